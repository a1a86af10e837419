"""`sweep --rejudge` replaces a committed calibration only with --replace, and judges only stored, intact seeds."""

from __future__ import annotations

import json

import pytest

from claims_fixtures import claim, fake_project, fake_run
from covbook.book.config import Paths
from covbook.book.sweep import calibrate, seed_root
from helpers import covbook


def _calibration(proj) -> dict:
    return json.loads((proj / "book" / "calibration.json").read_text())


@pytest.fixture
def stored(tmp_path):
    """Seeds 0-3 stored at smoke, and a committed 20-seed out-of-sample calibration of the chapter."""
    proj = fake_project(tmp_path, {"01_alpha": [claim("a", "01_alpha")]})
    paths = Paths(proj)
    for seed in range(4):
        fake_run(seed_root(paths, "smoke", seed) / "book" / "generated", "01_alpha",
                 [claim("a", "01_alpha", measured=1.0 + 0.01 * seed)], seed=seed)
    committed = calibrate(paths, "smoke", [0], ["01_alpha"])["01_alpha"]
    committed.update(seeds=list(range(1300, 1320)), out_of_sample=True, commit="abc1234")
    (proj / "book" / "calibration.json").write_text(json.dumps({"profiles": {"smoke": {"01_alpha": committed}}}))
    return proj


def test_a_rejudge_never_replaces_a_committed_out_of_sample_calibration_without_replace(stored):
    before = _calibration(stored)
    res = covbook(stored, "sweep", "--seeds", "0-3", "--rejudge", "01")
    assert res.returncode == 2, res.stdout + res.stderr
    assert ("book/calibration.json holds a smoke calibration this rejudge (4 seeds, development seeds) would "
            "replace: 01_alpha (20 seeds, out of sample); pass --replace to replace it") in res.stderr
    assert _calibration(stored) == before
    res = covbook(stored, "sweep", "--seeds", "0-3", "--rejudge", "--replace", "01")
    assert res.returncode == 0, res.stderr
    assert _calibration(stored)["profiles"]["smoke"]["01_alpha"]["seeds"] == [0, 1, 2, 3]


def test_a_rejudge_of_the_committed_seeds_needs_no_replace(stored):
    data = _calibration(stored)
    data["profiles"]["smoke"]["01_alpha"].update(seeds=[0, 1, 2, 3], out_of_sample=False)
    (stored / "book" / "calibration.json").write_text(json.dumps(data))
    res = covbook(stored, "sweep", "--seeds", "0-3", "--rejudge", "01")
    assert res.returncode == 0, res.stderr


def test_seeds_that_never_ran_are_an_error_not_failures(stored):
    before = _calibration(stored)
    res = covbook(stored, "sweep", "--seeds", "0-10", "--rejudge", "--replace", "01")
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert ("01_alpha never ran at seed(s) 4–10 (profile smoke): rejudge only the stored seeds, or run them: "
            "`covbook sweep --seeds 0-10 --profile smoke 01`") in res.stderr, res.stderr
    assert _calibration(stored) == before


def test_a_seed_that_failed_still_counts_as_failed(stored):
    gen = seed_root(Paths(stored), "smoke", 2) / "book" / "generated"
    fake_run(gen, "01_alpha", [claim("a", "01_alpha")], status="failed", seed=2)
    res = covbook(stored, "sweep", "--seeds", "0-3", "--rejudge", "--replace", "01")
    assert res.returncode == 1 and "01_alpha failed at seed(s) 2" in res.stderr, res.stderr
    assert _calibration(stored)["profiles"]["smoke"]["01_alpha"]["failed_seeds"] == [2]


def test_a_stored_seeds_claims_edited_by_hand_are_refused(stored):
    f = seed_root(Paths(stored), "smoke", 1) / "book" / "generated" / "claims" / "01_alpha.json"
    data = json.loads(f.read_text())
    data[0]["value"] = 1.2345  # edited; its run record still names the measured file's SHA-256
    f.write_text(json.dumps(data))
    before = _calibration(stored)
    res = covbook(stored, "sweep", "--seeds", "0-3", "--rejudge", "--replace", "01")
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    assert ("book/generated/sweep/smoke/seed-1/book/generated/claims/01_alpha.json is damaged (not the file its run "
            "record 01_alpha.json was committed with; run the sweep again, which re-makes it: covbook sweep --seeds "
            "0-3 --profile smoke 01)") in res.stderr, res.stderr
    assert _calibration(stored) == before


@pytest.mark.parametrize("args", [["--seeds", "0-3", "--rejudge"], ["--seeds", "0", "--replace"], ["--seeds", "0"]])
def test_a_damaged_calibration_is_restored_from_git_not_deleted(stored, args):
    (stored / "book" / "calibration.json").write_text('{"profiles": ')
    res = covbook(stored, "sweep", *args, "01", "--no-progress")
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert "book/calibration.json: damaged" in res.stderr and "git checkout -- book/calibration.json" in res.stderr
    assert "delete it and" not in res.stderr
    assert not (seed_root(Paths(stored), "smoke", 0) / "book" / "generated" / "01_alpha.ipynb").exists()
