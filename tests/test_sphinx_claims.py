"""The {claim} role: a tiny Sphinx project with a notebook chapter, its claims and the generated report."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from claims_fixtures import claim, fake_project
from covbook.book.checks import split_target
from covbook.book.config import Paths
from covbook.book.report import write_report
from covbook.claims import anchor
from helpers import ROOT, covbook

CONF = 'extensions = ["myst_nb", "sphinx_proof", "covbook.book.sphinx_claims"]\nnb_execution_mode = "off"\n' \
       'exclude_patterns = ["_build"]\n'


def _chapter(path: Path, markdown: str, claim_ids: list[str]) -> None:
    """An executed notebook as the runner writes it: prose, and each claim's verdict line as output."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells.append(nbformat.v4.new_markdown_cell(markdown))
    for cid in claim_ids:
        cell = nbformat.v4.new_code_cell(f"claims.record({cid!r}, ...)")
        md = f'<span id="{anchor(path.stem, cid)}"></span>**✓ PASS** `{cid}` (evidence) — x.'
        cell.outputs = [nbformat.v4.new_output("display_data", data={"text/markdown": md, "text/plain": "<md>"})]
        nb.cells.append(cell)
    nbformat.write(nb, path)


def _book(root: Path, chapter_md: str, notation: str = "") -> Path:
    """Fake project with a run of two chapters, its report written; returns the Sphinx source folder."""
    fake_project(root, {
        "01_alpha": [claim("x_is_x", "01_alpha", measured=1.23456, theorem="thm-01_alpha"),
                     claim("off", "01_alpha", passed=False, measured=7.0),
                     claim("weak", "01_alpha", kind="compatible", alternatives=[{"name": "no decay", "value": 1.2}])],
        "02_beta": [claim("y", "02_beta", kind="identity", basis=None)],
    })
    src = root / "book"
    gen = src / "generated"
    write_report(Paths(root))
    _chapter(gen / "01_alpha.ipynb", chapter_md, ["x_is_x", "off", "weak"])
    _chapter(gen / "02_beta.ipynb", "# Beta\n\nSee {claim}`01_alpha:x_is_x` and {claim}`01:off`.", ["y"])
    (src / "conf.py").write_text(CONF)
    (src / "index.md").write_text("# Book\n\n```{toctree}\nnotation\ngenerated/01_alpha\ngenerated/02_beta\n"
                                  "generated/reproduction\ngenerated/calibration\n```\n")
    (src / "notation.md").write_text("# Notation\n\n" + (notation or "See the {doc}`generated/reproduction`.\n"))
    return src


def _build(src: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sphinx", "-W", "-n", "-q", "-b", "html", str(src),
                           str(src / "_build")], capture_output=True, text=True)


def test_role_renders_value_verdict_and_links_both_ways(tmp_path):
    src = _book(tmp_path, "# Alpha\n\n```{prf:theorem} T\n:label: thm-01_alpha\n\nx\n```\n\n"
                          "The value is {claim}`x_is_x`; this one failed: {claim}`off`; {claim}`weak`.\n")
    res = _build(src)
    assert res.returncode == 0, res.stderr
    out = src / "_build" / "generated"
    page = (out / "01_alpha.html").read_text()
    assert 'href="reproduction.html#claim-01-x_is_x"' in page
    assert '<span class="covbook-claim-value">1.235</span>' in page  # 4 significant digits, as claims.fmt
    assert "covbook-claim-pass" in page and "✓" in page
    assert "covbook-claim-fail" in page and "✗ FAILED" in page and ">7</span>" in page
    assert 'id="claim-01-x_is_x"' in page  # the verdict line's anchor in the chapter
    assert "covbook-claim-compatible" in page and "≈ compatible, cannot exclude no decay" in page
    assert '<span class="covbook-claim-window">\u00a01 ± 0.5</span>' in page  # the window inline
    beta = (out / "02_beta.html").read_text()
    assert 'href="reproduction.html#claim-01-x_is_x"' in beta and 'href="reproduction.html#claim-01-off"' in beta
    report = (out / "reproduction.html").read_text()
    assert 'id="claim-01-x_is_x"' in report and 'href="01_alpha.html#claim-01-x_is_x"' in report
    assert 'href="01_alpha.html#thm-01_alpha"' in report  # {prf:ref} to the theorem box
    assert (src / "_build" / "_static" / "covbook-claims.css").is_file()
    assert "No sweep has been run" in (out / "calibration.html").read_text()


