"""Format and lint the code of the book's notebooks with ruff (``make lint`` checks, ``make format`` fixes).

ruff reads Jupyter notebooks, not MyST markdown: each chapter is converted with jupytext to a temporary
``.ipynb`` (ruff's notebook mode keeps a cell's trailing ``;`` and allows imports atop any cell) and checked
with the project's ``[tool.ruff]`` rules at :data:`LINE_LENGTH`; ``--fix`` writes the changed code cells back
(prose and metadata as jupytext writes them; ruff's formatter never changes the syntax tree).

    python -m covbook.book.nblint [--fix] [notebooks/NN_name.md ...]
"""

from __future__ import annotations

import difflib
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["LINE_LENGTH", "Report", "chapter_notebooks", "check_notebooks", "fix_notebooks", "main"]

LINE_LENGTH = 88
"""Longest code line in a notebook: what the book's page shows without a scroll bar."""


@dataclass
class Report:
    """What ruff says about a set of notebooks."""

    unformatted: dict[str, str] = field(default_factory=dict)  # notebook -> diff of its code
    findings: str = ""  # ruff check's output, with the notebooks' names

    @property
    def ok(self) -> bool:
        return not self.unformatted and not self.findings.strip()

    def text(self) -> str:
        parts = [f"{name}: code not formatted (ruff format, line length {LINE_LENGTH}):\n{diff}"
                 for name, diff in self.unformatted.items()]
        if self.findings.strip():
            parts.append(self.findings.rstrip())
        if parts:
            parts.append("fix with: make format  (python -m covbook.book.nblint --fix), then fix the rest by hand")
        return "\n".join(parts)


def _root() -> Path:
    from covbook.book.config import project_root

    return Path(project_root())


def chapter_notebooks(root: Path) -> list[Path]:
    """The chapters: ``notebooks/NN_*.md`` under the project root, in order."""
    return sorted((Path(root) / "notebooks").glob("[0-9][0-9]_*.md"))


def _ruff(args: list[str], root: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "ruff", *args, "--config", str(root / "pyproject.toml"),
           "--config", f"line-length = {LINE_LENGTH}"]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=root)


def _writes(nb, original: str) -> str:
    """The notebook as MyST markdown, without the jupytext version stamp unless the source had one."""
    import jupytext

    text = jupytext.writes(nb, fmt="md:myst")
    if "jupytext_version:" not in original:
        text = re.sub(r"(?m)^[ \t]*jupytext_version: .*\n", "", text, count=1)
    return text


def _run(paths: list[Path], fix: bool) -> Report:
    import jupytext
    import nbformat

    root, report = _root(), Report()
    if not paths:
        return report
    with tempfile.TemporaryDirectory(prefix="covbook-nblint-") as tmp:
        originals = {path: jupytext.read(path) for path in paths}
        tmp_files = [str(Path(tmp) / f"{path.stem}.ipynb") for path in paths]
        for path, target in zip(paths, tmp_files):
            nbformat.write(originals[path], target)
        fix_args = ["--fix"] if fix else []
        for args in (["format", "--quiet"], ["check", "--quiet", "--output-format", "concise", *fix_args]):
            done = _ruff([*args, *tmp_files], root)
            if done.returncode not in (0, 1):
                raise RuntimeError(f"ruff {args[0]} failed:\n{done.stdout}{done.stderr}")
        findings = done.stdout.replace(tmp + "/", "notebooks/")  # ruff check's output
        report.findings = re.sub(r"notebooks/(\S+?)\.ipynb", r"notebooks/\1.md", findings)
        for path, target in zip(paths, tmp_files):
            code_cells = [c for c in originals[path].cells if c.cell_type == "code"]
            old = [c.source for c in code_cells]
            new = [c.source for c in jupytext.read(target).cells if c.cell_type == "code"]
            if old == new:
                continue
            if fix:
                for cell, source in zip(code_cells, new, strict=True):
                    cell.source = source
                path.write_text(_writes(originals[path], path.read_text(encoding="utf-8")), encoding="utf-8")
            else:
                diff = []
                for k, (a, b) in enumerate(zip(old, new, strict=True)):
                    if a != b:
                        diff += difflib.unified_diff(a.splitlines(), b.splitlines(), f"code cell {k + 1}",
                                                     f"code cell {k + 1} formatted", lineterm="", n=1)
                report.unformatted[str(path.relative_to(root)) if path.is_relative_to(root) else str(path)] = (
                    "\n".join(diff))
    return report


def check_notebooks(paths: list[Path] | None = None) -> Report:
    """ruff format (check only) and ruff check of the chapters' code; nothing is written."""
    return _run(list(paths) if paths is not None else chapter_notebooks(_root()), fix=False)


def fix_notebooks(paths: list[Path] | None = None) -> Report:
    """Format the chapters' code and apply ruff's safe fixes; returns what is left to fix by hand."""
    paths = list(paths) if paths is not None else chapter_notebooks(_root())
    _run(paths, fix=True)
    return check_notebooks(paths)


def main(argv: list[str] | None = None) -> int:
    """``python -m covbook.book.nblint [--fix] [NOTEBOOK.md ...]``; usage errors exit 2."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m covbook.book.nblint", description="ruff on the chapters' code")
    p.add_argument("--fix", action="store_true", help="format and apply ruff's safe fixes")
    p.add_argument("notebooks", nargs="*", type=Path, metavar="NOTEBOOK.md", help="default: every chapter")
    args = p.parse_args(argv)
    missing = [str(n) for n in args.notebooks if not n.is_file()]
    if missing:
        p.error(f"no such notebook: {', '.join(missing)}")
    paths = [n.resolve() for n in args.notebooks] or None
    report = fix_notebooks(paths) if args.fix else check_notebooks(paths)
    if not report.ok:
        print(report.text())
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
