"""Sphinx extension: each chapter page shows its stored edition run where that is current, else the book's run.

At ``source-read`` a chapter's executed notebook (``generated/NN_name.ipynb``, the book's own run) is
replaced by :func:`covbook.book.edition.published_notebook`: the stored edition run of
``book/edition`` when its science key equals the chapter's now, with its verdict lines re-judged by
the current rules, else the book's run; either way with a note under the title naming the run it
shows (profile, device, date, commit), and saying so when the paper-scale run is pending.  The
``{claim}`` role of a chapter shown from the edition cites the edition's claims.  A page is read
again when which run it shows changes.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from covbook.book import edition
from covbook.book.config import Paths, UsageError
from covbook.book.records import read_run

__all__ = ["setup"]

_PREFIX = "generated/"


def _paths(app) -> Paths:
    return Paths(Path(app.srcdir).parent)


def _state(app) -> dict[str, str]:
    """Per chapter docname: a key of what its page shows (the edition state and the stored files' bytes)."""
    paths = _paths(app)
    try:
        manifest = edition.read_manifest(paths)
        st = edition.status(paths, manifest)
    except (ValueError, OSError):
        return {}
    out = {}
    for name, s in st.items():
        h = hashlib.sha256(f"{s.state}{json.dumps(manifest, sort_keys=True)}".encode())
        if s.current:
            for f in (paths.root / edition.EDITION / f"{name}.ipynb",
                      paths.root / edition.EDITION / "claims" / f"{name}.json"):
                h.update(f.read_bytes() if f.is_file() else b"")
        out[_PREFIX + name] = h.hexdigest()
    return out


def _inited(app) -> None:
    app.covbook_edition = _state(app)  # type: ignore[attr-defined]
    paths = _paths(app)
    try:
        manifest = edition.read_manifest(paths)
        current = [n for n, s in edition.status(paths, manifest).items() if s.current]
    except (ValueError, OSError):
        return
    store = getattr(app, "covbook_claims", None)
    if store is None or manifest is None:
        return
    for name in current:  # the {claim} role of a chapter shown from the edition cites the edition's claims
        try:
            store[name] = {c.id: c for c in edition.edition_claims(paths, name, manifest["profile"])}
        except (UsageError, ValueError, OSError):  # `covbook check` reports it; the role keeps the book's run
            continue


def _outdated(app, env, added, changed, removed) -> list[str]:
    old = getattr(env, "covbook_edition", {})
    new = getattr(app, "covbook_edition", {})
    env.covbook_edition = new
    return sorted(d for d in new if old.get(d) != new[d] and d in env.found_docs and d not in added)


def _source(app, docname: str, source: list[str]) -> None:
    if not docname.startswith(_PREFIX) or not docname[len(_PREFIX):len(_PREFIX) + 2].isdigit():
        return
    name = docname[len(_PREFIX):]
    paths = _paths(app)
    try:
        own = json.loads(source[0])
    except ValueError:
        return  # not a notebook: myst-nb reports it
    try:
        record = read_run(paths.runs / f"{name}.json")
    except (ValueError, OSError):
        record = None
    if not hasattr(app, "covbook_commit"):
        from covbook.book.provenance import git_commit

        app.covbook_commit = git_commit(paths.root)  # type: ignore[attr-defined]
    nb = edition.published_notebook(paths, name, own, dict(record) if record is not None else None,
                                    commit=app.covbook_commit)  # type: ignore[attr-defined]
    source[0] = json.dumps(nb)


def setup(app) -> dict[str, object]:
    app.connect("builder-inited", _inited, priority=600)  # after covbook.book.sphinx_claims loads its store
    app.connect("env-get-outdated", _outdated)
    app.connect("source-read", _source)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
