"""The notebook cache: what a result depends on, and whether a stored result is whole.

A notebook is served from ``book/generated`` when its key is unchanged.  The
key covers what can change a result and nothing else:

- the notebook's source and the parameters injected into it;
- the *science* code the notebook runs: the syntax tree of every ``.py`` module of the
  ``covbook`` package outside ``covbook/book/`` that the notebook's code cells import,
  directly or through other modules (:func:`notebook_science`: every ``import`` statement
  of a module counts, also one inside a function; editing ``covbook/transformer``
  re-executes the chapters that import it and no other).  The pipeline (runner, CLI,
  report, lock ...) never changes a number, so editing it re-executes nothing; nor do
  comments, docstrings, formatting, a ``notes.txt`` or an editor's ``.ipynb_checkpoints/``;
- the versions of Python, torch and numpy;
- the device the notebook resolves to (``auto`` becomes ``cpu`` or ``cuda``).

A stored result is served only if it parses and matches its run record: the
record holds the SHA-256 of the notebook and claims file it was committed with
(:func:`covbook.book.runner.commit_files` moves the three into place as one
unit), so a notebook or claims file that is truncated, not JSON, or from another
run is re-executed, and ``check`` and ``build`` refuse it.  A run that failed
keeps the last good outputs and writes its own record to
``book/generated/failed/NAME.json``; ``check`` and ``build`` refuse such a
notebook until a run succeeds (or the cache serves a result of the same key).
"""

from __future__ import annotations

import ast
import hashlib
import json
import warnings
from functools import lru_cache
from pathlib import Path

from covbook._devices import device_name
from covbook._jsonio import DamagedFile, read_json
from covbook.book.config import Paths, UsageError, _myst_code_cells
from covbook.book.provenance import versions
from covbook.book.records import read_run

__all__ = ["PACKAGE", "science_hash", "science_modules", "science_files", "notebook_modules", "notebook_science",
           "environment", "resolve_device", "content_hash", "is_cached", "damaged_outputs", "verify_outputs",
           "file_digest", "failed_runs", "last_failure"]

PACKAGE = Path(__file__).resolve().parents[1]  # src/covbook
PIPELINE = Path(__file__).resolve().parent  # src/covbook/book


def without_docstrings(tree: ast.AST) -> ast.AST:
    """``tree`` with the docstring of every module, class and function removed (in place): what keys code."""
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return tree


