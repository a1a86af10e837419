"""A build keeps its records true: rewriting a chapter's verdict lines rewrites its run record with it."""

from __future__ import annotations

import hashlib
import json

import pytest

from claims_fixtures import claim, fake_project, write_rules
from covbook.book.cache import damaged_outputs, is_cached
from covbook.book.checks import check
from covbook.book.config import Paths
from covbook.book.report import refresh_verdicts, write_report
from covbook.claims import anchor
from helpers import covbook


def _notebook_with_verdict(proj, name: str, cid: str) -> None:
    """An executed chapter with one (stale) verdict line, and a run record that names its digest."""
    gen = proj / "book" / "generated"
    line = f'<span id="{anchor(name, cid)}"></span>**✗ FAIL** `{cid}` stale'
    nb = {"cells": [{"cell_type": "code", "source": "", "metadata": {}, "execution_count": 1, "outputs": [
        {"output_type": "display_data", "metadata": {}, "data": {"text/markdown": line, "text/plain": "<md>"}}]}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (gen / f"{name}.ipynb").write_text(json.dumps(nb))
    rec = json.loads((gen / "runs" / f"{name}.json").read_text())
    rec["outputs"]["notebook"] = hashlib.sha256((gen / f"{name}.ipynb").read_bytes()).hexdigest()
    (gen / "runs" / f"{name}.json").write_text(json.dumps(rec))


def _verdict(proj, name: str) -> str:
    nb = json.loads((proj / "book" / "generated" / f"{name}.ipynb").read_text())
    return nb["cells"][0]["outputs"][0]["data"]["text/markdown"]


@pytest.fixture
def proj(tmp_path):
    p = fake_project(tmp_path, {"01_alpha": [claim("a", "01_alpha")]})
    _notebook_with_verdict(p, "01_alpha", "a")
    return p


def test_a_rewritten_chapter_matches_its_run_record(proj):
    """Build, change a rule, build, check: the notebook the build rewrote is the one its record names."""
    paths = Paths(proj)
    write_report(paths)
    assert "**✓ PASS** `a`" in _verdict(proj, "01_alpha")
    assert damaged_outputs(paths, ["01_alpha"]) == []
    narrow = claim("a", "01_alpha")
    narrow["_rule"].update(window="fixed", interval=[0, 0.5])  # the stored 1.0 now fails
    write_rules(proj, "01_alpha", [narrow])
    write_report(paths)
    assert "**✗ FAIL** `a`" in _verdict(proj, "01_alpha")
    assert damaged_outputs(paths, ["01_alpha"]) == []
    assert any("claim a failed" in p for p in check(paths).problems)  # failed, not damaged
    write_rules(proj, "01_alpha", [claim("a", "01_alpha")])  # reverting the rule heals it
    write_report(paths)
    assert "**✓ PASS** `a`" in _verdict(proj, "01_alpha")
    assert check(paths).ok and damaged_outputs(paths, ["01_alpha"]) == []
    assert not list((proj / "book" / "generated").glob(".*")) and not list(paths.tmp.glob("*"))  # no temporaries


def test_a_notebook_that_is_not_its_records_file_is_never_rewritten(proj):
    paths = Paths(proj)
    f = proj / "book" / "generated" / "01_alpha.ipynb"
    f.write_text(f.read_text().replace("stale", "edited by hand"))
    before = f.read_bytes()
    assert refresh_verdicts(paths, check(paths).claims) == 0
    assert f.read_bytes() == before and damaged_outputs(paths, ["01_alpha"])


def test_cli_check_after_build_and_rule_edit_is_not_damaged(proj):
    """The issue's sequence through the command (the report half of `covbook build`, then `covbook check`)."""
    write_report(Paths(proj))
    narrow = claim("a", "01_alpha")
    narrow["_rule"].update(window="fixed", interval=[0, 0.5])
    write_rules(proj, "01_alpha", [narrow])
    write_report(Paths(proj))
    res = covbook(proj, "check")
    assert res.returncode == 1 and "damaged" not in res.stderr and "claim a failed" in res.stderr


@pytest.mark.notebooks
def test_a_run_chapter_stays_cached_after_a_build_rewrites_its_verdicts(project):
    """Real kernels: run, build's report, change the rule, again; the chapter is served from the cache, not damaged."""
    covbook(project, "run", "01", "--profile", "smoke", "--no-progress", check=True)
    paths = Paths(project)
    write_report(paths)
    rules = project / "notebooks" / "rules" / "01_alpha.yml"
    rules.write_text("x_is_x: {kind: identity, statement: x equals itself, window: fixed, interval: [10, 11]}\n")
    write_report(paths)
    nb = json.loads((project / "book" / "generated" / "01_alpha.ipynb").read_text())
    assert "✗ FAIL" in json.dumps(nb, ensure_ascii=False)
    res = covbook(project, "check")
    assert res.returncode == 1 and "damaged" not in res.stderr, res.stderr
    res = covbook(project, "run", "01", "--profile", "smoke", "--no-progress")
    assert "0 executed, 1 cached" in res.stdout, res.stdout + res.stderr
    from covbook.book.records import read_run

    assert is_cached(paths, "01_alpha", read_run(paths.runs / "01_alpha.json").key)
