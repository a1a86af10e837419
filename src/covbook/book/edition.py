"""The book's stored edition: every chapter run once at a profile (paper scale on a GPU), kept in ``book/edition``.

``covbook edition full --device cuda`` runs the chapters in a scratch tree (``.covbook/edition/<profile>/``),
figures as SVG, and stores each successful chapter's notebook, claims and run record in ``book/edition/`` with
a manifest (``edition.json``: profile, seed, device, versions, commit, and per chapter its science key).  A
stored run is *current* while its :func:`science_key` equals the chapter's now; ``covbook build`` shows a
current chapter from it (:func:`published_notebook`), and ``covbook check`` re-judges its measurements by the
current rules (:func:`edition_problems`).  Nothing here imports torch unless a chapter is run.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from covbook._jsonio import DamagedFile, atomic_write, read_json, write_json_atomic
from covbook.book import config
from covbook.book.cache import notebook_science, portable
from covbook.book.checks import claim_problems, id_problems, read_rules
from covbook.book.config import Paths, UsageError, discover
from covbook.book.render import render
from covbook.claims import judge_file, load_measurements

__all__ = ["EDITION", "science_key", "read_manifest", "status", "Status", "edition_problems", "edition_claims",
           "published_notebook", "make", "store", "SVG_CONFIG", "shown_claims", "COMMIT_ENV", "refresh_verdict_lines"]

EDITION = Path("book") / "edition"
#: the commit an edition was made at, where the tree it runs in is no git checkout (a copy on a GPU machine)
COMMIT_ENV = "COVBOOK_EDITION_COMMIT"
#: the kernels of an edition draw figures as SVG (text, small, sharp at any zoom)
SVG_CONFIG = 'c.InlineBackend.figure_formats = {"svg"}\n'
_NOW = "%Y-%m-%d %H:%M UTC"


def _dir(paths: Paths) -> Path:
    return paths.root / EDITION


def science_key(paths: Paths, name: str, profile: str) -> str:
    """SHA-256 of what makes chapter ``name``'s results at ``profile``: its code cells and the science modules
    they import (each as :func:`covbook.book.cache.portable` source), and its parameters there.  Prose,
    comments and docstrings do not count; a :class:`UsageError` for an unknown chapter."""
    nb = discover(paths).get(name)
    if nb is None:
        raise UsageError(f"unknown notebook {name!r}")
    h = hashlib.sha256()
    for _, src in config.myst_code_cells(nb.read_text(encoding="utf-8")):
        h.update(portable(src).encode() + b"\0")
    h.update(notebook_science(nb).encode())
    params = config.resolve_parameters(name, config.notebook_parameters(nb), config.load_profiles(paths.profiles),
                                       profile, "auto", 0)
    h.update(json.dumps({k: v for k, v in params.items() if k not in ("device", "seed")}, sort_keys=True,
                        default=str).encode())
    return h.hexdigest()


def read_manifest(paths: Paths) -> dict | None:
    """``book/edition/edition.json`` (``None`` when there is no edition)."""
    f = _dir(paths) / "edition.json"
    return read_json(f, dict) if f.is_file() else None


@dataclass(frozen=True)
class Status:
    """Where chapter ``name`` stands in the edition: ``current``, ``pending`` (its science changed since the
    stored run), ``failed`` (the stored run failed) or ``absent`` (not in the edition)."""

    name: str
    state: str
    entry: dict | None = None

    @property
    def current(self) -> bool:
        return self.state == "current"


def status(paths: Paths, manifest: dict | None = None) -> dict[str, Status]:
    """Every chapter's :class:`Status` against the edition's manifest (read from disk by default)."""
    manifest = read_manifest(paths) if manifest is None else manifest
    chapters = (manifest or {}).get("notebooks", {})
    out = {}
    for name in discover(paths):
        entry = chapters.get(name)
        if entry is None:
            state = "absent"
        elif entry.get("status") != "ok":
            state = "failed"
        else:
            state = "current" if entry.get("science_key") == science_key(paths, name, manifest["profile"]) \
                else "pending"
        out[name] = Status(name, state, entry)
    return out


def edition_claims(paths: Paths, name: str, profile: str) -> list:
    """The stored measurements of chapter ``name`` judged by the current rules at the edition's ``profile``."""
    return judge_file(load_measurements(_dir(paths) / "claims" / f"{name}.json"), read_rules(paths, name),
                      profile=profile)[0]


