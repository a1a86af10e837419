"""The package's layers (ARCHITECTURE.md): no import cycles; the science never imports the pipeline.

Imports are read from the source with :mod:`ast` (nothing is imported), grouped by the
package's top-level units (``covbook.attention``, ``covbook.icl``, ``covbook.book``, ...).
"""

from __future__ import annotations

import ast

from helpers import ROOT

SRC = ROOT / "src" / "covbook"
SCIENCE = {"attention", "processes", "theory", "linalg", "stats", "icl", "transformer", "markov", "prior_work"}
NOTEBOOK_FACING = {"claims", "session", "streams", "plotting", "profiles"}
#: What the chapters' experiments may import besides the science and the shared helpers.
EXPERIMENTS_MAY_USE = {"rules", "plotting", "streams"}


def _unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def import_graph() -> dict[str, set[str]]:
    """``{unit: units it imports}`` over the covbook source tree."""
    graph: dict[str, set[str]] = {}
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC.parent).with_suffix("").parts
        unit = rel[1] if len(rel) > 1 else ""
        deps = graph.setdefault(unit, set())
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("covbook."):
                deps.add(_unit(node.module))
            elif isinstance(node, ast.Import):
                deps.update(_unit(a.name) for a in node.names if a.name.startswith("covbook."))
        deps.discard(unit)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every cycle found by depth-first search (empty when the graph is acyclic)."""
    found, state = [], {}

    def visit(u: str, stack: list[str]) -> None:
        state[u] = 1
        stack.append(u)
        for v in sorted(graph.get(u, ())):
            if state.get(v) == 1:
                found.append(stack[stack.index(v):] + [v])
            elif v not in state:
                visit(v, stack)
        stack.pop()
        state[u] = 2

    for u in sorted(graph):
        if u not in state:
            visit(u, [])
    return found


def test_no_import_cycles() -> None:
    assert cycles(import_graph()) == []


def test_the_science_imports_neither_the_pipeline_nor_the_notebook_layer() -> None:
    graph = import_graph()
    for unit in SCIENCE:
        assert unit in graph, f"covbook.{unit} is missing: update SCIENCE here and ARCHITECTURE.md"
        bad = graph[unit] & ({"book"} | NOTEBOOK_FACING)
        assert not bad, f"covbook.{unit} imports {sorted(bad)}"


def test_the_experiments_sit_between_the_science_and_the_notebooks() -> None:
    graph = import_graph()
    bad = graph["experiments"] - SCIENCE - EXPERIMENTS_MAY_USE - {"_validate", "_jsonio", "_seeds"}
    assert not bad, f"covbook.experiments imports {sorted(bad)} (the pipeline, claims or session)"
    users = sorted(u for u, deps in graph.items() if "experiments" in deps)
    assert users == [], f"{users} import covbook.experiments: only the notebooks do"


def test_the_pipeline_imports_no_science() -> None:
    assert not import_graph()["book"] & SCIENCE


def test_the_cycle_finder_itself() -> None:
    assert cycles({"a": {"b"}, "b": {"a"}}) == [["a", "b", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_docstring_points_outside_the_repository() -> None:
    for path in list(SRC.rglob("*.py")) + list((ROOT / "notebooks").glob("*.md")):
        text = path.read_text(encoding="utf-8")
        for name in ("DESIGN.md", "THEOREMS.md", "../shared"):
            assert name not in text, f"{path.relative_to(ROOT)} refers to {name}, which is not in the repository"


def test_sources_hold_no_control_characters():
    """A docstring written through an escaping tool once held a form feed and a backspace for ``\\f`` and
    ``\\b`` (its maths rendered as 'rac' and 'igl'): source text is printable, newlines aside."""
    bad = []
    for path in [*SRC.rglob("*.py"), *(ROOT / "tests").rglob("*.py"), *(ROOT / "notebooks").glob("*.md")]:
        text = path.read_text(encoding="utf-8")
        if any(ord(c) < 32 and c != "\n" for c in text):
            bad.append(str(path.relative_to(ROOT)))
    assert not bad, f"control characters in {bad}"
