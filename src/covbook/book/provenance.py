"""Provenance of a run or a page: this checkout's commit and the versions of what ran.

Read by the report, the calibration page (:mod:`covbook.book.sweep`) and the book's footer
(:mod:`covbook.book.sphinx_pages`); it imports nothing of the pipeline, so no module needs
another's internals for it.
"""

from __future__ import annotations

import platform
import subprocess
from pathlib import Path

__all__ = ["versions", "git_commit"]


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


def git_commit(root: Path) -> str:
    """This project's commit (short hash, and whether it has uncommitted changes).

    Only when ``root`` is the top of its git checkout: a book copied inside
    another repository is not that repository's commit.
    """
    try:
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=root, capture_output=True, text=True,
                             check=True).stdout.strip()
        if not top or Path(top).resolve() != Path(root).resolve():
            return "unknown (not a git checkout of its own)"
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return sha + (" (with uncommitted changes)" if dirty else "")