def edition_problems(paths: Paths) -> tuple[list[str], list[str]]:
    """``(problems, notes)`` of the stored edition: every failed claim of a current chapter, a damaged or
    missing file, and ids that differ from the rules (problems); each pending chapter (a note)."""
    try:
        manifest = read_manifest(paths)
    except DamagedFile as err:
        return [f"edition: {err}"], []
    if manifest is None:
        return [], []
    problems, notes = [], []
    profile = manifest.get("profile")
    for name, st in status(paths, manifest).items():
        if st.state == "pending":
            notes.append(f"edition: {name}: its paper-scale run is pending: its science changed after the stored "
                         f"{profile} run (shown from the book's own run; `covbook edition {profile} {name[:2]}`)")
        f = _dir(paths) / "claims" / f"{name}.json"
        if not st.current:
            continue
        if not f.is_file():
            problems.append(f"edition: {name}: {f.relative_to(paths.root)} is missing")
            continue
        try:
            rules, ms = read_rules(paths, name), load_measurements(f)
            claims = judge_file(ms, rules, profile=profile)[0]
        except (UsageError, ValueError, OSError) as err:
            problems.append(f"edition: {name}: {err}")
            continue
        problems += [f"edition ({profile}): {x}" for x in claim_problems(name, claims, profile)[0]]
        problems += [f"edition ({profile}): {x}" for x in id_problems(name, [m.id for m in ms], sorted(rules))]
    return problems, notes


def shown_claims(paths: Paths, claims: list) -> tuple[list, list[str]]:
    """The claims as the published book shows them: a current chapter's from its stored edition run (judged at
    the edition's profile), every other chapter's from ``claims`` (the book's run); and the lines of the
    report's section on the edition (empty without one)."""
    try:
        manifest = read_manifest(paths)
    except DamagedFile:
        manifest = None
    if manifest is None:
        return claims, []
    st = status(paths, manifest)
    current = [n for n, s in st.items() if s.current]
    shown = [c for c in claims if c.notebook not in current]
    for name in current:
        try:
            shown += edition_claims(paths, name, manifest["profile"])
        except (UsageError, ValueError, OSError):
            shown += [c for c in claims if c.notebook == name]
    return shown, render("edition_section.md.j2", m=manifest, statuses=st).split("\n")


def published_notebook(paths: Paths, name: str, own: dict, record: dict | None = None,
                       manifest: dict | None = None, commit: str | None = None,
                       statuses: dict[str, Status] | None = None) -> dict:
    """The notebook a reader sees for chapter ``name``: its stored edition run where that is current (verdict
    lines re-judged by the current rules), else ``own`` (the book's run, ``record`` its run record, ``commit`` the
    book's commit); under its title a note saying which run it shows (profile, device, date, commit).
    ``manifest`` and ``statuses`` (:func:`status` of that manifest) are read when not given."""
    manifest = read_manifest(paths) if manifest is None else manifest
    statuses = status(paths, manifest) if statuses is None else statuses
    st = statuses.get(name, Status(name, "absent"))
    nb = own
    if st.current:
        nb, record, commit = json.loads((_dir(paths) / f"{name}.ipynb").read_text(encoding="utf-8")), None, None
        try:  # a stored claim that cannot be judged is `covbook check`'s problem; the page keeps its verdict line
            refresh_verdict_lines(nb, edition_claims(paths, name, manifest["profile"]))
        except (UsageError, ValueError, OSError):
            pass
    cells = [c for c in nb.get("cells", []) if "covbook-edition" not in c.get("metadata", {}).get("tags", [])]
    at = next((i + 1 for i, c in enumerate(cells) if c.get("cell_type") == "markdown"
               and "".join(c.get("source", "")).lstrip().startswith("# ")), 0)
    rec = record or {}
    text = render("edition_banner.md.j2", current=st.current, m=manifest, e=st.entry or {}, rec=rec, commit=commit,
                  params=rec.get("parameters") or {}, pending=st.state == "pending").strip()
    note = {"cell_type": "markdown", "id": "covbook-edition", "metadata": {"tags": ["covbook-edition"]},
            "source": f":::{{note}}\n{text}\n:::\n"}
    return {**nb, "cells": [*cells[:at], note, *cells[at:]]}


_SPAN = re.compile(r'<span id="(claim-[^"]+)"></span>')  # a verdict line's anchor (covbook.claims.anchor)


def refresh_verdict_lines(nb: dict, claims: list) -> int:
    """Rewrite, in place, the verdict lines of executed notebook ``nb`` (found by their anchors) as ``claims``
    (judged by the current rules) give them; returns how many changed."""
    from covbook.claims import anchor, verdict_markdown

    by_anchor = {anchor(c.notebook, c.id): c for c in claims}
    n = 0
    for cell in nb.get("cells", []):
        for out in cell.get("outputs", []) if cell.get("cell_type") == "code" else []:
            md = out.get("data", {}).get("text/markdown")
            text = "".join(md) if isinstance(md, list) else md
            m = _SPAN.match(text or "")
            if m and m.group(1) in by_anchor and verdict_markdown(by_anchor[m.group(1)]) != text:
                out["data"]["text/markdown"] = verdict_markdown(by_anchor[m.group(1)])
                out["data"]["text/plain"] = "<IPython.core.display.Markdown object>"
                n += 1
    return n


