"""Provenance of a run or a page: this checkout's commit and the versions of what ran (imports no pipeline)."""

from __future__ import annotations

import platform
import subprocess
from pathlib import Path

__all__ = ["versions", "git", "git_commit"]


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
    """The output of ``git ARGS`` in ``root`` when ``root`` is the top of its own git checkout (a project copied
    inside another checkout is not that checkout's), else None."""
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
