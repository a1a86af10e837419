"""Sphinx hook: repository, issue and launch buttons only when the book knows its repository.

Listed in ``_config.yml`` (``sphinx.extra_extensions``).  At ``config-inited`` it asks
:func:`covbook.book.repository.resolve_repository` where the book lives and rewrites the
theme options of sphinx-book-theme accordingly: with a repository, the repository and
issue buttons and the Colab and Binder launch buttons, which open the executed notebook on
the branch the book workflow publishes; without one, none of them (no dead links).

It also offers each chapter's MyST source (``notebooks/NN_name.md``) next to the executed
``.ipynb`` in the page's download menu, and, when the repository is known, fills the
setup cell of the downloadable notebooks so that they install covbook where it is missing.
The downloadable notebooks are the published edition (:mod:`covbook.book.standalone`): roles
resolved to text and links, no papermill cell, the standard ``python3`` kernel.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from covbook.book.repository import (
    BINDER_URL,
    COLAB_URL,
    NOTEBOOKS_BRANCH,
    Repository,
    fill_notebook_file,
    resolve_repository,
)

__all__ = ["theme_options", "setup"]

_BUTTONS = ("use_repository_button", "use_issues_button", "use_edit_page_button", "use_source_button")
#: Jupyter Book's built-in default ``repository.url``: not this book's repository.
_JB_DEFAULT_URL = "https://github.com/executablebooks/jupyter-book"
_LAUNCHERS = ("colab_url", "binderhub_url", "jupyterhub_url", "deepnote_url", "jupyterlite_url")


def theme_options(options: dict[str, Any], repo: Repository | None, path_to_book: str = "book") -> dict[str, Any]:
    """sphinx-book-theme options with the repository and launch buttons set for ``repo`` (or removed)."""
    out = dict(options)
    launch = dict(out.get("launch_buttons") or {})
    for key in _LAUNCHERS:
        launch.pop(key, None)
    for key in _BUTTONS:
        out[key] = False
    for key in ("repository_url", "repository_branch", "path_to_docs"):
        out.pop(key, None)
    if repo is not None:
        out.update(repository_url=repo.url, repository_branch=NOTEBOOKS_BRANCH, path_to_docs=path_to_book,
                   use_repository_button=True, use_issues_button=True)
        launch.update(colab_url=COLAB_URL, binderhub_url=BINDER_URL)
    out["launch_buttons"] = launch
    return out


def _project_root(app) -> Path:
    return Path(app.srcdir).resolve().parent


def _configure(app, config) -> None:
    options = dict(config.html_theme_options or {})
    root = _project_root(app)
    configured = options.get("repository_url") or None
    repo = resolve_repository(root, configured=None if configured == _JB_DEFAULT_URL else configured)
    app.covbook_repository = repo
    config.html_theme_options = theme_options(options, repo, Path(app.srcdir).resolve().relative_to(root).as_posix())


def _md_source(app, pagename: str) -> Path | None:
    """``notebooks/NN_name.md`` for a chapter page ``generated/NN_name``."""
    folder, _, stem = pagename.rpartition("/")
    if folder != "generated":
        return None
    src = _project_root(app) / "notebooks" / f"{stem}.md"
    return src if src.is_file() else None


def _add_md_download(app, pagename: str, templatename: str, context: dict, doctree) -> None:
    if _md_source(app, pagename) is None:
        return
    for group in context.get("header_buttons", []):
        if group.get("label") == "download-buttons":
            group["buttons"].insert(-1, {
                "type": "link",
                "url": f"{context['pathto']('_sources', 1)}/{pagename}.md",
                "text": ".md",
                "tooltip": "Download the MyST notebook source (open it in Jupyter with jupytext)",
                "icon": "fas fa-file-lines",
                "label": "download-md-button",
            })


def _publish_sources(app, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    sources = Path(app.outdir) / "_sources"
    for pagename in app.env.found_docs:
        md = _md_source(app, pagename)
        if md is not None:
            dst = sources / f"{pagename}.md"
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes(md.read_bytes())
    from covbook.book.standalone import standalone_file

    repo: Repository | None = getattr(app, "covbook_repository", None)
    for nb in sorted((sources / "generated").glob("[0-9][0-9]_*.ipynb")):
        standalone_file(nb, nb, _project_root(app), repo.pages_url if repo else None)
        if repo is not None:
            fill_notebook_file(nb, repo.install_source)


def setup(app) -> dict[str, Any]:
    app.connect("config-inited", _configure, priority=100)
    app.connect("html-page-context", _add_md_download, priority=502)  # after the theme's buttons (501)
    app.connect("build-finished", _publish_sources)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
