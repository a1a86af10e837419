"""Where the pipeline reads and writes, the profiles file, and a notebook's parameters.

A profile is a set of papermill parameters per notebook in ``notebooks/profiles.yml`` (its header documents the
format); a notebook's ``parameters`` cell is the reference for names, types and signs.  No science is imported here.
"""

from __future__ import annotations

import ast
import operator
import os
import shutil
import signal
from dataclasses import dataclass
from pathlib import Path

from covbook._devices import DEVICES

__all__ = [
    "PROFILES", "PROFILE_TABLE", "DEFAULT_PROFILE", "Profile", "profile_table", "COMMON_PARAMETERS", "DEVICES",
    "PROFILES_FILE", "UsageError", "Paths", "project_root", "expression_value",
    "discover", "select", "load_profiles", "myst_code_cells", "notebook_parameters", "resolve_parameters", "Terminated",
    "stop_on_sigterm", "die_with_parent", "oserror_text",
]


class UsageError(ValueError):
    """Bad command-line input (unknown notebook, profile, parameter, device): exit status 2."""


@dataclass(frozen=True)
class Profile:
    """One profile of ``notebooks/profiles.yml``'s ``profiles:`` table (smallest first)."""

    name: str  # --profile NAME
    description: str = ""  # what it is for
    defaults: bool = False  # its sizes are the notebooks' own parameters cells (one profile: the default)
    power: bool = False  # the book is built at it: `covbook check` notes each evidence claim without power
    time_limit: int = 3600  # a notebook's time limit in seconds when `covbook run --plan` has no estimate


def profile_table(raw: object, where: str = "profiles.yml") -> dict[str, Profile]:
    """``{name: Profile}`` from the ``profiles:`` mapping of a profiles file; :class:`UsageError` if malformed."""
    keys = "description, defaults, power, time_limit"
    if not isinstance(raw, dict) or not raw:
        raise UsageError(f"{where}: `profiles:` must map profile names to {{{keys}}}")
    table = {}
    for name, spec in raw.items():
        try:
            table[name] = p = Profile(name, **spec)
        except TypeError:  # not a mapping, or a key that is no field of Profile
            p = None
        if (p is None or not isinstance(name, str) or not name.isidentifier() or not isinstance(p.description, str)
                or not isinstance(p.defaults, bool) or not isinstance(p.power, bool)):
            raise UsageError(f"{where}: profile {name!r} must be a mapping with keys among {{{keys}}} "
                             "(defaults and power: true or false)")
        if isinstance(p.time_limit, bool) or not isinstance(p.time_limit, int) or p.time_limit < 1:
            raise UsageError(f"{where}: profile {name}.time_limit must be a positive number of seconds")
    if sum(p.defaults for p in table.values()) != 1:
        raise UsageError(f"{where}: exactly one profile must have `defaults: true` (the notebooks' own parameters)")
    return table


def _read_yaml(path: Path) -> object:
    """The YAML document at ``path``; a :class:`UsageError` naming the file (and the line) when it does not read."""
    import yaml

    try:
        with open(path, encoding="utf-8") as fh:
            return yaml.safe_load(fh)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise UsageError(f"{path}{where}: YAML syntax error: {getattr(err, 'problem', None) or err}") from None
    except UnicodeDecodeError as err:
        raise UsageError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    except OSError as err:
        raise UsageError(f"{path}: cannot read: {err.strerror}") from None


_PACKAGED = Path(__file__).resolve().parents[1] / "profiles.yml"  # notebooks/profiles.yml in a checkout (a link)
_RAW = _read_yaml(_PACKAGED)
#: Every profile, smallest first, from the ``profiles:`` table of notebooks/profiles.yml.
PROFILE_TABLE = profile_table(_RAW.get("profiles") if isinstance(_RAW, dict) else None, str(_PACKAGED))
PROFILES = tuple(PROFILE_TABLE)
#: The profile whose sizes are the notebooks' own parameters cells (``covbook run``'s default).
DEFAULT_PROFILE = next(p.name for p in PROFILE_TABLE.values() if p.defaults)
COMMON_PARAMETERS = ("profile", "device", "seed")
#: the largest size of a number parameter (2**53: every integer up to it is exact as a float, as JSON reads it)
PARAMETER_MAX = 2**53
PROFILES_FILE = Path("notebooks") / "profiles.yml"
_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Pow: operator.pow}
_FUNCS = {"len": len, "sum": sum, "max": max, "min": min}


