"""covbook check: judging stored measurements against rules, power, the rules as the list of ids; the report."""

from __future__ import annotations

import hashlib
import json

import pytest

from claims_fixtures import claim, fake_project, fake_run, write_rules
from covbook.book.checks import check
from covbook.book.config import Paths
from covbook.book.render import render
from covbook.book.report import write_report
from covbook.claims import LEVEL, Z, familywise
from helpers import covbook


@pytest.fixture
def proj(tmp_path):
    return fake_project(tmp_path, {
        "01_alpha": [claim("a", "01_alpha"), claim("b", "01_alpha", kind="identity", basis=None)],
        "02_beta": [claim("c", "02_beta", kind="sanity", basis=None)],
    })


def test_clean_run_verifies(proj):
    v = check(Paths(proj))
    assert v.ok, v.problems


def test_failed_claim_and_evidence_without_basis_fail(proj):
    cl = [claim("a", "01_alpha", basis=None), claim("b", "01_alpha", kind="identity", basis=None, passed=False)]
    fake_run(proj / "book" / "generated", "01_alpha", cl)
    write_rules(proj, "01_alpha", cl)
    v = check(Paths(proj))
    assert not v.ok
    assert any("claim a: evidence claim without basis" in p for p in v.problems)
    assert any("claim b failed" in p for p in v.problems)
    assert len(v.problems) == 2  # identity claims need no basis


def test_claim_not_evaluated_fails_with_its_reason(proj):
    fake_run(proj / "book" / "generated", "02_beta",
             [claim("c", "02_beta", kind="sanity", passed=False, measured=float("nan"), reason="rho < 0.5")])
    v = check(Paths(proj))
    assert len(v.problems) == 1 and "claim c failed" in v.problems[0] and "rho < 0.5" in v.problems[0]


def test_ids_in_the_run_and_in_the_rules_must_agree(proj):
    paths = Paths(proj)
    fake_run(proj / "book" / "generated", "01_alpha", [claim("a", "01_alpha"), claim("z", "01_alpha")])
    problems = check(paths).problems
    assert any("not recorded by this run: b" in p for p in problems)
    assert any("recorded but not in notebooks/rules/01_alpha.yml: z" in p for p in problems)
    write_rules(proj, "01_alpha", [claim("a", "01_alpha"), claim("z", "01_alpha")])
    assert check(paths).ok


def test_missing_or_invalid_rules_file_fails(proj):
    paths = Paths(proj)
    f = proj / "notebooks" / "rules" / "02_beta.yml"
    f.unlink()
    assert any("02_beta.yml is missing" in p for p in check(paths).problems)
    f.write_text("c: {kind: proof, statement: s, window: fixed, interval: [0, 1]}\n")
    assert any("kind must be one of" in p for p in check(paths).problems)
    f.write_text("c: [\n")
    assert any("not valid YAML" in p for p in check(paths).problems)


def test_a_rule_change_is_rejudged_without_running(proj):
    """Widening nothing, narrowing the window: the stored measurement now fails; no kernel starts."""
    paths = Paths(proj)
    assert check(paths).ok
    f = proj / "notebooks" / "rules" / "02_beta.yml"
    f.write_text("c: {kind: sanity, statement: s, window: fixed, interval: [2, 3]}\n")
    v = check(paths)
    assert any("claim c failed" in p for p in v.problems)
    assert [c.lower for c in v.claims if c.id == "c"] == [2.0]


def test_evidence_rule_without_power_is_judged_compatible_and_noted(tmp_path):
    weak = claim("w", "01_alpha", alternatives=[{"name": "t^(-1/2)", "value": 0.9}])  # inside [0.5, 1.5]
    proj = fake_project(tmp_path, {"01_alpha": [weak]}, profile="smoke")
    v = check(Paths(proj))
    assert v.ok and v.claims[0].kind == "compatible" and v.claims[0].rule_kind == "evidence"
    assert not any("claim w" in n for n in v.notes)  # smoke builds no book: nothing to note
    fake_run(proj / "book" / "generated", "01_alpha", [weak], profile="quick")
    v = check(Paths(proj))
    assert v.ok, v.problems
    assert any("claim w: compatible at profile quick: window 1 ± 0.5 contains t^(-1/2)" in n for n in v.notes)
    assert v.claims[0].verdict == "compatible" and v.claims[0].power_text() == "compatible, cannot exclude t^(-1/2)"
    weak["_rule"]["kind"] = "compatible"
    write_rules(proj, "01_alpha", [weak])
    v = check(Paths(proj))
    assert v.ok, v.problems
    assert v.claims[0].verdict == "compatible" and not v.notes


