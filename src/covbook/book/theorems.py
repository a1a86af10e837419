"""Theorem boxes by label: which exist in the book.

The chapters state the paper's results in sphinx-proof boxes (``{prf:theorem}`` etc.) with a
``:label:`` such as ``thm-01-gaussian-readout``.  A generated page links a label with
``{prf:ref}`` only when the box is in the built chapters, so a renamed label never breaks the
build (``-W``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

__all__ = ["theorem_labels"]

_LABEL = re.compile(r":label:\s*([A-Za-z0-9][A-Za-z0-9_.-]*)")


def theorem_labels(folder: str | os.PathLike) -> set[str]:
    """Labels (``:label: ...``) in the chapters of ``folder``: ``NN_*.md`` sources or executed ``NN_*.ipynb``."""
    labels: set[str] = set()
    for path in sorted(Path(folder).glob("[0-9][0-9]_*")):
        if path.suffix in (".md", ".ipynb"):
            labels.update(_LABEL.findall(path.read_text(encoding="utf-8")))
    return labels

