"""The notebook cache: what a result depends on, and whether a stored result is whole.

A notebook's key (:func:`content_hash`) is its source, its parameters, the science code it imports
(:func:`notebook_science`: the static closure of its cells' covbook imports outside ``book/``, as syntax without
comments or docstrings), the Python, torch and numpy versions and the resolved device.  Stored outputs are served
only when their run record names their SHA-256 (:func:`verify_outputs`).
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import json
import warnings
from functools import lru_cache
from pathlib import Path

from covbook._devices import device_name
from covbook._jsonio import DamagedFile, read_json
from covbook.book.config import Paths, UsageError, myst_code_cells
from covbook.book.records import read_run, versions
from covbook.rules import utf8_text

__all__ = ["PACKAGE", "portable", "source_text", "science_hash", "science_modules", "science_files",
           "notebook_science", "environment", "resolve_device", "content_hash", "is_cached", "damaged_outputs",
           "verify_outputs", "file_digest", "failed_runs"]

PACKAGE = Path(__file__).resolve().parents[1]  # src/covbook


@lru_cache(maxsize=4096)
def portable(text: str) -> str:
    """Python source without comments, docstrings or formatting, as ``ast.unparse`` writes it (alike on every
    Python that parses it, unlike ``ast.dump``); text that does not parse, as it is.  Each text parsed once."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. an invalid escape sequence: the code still keys it
            tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return text
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return ast.unparse(tree)


def science_files(package: Path = PACKAGE, files: list[Path] | None = None) -> list[Path]:
    """The science files among ``files`` (default: all of ``package``), sorted: not in ``book/``, hidden or caches."""
    return sorted(f for f in (package.rglob("*.py") if files is None else files)
                  if f.is_file() and (package / "book") not in f.parents
                  and not any(part.startswith(".") or part == "__pycache__" for part in f.relative_to(package).parts))


def source_text(f: Path, root: Path | None = None) -> str:
    """The text of source ``f``; a :class:`UsageError` naming it (relative to ``root``) when it is not UTF-8."""
    try:
        return utf8_text(f, f.relative_to(root) if root is not None and f.is_relative_to(root) else f)
    except ValueError as err:
        raise UsageError(str(err)) from None


def science_hash(package: Path = PACKAGE, modules: list[Path] | None = None) -> str:
    """SHA-256 of the :func:`portable` code of every :func:`science_files` file (or of ``modules`` only)."""
    h = hashlib.sha256()
    for f in science_files(package, modules):
        h.update(f.relative_to(package).as_posix().encode() + b"\0")
        h.update(portable(source_text(f)).encode() + b"\0")
    return h.hexdigest()


def _module_files(package: Path, dotted: str) -> list[Path]:
    """The files of ``package`` that importing module ``dotted`` runs (``covbook.a.b``: a/__init__ and a/b)."""
    parts = dotted.split(".")
    if parts[0] != package.name:
        return []
    out = []
    for i in range(1, len(parts) + 1):
        base = package.joinpath(*parts[1:i])
        out += [f for f in (base.with_suffix(".py"), base / "__init__.py") if f.is_file()][:1]
    return out


