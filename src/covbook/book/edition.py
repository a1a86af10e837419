"""Stored larger runs (``book/edition``): a chapter run at a larger profile (the paper scale on a GPU, or a
decisive larger CPU run) that the book shows while it is current.

``covbook edition full --device cuda`` runs the chapters in a scratch tree (``.covbook/edition/<profile>/``,
figures as SVG) and copies each that succeeded into ``book/edition/``, laid out as ``book/generated`` (the run
record last; a failure leaves ``failed/NAME.json``).  A stored run is *current* when its key is the one cache
key (:func:`covbook.book.cache.content_hash`) the chapter has now with the device and environment its record
names.  Nothing here imports torch unless a chapter is run.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from covbook._jsonio import DamagedFile, atomic_write, read_json, write_json_atomic
from covbook.book import config
from covbook.book.cache import content_hash, environment, notebook_science, resolve_device, verify_outputs
from covbook.book.checks import judge_chapter, read_rules
from covbook.book.config import Paths, UsageError, discover
from covbook.book.records import RunRecord, git_commit
from covbook.book.render import render
from covbook.claims import anchor, load_measurements, verdict_markdown

__all__ = ["EDITION", "COMMIT_ENV", "Status", "status", "stored_key", "edition_problems",
           "edition_claims", "shown_claims", "published_notebook", "refresh_verdict_lines", "make", "store"]

EDITION = Path("book") / "edition"
#: the commit an edition was made at, where the tree it runs in is no git checkout (a copy on a GPU machine)
COMMIT_ENV = "COVBOOK_EDITION_COMMIT"


@dataclass(frozen=True)
class Status:
    """Where a chapter's stored run stands: ``current``, ``pending`` (the chapter's key changed since),
    ``failed`` or ``damaged`` (``error`` says how) or ``absent``."""

    state: str
    record: RunRecord | None = None
    error: str | None = None

    @property
    def current(self) -> bool:
        return self.state == "current"

    @property
    def profile(self) -> str | None:
        return self.record.profile if self.record is not None else None


def stored_key(paths: Paths, name: str, rec: RunRecord) -> str:
    """The key chapter ``name`` has now at the parameters, device and environment of stored run ``rec``."""
    nb = paths.notebooks / f"{name}.md"
    p = rec.parameters
    params = config.resolve_parameters(name, config.notebook_parameters(nb), config.load_profiles(paths.profiles),
                                       str(p.get("profile")), str(p.get("device", "auto")), rec.seed or 0)
    return content_hash(nb, params, notebook_science(nb), str(rec.get("key_device")), rec.get("environment"))


def status(paths: Paths) -> dict[str, Status]:
    """Every chapter's :class:`Status` in ``book/edition``."""
    d, out = paths.root / EDITION, {}
    for name in discover(paths):
        failed = d / "failed" / f"{name}.json"
        try:
            rec = verify_outputs(paths, name, d)
            if failed.is_file():
                info = read_json(failed, dict)
                out[name] = Status("failed", RunRecord(info, failed), str(info.get("error") or "unknown error"))
            elif rec is None:
                out[name] = Status("absent")
            else:
                out[name] = Status("current" if stored_key(paths, name, rec) == rec.key else "pending", rec)
        except DamagedFile as err:
            out[name] = Status("damaged", error=f"{os.path.relpath(err.path, paths.root)} is damaged ({err.reason})")
    return out


def _judged(paths: Paths, name: str, profile: str | None) -> tuple[list, list[str], list[str]]:
    """:func:`covbook.book.checks.judge_chapter` of chapter ``name``'s stored measurements, by the current rules."""
    ms = load_measurements(paths.root / EDITION / "claims" / f"{name}.json")
    return judge_chapter(name, ms, read_rules(paths, name), profile)


def edition_claims(paths: Paths, name: str, profile: str | None) -> list:
    """The stored measurements of chapter ``name`` judged by the current rules at the stored run's ``profile``."""
    return _judged(paths, name, profile)[0]


def edition_problems(paths: Paths) -> tuple[list[str], list[str]]:
    """``(problems, notes)`` of the stored runs: a damaged file, a failed edition run, every problem
    :func:`covbook.book.checks.judge_chapter` finds in a current run (problems); each pending run (a note)."""
    problems, notes = [], []
    for name, st in status(paths).items():
        again = f"covbook edition {st.profile or 'PROFILE'} {name[:2]}"
        if st.state == "damaged":
            problems.append(f"edition: {name}: {st.error}; repair it with: {again}")
        elif st.state == "failed":
            problems.append(f"edition: {name}: its {st.profile} run failed: {st.error} (shown from the book's own "
                            f"run; see {EDITION}/failed/{name}.json, then rerun: {again})")
        elif st.state == "pending":
            notes.append(f"edition: {name}: its stored {st.profile} run is pending: the notebook, its parameters or "
                         f"the science it imports changed after it (shown from the book's own run; `{again}`)")
        elif st.current:
            try:
                problems += [f"edition ({st.profile}): {x}" for x in _judged(paths, name, st.profile)[1]]
            except (UsageError, ValueError, OSError) as err:
                problems.append(f"edition: {name}: {err}")
    return problems, notes


def shown_claims(paths: Paths, claims: list) -> tuple[list, str]:
    """The claims as the published book shows them: a current stored run's (judged at its profile), every other
    chapter's from ``claims`` (the book's run); and the report's section on the stored runs (empty without any)."""
    st = status(paths)
    if all(s.state == "absent" for s in st.values()):
        return claims, ""
    current = [n for n, s in st.items() if s.current]
    shown = [c for c in claims if c.notebook not in current]
    for name in current:
        try:
            shown += edition_claims(paths, name, st[name].profile)
        except (UsageError, ValueError, OSError):
            shown += [c for c in claims if c.notebook == name]
    return shown, render("edition_section.md.j2", statuses=st)


