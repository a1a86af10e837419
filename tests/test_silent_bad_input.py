"""Bad input gives one line and exit 2 before any kernel, or names the damaged file: never a traceback or a hang."""

from __future__ import annotations

import hashlib
import json

import pytest

from claims_fixtures import claim, fake_project
from covbook._validate import check_seed
from covbook.book.config import UsageError
from covbook.book.sweep import SEED_MAX, SEEDS_MAX, parse_seeds
from covbook.claims import measurement_from_json
from helpers import covbook


def _one_line_usage_error(res, says: str) -> None:
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr, res.stderr
    assert says in res.stderr, res.stderr


@pytest.mark.parametrize("args, says", [
    (["sweep", "--seeds", "0-99999999999999999999"], "--seeds must be A-B or A with integers 0 <= A <= B <= 2**63 - 1"),
    (["sweep", "--seeds", "0-" + "9" * 5000], "--seeds must be A-B"),
    (["sweep", "--seeds", "0-100000000"], "names 100000001 seeds; a sweep runs at most 10000"),
    (["sweep", "--seeds", "0-3", "--cluster", "local:99999"], "local:N needs a number of worker processes from 1 to"),
    (["run", "--cluster", "tcp://127.0.0.1:notaport"], "a scheduler address SCHEME://HOST:PORT with a port"),
    (["run", "--cluster", "tcp://127.0.0.1:70000"], "with a port from 1 to 65535"),
    (["run", "--cluster", "tcp://:8786"], "a scheduler address SCHEME://HOST:PORT"),
    (["run", "--cluster", "tcp://[::1"], "a scheduler address SCHEME://HOST:PORT"),
    (["run", "--cluster", "tcp://"], "a scheduler address SCHEME://HOST:PORT"),
    (["run", "--cluster", "local:0"], "local:N needs"),
    (["run", "--cluster", "local:\u00b2"], "local:N needs"),
    (["run", "--seed", "18446744073709551616"], "argument --seed: expected a non-negative integer below 2**63"),
    (["run", "--seed", "9223372036854775808", "--plan"], "--seed: expected a non-negative integer below 2**63"),
    (["run", "--seed", "9" * 5000], "argument --seed: expected a non-negative integer"),
    (["run", "--seed", "-1"], "argument --seed: expected a non-negative integer"),
])
def test_absurd_arguments_are_one_line_usage_errors(project, args, says):
    res = covbook(project, *args, "--profile", "smoke", "--no-progress")
    _one_line_usage_error(res, says)
    assert not (project / "book" / "generated").exists()  # nothing ran


def test_the_largest_seed_is_the_kernels_largest():
    assert check_seed(SEED_MAX) == SEED_MAX
    with pytest.raises(ValueError):
        check_seed(SEED_MAX + 1)
    assert parse_seeds(f"{SEED_MAX}") == [SEED_MAX]
    assert len(parse_seeds(f"5-{5 + SEEDS_MAX - 1}")) == SEEDS_MAX
    for text in (f"{SEED_MAX + 1}", f"0-{SEEDS_MAX}", "1-2-3", "3-1", "a", "-1", "0x10", "\u0661"):
        with pytest.raises(UsageError):
            parse_seeds(text)


def test_the_plan_takes_the_largest_seed(project):
    res = covbook(project, "run", "--plan", "--seed", str(SEED_MAX), "--profile", "smoke")
    assert res.returncode == 0, res.stderr


@pytest.mark.parametrize("field, value, says", [
    ("value", None, "value = None (expected a number)"),
    ("value", "1.0", "value = '1.0' (expected a number)"),
    ("se", "0.1", "se = '0.1' (expected a number or null)"),
    ("dof", 2.5, "dof = 2.5 (expected a positive integer or null)"),
    ("extra", [1, 2], "extra = [1, 2] (expected an object of numbers and texts)"),
    ("extra", {"n": None}, "extra['n'] = None (expected a number or a text)"),
    ("reason", 3, "reason = 3 (expected a text or null)"),
])
def test_a_claims_file_edited_with_its_sha_fixed_is_damaged_not_a_traceback(tmp_path, field, value, says):
    proj = fake_project(tmp_path, {"01_alpha": [claim("a", "01_alpha")]})
    gen = proj / "book" / "generated"
    data = json.loads((gen / "claims" / "01_alpha.json").read_text())
    data[0][field] = value
    (gen / "claims" / "01_alpha.json").write_text(json.dumps(data))
    rec = json.loads((gen / "runs" / "01_alpha.json").read_text())
    rec["outputs"]["claims"] = hashlib.sha256((gen / "claims" / "01_alpha.json").read_bytes()).hexdigest()
    (gen / "runs" / "01_alpha.json").write_text(json.dumps(rec))
    for command in ("check", "build"):
        res = covbook(proj, command)
        assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
        assert (f"book/generated/claims/01_alpha.json is damaged (entry 0 is not a measurement: claim 'a': {says})"
                in res.stderr), res.stderr


def test_measurement_from_json_takes_what_measure_writes():
    m = measurement_from_json({"id": "a", "notebook": "01_a", "value": float("nan"), "prediction": 1, "se": None,
                               "dof": 3, "extra": {"n": 4, "law": "t", "ok": True}})
    assert m.dof == 3 and m.extra["law"] == "t"
    with pytest.raises(ValueError, match="unexpected keyword argument 'bogus'"):
        measurement_from_json({"id": "a", "notebook": "n", "value": 1.0, "bogus": 1})
    with pytest.raises(ValueError, match="expected a JSON object, got list"):
        measurement_from_json([1])
