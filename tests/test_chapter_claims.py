"""Chapters cite their claims: the closing section in every statement, and every bold finding.

The closing section is the one titled "## What this chapter shows…" (or, failing
that, the chapter's last "## " section).  Each of its paragraphs and list items
states a verdict, so each must cite at least one claim with the ``{claim}`` role
(which renders the measured value and the verdict and links to the report).  A
bold finding (a bold sentence of three words or more, e.g. "**Survives: the
rate.**") must sit in a paragraph that cites a claim.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from helpers import ROOT

NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.md"))

#: Chapters whose closing sections do not cite claims yet (issue 8). The chapter owners add the
#: citations; the lead removes a chapter from this set when its branch lands, and empties it at the end.
PENDING: set[str] = set()

#: Chapters with bold findings in paragraphs that cite no claim yet (same rule as PENDING).
PENDING_BOLD: set[str] = set()

CLOSING = re.compile(r"^## What this chapter shows")
ITEM = re.compile(r"^\s{0,3}([-*+]|\d+[.)])\s")


def prose(text: str) -> list[str]:
    """The lines of a MyST notebook outside fenced blocks (code cells, directives)."""
    lines, in_fence, out = text.splitlines(), None, []
    for line in lines:
        fence = re.match(r"^\s*(`{3,}|~{3,})", line)
        if fence and in_fence is None:
            in_fence = fence.group(1)
            continue
        if in_fence is not None:
            if line.strip() == in_fence:
                in_fence = None
            continue
        out.append(line)
    return out


def closing_section(text: str) -> tuple[str, list[str]]:
    """Title and lines of the closing section (outside code cells)."""
    out = prose(text)
    heads = [i for i, line in enumerate(out) if line.startswith("## ")]
    if not heads:
        return "", []
    marked = [i for i in heads if CLOSING.match(out[i])]
    start = marked[0] if marked else heads[-1]
    end = next((i for i in heads if i > start), len(out))
    return out[start], out[start + 1:end]


def statements(section: list[str]) -> list[str]:
    """The paragraphs and list items of a section (display math, comments and cell markers dropped)."""
    items: list[list[str]] = []
    current: list[str] = []
    in_math = False
    for line in section:
        s = line.strip()
        if in_math:
            in_math = not s.endswith("$$")
            continue
        if s.startswith("$$"):  # display math: an opening line, or a whole one-line block
            in_math = not (len(s) > 2 and s.endswith("$$"))
            continue
        if s.startswith("%") or s == "+++" or s.startswith("<!--"):
            continue
        if not s:
            if current:
                items.append(current)
            current = []
            continue
        if ITEM.match(line) and current:
            items.append(current)
            current = []
        current.append(s)
    if current:
        items.append(current)
    return [" ".join(i) for i in items]


def uncited(text: str) -> tuple[str, list[str]]:
    title, section = closing_section(text)
    return title, [s for s in statements(section) if "{claim}`" not in s]


BOLD_FINDING = re.compile(r"\*\*([^*]+?[.:!])\*\*")


def bold_findings_without_claim(text: str) -> list[str]:
    """Bold sentences (three words or more, ending in '.', ':' or '!') in paragraphs that cite no claim."""
    bad = []
    for para in statements(prose(text)):
        for m in BOLD_FINDING.finditer(para):
            if len(m.group(1).split()) >= 3 and "{claim}`" not in para:
                bad.append(m.group(1))
    return bad


def test_the_checker_itself():
    text = ("# T\n\n## Results\n\nx\n\n## What this chapter shows\n\n- a {claim}`x`\n  continued\n- b\n\n"
            "Para {claim}`05:y`.\n\n$$\nx\n$$\n\n$$ y $$\n\n```{code-cell} ipython3\nprint(1)\n```\n\nLast para.\n")
    title, bad = uncited(text)
    assert title == "## What this chapter shows" and bad == ["- b", "Last para."]
    assert uncited("# T\n\n## A\n\nx\n\n## Outlook\n\ny {claim}`z`\n")[1] == []  # last section if none titled
    text = ("**Survives: the order is forgotten.** It is {claim}`x`.\n\n**Markov gap.** A heading.\n\n"
            "A **two-word term** and **Does not survive: the rate.**\n")
    assert bold_findings_without_claim(text) == ["Does not survive: the rate."]



def _params(pending: set[str], what: str) -> list:
    return [pytest.param(p, marks=pytest.mark.xfail(
        p.stem in pending, strict=False, reason=f"issue 8: the chapter owner has not yet cited claims in {what}"))
        for p in NOTEBOOKS]


@pytest.mark.parametrize("path", _params(PENDING, "the closing section"), ids=[p.stem for p in NOTEBOOKS])
def test_closing_section_cites_a_claim_in_every_statement(path: Path) -> None:
    title, bad = uncited(path.read_text(encoding="utf-8"))
    assert title, f"{path.name}: no closing section (## What this chapter shows…)"
    _, section = closing_section(path.read_text(encoding="utf-8"))
    assert "{claim}`" in "\n".join(section), f"{path.name}: {title!r} cites no claim"
    assert not bad, f"{path.name}: {title!r}: statements without a {{claim}} citation:\n" + "\n".join(
        f"  - {s[:100]}…" for s in bad)


@pytest.mark.parametrize("path", _params(PENDING_BOLD, "its bold findings"), ids=[p.stem for p in NOTEBOOKS])
def test_bold_findings_cite_a_claim(path: Path) -> None:
    bad = bold_findings_without_claim(path.read_text(encoding="utf-8"))
    assert not bad, f"{path.name}: bold findings in paragraphs without a {{claim}} citation:\n" + "\n".join(
        f"  - {b}" for b in bad)
