"""The pipeline: execution, cache, atomic outputs, failure isolation, usage errors, check."""

from __future__ import annotations

import json

import pytest

from covbook.book.config import Paths, UsageError, notebook_parameters, resolve_parameters
from covbook.book.runner import run_notebooks
from helpers import covbook, make_notebook

pytestmark = pytest.mark.notebooks


def test_run_check_and_cache(project):
    first = covbook(project, "run", "--profile", "smoke", "--no-progress", check=True)
    assert "2 executed" in first.stdout
    gen = project / "book" / "generated"
    assert (gen / "01_alpha.ipynb").is_file() and (gen / "claims" / "02_beta.json").is_file()
    meta = json.loads((gen / "runs" / "01_alpha.json").read_text())
    assert meta["status"] == "ok" and meta["parameters"]["x"] == 3 and meta["parameters"]["profile"] == "smoke"
    nb = json.loads((gen / "01_alpha.ipynb").read_text())
    injected = [c for c in nb["cells"] if "injected-parameters" in c["metadata"].get("tags", [])]
    assert injected and "remove-cell" in injected[0]["metadata"]["tags"]

    second = covbook(project, "run", "--profile", "smoke", "--no-progress", check=True)
    assert "0 executed, 2 cached" in second.stdout
    # a change of parameters, of the source, or --force re-executes
    assert "1 executed" in covbook(project, "run", "--profile", "quick", "01", "--no-progress", check=True).stdout
    assert "1 executed" in covbook(project, "run", "02", "--force", "--no-progress", check=True).stdout

    res = covbook(project, "check", "--json", check=True)
    rows = json.loads(res.stdout)
    assert {r["notebook"] for r in rows} == {"01_alpha", "02_beta"}
    assert all({"id", "statement", "measured", "expected", "tolerance", "passed"} <= set(r) for r in rows)
    assert covbook(project, "check").returncode == 0


def test_failing_notebook_does_not_stop_the_others(project):
    (project / "notebooks" / "01_alpha.md").write_text(make_notebook("x = 1\nraise RuntimeError('boom')"))
    res = covbook(project, "run", "--profile", "smoke", "--no-progress")
    assert res.returncode == 1
    assert "01_alpha" in res.stderr and "RuntimeError" in res.stderr and "boom" in res.stderr and "cell" in res.stderr
    gen = project / "book" / "generated"
    assert (gen / "02_beta.ipynb").is_file()
    assert (gen / "failed" / "01_alpha.ipynb").is_file() and not (gen / "01_alpha.ipynb").exists()
    assert not list((gen / ".tmp").glob("*")) if (gen / ".tmp").exists() else True
    chk = covbook(project, "check")
    assert chk.returncode == 1 and "01_alpha: notebook failed" in chk.stderr


def test_failed_claim_and_missing_claims_fail_check(project):
    bad = "from covbook import claims\nclaims.record('off', 'one is two', 1.0, 2.0, tolerance=0.5)"
    (project / "notebooks" / "01_alpha.md").write_text(make_notebook(bad))
    (project / "notebooks" / "02_beta.md").write_text(make_notebook("y = 1"))
    res = covbook(project, "run", "--profile", "smoke", "--no-progress")
    assert res.returncode == 1 and "recorded no claims" in res.stderr  # 02 recorded none
    chk = covbook(project, "check")
    assert chk.returncode == 1
    assert "claim off failed" in chk.stderr and "02_beta" in chk.stderr
    assert "[FAIL] off" in chk.stdout


@pytest.mark.parametrize(
    "args, match",
    [
        (["run", "--profile", "huge"], "invalid choice"),
        (["run", "99_nope"], "unknown notebook"),
        (["run", "--jobs", "0"], "positive integer"),
        (["run", "--seed", "-3"], "non-negative"),
        (["run", "--frobnicate"], "unrecognized arguments"),
        (["publish"], "invalid choice"),
    ],
)
def test_usage_errors_exit_2(project, args, match):
    res = covbook(project, *args)
    assert res.returncode == 2 and match in res.stderr


def test_unknown_profile_parameter_exits_2(project):
    (project / "notebooks" / "profiles.yml").write_text("01_alpha:\n  smoke: {typo: 3}\n")
    res = covbook(project, "run", "--profile", "smoke")
    assert res.returncode == 2 and "unknown parameter(s) typo" in res.stderr and "valid:" in res.stderr
    (project / "notebooks" / "profiles.yml").write_text("01_alpha:\n  tiny: {x: 3}\n")
    res = covbook(project, "run")
    assert res.returncode == 2 and "unknown profile 'tiny'" in res.stderr


def test_outside_a_project_exits_2(tmp_path):
    res = covbook(tmp_path, "run")
    assert res.returncode == 2 and "not inside a covbook checkout" in res.stderr


def test_parameters_cell_is_read_and_resolved(project):
    params = notebook_parameters(project / "notebooks" / "01_alpha.md")
    assert params == {"profile": "quick", "device": "auto", "seed": 0, "x": 1}
    got = resolve_parameters("01_alpha", params, {"01_alpha": {"smoke": {"x": 3}}}, "smoke", "cpu", 4)
    assert got == {"x": 3, "profile": "smoke", "device": "cpu", "seed": 4}
    with pytest.raises(UsageError, match="must not set seed"):
        resolve_parameters("01_alpha", params, {"01_alpha": {"full": {"seed": 3}}}, "full", "cpu", 0)


def test_notebook_without_parameters_cell_is_rejected(project):
    (project / "notebooks" / "02_beta.md").write_text(make_notebook("x = 1").replace(":tags: [parameters]\n", ""))
    with pytest.raises(UsageError, match="tagged 'parameters'"):
        run_notebooks(Paths(project), ["02"], progress=False)