def expression_value(expr: str, params: dict, *, where: str, calls: bool = True,
                     error: type[Exception] = UsageError) -> object:
    """Evaluate an expression of a notebook's parameters from ``profiles.yml`` (``work:``, ``replicates:``): names,
    numbers and ``+ - * / // **``; with ``calls`` also lists and ``len``/``sum``/``max``/``min`` (without, every name
    must be a number).  Nothing else is evaluated; a bad expression raises ``error``, its message led by ``where``."""

    def ev(node: ast.AST) -> object:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in params:
                raise error(f"{where}: expression {expr!r} names {node.id!r}, which is not a parameter of the notebook")
            value = params[node.id]
            if not calls and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise error(f"{where}: expression {expr!r}: {node.id} = {value!r} is not a number")
            return value
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return _BINOPS[type(node.op)](ev(node.left), ev(node.right))
        if calls and isinstance(node, (ast.List, ast.Tuple)):
            return [ev(e) for e in node.elts]
        if (calls and isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCS
                and not node.keywords):
            return _FUNCS[node.func.id](*[ev(a) for a in node.args])
        raise error(f"{where}: expression {expr!r}: unsupported syntax {ast.unparse(node)!r}")

    try:
        return ev(ast.parse(expr, mode="eval").body)
    except SyntaxError as err:
        raise error(f"{where}: expression {expr!r} is not an expression: {err.msg}") from None
    except (ZeroDivisionError, OverflowError, TypeError) as err:
        raise error(f"{where}: expression {expr!r}: {err}") from None


class Terminated(KeyboardInterrupt):
    """SIGTERM (what CI systems and ``timeout`` send), handled like Ctrl-C; exit status 143."""


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated


def stop_on_sigterm() -> None:
    """Make SIGTERM raise :class:`Terminated` in the main thread, as Ctrl-C raises ``KeyboardInterrupt``."""
    signal.signal(signal.SIGTERM, _raise_terminated)


def die_with_parent() -> None:
    """SIGKILL this process when the thread that started it ends (Linux ``PR_SET_PDEATHSIG``; elsewhere nothing):
    a child of a covbook command killed with ``kill -9`` never goes on writing into its tree."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


_LAYOUT = {"notebooks": "notebooks", "profiles": "notebooks/profiles.yml", "generated": "book/generated",
           "claims": "book/generated/claims", "runs": "book/generated/runs", "failed": "book/generated/failed",
           "checkpoints": "book/generated/checkpoints", "state": ".covbook", "tmp": ".covbook/tmp",
           "lock": ".covbook/lock", "timings": ".covbook/timings.json"}


@dataclass(frozen=True)
class Paths:
    """Where the pipeline reads and writes under the project ``root``: ``paths.runs`` is ``root/book/generated/runs``
    (``_LAYOUT``); ``.covbook/`` (``state``: the lock, run temporaries, measured ``timings``) is never read by the
    book build."""

    root: Path

    def __getattr__(self, name: str) -> Path:
        if name in _LAYOUT:
            return self.root / _LAYOUT[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


def project_root(start: str | os.PathLike | None = None) -> Path:
    """The covbook checkout containing ``start`` (default: the working directory)."""
    here = Path(start or Path.cwd()).resolve()
    for p in (here, *here.parents):
        if (p / PROFILES_FILE).is_file() and (p / "_config.yml").is_file():
            return p
    raise UsageError(f"not inside a covbook checkout (no {PROFILES_FILE} above {here})")


def oserror_text(err: OSError) -> str:
    """An OS error in one line: what failed, on which file (a ``shutil.Error``: its first entry and a count)."""
    entries = err.args[0] if isinstance(err, shutil.Error) and err.args and isinstance(err.args[0], list) else []
    if entries:
        first = entries[0] if isinstance(entries[0], tuple) and len(entries[0]) == 3 else ("", "", entries[0])
        return f"{first[2]} (writing {first[1]}; {len(entries)} file(s) failed)"
    where = f" ({err.filename})" if getattr(err, "filename", None) else ""
    return f"{err.strerror or err}{where}"


def discover(paths: Paths) -> dict[str, Path]:
    """The book's notebooks, ``NN_name.md``, in order."""
    return {p.stem: p for p in sorted(paths.notebooks.glob("[0-9][0-9]_*.md"))}


