"""Sphinx hook: pages without console errors.

Two defects of the Jupyter Book 1 theme stack show up as JavaScript errors in a reader's
browser, and the browser test (tests/test_browser.py) fails on any console error:

- the inline script of sphinx-thebe (``const THEBE_JS_URL = ...``) and of
  sphinx-togglebutton are registered twice, so the second ``const`` is a SyntaxError on
  every page: identical scripts are kept once;
- pydata-sphinx-theme logs "Got invalid theme mode" on a reader's first page when no
  default colour mode is configured: the default is the light mode, in which the book's
  figures (white background) are drawn;
- the site's ``index.html``, a bare redirect to the first page written by
  sphinx-external-toc, names no icon, so the browser asks for ``/favicon.ico`` (a 404 in
  the console): the redirect is written here first, as a small page with the book's icon.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

__all__ = ["unique_scripts", "setup"]


def _key(js: object) -> tuple:
    """What makes two script tags the same: file (None and '' both mean inline), attributes, inline body."""
    attributes = getattr(js, "attributes", None)
    if attributes is None:  # a plain string (old Sphinx): its file name
        return (str(js),)
    return (getattr(js, "filename", None) or "", tuple(sorted((k, str(v)) for k, v in attributes.items())))


def unique_scripts(scripts: list) -> list:
    """``scripts`` with later duplicates (same file, inline body and attributes) removed, order kept."""
    seen: set = set()
    out = []
    for js in scripts:
        key = _key(js)
        if key not in seen:
            seen.add(key)
            out.append(js)
    return out


STATIC = Path(__file__).resolve().parent / "static"


def footer_text(version: str, commit: str) -> str:
    """The line every page's footer carries: which covbook built it, from which commit.

    >>> footer_text("0.1.0", "abc1234")
    'Built by covbook 0.1.0 from commit abc1234.'
    """
    return f"Built by covbook {version} from commit {commit}."


def _configure(app, config) -> None:
    from covbook.book.provenance import git_commit, versions

    config.html_static_path = [*config.html_static_path, str(STATIC)]
    context = dict(config.html_context or {})
    context.setdefault("default_mode", "light")  # pydata-sphinx-theme reads it from html_context
    config.html_context = context
    options = dict(config.html_theme_options or {})
    version = versions(("covbook",), missing="unknown")["covbook"]
    line = html.escape(footer_text(version, git_commit(Path(app.srcdir).resolve().parent)))
    options["navbar_persistent"] = []  # pydata-sphinx-theme's second search box (the book theme has one)
    extra = options.get("extra_footer") or ""
    options["extra_footer"] = f'{extra}<p class="covbook-build">{line}</p>'
    config.html_theme_options = options


def _dedupe(app, pagename: str, templatename: str, context: dict, doctree) -> None:
    if "script_files" in context:
        context["script_files"] = unique_scripts(list(context["script_files"]))


def redirect_page(title: str, target: str, icon: str | None) -> str:
    """A minimal HTML page that sends the reader to ``target`` (the book's first page)."""
    t, u = html.escape(title), html.escape(target, quote=True)
    link = f'<link rel="icon" href="{html.escape(icon, quote=True)}">\n' if icon else ""
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>{t}</title>\n{link}'
            f'<meta http-equiv="Refresh" content="0; url={u}">\n</head>\n'
            f'<body><p><a href="{u}">{t}</a></p></body>\n</html>\n')


def _write_index(app, exception: Exception | None) -> None:
    """Write the root redirect before sphinx-external-toc does (it keeps an existing index.html)."""
    index = Path(app.outdir) / "index.html"
    if exception is not None or app.builder.format != "html" or app.config.root_doc == "index" or index.exists():
        return
    favicon = app.config.html_favicon
    icon = f"_static/{Path(favicon).name}" if favicon and "://" not in str(favicon) else favicon
    index.write_text(redirect_page(app.config.html_title or app.config.project, f"{app.config.root_doc}.html", icon),
                     encoding="utf-8")


def setup(app) -> dict[str, Any]:
    app.connect("config-inited", _configure, priority=600)
    app.add_css_file("covbook.css")
    app.add_js_file("covbook.js")
    app.connect("html-page-context", _dedupe, priority=900)
    app.connect("build-finished", _write_index, priority=400)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
