"""The book's repository from one place, and its buttons: present when known, absent otherwise."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from covbook.book.repository import (
    ENV,
    NOTEBOOKS_BRANCH,
    Repository,
    parse_github,
    resolve_repository,
)
from covbook.book.sphinx_pages import theme_options
from covbook.book.standalone import fill_setup_source
from helpers import ROOT

OCTO = Repository("octo", "covbook")


@pytest.mark.parametrize("text", [
    "octo/covbook", "https://github.com/octo/covbook", "https://github.com/octo/covbook.git",
    "https://github.com/octo/covbook/", "git@github.com:octo/covbook.git", "ssh://git@github.com/octo/covbook.git",
    "https://x-access-token:abc@github.com/octo/covbook", "  octo/covbook\n",
])
def test_parse_github_accepts_slugs_and_urls(text: str) -> None:
    assert parse_github(text) == OCTO


@pytest.mark.parametrize("text", ["", "covbook", "https://gitlab.com/octo/covbook", "/srv/git/covbook.git",
                                  "https://github.com/octo", "octo/covbook/extra", "file:///tmp/x"])
def test_parse_github_rejects_everything_else(text: str) -> None:
    assert parse_github(text) is None


def test_repository_urls() -> None:
    assert OCTO.url == "https://github.com/octo/covbook"
    assert OCTO.install_source == f"git+https://github.com/octo/covbook@{NOTEBOOKS_BRANCH}"


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def test_resolve_order_env_then_config_then_origin(tmp_path: Path) -> None:
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "remote", "add", "origin", "git@github.com:from/origin.git")
    assert resolve_repository(tmp_path, environ={}) == Repository("from", "origin")
    assert resolve_repository(tmp_path, "https://github.com/from/config", environ={}) == Repository("from", "config")
    assert resolve_repository(tmp_path, "https://github.com/from/config", environ={ENV: "from/env"}) == \
        Repository("from", "env")
    for off in ("", "none", " None "):  # explicitly no repository, whatever git says
        assert resolve_repository(tmp_path, "https://github.com/from/config", environ={ENV: off}) is None


def test_resolve_unknown_without_github_origin(tmp_path: Path) -> None:
    assert resolve_repository(tmp_path, environ={}) is None  # not a git checkout
    _git(tmp_path, "init", "-q")
    assert resolve_repository(tmp_path, environ={}) is None  # no origin
    _git(tmp_path, "remote", "add", "origin", "https://gitlab.com/octo/covbook.git")
    assert resolve_repository(tmp_path, environ={}) is None  # not GitHub: no Colab, no buttons


def test_a_project_nested_in_another_checkout_is_not_that_checkout(tmp_path: Path) -> None:
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "remote", "add", "origin", "https://github.com/octo/covbook")
    nested = tmp_path / "_build" / "copy"
    nested.mkdir(parents=True)
    assert resolve_repository(nested, environ={}) is None


@pytest.mark.parametrize("bad", ["not a repo", "https://gitlab.com/octo/covbook"])
def test_bad_repository_setting_is_a_clear_error(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ValueError, match=ENV):
        resolve_repository(tmp_path, environ={ENV: bad})
    with pytest.raises(ValueError, match="repository.url"):
        resolve_repository(tmp_path, bad, environ={})


def test_fill_setup_source_makes_the_setup_cell_the_install_cell() -> None:
    from covbook.book.standalone import INSTALL_CELL, SETUP_CELL

    out = fill_setup_source(SETUP_CELL, OCTO.install_source)
    filled = 'COVBOOK_SOURCE = "git+https://github.com/octo/covbook@executed-notebooks"'
    assert out == INSTALL_CELL.replace("COVBOOK_SOURCE = None", filled)
    assert fill_setup_source("x = 1\n", OCTO.install_source) == "x = 1\n"  # any other cell: unchanged


def _source(cell: dict) -> str:
    src = cell["source"]
    return "".join(src) if isinstance(src, list) else src


def test_publishing_fills_the_setup_cell_and_no_prose(tmp_path: Path) -> None:
    from covbook.book.standalone import standalone_file

    nb = nbformat.v4.new_notebook()
    line = "COVBOOK_SOURCE = None"
    nb.cells = [nbformat.v4.new_markdown_cell(line), nbformat.v4.new_code_cell(line)]
    path, out = tmp_path / "n.ipynb", tmp_path / "published.ipynb"
    nbformat.write(nb, path)
    assert standalone_file(path, out, tmp_path, install_source=OCTO.install_source)
    cells = [_source(c) for c in json.loads(out.read_text())["cells"]]
    assert cells[0] == "COVBOOK_SOURCE = None"  # prose is never touched
    assert OCTO.install_source in cells[1]
    assert not standalone_file(out, out, tmp_path, install_source=OCTO.install_source)  # nothing left to fill
    assert not standalone_file(path, out, tmp_path)  # no install source: the cell is left as it is
    assert _source(json.loads(out.read_text())["cells"][1]) == line


def test_a_published_notebook_is_readable_by_all_and_written_as_nbformat_writes_it(tmp_path: Path) -> None:
    """A web server serving the built book (another user) must read it; its text stays UTF-8, not escapes."""
    from covbook.book.standalone import standalone_file

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("Straße — é"), nbformat.v4.new_code_cell("COVBOOK_SOURCE = None")]
    path, out = tmp_path / "n.ipynb", tmp_path / "published.ipynb"
    nbformat.write(nb, path)
    standalone_file(path, out, tmp_path, install_source=OCTO.install_source)
    assert out.stat().st_mode & 0o044 == 0o044
    text = out.read_text(encoding="utf-8")
    assert "Straße — é" in text and text.endswith("}\n")
    nbformat.validate(nbformat.read(out, as_version=4))


def test_theme_options_with_and_without_repository() -> None:
    base = {"launch_buttons": {"notebook_interface": "classic", "colab_url": "https://x"},
            "use_repository_button": True, "repository_url": "https://github.com/a/b", "other": 1}
    off = theme_options(base, None)
    assert off["other"] == 1 and "repository_url" not in off
    assert not any(off[k] for k in ("use_repository_button", "use_issues_button", "use_edit_page_button"))
    assert off["launch_buttons"] == {"notebook_interface": "classic"}
    on = theme_options(base, OCTO)
    assert on["repository_url"] == OCTO.url and on["repository_branch"] == NOTEBOOKS_BRANCH
    assert on["path_to_docs"] == "book" and on["use_repository_button"] and on["use_issues_button"]
    assert on["launch_buttons"]["colab_url"].startswith("https://colab.") and on["launch_buttons"]["binderhub_url"]
    assert base["launch_buttons"]["colab_url"] == "https://x"  # the input is not modified


# --- a real (tiny) Jupyter Book build, with and without a repository ------------------------------

MINI_CONFIG = """\
title: mini
only_build_toc_files: true
execute:
  execute_notebooks: "off"