def select(paths: Paths, names: list[str] | None) -> dict[str, Path]:
    """Resolve notebook names (``01``, ``01_covariance_readout`` or a path) to sources."""
    available = discover(paths)
    chosen: dict[str, Path] = {}
    for raw in names or []:
        hits = [n for n in available if Path(raw).stem in (n, n.split("_", 1)[0])]
        if len(hits) != 1:
            raise UsageError(f"unknown notebook {raw!r}; valid: {', '.join(available)}")
        chosen[hits[0]] = available[hits[0]]
    return chosen or available


def load_profiles(path: str | os.PathLike) -> dict[str, dict]:
    """Read the profiles file: ``{notebook: {profile: {param: value}, "lengths": [...], "work": {...}}}``; a
    :class:`UsageError` naming the file (and the line, for a YAML syntax error) on anything malformed
    (``replicates``: checked by :mod:`covbook.book.power`)."""
    path = Path(path)
    raw = _read_yaml(path) or {}
    if not isinstance(raw, dict):
        raise UsageError(f"{path}: expected a mapping of notebook names to profiles")
    if "profiles" in raw:
        profile_table(raw.pop("profiles"), str(path))  # the table itself is the package's (PROFILE_TABLE)
    entry_keys = ("lengths", "work", "replicates")
    for nb, per in raw.items():
        if not isinstance(per, dict):
            raise UsageError(f"{path}: entry {nb!r} must map profile names to parameters")
        for key, value in per.items():
            if key == "lengths" and not (isinstance(value, (list, dict)) and all(isinstance(v, str) for v in value)):
                raise UsageError(f"{path}: {nb}.lengths must be a list of parameter names, or a mapping of parameter "
                                 "names to rehearsal values (null: the smoke value)")
            if key == "work" and not (isinstance(value, dict) and isinstance(value.get("expr"), str)
                                      and isinstance(value.get("unit", ""), str) and set(value) <= {"expr", "unit"}):
                raise UsageError(f"{path}: {nb}.work must be a mapping {{expr: '...', unit: '...'}}")
            if key in entry_keys:
                continue
            if key not in PROFILES:
                raise UsageError(f"{path}: {nb}: unknown profile {key!r}; valid: {', '.join(PROFILES + entry_keys)}")
            if value is not None and not isinstance(value, dict):
                raise UsageError(f"{path}: {nb}.{key} must be a mapping of parameter names to values")
            per[key] = value or {}
    return raw


def myst_code_cells(text: str) -> list[tuple[dict, str]]:
    """The code cells of a MyST notebook as ``(metadata, source)``, as jupytext (and so papermill) reads them."""
    import jupytext  # about a second, for the commands that plan or key a run; none imports torch

    return [(dict(c.metadata), c.source) for c in jupytext.reads(text, fmt="md:myst").cells if c.cell_type == "code"]


