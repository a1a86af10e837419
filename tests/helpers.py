"""Helpers for tests that run the covbook command on a throw-away project."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COVBOOK = [sys.executable, "-m", "covbook.book.cli"]

HEADER = textwrap.dedent("""\
    ---
    jupytext:
      text_representation:
        extension: .md
        format_name: myst
        format_version: 0.13
    kernelspec:
      display_name: Python 3
      language: python
      name: python3
    ---
    """)


def make_notebook(body: str, params: str = "x = 1") -> str:
    """A minimal MyST notebook with a parameters cell and ``body`` as code."""
    return (HEADER + "\n# Demo\n\n```{code-cell} ipython3\n:tags: [parameters]\n\n"
            f'profile = "quick"\ndevice = "auto"\nseed = 0\n{params}\n```\n\n'
            f"```{{code-cell}} ipython3\n{body}\n```\n")


#: ``(what, project root, wall s, CPU s, started)`` of each timed pipeline step of this session
#: (``timed=`` in :func:`covbook`), printed by the terminal summary in conftest.py.
PIPELINE_STEPS: list[tuple[str, Path, float, float, float]] = []


def covbook(cwd: Path, *args: str, check: bool = False, timed: str | None = None) -> subprocess.CompletedProcess:
    """Run the covbook command in ``cwd``; with ``timed``, record its wall and CPU seconds under that name."""
    before, start, started = os.times(), time.perf_counter(), time.time()
    proc = subprocess.run([*COVBOOK, *args], cwd=cwd, capture_output=True, text=True)
    if timed:
        after = os.times()
        cpu = after.children_user - before.children_user + after.children_system - before.children_system
        PIPELINE_STEPS.append((timed, cwd, time.perf_counter() - start, cpu, started))
    if check and proc.returncode:
        raise AssertionError(f"covbook {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


@contextlib.contextmanager
def pipeline_project(name: str, tmp_path_factory) -> Iterator[Path]:
    """A copy of this project's notebooks and book sources in which ``make test`` runs the pipeline.

    The copy lives in ``.covbook/test/NAME`` (ignored by git), so that `make test`
    never replaces the quick-profile book a user built with `make book`, and a
    second `make test` serves every notebook whose cache key is unchanged (see
    :mod:`covbook.book.cache`: notebook source, parameters, science code,
    versions, device) from that copy's ``book/generated``: the same rule as a
    second `make book`.  The sources are copied afresh every session (with their
    modification times, so Sphinx rebuilds only changed pages) and the outputs of
    notebooks that no longer exist are removed.  The copy is held under a lock for
    the session; a second `make test` running at the same time, ``COVBOOK_TEST_FRESH=1``,
    or a tree that is not a git checkout gets a new temporary folder instead, in
    which every notebook executes.
    """
    from filelock import FileLock, Timeout

    home = ROOT / ".covbook" / "test"
    lock = None
    if not os.environ.get("COVBOOK_TEST_FRESH") and (ROOT / ".git").exists():
        home.mkdir(parents=True, exist_ok=True)
        lock = FileLock(home / f"{name}.lock")
        try:
            lock.acquire(timeout=0)
        except Timeout:
            lock = None
    if lock is None:
        root = tmp_path_factory.mktemp(f"covbook-{name}")
    else:
        root = home / name
        _replace_sources(root)
    shutil.copy2(ROOT / "_config.yml", root)
    shutil.copytree(ROOT / "notebooks", root / "notebooks", ignore=shutil.ignore_patterns("*.ipynb", ".*"))
    shutil.copytree(ROOT / "book", root / "book", ignore=shutil.ignore_patterns("generated"), dirs_exist_ok=True)
    try:
        yield root
    finally:
        if lock is not None:
            lock.release()


def _replace_sources(root: Path) -> None:
    """Remove everything in ``root`` but its outputs (and those of notebooks that are gone)."""
    root.mkdir(parents=True, exist_ok=True)
    keep = {root / "book", root / "book" / "generated", root / "_build", root / ".covbook"}
    for item in [*root.iterdir(), *root.glob("book/*")]:  # iterdir lists dot files too
        if item not in keep:
            shutil.rmtree(item) if item.is_dir() else item.unlink()
    names = {p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.md")}
    gen = root / "book" / "generated"
    for out in [*gen.glob("runs/*.json"), *gen.glob("claims/*.json"), *gen.glob("[0-9][0-9]_*.ipynb")]:
        if out.stem not in names:
            out.unlink()