def test_evidence_rule_must_name_an_alternative(tmp_path):
    proj = fake_project(tmp_path, {"01_alpha": [claim("a", "01_alpha", alternatives=[])]})
    assert any("names no alternative" in p for p in check(Paths(proj)).problems)


def test_mixed_profiles_or_seeds_are_noted(proj):
    fake_run(proj / "book" / "generated", "02_beta", [claim("c", "02_beta", kind="sanity", basis=None)], seed=3)
    v = check(Paths(proj))
    assert v.ok and any("mixed profiles or seeds" in n and "02 smoke seed 3" in n for n in v.notes)


def test_cli_check_json_carries_kind_basis_reason_and_times_itself(proj):
    res = covbook(proj, "check", "--json")
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)
    assert {"kind", "basis", "reason", "alternatives", "powered", "window"} <= set(rows[0])
    assert {r["kind"] for r in rows} == {"evidence", "identity", "sanity"}
    res = covbook(proj, "check")
    assert res.returncode == 0 and "judged in" in res.stdout
    fake_run(proj / "book" / "generated", "02_beta", [claim("c2", "02_beta", kind="sanity")])
    res = covbook(proj, "check")
    assert res.returncode == 1 and "c2" in res.stderr


def test_error_rate_statement():
    assert familywise(0) == 0.0 and familywise(1) == pytest.approx(LEVEL)
    assert familywise(100) == pytest.approx(1 - (1 - LEVEL) ** 100)
    with pytest.raises(ValueError, match="non-negative integer"):
        familywise(-1)
    text = render("error_rate.md.j2", level=LEVEL, z=Z, n_evidence=100, familywise=familywise(100))
    assert "N = 100" in text and "4.9 %" in text and "3.48" in text


def test_report_groups_kinds_bases_anchors_and_theorem_links(proj):
    cl = [claim("a", "01_alpha", theorem="thm-01_alpha"), claim("b", "01_alpha", kind="identity", basis=None),
          claim("q", "01_alpha", theorem="thm-09-gone", passed=False, basis=None, reason="not enough data")]
    fake_run(proj / "book" / "generated", "01_alpha", cl)
    write_rules(proj, "01_alpha", cl)
    text = write_report(Paths(proj)).read_text()
    assert "By kind: evidence 1 of 2, identity 1 of 1, sanity 1 of 1." in text
    assert "N = 2 evidence claims" in text
    assert "{claim-row}`01_alpha:a`" in text and "{prf:ref}`thm-01_alpha`" in text
    assert "thm-09-gone" not in text  # not a label of any theorem box: no raw label, no broken link
    assert "| verdict | measured in window | claim |" in text and "| ✓ pass | 1 in 1 ± 0.5 |" in text
    assert "not evaluated: not enough data" in text and "**none: an evidence claim needs a basis**" in text
    assert "**✗ FAIL**" in text
    assert (proj / "book" / "generated" / "calibration.md").is_file()


def test_build_rewrites_the_chapters_verdict_lines_from_the_current_rules(proj):
    from covbook.claims import anchor

    gen = proj / "book" / "generated"
    stale = f'<span id="{anchor("01_alpha", "a")}"></span>**✗ FAIL** `a` stale'
    nb = {"cells": [{"cell_type": "code", "source": "", "metadata": {}, "execution_count": 1, "outputs": [
        {"output_type": "display_data", "metadata": {}, "data": {"text/markdown": stale, "text/plain": "<md>"}}]}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (gen / "01_alpha.ipynb").write_text(json.dumps(nb))
    rec = json.loads((gen / "runs" / "01_alpha.json").read_text())  # the record names the notebook it came with
    rec["outputs"]["notebook"] = hashlib.sha256((gen / "01_alpha.ipynb").read_bytes()).hexdigest()
    (gen / "runs" / "01_alpha.json").write_text(json.dumps(rec))
    write_report(Paths(proj))
    out = json.loads((gen / "01_alpha.ipynb").read_text())["cells"][0]["outputs"][0]["data"]["text/markdown"]
    assert "**✓ PASS** `a` **1** in 1 ± 0.5 (excludes no effect)" in out
