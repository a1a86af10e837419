"""A notebook's cache key covers the science modules it imports, and only those (covbook.book.cache)."""

from __future__ import annotations

from pathlib import Path

from covbook.book import cache
from covbook.book.config import myst_code_cells
from helpers import ROOT, make_notebook


def _package(tmp_path: Path) -> Path:
    """A stand-in `covbook` package: a/ imports b (relatively, inside a function), c is imported by nobody
    but notebook B, book/ (the pipeline) imports d."""
    pkg = tmp_path / "covbook"
    files = {
        "__init__.py": "",
        "a/__init__.py": "from .core import f\n",
        "a/core.py": "def f():\n    from covbook.b import g\n    return g()\n",
        "b.py": "def g():\n    return 1\n",
        "c.py": "X = 2\n",
        "d.py": "Y = 3\n",
        "book/__init__.py": "",
        "book/x.py": "from covbook import d\n",
    }
    for rel, text in files.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    return pkg


def _notebook(tmp_path: Path, name: str, body: str) -> Path:
    nb = tmp_path / f"{name}.md"
    nb.write_text(make_notebook(body))
    return nb


def _names(pkg: Path, mods: list[Path] | None) -> list[str]:
    assert mods is not None
    return [m.relative_to(pkg).as_posix() for m in mods]


def test_the_closure_follows_relative_function_level_and_pipeline_imports(tmp_path):
    pkg = _package(tmp_path)
    assert _names(pkg, cache.science_modules(["from covbook.a import f"], pkg)) == [
        "__init__.py", "a/__init__.py", "a/core.py", "b.py"]
    # through the pipeline (followed, not keyed): book/x imports d
    assert _names(pkg, cache.science_modules(["import covbook.book.x"], pkg)) == ["__init__.py", "d.py"]
    assert _names(pkg, cache.science_modules(["x = 1", "%matplotlib inline"], pkg)) == []


def test_editing_a_module_re_keys_only_the_notebooks_that_import_it(tmp_path):
    pkg = _package(tmp_path)
    a = _notebook(tmp_path, "01_a", "from covbook.a import f\nx = f()")
    b = _notebook(tmp_path, "02_b", "from covbook import c\nx = c.X")
    before = cache.notebook_science(a, pkg), cache.notebook_science(b, pkg)
    (pkg / "c.py").write_text("X = 20\n")
    assert cache.notebook_science(a, pkg) == before[0]
    assert cache.notebook_science(b, pkg) != before[1]
    (pkg / "b.py").write_text("def g():\n    return 10\n")  # reached by a only through a function body
    assert cache.notebook_science(a, pkg) != before[0]
    # a comment or docstring changes no key (the key hashes the syntax tree without docstrings)
    after = cache.notebook_science(b, pkg)
    (pkg / "c.py").write_text('"""Doc."""\n# note\nX = 20\n')
    assert cache.notebook_science(b, pkg) == after


def test_a_dynamic_import_keys_the_notebook_on_the_whole_package(tmp_path):
    pkg = _package(tmp_path)
    (pkg / "b.py").write_text("import importlib\n\ndef g():\n    return importlib.import_module('covbook.c').X\n")
    a = _notebook(tmp_path, "01_a", "from covbook.a import f")
    assert cache.science_modules(["from covbook.a import f"], pkg) is None
    assert cache.notebook_science(a, pkg) == cache.science_hash(pkg)
    before = cache.notebook_science(a, pkg)
    (pkg / "c.py").write_text("X = 5\n")  # not imported statically by anything: still re-keys a
    assert cache.notebook_science(a, pkg) != before


def test_each_chapter_is_keyed_on_its_own_experiment_module():
    """The book's chapters: 01 imports neither the transformers nor the other chapters' experiments."""
    def modules(name: str) -> set[str]:
        nb = next((ROOT / "notebooks").glob(f"{name}_*.md"))
        mods = cache.science_modules([src for _, src in myst_code_cells(nb.read_text())])
        return {m.relative_to(cache.PACKAGE).as_posix() for m in mods}

    first, eighth = modules("01"), modules("08")
    assert "experiments/readout.py" in first and "attention.py" in first and "claims.py" in first
    assert not {m for m in first if m.startswith(("transformer/", "icl/", "experiments/depth"))}
    assert "experiments/depth.py" in eighth and "transformer/mean_field.py" in eighth
    assert not {m for m in first | eighth if m.startswith("book/")}  # the pipeline is never keyed



def test_each_version_of_a_science_file_is_parsed_once(tmp_path):
    """The code key of a file is cached on its text (a second hash of an unchanged tree parses nothing)."""
    f = tmp_path / "m.py"
    f.write_text('"""doc"""\nx = 1  # comment\n')
    first = cache.portable(f.read_text())
    hits = cache.portable.cache_info().hits
    assert cache.portable(f.read_text()) == first and cache.portable.cache_info().hits == hits + 1
    assert first == cache.portable("x = 1\n")  # docstring, comment and formatting do not count
