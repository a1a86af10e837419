"""No measurement diary in the documents, chapters and rules: history lives in git.

The documents a person reads (README, CONTRIBUTING, ARCHITECTURE, the Makefile's comments, the chapters,
the rules files and the book's own pages) say what the book is and how it works. A commit hash, a date, a
load average or a development step ("stop 35") is a diary line: the numbers a machine measures are
rendered by the build from run records, and how a rule or a chapter came to be is in git's log.
CITATION.cff (its release date) and the bibliography's references are exempt.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from covbook.rules import parse_rules

ROOT = Path(__file__).resolve().parents[1]

# a word of 7-40 hex digits with at least one letter (what `git log --oneline` prints), except English words
_HASH = re.compile(r"(?<![0-9A-Za-z_#./-])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![0-9A-Za-z_])")
_WORDS = frozenset({"acceded", "defaced", "effaced", "deadbeef"})
_DATE = re.compile(r"\b(?:19|20)\d\d-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])\b")
_LOAD = re.compile(r"\bload average", re.IGNORECASE)
_STOP = re.compile(r"\bstops? \d+", re.IGNORECASE)
_PROCESS = re.compile(r"\b(?:audit(?:ed|s)?|re-kinded|changed after)\b", re.IGNORECASE)
PATTERNS = {"a commit hash": _HASH, "a date": _DATE, "a load average": _LOAD, "a development step": _STOP,
            "a process word": _PROCESS}


def _documents() -> list[str]:
    files = ["README.md", "CONTRIBUTING.md", "ARCHITECTURE.md", "Makefile"]
    for pattern in ("notebooks/*.md", "notebooks/rules/*.yml", "book/*.md"):
        files += sorted(str(p.relative_to(ROOT)) for p in ROOT.glob(pattern))
    return files


def diary_lines(text: str) -> list[str]:
    """Each line of ``text`` holding a diary mark, as ``"line N: <what> (<match>)"``."""
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        for what, pattern in PATTERNS.items():
            for m in pattern.finditer(line):
                if m.group(0).lower() not in _WORDS:
                    found.append(f"line {n}: {what} ({m.group(0)!r})")
                    break
    return found


@pytest.mark.parametrize("name", _documents())
def test_no_diary(name: str) -> None:
    text = (ROOT / name).read_text(encoding="utf-8")
    if name == "Makefile":  # its comments only: a recipe may name what it needs
        text = "\n".join(line.split("#", 1)[1] for line in text.splitlines() if "#" in line)
    found = diary_lines(text)
    assert not found, f"{name}: history belongs in git, measured numbers in run records:\n" + "\n".join(found)


def test_the_documents_are_found() -> None:
    names = _documents()
    assert {"README.md", "Makefile", "notebooks/01_covariance_readout.md",
            "notebooks/rules/01_covariance_readout.yml", "book/intro.md"} <= set(names)


@pytest.mark.parametrize(("line", "what"), [
    ("made at 93c20e0 the same afternoon", "a commit hash"),
    ("at beffafa and 4597019", "a commit hash"),
    ("measured on 2026-12-04", "a date"),
    ("at a load average of 15", "a load average"),
    ("per_run since stop 35", "a development step"),
    ("re-kinded by the audit", "a process word"),
    ("changed after the 10-seed smoke calibration", "a process word"),
])
def test_diary_marks_are_found(line: str, what: str) -> None:
    assert any(what in f for f in diary_lines(line)), line


@pytest.mark.parametrize("line", [
    "a window of 3.5 standard errors at 10⁷ tokens",
    "the colour #1f77b4 and a SHA-256 of 64 hex digits " + "ab12" * 16,
    "a decade, defaced, 1234567 tokens",  # short or English words of hex letters; digits alone
    "arXiv:2605.10466, 2026",
    "stop the run with Ctrl-C",
])
def test_ordinary_text_is_not_a_diary(line: str) -> None:
    assert diary_lines(line) == []


def test_a_rule_has_no_history_key() -> None:
    text = "c:\n  kind: sanity\n  statement: s\n  window: fixed\n  interval: [0, 1]\n  history: changed once\n"
    with pytest.raises(ValueError, match="unknown key.*history"):
        parse_rules(text, "rules")


def test_readme_lists_every_chapter_by_its_title() -> None:
    """The README's chapter table names each chapter as its page does (its `#` title), in the book's order."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    listed = re.findall(r"^\|[^|]*\| (\d\d) (.+?) \|$", readme, flags=re.MULTILINE)
    chapters = []
    for path in sorted(ROOT.glob("notebooks/[0-9][0-9]_*.md")):
        title = next(line[2:].strip() for line in path.read_text(encoding="utf-8").splitlines()
                     if line.startswith("# "))
        chapters.append((path.name[:2], title))
    assert listed == chapters
