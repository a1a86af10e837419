"""Helpers for tests that run the covbook command on a throw-away project."""

from __future__ import annotations

import contextlib
import json
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


def book_project(root: Path) -> Path:
    """A copy of this project's notebooks and book sources (no outputs) in the new folder ``root``."""
    root.mkdir()
    shutil.copy2(ROOT / "_config.yml", root)
    shutil.copytree(ROOT / "notebooks", root / "notebooks", ignore=shutil.ignore_patterns("*.ipynb", ".*"))
    shutil.copytree(ROOT / "book", root / "book", ignore=shutil.ignore_patterns("generated"))
    return root


#: One JSON line ``{what, root, wall, cpu, started}`` per timed pipeline step of this session (``timed=`` in
#: :func:`covbook`), appended by whichever pytest-xdist worker ran it and printed by the terminal summary in
#: conftest.py (which empties the file when the session starts).
PIPELINE_STEPS = ROOT / ".covbook" / "test" / "pipeline-steps.jsonl"


def pipeline_steps() -> list[tuple[str, Path, float, float, float]]:
    """``(what, project root, wall s, CPU s, started)`` of each timed pipeline step recorded this session."""
    if not PIPELINE_STEPS.is_file():
        return []
    rows = [json.loads(line) for line in PIPELINE_STEPS.read_text().splitlines() if line.strip()]
    return [(r["what"], Path(r["root"]), r["wall"], r["cpu"], r["started"]) for r in rows]


def covbook(cwd: Path, *args: str, check: bool = False, timed: str | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run the covbook command in ``cwd``; with ``timed``, record its wall and CPU seconds under that name.

    ``env``: variables set for the command on top of this process's environment.
    """
    before, start, started = os.times(), time.perf_counter(), time.time()
    proc = subprocess.run([*COVBOOK, *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, **env} if env else None)
    if timed:
        after = os.times()
        cpu = after.children_user - before.children_user + after.children_system - before.children_system
        PIPELINE_STEPS.parent.mkdir(parents=True, exist_ok=True)
        with PIPELINE_STEPS.open("a") as fh:  # one short line per write: whole lines from concurrent workers
            fh.write(json.dumps({"what": timed, "root": str(cwd), "wall": time.perf_counter() - start, "cpu": cpu,
                                 "started": started}) + "\n")
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



def _can_bind_read_only() -> bool:
    """Whether ``unshare -rm`` may make a read-only bind mount here (a container's root usually may)."""
    if not shutil.which("unshare"):
        return False
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount --bind / / 2>/dev/null; echo ok"],
                           capture_output=True, text=True)
    return probe.returncode == 0 and "ok" in probe.stdout


def with_read_only(cwd: Path, read_only: list[Path], *args: str, env: dict | None = None,
                   preexec_fn=None) -> subprocess.CompletedProcess:
    """``covbook ARGS`` with the folders ``read_only`` unwritable (read-only bind mounts when run as root).

    Root ignores file modes, so as root each folder is bind-mounted read-only in a
    private mount namespace (``unshare -rm``); otherwise its mode is set to 0555 for
    the call.  Skips the test where neither is possible.
    """
    import pytest

    full = {**os.environ, **(env or {})}
    if os.geteuid() != 0:
        modes = {p: p.stat().st_mode for p in read_only}
        try:
            for p in read_only:
                p.chmod(0o555)
            return subprocess.run([*COVBOOK, *args], cwd=cwd, capture_output=True, text=True, env=full,
                                  preexec_fn=preexec_fn)
        finally:
            for p, m in modes.items():
                p.chmod(m)
    if not _can_bind_read_only():
        pytest.skip("running as root without a way to make a folder read-only")
    import shlex

    mounts = " && ".join(f"mount --bind {shlex.quote(str(p))} {shlex.quote(str(p))} && "
                         f"mount -o remount,bind,ro {shlex.quote(str(p))}" for p in read_only)
    cmd = f"{mounts} && exec {' '.join(shlex.quote(c) for c in [*COVBOOK, *args])}"
    return subprocess.run(["unshare", "-rm", "sh", "-c", cmd], cwd=cwd, capture_output=True, text=True, env=full,
                          preexec_fn=preexec_fn)


def fake_run(project: Path, name: str, *, digest: str, claims: int = 1, seed: int = 0) -> None:
    """Outputs of a successful run of ``name`` (notebook, claims, record naming their digests), without a kernel."""
    import hashlib
    import json

    gen = project / "book" / "generated"
    for d in (gen / "claims", gen / "runs"):
        d.mkdir(parents=True, exist_ok=True)
    nb = {"cells": [{"cell_type": "code", "execution_count": 1, "metadata": {}, "outputs": [],
                     "source": f"seed = {seed}"}], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    from claims_fixtures import claim, measurements

    rows = measurements([claim(f"c{i}", name) for i in range(claims)])
    (gen / f"{name}.ipynb").write_text(json.dumps(nb))
    (gen / "claims" / f"{name}.json").write_text(json.dumps(rows))

    def sha(p: Path) -> str:
        return hashlib.sha256(p.read_bytes()).hexdigest()

    rec = {"notebook": name, "parameters": {"profile": "smoke", "device": "cpu", "seed": seed}, "hash": digest,
           "seconds": 1.0, "device_used": "cpu", "rehearsal": False, "finished": "2026-01-01T00:00:00+0000",
           "status": "ok",
           "outputs": {"notebook": sha(gen / f"{name}.ipynb"), "claims": sha(gen / "claims" / f"{name}.json")}}
    (gen / "runs" / f"{name}.json").write_text(json.dumps(rec))


def wait_for(pred, timeout: float = 120.0) -> None:
    """Poll ``pred`` every 0.2 s until it is true; an ``AssertionError`` after ``timeout`` seconds."""
    import time

    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end:
            raise AssertionError("timed out waiting")
        time.sleep(0.2)


def descendants(pid: int) -> list[int]:
    """The processes below ``pid`` (read from /proc)."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        parents.setdefault(ppid, []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        kids = parents.get(todo.pop(), [])
        out += kids
        todo += kids
    return out


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def kernel_of(covbook_pid: int, name: str) -> tuple[int, int] | None:
    """``(notebook process, kernel)`` of notebook ``name`` run by the covbook process ``covbook_pid``, once both
    run; else ``None``."""
    for pid in descendants(covbook_pid):
        if "covbook.book.runner" in cmdline(pid) and name in cmdline(pid):
            kernels = [k for k in descendants(pid) if "ipykernel" in cmdline(k)]
            if kernels:
                return pid, kernels[0]
    return None


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs; a zombie (dead, not yet reaped) does not."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False
