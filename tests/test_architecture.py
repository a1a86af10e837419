"""The package's layers (ARCHITECTURE.md): no import cycles; the science never imports the pipeline.

Imports are read from the source with :mod:`ast` (nothing is imported), grouped by the
package's top-level units (``covbook.attention``, ``covbook.icl``, ``covbook.book``, ...).
"""

from __future__ import annotations

import ast

from helpers import ROOT

SRC = ROOT / "src" / "covbook"
SCIENCE = {"attention", "processes", "theory", "linalg", "stats", "icl", "transformer", "markov", "prior_work",
           "token_laws"}
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


def _module_name(path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _top_level_imports(tree: ast.Module, package: str) -> set[str]:
    """Modules imported when the module is (statements outside functions and classes; not TYPE_CHECKING)."""
    found: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("covbook") and node.level == 0:
                found.add(node.module)
                found.update(f"{node.module}.{a.name}" for a in node.names)  # `from pkg import module`
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name.startswith("covbook"))
            elif isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                for h in node.handlers:
                    visit(h.body)

    visit(tree.body)
    return found


def module_graph() -> dict[str, set[str]]:
    """``{module: covbook modules it imports at module level}``, module by module (not by unit)."""
    files = {_module_name(p): p for p in SRC.rglob("*.py")}
    graph = {}
    for name, path in files.items():
        deps = _top_level_imports(ast.parse(path.read_text(encoding="utf-8")), name)
        graph[name] = {d for d in deps if d in files and d != name}
    return graph


def test_no_module_level_import_cycles_between_modules() -> None:
    """Within a unit too: e.g. covbook.book.report and covbook.book.sweep once imported each other."""
    graph = module_graph()
    assert "covbook.book.report" in graph and graph["covbook.book.report"]
    # a package's __init__ importing its own modules is not a cycle through them
    pruned = {m: {d for d in deps if not m.startswith(d + ".")} for m, deps in graph.items()}
    assert cycles(pruned) == []


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


def _all_imports(tree: ast.Module) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("covbook") and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("covbook"))
    return found


def test_no_import_cycles_through_deferred_imports_either() -> None:
    """Imports inside functions count too: the Dask executor uses the runner's jobs, the runner knows nothing
    of Dask (it is handed an engine), and the plan is handed the runner's job list."""
    files = {_module_name(p): p for p in SRC.rglob("*.py")}
    graph = {}
    for name, path in files.items():
        deps = _all_imports(ast.parse(path.read_text(encoding="utf-8")))
        graph[name] = {d for d in deps if d in files and d != name and not name.startswith(d + ".")}
    assert cycles(graph) == [], f"import cycles: {cycles(graph)}"


def test_the_module_graph_sees_a_cycle() -> None:
    tree = ast.parse("import os\nfrom covbook.book import sweep\ndef f():\n    from covbook.book import report\n")
    assert _top_level_imports(tree, "x") == {"covbook.book", "covbook.book.sweep"}


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
