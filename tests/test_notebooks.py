"""Every notebook at the smoke profile through the real runner, its claims checked, then the book built with -W.

The project is copied to `.covbook/test/smoke` (fixtures ``smoke_project`` and ``smoke_book`` in
conftest.py, shared with the browser test) so that `make test` does not replace the
quick-profile book a user built with `make book`.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from covbook.claims import load_claims
from helpers import ROOT, covbook

NOTEBOOKS = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.md"))


@pytest.mark.notebooks
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs_and_its_claims_pass(smoke_project: Path, name: str) -> None:
    gen = smoke_project / "book" / "generated"
    meta = json.loads((gen / "runs" / f"{name}.json").read_text())
    assert meta["status"] == "ok", f"{name} failed: {meta.get('error')}"
    claims = load_claims(gen / "claims" / f"{name}.json", smoke_project)  # judged by the current rules
    assert claims, f"{name} recorded no claims"
    failed = [f"{c.id}: measured {c.measured}, expected [{c.lower}, {c.upper}]" for c in claims if not c.passed]
    assert not failed, f"{name}: failed claims: {failed}"


@pytest.mark.book
def test_check_and_book_build(smoke_project: Path, smoke_book: subprocess.CompletedProcess) -> None:
    chk = covbook(smoke_project, "check")
    assert chk.returncode == 0, chk.stderr
    build = smoke_book
    assert build.returncode == 0, build.stdout[-4000:] + build.stderr[-4000:]
    html = smoke_project / "_build" / "html"
    assert (html / "_static" / "mathjax" / "tex-chtml.js").is_file()
    report = (html / "generated" / "reproduction.html").read_text()
    assert "claims pass" in report and "torch" in report
    assert "the claims across seeds" in (html / "generated" / "calibration.html").read_text()  # a page of the book
    for name in NOTEBOOKS:
        page = (html / "generated" / f"{name}.html").read_text()
        assert "mathjax/tex-chtml.js" in page and "cdn.jsdelivr" not in page
        assert "covbook-claim-value" in page  # the {claim} role (covbook.book.sphinx_claims) rendered
        assert 'class="proof' in page or "prf:theorem" not in (ROOT / "notebooks" / f"{name}.md").read_text()