@pytest.mark.parametrize("text, message", [
    ("{claim}`nope`", "the run did not record claim 'nope' in 01_alpha"),
    ("{claim}`02_beta:nope`", "the run did not record claim 'nope' in 02_beta"),
    ("{claim}`09_gamma:x`", "no claims of chapter '09_gamma'"),
])
def test_unrecorded_claim_fails_the_build_with_page_and_line(tmp_path, text, message):
    res = _build(_book(tmp_path, f"# Alpha\n\nA claim {text} here.\n"))
    assert res.returncode != 0
    assert "01_alpha.ipynb" in res.stderr and message in res.stderr and "markdown cell 1" in res.stderr


def test_claim_without_chapter_on_a_page_that_is_no_chapter(tmp_path):
    res = _build(_book(tmp_path, "# Alpha\n", notation="See {claim}`x_is_x`.\n"))
    assert res.returncode != 0 and "notation.md:3" in res.stderr and "NN_name:x_is_x" in res.stderr


def test_split_target():
    chapters = ["01_alpha", "02_beta"]
    assert split_target("x", "generated/01_alpha", chapters) == ("01_alpha", "x")
    assert split_target("02_beta:y", "generated/01_alpha", chapters) == ("02_beta", "y")
    assert split_target("02:y", "notation", chapters) == ("02_beta", "y")
    with pytest.raises(ValueError, match="not a chapter"):
        split_target("y", "notation", chapters)


def test_extension_imports_no_torch():
    code = "import sys, covbook.book.sphinx_claims; assert 'torch' not in sys.modules, 'torch imported'"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


@pytest.mark.book
def test_book_build_resolves_claims(project):
    """The fixture project run for real and built by jupyter-book with a chapter citing its claims."""
    nb = project / "notebooks" / "01_alpha.md"
    nb.write_text(nb.read_text() + "\nThe claim holds: {claim}`x_is_x`; beta's: {claim}`02_beta:x_is_x`.\n")
    (project / "book" / "_toc.yml").write_text(
        "format: jb-book\nroot: intro\nchapters:\n  - file: generated/01_alpha\n  - file: generated/02_beta\n"
        "  - file: generated/reproduction\n  - file: generated/calibration\n")
    (project / "book" / "intro.md").write_text("# Intro\n\nThe claims: {claim}`01:x_is_x`.\n")
    (project / "book" / "references.bib").write_text("")
    for asset in (ROOT / "book").glob("*.svg"):  # files _config.yml names (the favicon)
        shutil.copy(asset, project / "book" / asset.name)
    covbook(project, "run", "--profile", "smoke", "--no-progress", check=True)
    res = covbook(project, "build")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    html = project / "_build" / "html" / "generated"
    page = (html / "01_alpha.html").read_text()
    assert 'href="reproduction.html#claim-01-x_is_x"' in page and 'href="reproduction.html#claim-02-x_is_x"' in page
    assert 'id="claim-01-x_is_x"' in page  # claims._show gives the verdict line its anchor
    assert 'href="01_alpha.html#claim-01-x_is_x"' in (html / "reproduction.html").read_text()
    claims = json.loads((project / "book" / "generated" / "claims" / "01_alpha.json").read_text())
    assert claims[0]["value"] == 3 and "kind" not in claims[0]  # measurements; the rule is in notebooks/rules
    # an unknown claim fails the -W build, and keeps failing on the next build with nothing changed
    # (Sphinx re-reads only changed pages; covbook build forgets the environment after a failure)
    (project / "book" / "intro.md").write_text("# Intro\n\n{claim}`no_such_claim`\n")
    first = covbook(project, "build")
    assert first.returncode == 1 and "no_such_claim" in first.stdout + first.stderr
    assert not (project / "_build" / ".doctrees").exists()
    again = covbook(project, "build")
    assert again.returncode == 1 and "no_such_claim" in again.stdout + again.stderr
