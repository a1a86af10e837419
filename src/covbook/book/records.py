"""Run records (``book/generated/runs/NAME.json``, ``book/edition/runs/NAME.json``): the one reader of what a
notebook run wrote (:func:`covbook.book.runner.commit_outcome` writes it), the provenance a record names (commit,
versions), and the run-costs table rendered from them.
"""

from __future__ import annotations

import contextlib
import os
import platform
import statistics
import subprocess
from collections.abc import Mapping
from pathlib import Path

from covbook._jsonio import DamagedFile, read_json
from covbook.book.config import Paths

__all__ = ["RunRecord", "read_run", "versions", "git", "git_commit", "run_costs_markdown"]


def _typed(key: str, kind: type | tuple[type, ...], cast=lambda x: x, default=None) -> property:
    """A read-only field of the record: ``cast(value)`` when it is a ``kind``, else ``default``."""
    return property(lambda self: cast(self[key]) if isinstance(self.get(key), kind) else default)


class RunRecord(dict):
    """One run record: the stored JSON object, with typed fields.

    >>> r = RunRecord({"notebook": "01_a", "status": "ok", "parameters": {"profile": "smoke", "seed": 3}})
    >>> r.ok, r.profile, r.seed, r["notebook"]
    (True, 'smoke', 3, '01_a')
    """

    def __init__(self, data: Mapping[str, object], path: str | os.PathLike | None = None) -> None:
        if not isinstance(data, Mapping):
            raise ValueError(f"a run record must be a JSON object, got {type(data).__name__}")
        if not isinstance(data.get("parameters", {}), (Mapping, type(None))):
            raise DamagedFile(path or "run record", "its parameters are not an object")
        super().__init__(data)

    status = property(lambda self: str(self.get("status", "unknown")), doc="``ok`` or ``failed``.")
    ok = property(lambda self: self.status == "ok", doc="Whether the run succeeded.")
    parameters = property(lambda self: dict(self.get("parameters") or {}), doc="The parameters it ran with.")
    seed = property(lambda self: s if isinstance(s := self.parameters.get("seed"), int) else None)
    profile = property(lambda self: None if (p := self.parameters.get("profile")) is None else str(p))
    key = _typed("hash", str)  # the cache key the run was made for
    device_used = property(lambda self: str(self.get("device_used") or ""), doc="``cpu`` or the GPU, in words.")
    rehearsal = property(lambda self: bool(self.get("rehearsal")), doc="A rehearsal (full shapes, short lengths).")
    seconds = _typed("seconds", (int, float), float)  # wall seconds
    cpu_seconds = _typed("cpu_seconds", (int, float), float)  # of the notebook's process and its kernel
    outputs = _typed("outputs", Mapping, dict)  # {"claims": sha256, "notebook": sha256} of the committed outputs
    error = property(lambda self: None if (e := self.get("error")) is None else str(e), doc="Why it failed.")


def read_run(path: str | os.PathLike) -> RunRecord | None:
    """The run record at ``path``; ``None`` when there is none.  Raises :class:`DamagedFile` if it does not parse."""
    p = Path(path)
    return RunRecord(read_json(p, dict), p) if p.is_file() else None


def versions(packages: tuple[str, ...] = ("covbook", "torch", "numpy", "scipy", "matplotlib", "pandas",
                                          "papermill", "jupytext", "jupyter-book"),
             missing: str = "not installed") -> dict[str, str]:
    """Versions of Python and of ``packages`` (read without importing them; ``missing`` when absent)."""
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for pkg in packages:
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = missing
    return out


def git(root: Path, *args: str) -> str | None:
    """``git ARGS``'s output in ``root`` when it is the top of its own checkout (not one inside another), else None."""
    def run(*a: str) -> str:
        return subprocess.run(["git", *a], cwd=root, capture_output=True, text=True, check=True, timeout=30).stdout

    try:
        top = run("rev-parse", "--show-toplevel").strip()
        return run(*args).strip() if top and Path(top).resolve() == Path(root).resolve() else None
    except (OSError, subprocess.SubprocessError):
        return None


def git_commit(root: Path) -> str:
    """This project's commit (short hash, and whether it has uncommitted changes)."""
    sha = git(root, "rev-parse", "--short", "HEAD")
    if sha is None:
        return "unknown (not a git checkout of its own, or no git or no commit)"
    return sha + (" (with uncommitted changes)" if git(root, "status", "--porcelain", "--untracked-files=no") else "")


def run_costs_markdown(paths: Paths) -> str:
    """The run-costs table of the reproduction page (Markdown): per notebook, profile and device, the wall and CPU
    seconds of the successful timed runs (no rehearsal) of the book's run and of each stored sweep seed."""
    from covbook.book.render import render

    runs: dict[tuple[str, str, str], list[RunRecord]] = {}
    sweeps = [Paths(s).runs for s in sorted((paths.generated / "sweep").glob("*/seed-*"))]
    for f in (f for folder in [paths.runs, *sweeps] for f in sorted(folder.glob("[0-9][0-9]_*.json"))):
        with contextlib.suppress(OSError, DamagedFile):  # `covbook check` names a damaged record, not the build
            rec = read_run(f)
            if rec.ok and not rec.rehearsal and rec.seconds is not None and rec.profile:
                device = rec.device_used or str(rec.parameters.get("device") or "?")  # the resolved one, else asked
                runs.setdefault((str(rec.get("notebook", "")), rec.profile, device), []).append(rec)
    return render("costs.md.j2", groups=sorted(runs.items()), median=statistics.median)