repository:
  url: ""
html:
  use_download_button: true
launch_buttons:
  notebook_interface: classic
sphinx:
  extra_extensions:
    - covbook.book.sphinx_pages
"""


def _mini_book(root: Path) -> Path:
    (root / "book" / "generated").mkdir(parents=True)
    (root / "notebooks").mkdir()
    (root / "_config.yml").write_text(MINI_CONFIG)
    (root / "book" / "_toc.yml").write_text("format: jb-book\nroot: intro\nchapters:\n  - file: generated/01_alpha\n")
    (root / "book" / "intro.md").write_text("# Intro\n\nHello.\n")
    (root / "notebooks" / "01_alpha.md").write_text("---\njupytext: {}\n---\n# Alpha\n")
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_markdown_cell("# Alpha"),
                nbformat.v4.new_code_cell("COVBOOK_SOURCE = None  # filled in when the notebooks are published")]
    nbformat.write(nb, root / "book" / "generated" / "01_alpha.ipynb")
    return root


def _build(root: Path, repository: str) -> Path:
    jb = Path(sys.executable).with_name("jupyter-book")
    env = {**os.environ, ENV: repository, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get(
        "PYTHONPATH", "")])}
    shutil.rmtree(root / "_build", ignore_errors=True)
    proc = subprocess.run([str(jb), "build", "book/", "--config", "_config.yml", "-W", "-n", "--keep-going"],
                          cwd=root, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return root / "_build" / "html"


@pytest.mark.book
def test_book_buttons_follow_the_repository(tmp_path: Path) -> None:
    root = _mini_book(tmp_path)
    html = _build(root, "octo/covbook")
    page = (html / "generated" / "01_alpha.html").read_text()
    path = f"{NOTEBOOKS_BRANCH}/book/generated/01_alpha.ipynb"
    assert f"https://colab.research.google.com/github/octo/covbook/blob/{path}" in page
    assert f"https://mybinder.org/v2/gh/octo/covbook/{NOTEBOOKS_BRANCH}?urlpath=tree/book/generated/01_alpha.ipynb" \
        in page
    assert 'href="https://github.com/octo/covbook"' in page and "github.com/octo/covbook/issues/new" in page
    for download in ("_sources/generated/01_alpha.ipynb", "_sources/generated/01_alpha.md"):
        assert download in page and (html / download).is_file()
    published = json.loads((html / "_sources" / "generated" / "01_alpha.ipynb").read_text())
    assert 'COVBOOK_SOURCE = "git+https://github.com/octo/covbook@executed-notebooks"' in _source(published["cells"][1])
    index = (html / "index.html").read_text()  # the root redirect, with the book's title (and icon, if any)
    assert '<title>mini</title>' in index and 'content="0; url=intro.html"' in index

    html = _build(root, "")  # unknown: no buttons, no dead links
    for page_file in (html / "generated" / "01_alpha.html", html / "intro.html"):
        page = page_file.read_text()
        assert not re.search(r"colab\.research|mybinder|github\.com/octo", page), page_file.name
        assert "launch-buttons" not in page and "repository-button" not in page
    assert (html / "_sources" / "generated" / "01_alpha.md").is_file()
    published = json.loads((html / "_sources" / "generated" / "01_alpha.ipynb").read_text())
    assert "COVBOOK_SOURCE = None" in _source(published["cells"][1])


# --- the notebooks' setup cell ------------------------------------------------------------------

def test_setup_cell_is_a_no_op_where_covbook_is_importable() -> None:
    from covbook.book.standalone import SETUP_CELL

    namespace: dict = {}
    exec(compile(fill_setup_source(SETUP_CELL, "git+https://invalid.invalid/never-used"), "setup", "exec"), namespace)
    assert namespace["COVBOOK_SOURCE"].startswith("git+")  # filled, and pip was not called (covbook is importable)


def test_unpublished_setup_cell_runs_without_covbook_and_calls_no_pip() -> None:
    from covbook.book.standalone import SETUP_CELL

    assert len(SETUP_CELL.splitlines()) <= 3  # the chapters repeat it: a few lines, the logic in INSTALL_CELL
    # -I -S: no site-packages, so covbook is not importable; the unpublished cell only names the placeholder
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", SETUP_CELL + "\nprint(COVBOOK_SOURCE)"],
                          capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.strip() == "None", proc.stderr


# Every chapter's first code cell is SETUP_CELL, tagged remove-cell: tests/test_notebook_pages.py


def test_publish_keeps_the_run_records_true(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from covbook.book.cache import damaged_outputs
    from covbook.book.cli import main
    from covbook.book.config import Paths
    from helpers import fake_run

    fake_run(project, "01_alpha", digest="k")
    nb_file = project / "book" / "generated" / "01_alpha.ipynb"
    nb = json.loads(nb_file.read_text())
    nb["cells"].insert(0, nbformat.v4.new_code_cell("COVBOOK_SOURCE = None"))
    nb_file.write_text(json.dumps(nb))  # as if the run had committed this notebook: its record names it
    rec_file = project / "book" / "generated" / "runs" / "01_alpha.json"
    rec = json.loads(rec_file.read_text())
    from covbook.book.cache import file_digest

    rec["outputs"]["notebook"] = file_digest(nb_file)
    rec_file.write_text(json.dumps(rec))
    monkeypatch.chdir(project)
    monkeypatch.setenv(ENV, OCTO.slug)
    assert main(["publish"]) == 0
    assert OCTO.install_source in _source(json.loads(nb_file.read_text())["cells"][0])  # rewritten
    assert damaged_outputs(Paths(project), ["01_alpha"]) == []  # and its record follows it
    assert not list((project / ".covbook" / "tmp").iterdir())  # no temporaries left
