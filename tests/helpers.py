"""Helpers for tests that run the covbook command on a throw-away project."""

from __future__ import annotations

import subprocess
import sys
import textwrap
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


def covbook(cwd: Path, *args: str, check: bool = False) -> subprocess.CompletedProcess:
    proc = subprocess.run([*COVBOOK, *args], cwd=cwd, capture_output=True, text=True)
    if check and proc.returncode:
        raise AssertionError(f"covbook {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


