"""`covbook run` shows rule problems up front and its exit status is what the README says; check sees what is gone.

Exit statuses: 0 success; 1 a failed notebook or a claim of the run that fails ``covbook check`` (a failed claim,
an id without a rule, ...), a damaged or missing output; 2 bad usage, before any kernel starts (a rules file
missing or invalid, a notebook that is not UTF-8).
"""

from __future__ import annotations

import json

import pytest

from claims_fixtures import claim, fake_project
from covbook.book.checks import check
from covbook.book.config import Paths
from helpers import covbook, make_notebook

BROKEN = "x_is_x: {kind: proof, statement: x equals itself, window: tolerance, tolerance: 0.0}\n"


def _kernels_started(project) -> bool:
    """Whether any run left a record or an executed notebook (a kernel ran)."""
    gen = project / "book" / "generated"
    return any(gen.glob("runs/*.json")) or any(gen.glob("failed/*.json")) or any(gen.glob("*.ipynb"))


@pytest.mark.parametrize("rules, says", [
    (BROKEN, "rule 'x_is_x': kind must be one of"),
    ("x_is_x: [\n", "not valid YAML"),
    (None, "notebooks/rules/01_alpha.yml is missing"),
])
def test_a_rules_problem_is_a_usage_error_before_any_kernel(project, rules, says):
    f = project / "notebooks" / "rules" / "01_alpha.yml"
    f.unlink() if rules is None else f.write_text(rules)
    for args in (["run", "--force"], ["run", "01", "--force"], ["run", "--plan"]):
        res = covbook(project, *args, "--profile", "smoke", "--no-progress")
        assert res.returncode == 2 and says in res.stderr, (args, res.stderr)
        assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr
    assert not _kernels_started(project)
    res = covbook(project, "run", "02", "--profile", "smoke", "--plan")  # another notebook is not refused
    assert res.returncode == 0, res.stderr


def test_a_renamed_notebook_without_its_rules_is_refused_up_front(project):
    (project / "notebooks" / "02_beta.md").rename(project / "notebooks" / "03_gamma.md")
    res = covbook(project, "run", "--profile", "smoke", "--no-progress")
    assert res.returncode == 2 and "notebooks/rules/03_gamma.yml is missing" in res.stderr
    assert not _kernels_started(project)


@pytest.mark.parametrize("command", [["run"], ["run", "--plan"], ["sweep", "--seeds", "0"]])
def test_a_notebook_that_is_not_utf8_is_one_line_with_exit_2(project, command):
    f = project / "notebooks" / "02_beta.md"
    f.write_bytes(f.read_bytes().replace(b"# Demo", b"# D\xe9mo"))
    res = covbook(project, *command, "--profile", "smoke", "--no-progress")
    assert res.returncode == 2, res.stderr
    assert res.stderr == ("covbook " + command[0] + ": error: notebooks/02_beta.md: not UTF-8 text (byte 0xe9 on "
                          "line 13); save it as UTF-8\n")
    assert not _kernels_started(project)


def test_check_judges_the_stored_run_of_a_notebook_that_is_not_utf8(tmp_path):
    """`covbook check` reads the stored measurements, not the prose (which `covbook run` refuses, exit 2)."""
    proj = fake_project(tmp_path, {"01_alpha": [claim("a", "01_alpha")]})
    f = proj / "notebooks" / "01_alpha.md"
    f.write_bytes(f.read_bytes() + b"caf\xe9\n")
    res = covbook(proj, "check")
    assert res.returncode == 0 and "Traceback" not in res.stderr and "1 of 1 claims pass" in res.stdout, res.stderr


