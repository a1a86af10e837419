"""The chapters as a reader meets them: no setup wall, no reprs, code that fits the page, figures
that are numbered, captioned, referenced and described (issue 10, "Pages that read like a book").

Fast: nothing is executed.  The notebooks are read with jupytext and their cells checked statically:

* the first code cell is the Colab setup cell (``covbook.book.standalone.SETUP_CELL``), tagged
  ``remove-cell``;
* the imports cell (the code cell after ``parameters``) and every cell whose code is only
  ``claims.*`` calls are hidden behind myst-nb's "show code" toggle (``hide-input``) or removed
  (``remove-input`` / ``remove-cell``), so the verdict lines stay and the plumbing goes;
* no cell ends in a bare expression that would print an object's repr;
* every figure cell carries myst-nb ``figure`` metadata (a caption and a name ``fig-NN-…``) and an
  ``image`` alt text, makes one figure and records no claim (myst-nb would wrap the verdict lines
  in the figure too), and each chapter cites at least one of its figures with ``{numref}``;
* the code is ruff-formatted and ruff-clean at the notebooks' line length
  (``make lint-notebooks``; ``make format`` fixes what it can).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ROOT

NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.md"))

#: Chapters still being edited by their owners when these checks landed; emptied when they merge.
PENDING: set[str] = set()

HIDDEN = {"hide-input", "remove-input", "remove-cell"}
#: The claims functions that show a verdict line (``claims.glue`` shows nothing).
SHOWN = {"record", "within_se", "at_least_se", "at_most_se"}
#: matplotlib calls that return None (a cell may end in them without a repr).
RETURNS_NONE = {"tight_layout", "show", "savefig", "close", "grid", "set_axis_off", "clf", "cla", "draw"}
FIGURE_CALLS = re.compile(r"\bplt\.(subplots|figure|subplot_mosaic)\(")


def _chapters() -> list[Path]:
    return [p for p in NOTEBOOKS if p.name[:2] not in PENDING]


def _code_cells(path: Path) -> list:
    import jupytext

    return [c for c in jupytext.read(path).cells if c.cell_type == "code"]


def _tags(cell) -> set[str]:
    return set(cell.metadata.get("tags", []))


def _is_claims_call(node: ast.AST) -> bool:
    return (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Attribute) and isinstance(node.value.func.value, ast.Name)
            and node.value.func.value.id == "claims")


def _root_name(node: ast.AST) -> str:
    while isinstance(node, ast.Attribute | ast.Subscript | ast.Call):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else ""


def _prints_repr(value: ast.AST) -> bool:
    """Whether a cell ending in this expression shows an object's repr (statically, as far as it can tell).

    A value (name, attribute, item, tuple, comparison) always shows. A call shows what it returns:
    matplotlib's calls (on ``ax``, ``axes``, ``fig``, ``plt``) return artists, whose reprs are noise,
    except those in :data:`RETURNS_NONE`; other calls are trusted (``list.append`` returns None, a
    claim's display is empty, a pandas Styler is a table meant to be shown).
    """
    if isinstance(value, ast.Call):
        root = _root_name(value)
        method = value.func.attr if isinstance(value.func, ast.Attribute) else ""
        return (root in ("plt", "fig") or root.startswith("ax")) and method not in RETURNS_NONE
    return not isinstance(value, ast.Constant)


@pytest.fixture(params=_chapters(), ids=lambda p: p.name[:2])
def chapter(request) -> Path:
    return request.param


def test_every_chapter_is_checked() -> None:
    assert NOTEBOOKS, "no chapters found"
    assert PENDING <= {p.name[:2] for p in NOTEBOOKS}, "PENDING names a chapter that does not exist"


def test_setup_cell_comes_first(chapter: Path) -> None:
    from covbook.book.standalone import SETUP_CELL

    first = _code_cells(chapter)[0]
    assert first.source.strip() == SETUP_CELL.strip(), (
        f"{chapter.name}: the first code cell is not covbook.book.standalone.SETUP_CELL (paste it, verbatim, "
        "before the parameters cell)")
    assert "remove-cell" in _tags(first), f"{chapter.name}: tag the setup cell remove-cell"


def test_imports_cell_is_hidden(chapter: Path) -> None:
    cells = _code_cells(chapter)
    par = next(i for i, c in enumerate(cells) if "parameters" in _tags(c))
    imports = cells[par + 1]
    assert isinstance(ast.parse(imports.source).body[0], ast.Import | ast.ImportFrom), (
        f"{chapter.name}: the cell after the parameters cell should be the imports cell")
    assert _tags(imports) & HIDDEN, f"{chapter.name}: tag the imports cell hide-input"


def test_claims_only_cells_are_hidden(chapter: Path) -> None:
    for k, cell in enumerate(_code_cells(chapter), 1):
        body = ast.parse(cell.source).body
        if body and all(_is_claims_call(node) for node in body):
            assert _tags(cell) & HIDDEN, (
                f"{chapter.name}, code cell {k}: a cell that only records claims is plumbing; tag it hide-input "
                "(the verdict lines stay visible)")


def test_no_object_repr_at_the_end_of_a_cell(chapter: Path) -> None:
    for k, cell in enumerate(_code_cells(chapter), 1):
        source = cell.source.rstrip()
        body = ast.parse(source).body
        if not body or not isinstance(body[-1], ast.Expr) or source.endswith(";"):
            continue
        if not _prints_repr(body[-1].value):
            continue
        last = body[-1]
        pytest.fail(f"{chapter.name}, code cell {k} ends in an expression whose repr would be printed: "
                    f"`{ast.unparse(last)[:60]}`; end it with ';' or assign it")


def test_figures_are_captioned_named_described_and_referenced(chapter: Path) -> None:
    names = []
    for k, cell in enumerate(_code_cells(chapter), 1):
        meta = cell.metadata.get("mystnb", {})
        makes_figure = bool(FIGURE_CALLS.search(cell.source))
        if not makes_figure:
            assert "figure" not in meta, f"{chapter.name}, code cell {k}: figure metadata on a cell with no figure"
            continue
        where = f"{chapter.name}, code cell {k}"
        assert len(FIGURE_CALLS.findall(cell.source)) == 1, f"{where}: one figure per cell (each needs its caption)"
        fig, image = meta.get("figure", {}), meta.get("image", {})
        assert str(fig.get("caption", "")).strip(), f"{where}: add mystnb: figure: caption"
        assert re.fullmatch(rf"fig-{chapter.name[:2]}-[a-z0-9-]+", str(fig.get("name", ""))), (
            f"{where}: mystnb: figure: name must be fig-{chapter.name[:2]}-<words>")
        assert len(str(image.get("alt", ""))) >= 20, f"{where}: add mystnb: image: alt (what the figure shows)"
        for key, text in (("caption", str(fig.get("caption", ""))), ("alt", str(image.get("alt", "")))):
            # a double-quoted YAML string reads "$\tau$" as a tab and "au" (chapter 10's caption once did)
            bad = sorted({repr(c) for c in text if ord(c) < 32})
            assert not bad, f"{where}: the {key} holds control characters {bad}: escape backslashes in YAML"
        assert not any(_is_claims_call(n) and n.value.func.attr in SHOWN for n in ast.walk(ast.parse(cell.source))), (
            f"{where}: record claims in a separate cell (myst-nb would put the verdict lines inside the figure)")
        names.append(fig["name"])
    assert names, f"{chapter.name}: no figure"
    assert len(set(names)) == len(names), f"{chapter.name}: duplicate figure names {names}"
    text = chapter.read_text(encoding="utf-8")
    cited = set(re.findall(r"\{numref\}`(?:[^`<]*<)?(fig-[a-z0-9-]+)>?`", text))
    assert cited & set(names), f"{chapter.name}: cite the chapter's main figure in the prose with {{numref}}`name`"
    unknown = {c for c in cited if c.startswith(f"fig-{chapter.name[:2]}-")} - set(names)
    assert not unknown, f"{chapter.name}: {{numref}} to figures that do not exist: {sorted(unknown)}"


def test_notebook_code_is_formatted_and_linted() -> None:
    """The same check as `make lint`: ruff format and ruff check on the chapters' code cells."""
    done = subprocess.run(["make", "-s", "lint-notebooks", f"BIN={Path(sys.executable).parent}"], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr + "\nfix with: make format, then fix the rest by hand"
