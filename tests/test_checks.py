"""covbook check: failed claims, evidence without basis, the claim-id manifest; the report's content."""

from __future__ import annotations

import json

import pytest
import yaml

from claims_fixtures import claim, fake_project, fake_run
from covbook.book.checks import check, read_manifest, update_manifest
from covbook.book.config import Paths
from covbook.book.report import error_rate_text, write_report
from covbook.claims import LEVEL, familywise
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
    assert v.counts() == {"evidence": (1, 1), "identity": (1, 1), "sanity": (1, 1)}


def test_failed_claim_and_evidence_without_basis_fail(proj):
    gen = proj / "book" / "generated"
    fake_run(gen, "01_alpha", [claim("a", "01_alpha", basis=None),
                               claim("b", "01_alpha", kind="identity", basis=None, passed=False)])
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


def test_vanished_or_new_claim_id_fails_until_the_manifest_is_updated(proj):
    paths = Paths(proj)
    fake_run(proj / "book" / "generated", "01_alpha", [claim("a", "01_alpha"), claim("z", "01_alpha")])
    problems = check(paths).problems
    assert any("not recorded by this run: b" in p for p in problems)
    assert any("not in notebooks/claims_manifest.yml: z" in p for p in problems)
    changes = update_manifest(paths)
    assert changes == ["01_alpha: + z; - b"]
    assert read_manifest(paths) == {"01_alpha": ["a", "z"], "02_beta": ["c"]}
    text = (proj / "notebooks" / "claims_manifest.yml").read_text()
    assert text.startswith("# The claim ids") and yaml.safe_load(text)["01_alpha"] == ["a", "z"]
    assert check(paths).ok


def test_missing_manifest_or_entry_fails(proj):
    paths = Paths(proj)
    (proj / "notebooks" / "claims_manifest.yml").write_text("01_alpha: [a, b]\n")
    assert any("02_beta: not in notebooks/claims_manifest.yml" in p for p in check(paths).problems)
    (proj / "notebooks" / "claims_manifest.yml").unlink()
    assert any("claims_manifest.yml is missing" in p for p in check(paths).problems)
    (proj / "notebooks" / "claims_manifest.yml").write_text("01_alpha: 3\n")
    with pytest.raises(ValueError, match="mapping of notebook name"):
        check(paths)


def test_failed_notebook_keeps_its_manifest_entry(proj):
    paths = Paths(proj)
    fake_run(proj / "book" / "generated", "02_beta", [], status="failed")
    assert update_manifest(paths) == []
    assert read_manifest(paths)["02_beta"] == ["c"]


def test_cli_check_json_carries_kind_basis_reason_and_update_manifest(proj):
    res = covbook(proj, "check", "--json")
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)
    assert {"kind", "basis", "reason"} <= set(rows[0])
    assert {r["kind"] for r in rows} == {"evidence", "identity", "sanity"}
    fake_run(proj / "book" / "generated", "02_beta", [claim("c2", "02_beta", kind="sanity")])
    res = covbook(proj, "check")
    assert res.returncode == 1 and "c2" in res.stderr
    res = covbook(proj, "check", "--update-manifest")
    assert res.returncode == 0 and "02_beta: + c2; - c" in res.stderr


def test_error_rate_statement():
    assert familywise(0) == 0.0 and familywise(1) == pytest.approx(LEVEL)
    assert familywise(100) == pytest.approx(1 - (1 - LEVEL) ** 100)
    with pytest.raises(ValueError, match="non-negative integer"):
        familywise(-1)
    text = error_rate_text(100)
    assert "N = 100" in text and "4.9 %" in text and "3.48" in text


def test_report_groups_kinds_bases_anchors_and_theorem_links(proj):
    fake_run(proj / "book" / "generated", "01_alpha", [
        claim("a", "01_alpha", theorem="thm-01_alpha"), claim("b", "01_alpha", kind="identity", basis=None),
        claim("q", "01_alpha", theorem="Theorem 9", passed=False, basis=None, reason="not enough data")])
    update_manifest(Paths(proj))
    text = write_report(Paths(proj)).read_text()
    assert "By kind: evidence 1 of 2, identity 1 of 1, sanity 1 of 1." in text
    assert "N = 2 evidence claims" in text
    assert "{claim-row}`01_alpha:a`" in text and "{prf:ref}`thm-01_alpha`" in text
    assert "(Theorem 9)" in text  # not a label of any theorem box: plain text, no broken link
    assert "not evaluated: not enough data" in text and "**none: an evidence claim needs a basis**" in text
    assert "**✗ FAIL**" in text
    assert (proj / "book" / "generated" / "calibration.md").is_file()


def test_citation_of_an_unrecorded_claim_fails_check(proj):
    nb = proj / "notebooks" / "01_alpha.md"
    nb.write_text(nb.read_text() + "\nSee {claim}`a`, {claim}`02:c` and {claim}`gone`.\n\n{claim}`02_beta:nope`\n"
                  "{claim}`77:x`\n")
    problems = check(Paths(proj)).problems
    lines = nb.read_text().splitlines()
    n = next(i for i, line in enumerate(lines, 1) if "gone" in line)
    assert problems == [
        f"notebooks/01_alpha.md:{n}: {{claim}}`gone` cites a claim that 01_alpha did not record",
        f"notebooks/01_alpha.md:{n + 2}: {{claim}}`02_beta:nope` cites a claim that 02_beta did not record",
        f"notebooks/01_alpha.md:{n + 3}: {{claim}}`77:x`: no claims of chapter '77' in this run (chapters with "
        "claims: 01_alpha, 02_beta)",
    ]