def published_notebook(paths: Paths, name: str, own: dict, record: dict | None = None,
                       statuses: dict[str, Status] | None = None) -> dict:
    """The notebook a reader sees for chapter ``name``: its stored run where that is current (verdict lines
    re-judged by the current rules), else ``own`` (the book's run, ``record`` its run record), with a note under
    its title saying which run it shows; ``statuses`` (:func:`status`) are read when not given."""
    st = (status(paths) if statuses is None else statuses).get(name, Status("absent"))
    nb, rec = own, dict(record or {})
    if st.current:
        nb, rec = read_json(paths.root / EDITION / f"{name}.ipynb", dict), dict(st.record or {})
        try:  # a stored claim that cannot be judged is `covbook check`'s problem; the page keeps its verdict line
            refresh_verdict_lines(nb, edition_claims(paths, name, st.profile))
        except (UsageError, ValueError, OSError):
            pass
    cells = [c for c in nb.get("cells", []) if "covbook-edition" not in c.get("metadata", {}).get("tags", [])]
    at = next((i + 1 for i, c in enumerate(cells) if c.get("cell_type") == "markdown"
               and "".join(c.get("source", "")).lstrip().startswith("# ")), 0)
    text = render("edition_banner.md.j2", st=st, rec=rec).strip()
    note = {"cell_type": "markdown", "id": "covbook-edition", "metadata": {"tags": ["covbook-edition"]},
            "source": f":::{{note}}\n{text}\n:::\n"}
    return {**nb, "cells": [*cells[:at], note, *cells[at:]]}


def refresh_verdict_lines(nb: dict, claims: list) -> int:
    """Rewrite, in place, the verdict lines of executed notebook ``nb`` (found by their anchors) as ``claims``
    (judged by the current rules) give them; returns how many changed."""
    by_anchor = {anchor(c.notebook, c.id): c for c in claims}
    n = 0
    for cell in nb.get("cells", []):
        for out in cell.get("outputs", []) if cell.get("cell_type") == "code" else []:
            md = out.get("data", {}).get("text/markdown")
            text = "".join(md) if isinstance(md, list) else md
            m = re.match(r'<span id="(claim-[^"]+)"></span>', text or "")  # its anchor (covbook.claims.anchor)
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
    cfg.write_text('c.InlineBackend.figure_formats = {"svg"}\n', encoding="utf-8")  # small, sharp at any zoom
    if (paths.root / "_config.yml").is_file():
        shutil.copy2(paths.root / "_config.yml", root / "_config.yml")
    return Paths(root)


def store(paths: Paths, scratch: Paths, results: list, profile: str, provenance: dict) -> None:
    """Copy into ``book/edition`` each chapter of ``results`` that succeeded in this invocation (its record's key
    taken when the run started; ``provenance`` joins the record: the key's device and environment, the commit);
    a failed one writes ``failed/NAME.json`` only.  Files are written atomically, the record last."""
    out = paths.root / EDITION
    for r in results:
        failed = out / "failed" / f"{r.name}.json"
        if r.status == "failed":
            write_json_atomic(failed, {"notebook": r.name, "status": "failed", "error": r.error or "unknown error",
                                       "parameters": {"profile": profile}, **provenance})
            continue
        rec = verify_outputs(scratch, r.name)
        for src, dst in ((scratch.generated / f"{r.name}.ipynb", out / f"{r.name}.ipynb"),
                         (scratch.claims / f"{r.name}.json", out / "claims" / f"{r.name}.json")):
            atomic_write(dst, partial(shutil.copyfile, src))
        write_json_atomic(out / "runs" / f"{r.name}.json", {**dict(rec or {}), **provenance})
        failed.unlink(missing_ok=True)


def make(paths: Paths, names: list[str] | None, *, profile: str, device: str, seed: int = 0, jobs: int = 1,
         timeout: float | None = None, force: bool = False, progress: bool = True) -> tuple[list, str]:
    """Run chapters ``names`` (all by default) at ``profile`` in the edition's scratch tree and store those that
    succeed; returns the runner's results and the resolved device.  Every usage error (another profile stored,
    bad parameters) is raised before any kernel; a chapter cached there is not run again unless ``force``."""
    from covbook.book.lock import tree_lock
    from covbook.book.plan import plan_jobs
    from covbook.book.runner import Interrupted, run_notebooks

    names = names or list(discover(paths))
    other = {n: s.profile for n, s in status(paths).items() if s.profile not in (None, profile)}
    if other:
        raise UsageError(f"{EDITION} holds {next(iter(other.values()))} runs ({', '.join(other)}); this edition is "
                         f"{profile}: make it at that profile, or remove {EDITION} first")
    dev = resolve_device(device)
    provenance = {"key_device": dev, "environment": environment(),
                  "commit": os.environ.get(COMMIT_ENV) or git_commit(paths.root)}
    scratch = _scratch(paths, profile)
    plan_jobs(scratch, names, profile=profile, device=device, seed=seed, resolved_device=dev)
    try:
        with tree_lock(scratch.lock, f"covbook edition {profile}"):
            results = run_notebooks(scratch, names, profile=profile, device=device, seed=seed, jobs=jobs,
                                    force=force, progress=progress, timeout=timeout)
    except Interrupted as stop:  # Ctrl-C, SIGTERM: what finished is stored
        store(paths, scratch, stop.results, profile, provenance)
        raise
    store(paths, scratch, results, profile, provenance)
    return results, dev
