"""Stored larger runs end to end on the CPU at smoke: stored, published, re-judged, a changed chapter pending.

``covbook edition smoke`` runs a tiny project's two chapters in the edition's scratch tree and stores them
in ``book/edition`` (a run folder laid out as ``book/generated``); the published page of a current chapter is
its stored run (SVG figures, a banner naming the run), ``covbook check`` re-judges the stored measurements
against the current rules, and a chapter whose notebook changed after its stored run falls back to the book's
own run, says its stored run is pending, and is listed by ``covbook check``.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from covbook.book import edition, sphinx_claims
from covbook.book.config import Paths, UsageError
from helpers import covbook, make_notebook

pytestmark = pytest.mark.notebooks

PLOT = ("import matplotlib.pyplot as plt\nfrom covbook import claims\nclaims.measure('x_is_x', x, prediction=x)\n"
        "fig, ax = plt.subplots(figsize=(2, 1.5))\nax.plot([0, 1], [0, x]);")


@pytest.fixture
def stored(project):
    (project / "notebooks" / "01_alpha.md").write_text(make_notebook(PLOT))
    res = covbook(project, "edition", "smoke", "--device", "cpu", "--no-progress")
    assert res.returncode == 0, res.stderr
    assert "2 of 2 chapters stored in book/edition (smoke, cpu" in res.stdout
    covbook(project, "run", "--profile", "smoke", "--device", "cpu", "--no-progress", check=True)
    return project


def test_the_edition_is_stored_with_its_provenance(stored):
    paths = Paths(stored)
    for name in ("01_alpha", "02_beta"):
        rec = json.loads((stored / "book" / "edition" / "runs" / f"{name}.json").read_text())
        assert rec["status"] == "ok" and rec["parameters"]["profile"] == "smoke" and rec["key_device"] == "cpu"
        assert {"torch", "numpy", "python"} <= set(rec["environment"]) and rec["commit"]
        assert {"notebook", "claims"} == set(rec["outputs"])  # the digests check and build verify
        for f in (f"{name}.ipynb", f"claims/{name}.json"):
            assert (stored / "book" / "edition" / f).is_file()
    nb = json.loads((stored / "book" / "edition" / "01_alpha.ipynb").read_text())
    kinds = {k for c in nb["cells"] for o in c.get("outputs", []) for k in o.get("data", {})}
    assert "image/svg+xml" in kinds and "image/png" not in kinds  # figures as SVG
    assert all(s.current for s in edition.status(paths).values())
    assert not (paths.generated / "edition").exists()  # the book's own run is untouched by the edition


def test_the_published_page_shows_the_stored_run_and_says_which(stored):
    paths = Paths(stored)
    own = json.loads((paths.generated / "02_beta.ipynb").read_text())
    nb = edition.published_notebook(paths, "02_beta", own)
    stored_nb = json.loads((stored / "book" / "edition" / "02_beta.ipynb").read_text())
    texts = ["".join(c["source"]) for c in nb["cells"]]
    assert texts[0].lstrip().startswith("# Demo") and "shows its **smoke** run on cpu" in texts[1]
    assert "commit" in texts[1] and "torch" in texts[1]
    assert [c.get("outputs") for c in nb["cells"] if c["cell_type"] == "code"] == [
        c.get("outputs") for c in stored_nb["cells"] if c["cell_type"] == "code"]
    # the report shows the stored run's claims for a current chapter, and says which run each chapter shows
    from covbook.book.report import write_report

    text = write_report(paths).read_text()
    assert "## Stored larger runs" in text and "| 02_beta | current | smoke |" in text
    assert "the stored smoke run |" in text
    # the Sphinx hook makes the same page from the book's own notebook
    app = SimpleNamespace(srcdir=str(stored / "book"))
    source = [json.dumps(own)]
    sphinx_claims._source(app, "generated/02_beta", source)
    assert "shows its **smoke** run on cpu" in json.dumps(json.loads(source[0])["cells"][1])


def test_check_rejudges_the_stored_edition_and_fails_on_a_failed_claim(stored):
    assert covbook(stored, "check").returncode == 0
    (stored / "notebooks" / "rules" / "02_beta.yml").write_text(
        "x_is_x: {kind: sanity, statement: x is small, window: fixed, interval: [5, 6]}\n")
    res = covbook(stored, "check")
    assert res.returncode == 1 and "edition (smoke): 02_beta: claim x_is_x failed" in res.stderr


def test_a_chapter_whose_notebook_changed_is_pending_shown_from_the_books_run_and_listed_by_check(stored):
    paths = Paths(stored)
    (stored / "notebooks" / "02_beta.md").write_text(make_notebook(
        "from covbook import claims\nclaims.measure('x_is_x', x + 0, prediction=x)", "x = 2"))
    st = edition.status(paths)
    assert st["02_beta"].state == "pending" and st["01_alpha"].current
    own = {"cells": [{"cell_type": "markdown", "metadata": {}, "source": "# Demo\n"}], "metadata": {}}
    record = {"parameters": {"profile": "smoke"}, "device_used": "cpu", "finished": "2026-12-04T20:00:00+0000",
              "commit": "abc1234"}
    nb = edition.published_notebook(paths, "02_beta", own, record)
    banner = "".join(nb["cells"][1]["source"])
    assert f"shows its **smoke** run on cpu, {record['finished']}, commit abc1234." in banner
    assert "Its stored **smoke** run is pending" in banner and len(nb["cells"]) == 2
    res = covbook(stored, "run", "02", "--profile", "smoke", "--device", "cpu", "--no-progress")
    res = covbook(stored, "check")
    assert res.returncode == 0 and "edition: 02_beta: its stored smoke run is pending" in res.stderr


def test_an_edition_of_another_profile_is_refused(stored):
    with pytest.raises(UsageError, match="holds smoke runs"):
        edition.make(Paths(stored), None, profile="full", device="cpu")


MINI_CONFIG = """\
title: mini
only_build_toc_files: true
execute:
  execute_notebooks: "off"