def _scratch(paths: Paths, profile: str) -> Paths:
    """The edition's scratch tree: the chapters, rules, profiles and ``_config.yml`` copied; kernels draw SVG."""
    root = paths.state / "edition" / profile
    shutil.rmtree(root / "notebooks", ignore_errors=True)
    shutil.copytree(paths.notebooks, root / "notebooks", ignore=shutil.ignore_patterns("*.ipynb", ".ipynb_checkpoints"))
    cfg = root / ".covbook" / "home" / "ipython" / "profile_default" / "ipython_kernel_config.py"
    cfg.parent.mkdir(parents=True, exist_ok=True)
    cfg.write_text(SVG_CONFIG, encoding="utf-8")
    if (paths.root / "_config.yml").is_file():
        shutil.copy2(paths.root / "_config.yml", root / "_config.yml")
    return Paths(root)


def _versions() -> dict[str, str | None]:
    """torch, its CUDA, Python and numpy versions of this machine (imports torch: an edition runs chapters)."""
    import platform

    import numpy
    import torch

    return {"torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
            "numpy": numpy.__version__}


def store(paths: Paths, scratch: Paths, names: list[str], profile: str, seed: int,
          versions: dict[str, str | None] | None = None) -> dict:
    """Copy the successful chapters ``names`` of ``scratch`` into ``book/edition`` and update its manifest.

    A chapter that failed keeps its earlier stored run only when that is still current; otherwise it is
    recorded as failed.  Files are written atomically, the manifest last; the run times join this machine's
    ``.covbook/timings.json``.
    """
    from covbook.book.provenance import git_commit
    from covbook.book.records import read_run

    out = _dir(paths)
    old = read_manifest(paths) or {}
    if old.get("profile") not in (None, profile):
        raise UsageError(f"book/edition holds a {old['profile']} edition; this one is {profile} (remove it first)")
    chapters = dict(old.get("notebooks", {}))
    device = None
    for name in names:
        rec = read_run(scratch.runs / f"{name}.json")
        key = science_key(paths, name, profile)
        if rec is None or not rec.ok:
            if chapters.get(name, {}).get("science_key") != key:
                chapters[name] = {"status": "failed", "error": (rec.error if rec is not None else None) or "no run"}
            continue
        for src, dst in ((scratch.generated / f"{name}.ipynb", out / f"{name}.ipynb"),
                         (scratch.claims / f"{name}.json", out / "claims" / f"{name}.json"),
                         (scratch.runs / f"{name}.json", out / "runs" / f"{name}.json")):
            atomic_write(dst, partial(shutil.copyfile, src))
        device = rec.device_used
        chapters[name] = {"status": "ok", "science_key": key, "seconds": round(float(rec.get("seconds", 0.0)), 1),
                          "device_used": device, "when": rec.get("finished") or time.strftime(_NOW, time.gmtime())}
    manifest = {"profile": profile, "seed": seed, "device": device or old.get("device", "?"),
                **(versions if versions is not None else _versions()),
                "commit": os.environ.get(COMMIT_ENV) or git_commit(paths.root),
                "made": time.strftime(_NOW, time.gmtime()), "notebooks": dict(sorted(chapters.items()))}
    write_json_atomic(out / "edition.json", manifest)
    _merge_timings(paths, scratch)
    return manifest


def _merge_timings(paths: Paths, scratch: Paths) -> None:
    """The edition's measured run times join this machine's ``.covbook/timings.json`` (the plan's calibration)."""
    try:
        new = read_json(scratch.timings, dict) if scratch.timings.is_file() else {}
        old = read_json(paths.timings, dict) if paths.timings.is_file() else {}
    except DamagedFile:
        return
    for name, devices in new.items():
        for dev, runs in (devices or {}).items():
            old.setdefault(name, {}).setdefault(dev, {}).update(runs or {})
    if new:
        write_json_atomic(paths.timings, old)


def make(paths: Paths, names: list[str] | None, *, profile: str, device: str, seed: int = 0, jobs: int = 1,
         timeout: float | None = None, force: bool = False, progress: bool = True) -> tuple[list, dict]:
    """Run chapters ``names`` (all by default) at ``profile`` in the edition's scratch tree and store them;
    returns the runner's results and the new manifest.  A chapter cached there is not run again unless ``force``."""
    from covbook.book.lock import tree_lock
    from covbook.book.runner import run_notebooks

    scratch = _scratch(paths, profile)
    with tree_lock(scratch.lock, f"covbook edition {profile}"):
        results = run_notebooks(scratch, names or list(discover(scratch)), profile=profile, device=device, seed=seed,
                                jobs=jobs, force=force, progress=progress, timeout=timeout)
    return results, store(paths, scratch, [r.name for r in results], profile, seed)
