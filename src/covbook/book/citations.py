"""Claim citations in the prose: ``{claim}`id``` and ``{claim}`NN_name:id```.

One resolver for the Sphinx role (:mod:`covbook.book.sphinx_claims`), which
renders citations, and for ``covbook check`` (:mod:`covbook.book.checks`),
which finds a citation of a claim the run did not record without building the
book.  Imports nothing beyond the standard library.
"""

from __future__ import annotations

import re

__all__ = ["CITATION", "split_target", "citations"]

CITATION = re.compile(r"\{claim\}`([^`]+)`")


def split_target(text: str, docname: str, chapters: list[str]) -> tuple[str, str]:
    """``(chapter, claim id)`` cited by a role's text on page ``docname``.

    ``id`` means this page's chapter (the last part of ``docname``);
    ``NN_name:id`` or ``NN:id`` another chapter's.  ``chapters`` are the
    chapters with claims in the run.  Raises ``ValueError`` with a message.

    Examples
    --------
    >>> split_target("05:risk", "generated/06_icl_multi_step", ["05_icl_one_step", "06_icl_multi_step"])
    ('05_icl_one_step', 'risk')
    """
    text = text.strip()
    if ":" in text:
        chap, cid = (s.strip() for s in text.split(":", 1))
        if chap not in chapters:
            hits = [c for c in chapters if c.split("_", 1)[0] == chap]
            if len(hits) != 1:
                raise ValueError(f"no claims of chapter {chap!r} in this run (chapters with claims: "
                                 f"{', '.join(chapters) or 'none'})")
            chap = hits[0]
        return chap, cid
    chap = docname.rsplit("/", 1)[-1]
    if chap not in chapters:
        raise ValueError(f"page {docname!r} is not a chapter with claims in this run; cite another chapter's "
                         f"claim as NN_name:{text}")
    return chap, text


def citations(text: str) -> list[tuple[int, str]]:
    """``(line number, role text)`` of every claim citation in a MyST source.

    Examples
    --------
    >>> citations("a {claim}`x` b\\n\\nc {claim}`05:y`")
    [(1, 'x'), (3, '05:y')]
    """
    return [(i, m.group(1)) for i, line in enumerate(text.splitlines(), 1) for m in CITATION.finditer(line)]
