"""Sphinx extension: the book's pages, with the buttons its repository allows and no console errors.

Repository, issue and launch (Colab, Binder) buttons where :func:`covbook.book.repository.resolve_repository`
knows the repository (else none: no dead links); each chapter's MyST source and published notebook
(:mod:`covbook.book.standalone`) to download; inline scripts once (sphinx-thebe's and sphinx-togglebutton's
``const`` twice is a SyntaxError); the light colour mode (else pydata-sphinx-theme logs an error); a root
``index.html`` naming the icon (else a favicon 404); the covbook version and commit in every footer.
"""

from __future__ import annotations

import html
import shutil
from pathlib import Path
from typing import Any

from covbook.book.records import git_commit, versions
from covbook.book.repository import NOTEBOOKS_BRANCH, Repository, resolve_repository

__all__ = ["theme_options", "unique_scripts", "setup"]

HERE = Path(__file__).resolve().parent
_BUTTONS = ("use_repository_button", "use_issues_button", "use_edit_page_button", "use_source_button")
_LAUNCHERS = ("colab_url", "binderhub_url", "jupyterhub_url", "deepnote_url", "jupyterlite_url")
#: Jupyter Book's built-in default ``repository.url``: not this book's repository.
_JB_DEFAULT_URL = "https://github.com/executablebooks/jupyter-book"


def theme_options(options: dict[str, Any], repo: Repository | None, path_to_book: str = "book") -> dict[str, Any]:
    """sphinx-book-theme options with the repository and launch buttons set for ``repo`` (or removed)."""
    out = {k: v for k, v in options.items() if k not in ("repository_url", "repository_branch", "path_to_docs")}
    out.update(dict.fromkeys(_BUTTONS, False))
    launch = {k: v for k, v in (out.get("launch_buttons") or {}).items() if k not in _LAUNCHERS}
    if repo is not None:
        out.update(repository_url=repo.url, repository_branch=NOTEBOOKS_BRANCH, path_to_docs=path_to_book,
                   use_repository_button=True, use_issues_button=True)
        launch.update(colab_url="https://colab.research.google.com", binderhub_url="https://mybinder.org")
    out["launch_buttons"] = launch
    return out


def unique_scripts(scripts: list) -> list:
    """``scripts`` with later duplicates (same file, inline body and attributes) removed, order kept."""
    first: dict[tuple, object] = {}
    for js in scripts:  # a file name of '' and None both mean inline
        first.setdefault((js.filename or "", tuple(sorted((k, str(v)) for k, v in js.attributes.items()))), js)
    return list(first.values())


def _root(app) -> Path:
    return Path(app.srcdir).resolve().parent


def _configure(app, config) -> None:
    options = dict(config.html_theme_options or {})
    root, configured = _root(app), options.get("repository_url") or None
    app.covbook_repository = resolve_repository(root, None if configured == _JB_DEFAULT_URL else configured)
    options = theme_options(options, app.covbook_repository, Path(app.srcdir).resolve().relative_to(root).as_posix())
    options["navbar_persistent"] = []  # pydata-sphinx-theme's second search box (the book theme has one)
    version = versions(("covbook",), missing="unknown")["covbook"]
    line = html.escape(f"Built by covbook {version} from commit {git_commit(root)}.")
    options["extra_footer"] = f'{options.get("extra_footer") or ""}<p class="covbook-build">{line}</p>'
    config.html_theme_options = options
    config.html_static_path = [*config.html_static_path, str(HERE / "static")]
    config.html_context = {"default_mode": "light", **(config.html_context or {})}
    if config.root_doc != "index":  # the root redirect, written before sphinx-external-toc's (which has no icon)
        config.templates_path = [*config.templates_path, str(HERE / "templates")]
        config.html_additional_pages = {"index": "redirect.html.j2", **config.html_additional_pages}


def _md_source(app, pagename: str) -> Path | None:
    """``notebooks/NN_name.md`` for a chapter page ``generated/NN_name``."""
    folder, _, stem = pagename.rpartition("/")
    src = _root(app) / "notebooks" / f"{stem}.md"
    return src if folder == "generated" and src.is_file() else None


def _page_context(app, pagename: str, templatename: str, context: dict, doctree) -> None:
    if "script_files" in context:
        context["script_files"] = unique_scripts(list(context["script_files"]))
    if _md_source(app, pagename) is None:
        return
    for group in context.get("header_buttons", []):
        if group.get("label") == "download-buttons":
            group["buttons"].insert(-1, {
                "type": "link", "url": f"{context['pathto']('_sources', 1)}/{pagename}.md", "text": ".md",
                "tooltip": "Download the MyST notebook source (open it in Jupyter with jupytext)",
                "icon": "fas fa-file-lines", "label": "download-md-button"})


def _publish_sources(app, exception: Exception | None) -> None:
    """Each chapter's MyST source next to its ``.ipynb`` in ``_sources``; the notebooks as published."""
    if exception is not None or app.builder.format != "html":
        return
    from covbook.book.standalone import book_context, standalone_file

    sources = Path(app.outdir) / "_sources"
    for pagename in app.env.found_docs:
        if (md := _md_source(app, pagename)) is not None:
            (sources / pagename).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(md, sources / f"{pagename}.md")
    repo, context = app.covbook_repository, book_context(_root(app))
    for nb in sorted((sources / "generated").glob("[0-9][0-9]_*.ipynb")):
        standalone_file(nb, nb, _root(app), repo.pages_url if repo else None, repo.install_source if repo else None,
                        context)


def setup(app) -> dict[str, Any]:
    app.connect("config-inited", _configure, priority=950)  # after sphinx-external-toc names the root page (900)
    app.add_css_file("covbook.css")
    app.add_js_file("covbook.js")
    app.connect("html-page-context", _page_context, priority=900)  # after the theme's buttons (501)
    app.connect("build-finished", _publish_sources)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
