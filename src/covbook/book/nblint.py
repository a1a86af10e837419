r"""Format and lint the code of the book's notebooks with ruff.

The chapters are MyST-markdown notebooks (``notebooks/NN_*.md``); ruff reads Jupyter
notebooks, not MyST markdown.  This module converts each chapter with jupytext to a
temporary ``.ipynb`` (ruff's notebook mode keeps a cell's trailing ``;``, which hides a
figure's or object's repr, and allows imports at the top of any cell), runs ruff on it with
the project's ``[tool.ruff]`` rules and a line length that fits the book's page
(:data:`LINE_LENGTH`), and with ``--fix`` writes the changed code cells back into the
markdown.  Only code changes: prose, cell metadata and the markdown layout stay as jupytext
writes them.  ruff's formatter preserves the program (it checks that the syntax tree is
unchanged), so formatting never changes a computation.

Command line (``make lint`` runs the check, ``make format`` the fix)::

    python -m covbook.book.nblint            # check: exit 1 and say what to fix
    python -m covbook.book.nblint --fix      # ruff format + ruff check --fix, written back
    python -m covbook.book.nblint notebooks/01_covariance_readout.md   # some chapters only
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
        parts = []
        for name, diff in self.unformatted.items():
            parts.append(f"{name}: code not formatted (ruff format, line length {LINE_LENGTH}):\n{diff}")
        if self.findings.strip():
            parts.append(self.findings.rstrip())
        if parts:
            parts.append("fix with: make format  (python -m covbook.book.nblint --fix), then fix the rest by hand")
        return "\n".join(parts)


def chapter_notebooks(root: Path) -> list[Path]:
    """The chapters: ``notebooks/NN_*.md`` under the project root, in order."""
    return sorted((Path(root) / "notebooks").glob("[0-9][0-9]_*.md"))


def _project_root() -> Path:
    from covbook.book.config import project_root

    return Path(project_root())


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


def _code(nb) -> list[str]:
    return [c.source for c in nb.cells if c.cell_type == "code"]


def _run(paths: list[Path], fix: bool) -> Report:
    import jupytext
    import nbformat

    root = _project_root()
    report = Report()
    with tempfile.TemporaryDirectory(prefix="covbook-nblint-") as tmp:
        originals, tmp_files = {}, []
        for path in paths:
            nb = jupytext.read(path)
            originals[path] = nb
            target = Path(tmp) / f"{path.stem}.ipynb"
            nbformat.write(nb, target)
            tmp_files.append(str(target))
        if not tmp_files:
            return report
        fmt = _ruff(["format", "--quiet", *tmp_files], root)
        if fmt.returncode not in (0, 1):
            raise RuntimeError(f"ruff format failed:\n{fmt.stdout}{fmt.stderr}")
        check = _ruff(["check", "--quiet", "--output-format", "concise", *(["--fix"] if fix else []), *tmp_files],
                      root)
        if check.returncode not in (0, 1):
            raise RuntimeError(f"ruff check failed:\n{check.stdout}{check.stderr}")
        out = check.stdout.replace(tmp + "/", "notebooks/")
        report.findings = re.sub(r"notebooks/(\S+?)\.ipynb", r"notebooks/\1.md", out)
        for path in paths:
            nb = originals[path]
            formatted = jupytext.read(Path(tmp) / f"{path.stem}.ipynb")
            old, new = _code(nb), _code(formatted)
            if old == new:
                continue
            if fix:
                code_cells = [c for c in nb.cells if c.cell_type == "code"]
                for cell, source in zip(code_cells, new, strict=True):
                    cell.source = source
                path.write_text(_writes(nb, path.read_text(encoding="utf-8")), encoding="utf-8")
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
    return _run(list(paths) if paths is not None else chapter_notebooks(_project_root()), fix=False)


def fix_notebooks(paths: list[Path] | None = None) -> Report:
    """Format the chapters' code and apply ruff's safe fixes; returns what is left to fix by hand."""
    paths = list(paths) if paths is not None else chapter_notebooks(_project_root())
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