def notebook_parameters(path: Path) -> dict[str, object]:
    """Names and default values of the notebook's ``parameters`` cell (an expression that is no literal: its text);
    a syntax error in any code cell (magics and shell escapes aside) is a :class:`UsageError`, before any kernel."""
    tagged = []
    for index, (opts, source) in enumerate(myst_code_cells(Path(path).read_text(encoding="utf-8"))):
        if source.lstrip().startswith("%%"):
            continue
        lines = [ln[: len(ln) - len(ln.lstrip())] + "pass" if ln.lstrip().startswith(("%", "!")) else ln
                 for ln in source.splitlines()]
        try:
            body = ast.parse("\n".join(lines), filename=path.name).body
        except SyntaxError as err:
            raise UsageError(f"{path.name}: code cell {index + 1} line {err.lineno}: {err.msg} "
                             "(found before any kernel started)") from None
        if "parameters" in (opts.get("tags") or []):
            tagged.append(body)
    if len(tagged) != 1:
        raise UsageError(f"{path.name}: expected exactly one code cell tagged 'parameters', found {len(tagged)}")
    params: dict[str, object] = {}
    for node in tagged[0]:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                params[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                params[node.targets[0].id] = ast.unparse(node.value)
    if missing := [p for p in COMMON_PARAMETERS if p not in params]:
        raise UsageError(f"{path.name}: parameters cell must define {', '.join(missing)}")
    return params


#: the kinds of value a parameters cell and profiles.yml hold (YAML's and Python literals' own types)
_KINDS = {bool: "bool", int: "int", float: "float", str: "str", list: "list", tuple: "list", type(None): "None"}


def check_value(where: str, value: object, default: object) -> None:
    """Raise :class:`UsageError` unless ``value`` has the type (an int is a float too; each element of a list) and
    sign of the notebook's ``default``, and no number exceeds :data:`PARAMETER_MAX` in size (nor is NaN)."""
    dk, vk = _KINDS.get(type(default)), _KINDS.get(type(value), type(value).__name__)
    if dk in (None, "None"):
        return
    if vk != dk and not (dk == "float" and vk == "int"):
        raise UsageError(f"{where} = {value!r} is a {vk}, but the notebook's default {default!r} is a {dk}")
    elems = [e for e in default if e is not None] if dk == "list" else []
    if elems and len({_KINDS.get(type(e)) for e in elems}) == 1:
        for i, e in enumerate(value):
            check_value(f"{where}[{i}]", e, elems[0])
    if dk in ("int", "float") and not abs(value) <= PARAMETER_MAX:
        raise UsageError(f"{where} = {value!r} is out of range: a number parameter is at most 2**53 in size")
    if dk in ("int", "float") and ((default > 0 and not value > 0) or (default < 0 and not value < 0)):
        sign = "positive" if default > 0 else "negative"
        raise UsageError(f"{where} = {value!r} must be {sign} (the notebook's default is {default!r})")


def resolve_parameters(name: str, defaults: dict[str, object], profiles: dict, profile: str, device: str, seed: int,
                       *, rehearse: bool = False) -> dict[str, object]:
    """Parameters injected into notebook ``name`` for ``profile``; unknown names, and values of the wrong type or
    sign, are usage errors.  With ``rehearse`` (the profile's shapes at short lengths) each parameter under the
    notebook's ``lengths`` takes the value given there, else its ``smoke`` value, else the notebook's default."""
    entry, where = profiles.get(name, {}), f"notebooks/profiles.yml: {name}"
    overrides = dict(entry.get(profile, {}))
    if unknown := sorted(set(overrides) - set(defaults)):
        raise UsageError(f"{where}.{profile} sets unknown parameter(s) {', '.join(unknown)}; "
                         f"valid: {', '.join(sorted(defaults))}")
    if clash := sorted(set(overrides) & set(COMMON_PARAMETERS)):
        raise UsageError(f"{where}.{profile} must not set {', '.join(clash)} (command-line options)")
    lengths = entry.get("lengths", [])
    if bad := sorted(set(lengths) - (set(defaults) - set(COMMON_PARAMETERS))):
        raise UsageError(f"{where}.lengths names unknown parameter(s) {', '.join(bad)}")
    if rehearse:
        smoke, explicit = entry.get("smoke", {}), lengths if isinstance(lengths, dict) else {}
        for key in lengths:
            if explicit.get(key) is not None:
                overrides[key] = explicit[key]
            elif key in smoke:
                overrides[key] = smoke[key]
            else:
                overrides.pop(key, None)  # the notebook's default (quick) length
    for key, value in overrides.items():
        check_value(f"{where}.{profile}.{key}", value, defaults[key])
    return {**overrides, "profile": profile, "device": device, "seed": seed}