@lru_cache(maxsize=1024)
def _code_of(f: Path, text: bytes) -> bytes:
    """What in ``.py`` file ``f`` holding ``text`` can change a result: its syntax tree without docstrings (no
    comments, no formatting).  Each version of a file (its bytes: cheap to read) is parsed once per process."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. an invalid escape sequence: the bytes still key it
            tree = ast.parse(text, filename=str(f))
    except (SyntaxError, ValueError):
        return text  # not Python this interpreter reads: key on its bytes
    return ast.dump(without_docstrings(tree)).encode()


def science_hash(package: Path = PACKAGE, modules: list[Path] | None = None) -> str:
    """Hash of the science code: the syntax tree of every ``.py`` file of ``package`` outside ``book/``
    (or of the files ``modules`` only, e.g. :func:`science_modules` of a notebook).

    Only Python code can change a result (the package ships no data files):
    comments, docstrings, formatting, a ``notes.txt``, ``__pycache__`` and
    ``.ipynb_checkpoints`` folders do not change the key.
    """
    h = hashlib.sha256()
    for f in science_files(package, modules):
        h.update(f.relative_to(package).as_posix().encode() + b"\0")
        h.update(_code_of(f, f.read_bytes()) + b"\0")
    return h.hexdigest()


def science_files(package: Path = PACKAGE, files: list[Path] | None = None) -> list[Path]:
    """The science files among ``files`` (default: every ``.py`` file of ``package``), sorted: those outside
    the pipeline (``book/``), hidden folders and ``__pycache__``."""
    return sorted(f for f in (package.rglob("*.py") if files is None else files)
                  if f.is_file() and (package / "book") not in f.parents
                  and not any(part.startswith(".") or part == "__pycache__" for part in f.relative_to(package).parts))


def _module_file(package: Path, dotted: str) -> Path | None:
    """The file of module ``dotted`` (``covbook.x.y``) inside ``package``, or None (not covbook's, or absent)."""
    parts = dotted.split(".")
    if parts[0] != package.name:
        return None
    base = package.joinpath(*parts[1:])
    for f in (base.with_suffix(".py"), base / "__init__.py"):
        if f.is_file():
            return f
    return None


def _imports(package: Path, f: Path, tree: ast.AST) -> tuple[set[Path], bool]:
    """The covbook files ``f`` imports anywhere in its body (with their parent packages), and whether it
    imports dynamically (``importlib.import_module``, ``__import__``: then no static closure is trusted)."""
    found: set[Path] = set()
    here = ".".join((package.name, *f.relative_to(package).with_suffix("").parts))
    if f.name == "__init__.py":
        here = here.rsplit(".", 1)[0] + "._"  # relative imports resolve against the package itself
    dynamic = False

    def add(dotted: str) -> None:
        parts = dotted.split(".")
        for i in range(1, len(parts) + 1):  # importing a.b.c runs a/__init__, a/b/__init__ and a/b/c
            m = _module_file(package, ".".join(parts[:i]))
            if m is not None:
                found.add(m)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = here.split(".")[: -node.level]
                base = ".".join([*anchor, base] if base else anchor)
            add(base)
            for alias in node.names:  # `from covbook.x import y`: y may be a module
                add(f"{base}.{alias.name}")
        elif isinstance(node, ast.Call):
            fn = node.func
            name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
            dynamic |= name in ("import_module", "__import__")
    return found, dynamic


@lru_cache(maxsize=1024)
def _file_imports(package: Path, f: Path, text: bytes) -> tuple[frozenset[Path], bool]:
    """:func:`_imports` of file ``f`` holding ``text``: each version of a file parsed once per process."""
    try:
        tree = ast.parse(text, filename=str(f))
    except (SyntaxError, ValueError):
        return frozenset(), False  # keyed on its bytes by science_hash; it imports nothing Python can read
    found, dynamic = _imports(package, f, tree)
    return frozenset(found), dynamic


def science_modules(sources: list[str], package: Path = PACKAGE) -> list[Path] | None:
    """The science modules (files of ``package`` outside ``book/``) that code ``sources`` imports, directly or
    through other covbook modules (the pipeline's included), sorted; None when one of them imports dynamically.

    Examples
    --------
    >>> mods = science_modules(["from covbook.experiments import readout"])
    >>> [m.relative_to(PACKAGE).as_posix() for m in mods][-4:]
    ['processes.py', 'rules.py', 'stats.py', 'theory.py']
    >>> any(m.parent.name == "transformer" for m in mods)
    False
    """
    seen: set[Path] = set()
    todo: list[Path] = []
    for source in sources:
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue  # a cell magic or the like: run_notebooks refuses real syntax errors before any kernel
        todo += _imports(package, package / "__init__.py", tree)[0]
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.add(f)
        found, dynamic = _file_imports(package, f, f.read_bytes())
        if dynamic:
            return None
        todo += found - seen
    return science_files(package, list(seen))


def notebook_modules(nb_path: Path, package: Path = PACKAGE) -> list[Path]:
    """The science modules notebook ``nb_path`` runs: :func:`science_modules` of its code cells (IPython's magics
    and shell lines left out), or every :func:`science_files` when its imports cannot be followed statically."""
    sources = [src for _, src in _myst_code_cells(nb_path.read_text(encoding="utf-8"))]
    sources = ["\n".join(ln for ln in s.splitlines() if not ln.lstrip().startswith(("%", "!"))) for s in sources]
    modules = science_modules(sources, package)
    return science_files(package) if modules is None else modules


def notebook_science(nb_path: Path, package: Path = PACKAGE) -> str:
    """Hash of the science code notebook ``nb_path`` runs (:func:`science_hash` of :func:`notebook_modules`)."""
    return science_hash(package, notebook_modules(nb_path, package))


@lru_cache(maxsize=1)
def environment() -> dict[str, str]:
    """Versions that can change a result: Python, torch, numpy (read without importing them)."""
    return versions(("torch", "numpy"))


def resolve_device(device: str) -> str:
    """``auto`` → ``cuda`` or ``cpu`` (:func:`covbook._devices.device_name`); a bad name is a :class:`UsageError`."""
    try:
        return device_name(device)
    except ValueError as e:
        raise UsageError(f"--device: {e}") from None


def content_hash(nb_path: Path, params: dict, science: str, device: str) -> str:
    """The cache key of one notebook run (``device``: the resolved device, ``cpu`` or ``cuda``)."""
    h = hashlib.sha256()
    h.update(nb_path.read_bytes())
    h.update(json.dumps(params, sort_keys=True, default=str).encode())
    h.update(science.encode())
    h.update(json.dumps(environment(), sort_keys=True).encode())
    h.update(device.encode())
    return h.hexdigest()


def _outputs(paths: Paths, name: str) -> tuple[Path, Path, Path]:
    return paths.runs / f"{name}.json", paths.claims / f"{name}.json", paths.generated / f"{name}.ipynb"


def file_digest(path: Path) -> str:
    """SHA-256 of a file's bytes (what a run record says it was committed with)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def verify_outputs(paths: Paths, name: str) -> dict | None:
    """Parse the outputs of ``name`` that exist; the run record (``None`` if absent).

    Raises :class:`DamagedFile` for the first one that does not parse, that is
    not the file its run record was committed with, or that its record names but is gone.
    """
    from covbook.claims import measurement_from_json

    rec_path, claims_path, nb_path = _outputs(paths, name)
    rec = read_run(rec_path)
    if claims_path.is_file():
        for i, c in enumerate(read_json(claims_path, list)):
            try:
                measurement_from_json(c)
            except ValueError as err:
                raise DamagedFile(claims_path, f"entry {i} is not a measurement: {err}") from None
    if nb_path.is_file():
        nb = read_json(nb_path, dict)
        if not isinstance(nb.get("cells"), list) or not isinstance(nb.get("nbformat"), int):
            raise DamagedFile(nb_path, "not a Jupyter notebook (no cells or nbformat)")
    if rec is not None and rec.ok:
        outputs = rec.outputs
        if outputs is None:
            raise DamagedFile(rec_path, "a run record of an older covbook, which does not name its outputs")
        for key, path in (("claims", claims_path), ("notebook", nb_path)):
            if not path.is_file() and key in outputs:
                raise DamagedFile(path, f"missing: its run record {rec_path.name} was committed with it")
            if path.is_file() and outputs.get(key) != file_digest(path):
                raise DamagedFile(path, f"not the file its run record {rec_path.name} was committed with")
    return rec


def is_cached(paths: Paths, name: str, digest: str) -> bool:
    """True if all three outputs of ``name`` exist, parse, match, and were made by a successful run with key
    ``digest``."""
    if not all(p.is_file() for p in _outputs(paths, name)):
        return False
    try:
        rec = verify_outputs(paths, name)
    except (OSError, DamagedFile):
        return False
    return rec is not None and rec.ok and rec.key == digest


def _repair_command(paths: Paths, name: str) -> str:
    profile = None
    for path in (paths.failed / f"{name}.json", paths.runs / f"{name}.json"):
        try:
            rec = read_run(path)
        except (OSError, DamagedFile):
            continue
        if rec is not None:
            profile = rec.profile
            break
    return f"covbook run {name.split('_', 1)[0]}" + (f" --profile {profile}" if profile else "")


def damaged_outputs(paths: Paths, names: list[str]) -> list[str]:
    """One line per damaged output among ``names``: the file and the command that repairs it."""
    problems = []
    for name in names:
        try:
            verify_outputs(paths, name)
        except DamagedFile as err:
            rel = err.path.relative_to(paths.root) if err.path.is_relative_to(paths.root) else err.path
            problems.append(f"{rel} is damaged ({err.reason}); repair it with: {_repair_command(paths, name)}")
    return problems


def last_failure(paths: Paths, name: str) -> dict | None:
    """The record of ``name``'s last run if it failed (``book/generated/failed/NAME.json``), else ``None``."""
    path = paths.failed / f"{name}.json"
    if not path.is_file():
        return None
    try:
        return read_json(path, dict)
    except (OSError, DamagedFile):
        return {"error": f"its failure record {path.name} is unreadable"}


def failed_runs(paths: Paths, names: list[str]) -> list[str]:
    """One line per notebook among ``names`` whose last run failed: the error and what to do."""
    out = []
    for name in names:
        rec = last_failure(paths, name)
        if rec is None:
            continue
        error = str(rec.get("error") or "unknown error").strip().splitlines()[0]
        kept = " (the last good outputs are kept, not used)" if paths.runs.joinpath(f"{name}.json").is_file() else ""
        out.append(f"{name}: notebook failed: {error}{kept}; see book/generated/failed/{name}.ipynb, "
                   f"then rerun: {_repair_command(paths, name)}")
    return out
