"""Each chapter shows its central computation in a few visible lines, as QuantEcon's lectures do.

Static, nothing is executed: every chapter has a visible code cell of at most :data:`MAX_LINES` lines
that prints what it computes with library functions — the readout of one context next to Σa, one
gradient step as a head, one step of the greedy map — without the chapter's experiments or claims. Such
a cell draws only from the stream :data:`ILLUSTRATION` (``streams.torch_generator("illustration")``,
``seed=streams.seed_for("illustration")``), which no experiment uses, so it never consumes a stream a
claim draws from (and, like every cell, derives no seed by hand: tests/test_streams.py).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from helpers import ROOT

CHAPTERS = ("01", "02", "03", "04", "05", "06", "07", "08", "09", "10", "11")
MAX_LINES = 20
HIDDEN = {"hide-input", "remove-input", "remove-cell", "parameters"}
#: Names a computation cell must not use: the chapter's claims and session.
PLUMBING = {"claims", "setup"}
#: The one stream a computation cell draws from; no experiment draws from it.
ILLUSTRATION = "illustration"


def _code_cells(path: Path) -> list:
    import jupytext

    return [c for c in jupytext.read(path).cells if c.cell_type == "code"]


def _experiment_modules(cells: list) -> set[str]:
    """The names the chapter binds to ``covbook.experiments`` modules (``readout``, ``lm``, ...)."""
    names = set()
    for cell in cells:
        for node in ast.walk(ast.parse(cell.source)):
            if isinstance(node, ast.ImportFrom) and node.module == "covbook.experiments":
                names |= {a.asname or a.name for a in node.names}
    return names


def _calls_on(tree: ast.AST, names: set[str]) -> list[str]:
    """The calls ``name.f(...)`` on one of ``names`` (attribute reads such as ``dependence.Q`` are fine)."""
    return [ast.unparse(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name) and n.func.value.id in names]


def _stream_names(tree: ast.AST) -> list[str]:
    """The stream names of ``streams.f(name, ...)`` calls (``"?"`` for a name that is not a literal)."""
    return [n.args[0].value if n.args and isinstance(n.args[0], ast.Constant) else "?"
            for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and isinstance(n.func.value, ast.Name) and n.func.value.id == "streams"]


def computation_cells(path: Path) -> list[str]:
    """The sources of the chapter's visible cells that compute and print without the experiments' plumbing."""
    cells = _code_cells(path)
    modules = _experiment_modules(cells)
    out = []
    for cell in cells:
        if set(cell.metadata.get("tags", [])) & HIDDEN or len(cell.source.strip().splitlines()) > MAX_LINES:
            continue
        tree = ast.parse(cell.source)
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        prints = any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "print"
                     for n in ast.walk(tree))
        if prints and not names & PLUMBING and not _calls_on(tree, modules):
            out.append(cell.source)
    return out


@pytest.mark.parametrize("nb", CHAPTERS)
def test_chapter_shows_its_computation(nb: str) -> None:
    path = next((ROOT / "notebooks").glob(f"{nb}_*.md"))
    cells = computation_cells(path)
    assert cells, (f"{path.name}: no visible cell of at most {MAX_LINES} lines that computes the chapter's idea "
                   "with library functions and prints it (without streams, claims or the experiments)")
    for source in cells:
        names = _stream_names(ast.parse(source))
        assert set(names) <= {ILLUSTRATION}, (
            f"{path.name}: a computation cell draws from the stream {ILLUSTRATION!r} only, got {names}")


def test_no_experiment_draws_from_the_illustration_stream() -> None:
    for path in sorted((ROOT / "src" / "covbook" / "experiments").glob("*.py")):
        assert f'"{ILLUSTRATION}"' not in path.read_text(encoding="utf-8"), path.name


def test_the_check_tells_a_computation_from_plumbing(tmp_path: Path) -> None:
    def chapter(*cells: str) -> Path:
        body = "".join(f"```{{code-cell}} ipython3\n{c}\n```\n\n" for c in cells)
        p = tmp_path / "01_x.md"
        p.write_text("---\njupytext:\n  text_representation:\n    extension: .md\n    format_name: myst\n---\n\n"
                     + body, encoding="utf-8")
        return p

    imports = "from covbook.experiments import readout"
    assert computation_cells(chapter(imports, "r = readout.rate(1, streams=streams)\nprint(r)")) == []
    assert computation_cells(chapter(imports, "x = readout.CHAPTER\nclaims.record(x)\nprint(x)")) == []
    shown = "import torch\n\nx = torch.randn(3, generator=streams.torch_generator(\"illustration\"))\nprint(x.sum())"
    assert computation_cells(chapter(imports, shown)) == [shown]