def test_an_invalid_rules_file_is_one_problem_and_the_chapter_is_counted_as_not_judged(tmp_path):
    proj = fake_project(tmp_path, {"01_alpha": [claim("a", "01_alpha"), claim("b", "01_alpha")]})
    (proj / "notebooks" / "rules" / "01_alpha.yml").write_text(BROKEN.replace("x_is_x", "a"))
    v = check(Paths(proj))
    assert len(v.problems) == 1 and "kind must be one of" in v.problems[0], v.problems
    assert v.unjudged == {"01_alpha": 2}
    res = covbook(proj, "check")
    assert "0 of 0 claims pass; 2 claim(s) of 01_alpha not judged (its rules file is invalid)" in res.stdout


def test_check_notices_a_deleted_executed_notebook(tmp_path):
    proj = fake_project(tmp_path, {"01_alpha": [claim("a", "01_alpha")]})
    gen = proj / "book" / "generated"
    (gen / "01_alpha.ipynb").write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    rec = json.loads((gen / "runs" / "01_alpha.json").read_text())
    import hashlib

    rec["outputs"]["notebook"] = hashlib.sha256((gen / "01_alpha.ipynb").read_bytes()).hexdigest()
    (gen / "runs" / "01_alpha.json").write_text(json.dumps(rec))
    assert covbook(proj, "check").returncode == 0
    (gen / "01_alpha.ipynb").unlink()
    res = covbook(proj, "check")
    assert res.returncode == 1 and ("book/generated/01_alpha.ipynb is damaged (missing: its run record "
                                    "01_alpha.json was committed with it); repair it with: covbook run 01") \
        in res.stderr, res.stderr


@pytest.mark.notebooks
def test_a_failing_claim_makes_run_exit_1_and_names_it(project):
    bad = "from covbook import claims\nclaims.measure('x_is_x', 1.0, prediction=2.0)"
    (project / "notebooks" / "01_alpha.md").write_text(make_notebook(bad))
    res = covbook(project, "run", "--profile", "smoke", "--no-progress")
    assert res.returncode == 1, res.stdout + res.stderr
    assert "0 failed" in res.stdout and "1 of 2 claims failed (see covbook check)" in res.stdout
    assert "01_alpha: claim x_is_x failed" in res.stderr
    again = covbook(project, "run", "--profile", "smoke", "--no-progress")  # cached: the same verdict
    assert again.returncode == 1 and "2 cached" in again.stdout and "1 of 2 claims failed" in again.stdout
    (project / "notebooks" / "rules" / "01_alpha.yml").write_text(
        "x_is_x: {kind: identity, statement: x, window: tolerance, tolerance: 1.0}\n")
    assert covbook(project, "run", "--profile", "smoke", "--no-progress").returncode == 0


@pytest.mark.notebooks
def test_after_a_failed_notebook_run_counts_the_claims_of_those_that_ran(project):
    (project / "notebooks" / "02_beta.md").write_text(make_notebook("raise RuntimeError('boom')"))
    res = covbook(project, "run", "--profile", "smoke", "--no-progress")
    assert res.returncode == 1 and "1 executed, 0 cached, 1 failed" in res.stdout
    assert "0 of 1 claims failed in the 1 notebook(s) that ran" in res.stdout, res.stdout
    res = covbook(project, "run", "02", "--profile", "smoke", "--no-progress")
    assert "0 executed, 0 cached, 1 failed" in res.stdout and "claims failed" not in res.stdout, res.stdout


def test_check_names_a_claims_file_that_is_not_measurements_instead_of_raising(tmp_path):
    proj = fake_project(tmp_path, {"01_alpha": [claim("a", "01_alpha")], "02_beta": [claim("b", "02_beta")]})
    bad = '[{"id": "b", "notebook": "02_beta", "value": "1.0"}]'
    (proj / "book" / "generated" / "claims" / "02_beta.json").write_text(bad)
    v = check(Paths(proj))  # what `covbook run 01` judges after its run: another chapter's file does not raise
    assert [p for p in v.problems if p.startswith("02_beta:")] and not v.problems_of("01_alpha")
    assert "value = '1.0' (expected a number)" in v.problems_of("02_beta")[0]
