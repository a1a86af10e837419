"""Theorem boxes by label: which exist in the built chapters, and prose that links to them.

The chapters state their results in sphinx-proof boxes with a ``:label:`` (``thm-01-gaussian-readout``); a
generated page's mention of a label that exists becomes a ``{prf:ref}`` link, any other text is left alone.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

__all__ = ["theorem_labels", "link_theorems"]

_LABEL = re.compile(r":label:\s*([A-Za-z0-9][A-Za-z0-9_.-]*)")
_MENTION = re.compile(r"\b(?:(?:Theorem|Proposition|Lemma|Corollary|Remark|Definition)s?\s+)?"
                      r"([A-Za-z]+-[0-9]{2}-[A-Za-z0-9-]+)\b")


def theorem_labels(folder: str | os.PathLike) -> set[str]:
    """Labels (``:label: ...``) in the chapters of ``folder``: ``NN_*.md`` sources or executed ``NN_*.ipynb``."""
    labels: set[str] = set()
    for path in sorted(Path(folder).glob("[0-9][0-9]_*")):
        if path.suffix in (".md", ".ipynb"):
            labels.update(_LABEL.findall(path.read_text(encoding="utf-8")))
    return labels


def link_theorems(text: str, labels: set[str]) -> str:
    """Replace each mention of a known label (with its "Theorem"/"Proposition" word) by ``{prf:ref}``.

    >>> link_theorems("slope −1 (Theorem thm-01-a); see thm-09-gone", {"thm-01-a"})
    'slope −1 ({prf:ref}`thm-01-a`); see thm-09-gone'
    """
    return _MENTION.sub(lambda m: f"{{prf:ref}}`{m[1]}`" if m[1] in labels else m[0], text)
