"""No measurement diary in tracked text: history lives in git.

The documents a person reads (README, CONTRIBUTING, ARCHITECTURE, the Makefile's comments, the chapters,
the rules files and the book's own pages) say what the book is and how it works. A commit hash, a date, a
load average or a development step ("stop 35") is a diary line: the numbers a machine measures are
rendered by the build from run records, and how a rule or a chapter came to be is in git's log.

Every tracked text file (``git ls-files``: code, tests, templates, workflows, data) is held to the marks that
are a diary wherever they stand (a commit hash, a date, a load average, a development step); the process
words ("audit", "changed after") only in the documents, since code names what it checks and what changed
after a run in the same words. :data:`ALLOWED` lists the files that hold such marks by their nature.
"""

from __future__ import annotations

import re
import subprocess
from fnmatch import fnmatch
from pathlib import Path

import pytest

from covbook.rules import parse_rules

ROOT = Path(__file__).resolve().parents[1]

# a word of 7-40 hex digits with at least one letter (what `git log --oneline` prints), except English words and
# the tests' made-up commit; not after `@`, a pinned reference (a workflow's `uses: owner/action@<sha>`)
_HASH = re.compile(r"(?<![0-9A-Za-z_#./@-])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![0-9A-Za-z_])")
_WORDS = frozenset({"acceded", "defaced", "effaced", "deadbeef", "abc1234"})
_DATE = re.compile(r"\b(?:19|20)\d\d-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])(?:\b|(?=T\d))")  # and ISO times
_LOAD = re.compile(r"\bload average (?:of |was |at |≈ ?|~ ?)?\d", re.IGNORECASE)  # a measured one: code may name it
_STOP = re.compile(r"\bstops? \d+", re.IGNORECASE)
_PROCESS = re.compile(r"\b(?:audit(?:ed|s)?|re-kinded|changed after)\b", re.IGNORECASE)
PATTERNS = {"a commit hash": _HASH, "a date": _DATE, "a load average": _LOAD, "a development step": _STOP,
            "a process word": _PROCESS}

#: a record's time stamp or commit as the value of its field is machine data (run records, timings, the sweeps'
#: book/calibration.json, and the tests' stand-ins for them), never a diary line
_FIELD = re.compile(r'"(?:commit|rules_commit|date|when|made|finished)": "[^"\n]*"')
#: tracked files that hold such marks by their nature
ALLOWED = {
    "CITATION.cff": "the release date the citation format asks for",
    "tests/test_docs_no_diary.py": "this test's own examples of each mark",
}


def _documents() -> list[str]:
    files = ["README.md", "CONTRIBUTING.md", "ARCHITECTURE.md", "Makefile"]
    for pattern in ("notebooks/*.md", "notebooks/rules/*.yml", "book/*.md"):
        files += sorted(str(p.relative_to(ROOT)) for p in ROOT.glob(pattern))
    return files


def _tracked_text() -> list[str]:
    """Every file git tracks that is UTF-8 text, less :data:`ALLOWED`."""
    done = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True)
    if done.returncode:
        pytest.skip("not a git checkout")
    names = []
    for name in filter(None, done.stdout.decode("utf-8").split("\0")):
        path = ROOT / name
        if any(fnmatch(name, pattern) for pattern in ALLOWED) or not path.is_file():
            continue
        data = path.read_bytes()
        try:
            if b"\0" not in data:
                data.decode("utf-8")
                names.append(name)
        except UnicodeDecodeError:
            pass
    return names


def _text(name: str) -> str:
    text = (ROOT / name).read_text(encoding="utf-8")
    if name == "Makefile":  # its comments only: a recipe may name what it needs
        text = "\n".join(line.split("#", 1)[1] for line in text.splitlines() if "#" in line)
    return text


def diary_lines(text: str, patterns: dict[str, re.Pattern] = PATTERNS) -> list[str]:
    """Each line of ``text`` holding a diary mark, as ``"line N: <what> (<match>)"``."""
    found = []
    for n, line in enumerate(_FIELD.sub('""', text).splitlines(), 1):
        for what, pattern in patterns.items():
            for m in pattern.finditer(line):
                if m.group(0).lower() not in _WORDS:
                    found.append(f"line {n}: {what} ({m.group(0)!r})")
                    break
    return found


@pytest.mark.parametrize("name", _documents())
def test_no_diary(name: str) -> None:
    found = diary_lines(_text(name))
    assert not found, f"{name}: history belongs in git, measured numbers in run records:\n" + "\n".join(found)


def test_no_diary_in_any_tracked_text() -> None:
    marks = {what: p for what, p in PATTERNS.items() if what != "a process word"}
    found = [f"{name}: {line}" for name in _tracked_text() for line in diary_lines(_text(name), marks)]
    assert not found, "history belongs in git, measured numbers in run records:\n" + "\n".join(found)


def test_the_tracked_text_is_found() -> None:
    names = _tracked_text()
    assert {"Makefile", "src/covbook/claims.py", "studies/slope_statistic_08.py", ".github/workflows/ci.yml",
            "src/covbook/book/templates/reproduction.md.j2"} <= set(names)
    assert "CITATION.cff" not in names and {"book/calibration.json", "book/favicon.svg"} <= set(names)


def test_the_documents_are_found() -> None:
    names = _documents()
    assert {"README.md", "Makefile", "notebooks/01_covariance_readout.md",
            "notebooks/rules/01_covariance_readout.yml", "book/intro.md"} <= set(names)


@pytest.mark.parametrize(("line", "what"), [
    ("made at 93c20e0 the same afternoon", "a commit hash"),
    ("at beffafa and 4597019", "a commit hash"),
    ("measured on 2026-12-04", "a date"),
    ("when: 2026-12-05T00:31:57+0000", "a date"),
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
    "print the load average before and after",
    "uses: actions/checkout@3d3c42e5aac5ba805825da76410c181273ba90b1",
    '"commit": "6a65014", "date": "2026-12-03", "when": "2026-12-05T00:31:57+0000"',  # a record's fields
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