parse:
  myst_enable_extensions: [colon_fence]
sphinx:
  extra_extensions:
    - covbook.book.sphinx_claims
"""


def _mini_notebook(text: str) -> dict:
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    cell = nbformat.v4.new_code_cell("print(x)")
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)]
    nb.cells = [nbformat.v4.new_markdown_cell("# Alpha"), cell]
    return nb


@pytest.mark.book
def test_the_built_page_follows_the_edition_and_is_read_again_when_it_changes(tmp_path):
    """A real (tiny) Jupyter Book build: the page shows the stored run; after the chapter's code changes, the
    next build reads the page again and shows the book's run, saying the paper-scale run is pending."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    import nbformat

    from covbook._jsonio import write_json_atomic

    root = tmp_path
    (root / "book" / "generated" / "runs").mkdir(parents=True)
    (root / "book" / "edition").mkdir(parents=True)
    (root / "notebooks").mkdir()
    (root / "_config.yml").write_text(MINI_CONFIG)
    (root / "book" / "_toc.yml").write_text("format: jb-book\nroot: intro\nchapters:\n  - file: generated/01_alpha\n")
    (root / "book" / "intro.md").write_text("# Intro\n\nHello.\n")
    (root / "notebooks" / "01_alpha.md").write_text(make_notebook("print(x)"))
    (root / "notebooks" / "profiles.yml").write_text("01_alpha:\n  full: {x: 9}\n")
    nbformat.write(_mini_notebook("book-run-output\n"), root / "book" / "generated" / "01_alpha.ipynb")
    write_json_atomic(root / "book" / "generated" / "runs" / "01_alpha.json",
                      {"notebook": "01_alpha", "status": "ok", "parameters": {"profile": "quick"},
                       "device_used": "cpu", "finished": "2026-12-04T20:00:00+0000"})
    nbformat.write(_mini_notebook("edition-run-output\n"), root / "book" / "edition" / "01_alpha.ipynb")
    paths = Paths(root)
    from covbook.book.cache import file_digest
    from covbook.book.records import RunRecord

    rec = {"notebook": "01_alpha", "status": "ok", "parameters": {"profile": "full", "device": "cuda", "seed": 0},
           "device_used": "cuda (a GPU)", "finished": "2026-12-04T20:00:00+0000", "commit": "abc1234",
           "key_device": "cuda", "environment": {"torch": "2.x"},
           "outputs": {"notebook": file_digest(root / "book" / "edition" / "01_alpha.ipynb")}}
    rec["hash"] = edition.stored_key(paths, "01_alpha", RunRecord(rec))
    write_json_atomic(root / "book" / "edition" / "runs" / "01_alpha.json", rec)
    jb = Path(sys.executable).with_name("jupyter-book")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(edition.__file__).parents[2]),
                                                        os.environ.get("PYTHONPATH", "")])}

    def build() -> str:
        proc = subprocess.run([str(jb), "build", "book/", "--config", "_config.yml", "-W", "-n", "--keep-going"],
                              cwd=root, env=env, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return (root / "_build" / "html" / "generated" / "01_alpha.html").read_text()

    page = build()
    assert "edition-run-output" in page and "book-run-output" not in page
    assert "run on cuda (a GPU)" in page and "commit abc1234" in page
    (root / "notebooks" / "01_alpha.md").write_text(make_notebook("print(x + 0)"))  # the chapter's code changed
    page = build()
    assert "book-run-output" in page and "edition-run-output" not in page
    assert "run is pending" in page and "<strong>quick</strong> run on cpu" in page