@lru_cache(maxsize=1024)
def _imports(package: Path, f: Path, text: str | bytes) -> tuple[frozenset[Path], bool]:
    """The covbook files that code ``text`` of file ``f`` imports anywhere (with their parent packages), and
    whether it imports dynamically (``import_module``, ``__import__``: then no static closure is trusted)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return frozenset(), False  # a cell magic, or a file keyed on its text
    here = [package.name, *f.relative_to(package).with_suffix("").parts]
    if f.name == "__init__.py":
        here[-1] = "_"  # relative imports resolve against the package itself
    found: set[Path] = set()
    dynamic = False
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(m for alias in node.names for m in _module_files(package, alias.name))
        elif isinstance(node, ast.ImportFrom):
            anchor = here[: -node.level] if node.level else []
            base = ".".join([*anchor, node.module] if node.module else anchor)
            for dotted in (base, *(f"{base}.{alias.name}" for alias in node.names)):  # `from x import y`: y a module?
                found.update(_module_files(package, dotted))
        elif isinstance(node, ast.Call):
            fn = node.func
            name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
            dynamic |= name in ("import_module", "__import__")
    return frozenset(found), dynamic


def science_modules(sources: list[str], package: Path = PACKAGE) -> list[Path] | None:
    """The science modules (files of ``package`` outside ``book/``) that code ``sources`` imports, directly or
    through other covbook modules (the pipeline's included), sorted; None when one of them imports dynamically.

    >>> [m.relative_to(PACKAGE).as_posix() for m in science_modules(["from covbook import stats"])][-1]
    'stats.py'
    """
    seen: set[Path] = set()
    todo = [m for s in sources for m in _imports(package, package / "__init__.py", s)[0]]
    while todo:
        f = todo.pop()
        if f not in seen:
            seen.add(f)
            found, dynamic = _imports(package, f, f.read_bytes())
            if dynamic:
                return None
            todo += found - seen
    return science_files(package, list(seen))


def notebook_science(nb_path: Path, package: Path = PACKAGE) -> str:
    """Hash of the science code notebook ``nb_path`` runs: :func:`science_hash` of the :func:`science_modules` of
    its code cells (IPython's magics and shell lines left out), of all when those cannot be followed statically."""
    sources = ["\n".join(ln for ln in src.splitlines() if not ln.lstrip().startswith(("%", "!")))
               for _, src in myst_code_cells(source_text(nb_path))]
    return science_hash(package, science_modules(sources, package))


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


def content_hash(nb_path: Path, params: dict, science: str, device: str, env: dict | None = None) -> str:
    """The cache key of one notebook run on the resolved ``device``, in environment ``env`` (default: this one)."""
    h = hashlib.sha256(nb_path.read_bytes())
    for part in (json.dumps(params, sort_keys=True, default=str), science,
                 json.dumps(environment() if env is None else env, sort_keys=True), device):
        h.update(part.encode())
    return h.hexdigest()


def file_digest(path: Path) -> str:
    """SHA-256 of a file's bytes (what a run record says it was committed with)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def verify_outputs(paths: Paths, name: str, folder: Path | None = None) -> dict | None:
    """Parse the outputs of ``name`` that exist in ``folder`` (``book/generated`` by default, or a stored-run folder
    of its layout); the run record (``None`` if absent).  Raises :class:`DamagedFile` for the first that does not
    parse, is not the file its run record was committed with, or is gone (in a stored-run folder: a file without
    a run record, or the record of a failed run)."""
    from covbook.claims import measurement_from_json

    folder = folder or paths.generated
    rec_path, claims_path, nb_path = (folder / f for f in (f"runs/{name}.json", f"claims/{name}.json", f"{name}.ipynb"))
    rec = read_run(rec_path)
    if folder != paths.generated and (rec is None or not rec.ok):
        if rec is not None or claims_path.is_file() or nb_path.is_file():
            raise DamagedFile(rec_path, "a stored run's record must be that of a successful run" if rec is not None
                              else f"missing: {name}'s stored files have no run record")
    for i, c in enumerate(read_json(claims_path, list) if claims_path.is_file() else []):
        try:
            measurement_from_json(c)
        except ValueError as err:
            raise DamagedFile(claims_path, f"entry {i} is not a measurement: {err}") from None
    nb = read_json(nb_path, dict) if nb_path.is_file() else None
    if nb is not None and (not isinstance(nb.get("cells"), list) or not isinstance(nb.get("nbformat"), int)):
        raise DamagedFile(nb_path, "not a Jupyter notebook (no cells or nbformat)")
    if rec is not None and rec.ok:
        if rec.outputs is None:
            raise DamagedFile(rec_path, "a run record of an older covbook, which does not name its outputs")
        for key, path in (("claims", claims_path), ("notebook", nb_path)):
            if not path.is_file() and key in rec.outputs:
                raise DamagedFile(path, f"missing: its run record {rec_path.name} was committed with it")
            if path.is_file() and rec.outputs.get(key) != file_digest(path):
                raise DamagedFile(path, f"not the file its run record {rec_path.name} was committed with")
    return rec


def is_cached(paths: Paths, name: str, digest: str) -> bool:
    """Whether ``name``'s outputs are whole, those its record names, of a successful run with key ``digest``."""
    try:
        rec = verify_outputs(paths, name)
    except (OSError, DamagedFile):
        return False
    return rec is not None and rec.ok and rec.key == digest and set(rec.outputs) >= {"claims", "notebook"}


def _repair_command(paths: Paths, name: str, folder: Path | None = None) -> str:
    """The command that makes ``name``'s outputs in ``folder`` again, at the profile of its last record."""
    folder, profile = folder or paths.generated, None
    for path in (folder / "failed" / f"{name}.json", folder / "runs" / f"{name}.json"):
        with contextlib.suppress(OSError, DamagedFile):
            if (rec := read_run(path)) is not None:
                profile = rec.profile
                break
    if folder != paths.generated:
        return f"covbook edition {profile or 'PROFILE'} {name.split('_', 1)[0]}"
    return f"covbook run {name.split('_', 1)[0]}" + (f" --profile {profile}" if profile else "")


def damaged_outputs(paths: Paths, names: list[str]) -> list[str]:
    """One line per damaged output of ``names`` (the book's run, the stored runs) and the command repairing it."""
    problems = []
    for name, folder in ((n, f) for n in names for f in (paths.generated, paths.root / "book" / "edition")):
        try:
            verify_outputs(paths, name, folder)
        except DamagedFile as err:
            rel = err.path.relative_to(paths.root) if err.path.is_relative_to(paths.root) else err.path
            problems.append(f"{rel} is damaged ({err.reason}); repair it with: {_repair_command(paths, name, folder)}")
    return problems


def failed_runs(paths: Paths, names: list[str]) -> list[str]:
    """One line per notebook among ``names`` whose last run failed (``failed/NAME.json``): the error, what to do."""
    out = []
    for name in names:
        path = paths.failed / f"{name}.json"
        try:
            rec = read_json(path, dict) if path.is_file() else None
        except (OSError, DamagedFile):
            rec = {"error": f"its failure record {path.name} is unreadable"}
        if rec is not None:
            error = str(rec.get("error") or "unknown error").strip().splitlines()[0]
            kept = " (the last good outputs are kept, not used)" if (paths.runs / f"{name}.json").is_file() else ""
            out.append(f"{name}: notebook failed: {error}{kept}; see book/generated/failed/{name}.ipynb, "
                       f"then rerun: {_repair_command(paths, name)}")
    return out
