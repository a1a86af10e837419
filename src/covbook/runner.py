"""Execute the book's notebooks: jupytext -> papermill -> book/generated/.

The pipeline of DESIGN.md: each MyST-markdown notebook in ``notebooks/`` is read
with jupytext, executed by papermill with the parameters of a profile, and
written (atomically) to ``book/generated/NAME.ipynb`` together with its claims
(``claims/NAME.json``) and run record (``runs/NAME.json``: time, profile,
device, content hash, status).  A notebook whose source, parameters and covbook
source are unchanged is served from this cache.  A failing notebook is
reported with its failing cell and does not stop the others.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from multiprocessing import get_context
from pathlib import Path

from covbook.claims import CLAIMS_FILE_ENV, NOTEBOOK_ENV, write_json_atomic
from covbook.profiles import COMMON_PARAMETERS, PROFILES, load_profiles

__all__ = ["UsageError", "Paths", "discover", "notebook_parameters", "resolve_parameters", "run_notebooks"]

KERNEL = "python3"


def _ipc_kernel_manager(socket_dir: Path):
    """A kernel manager on IPC sockets in ``socket_dir`` (no TCP ports, no 'unencrypted TCP' warning)."""
    from jupyter_client.manager import AsyncKernelManager

    class IPCKernelManager(AsyncKernelManager):
        def __init__(self, **kwargs: object) -> None:
            kwargs.setdefault("transport", "ipc")
            kwargs.setdefault("ip", str(socket_dir / "kernel"))
            super().__init__(**kwargs)

    return IPCKernelManager


class UsageError(ValueError):
    """Bad command-line input (unknown notebook, profile or parameter): exit status 2."""


@dataclass(frozen=True)
class Paths:
    """Where the pipeline reads and writes, relative to the project root."""

    root: Path

    @property
    def notebooks(self) -> Path:
        return self.root / "notebooks"

    @property
    def profiles(self) -> Path:
        return self.notebooks / "profiles.yml"

    @property
    def generated(self) -> Path:
        return self.root / "book" / "generated"

    @property
    def claims(self) -> Path:
        return self.generated / "claims"

    @property
    def runs(self) -> Path:
        return self.generated / "runs"

    @property
    def failed(self) -> Path:
        return self.generated / "failed"


@dataclass
class Result:
    """Outcome of one notebook."""

    name: str
    status: str  # "ok" | "cached" | "failed"
    seconds: float
    error: str | None = None


def discover(paths: Paths) -> dict[str, Path]:
    """The book's notebooks, ``NN_name.md``, in order."""
    found = sorted(p for p in paths.notebooks.glob("[0-9][0-9]_*.md"))
    return {p.stem: p for p in found}


def notebook_parameters(path: Path) -> dict[str, object]:
    """Names and default values of the notebook's ``parameters`` cell."""
    import jupytext

    nb = jupytext.read(path)
    cells = [c for c in nb.cells if c.cell_type == "code" and "parameters" in c.metadata.get("tags", [])]
    if len(cells) != 1:
        raise UsageError(f"{path.name}: expected exactly one code cell tagged 'parameters', found {len(cells)}")
    params: dict[str, object] = {}
    for node in ast.parse(cells[0].source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                params[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                params[node.targets[0].id] = ast.unparse(node.value)
    missing = [p for p in COMMON_PARAMETERS if p not in params]
    if missing:
        raise UsageError(f"{path.name}: parameters cell must define {', '.join(missing)}")
    return params


def resolve_parameters(
    name: str, defaults: dict[str, object], profiles: dict, profile: str, device: str, seed: int
) -> dict[str, object]:
    """Parameters injected into notebook ``name`` for ``profile``; unknown names are an error."""
    if profile not in PROFILES:
        raise UsageError(f"unknown profile {profile!r}; valid: {', '.join(PROFILES)}")
    overrides = dict(profiles.get(name, {}).get(profile, {}))
    unknown = sorted(set(overrides) - set(defaults))
    if unknown:
        raise UsageError(
            f"notebooks/profiles.yml: {name}.{profile} sets unknown parameter(s) {', '.join(unknown)}; "
            f"valid: {', '.join(sorted(defaults))}"
        )
    clash = sorted(set(overrides) & set(COMMON_PARAMETERS))
    if clash:
        raise UsageError(
            f"notebooks/profiles.yml: {name}.{profile} must not set {', '.join(clash)} (command-line options)"
        )
    return {**overrides, "profile": profile, "device": device, "seed": seed}


def source_hash(root: Path) -> str:
    """Hash of the covbook package source (any change invalidates the cache)."""
    h = hashlib.sha256()
    pkg = Path(__file__).resolve().parent
    for f in sorted(pkg.rglob("*.py")):
        h.update(f.relative_to(pkg).as_posix().encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def content_hash(nb_path: Path, params: dict, src_hash: str) -> str:
    h = hashlib.sha256()
    h.update(nb_path.read_bytes())
    h.update(json.dumps(params, sort_keys=True, default=str).encode())
    h.update(src_hash.encode())
    return h.hexdigest()


def _is_cached(paths: Paths, name: str, digest: str) -> bool:
    rec = paths.runs / f"{name}.json"
    outputs = (rec, paths.generated / f"{name}.ipynb", paths.claims / f"{name}.json")
    if not all(p.is_file() for p in outputs):
        return False
    try:
        meta = json.loads(rec.read_text())
    except (OSError, json.JSONDecodeError):
        return False
    return meta.get("status") == "ok" and meta.get("hash") == digest


def _hide_injected(nb) -> None:
    """Tag papermill's cells so the book does not show them (myst-nb ``remove-cell``)."""
    for cell in nb.cells:
        tags = cell.metadata.setdefault("tags", [])
        if ("injected-parameters" in tags or "parameters" in tags) and "remove-cell" not in tags:
            tags.append("remove-cell")


def execute_one(root: str, name: str, params: dict, digest: str, threads: int | None) -> dict:
    """Execute one notebook (in a worker process); returns a :class:`Result` as a dict."""
    import jupytext
    import nbformat
    import papermill as pm

    paths = Paths(Path(root))
    src = paths.notebooks / f"{name}.md"
    tmpdir = paths.generated / ".tmp"
    for d in (tmpdir, paths.claims, paths.runs):
        d.mkdir(parents=True, exist_ok=True)
    tmp_nb, tmp_claims = tmpdir / f"{name}.ipynb", tmpdir / f"{name}.claims.json"
    tmp_claims.unlink(missing_ok=True)
    os.environ[CLAIMS_FILE_ENV] = str(tmp_claims)
    os.environ[NOTEBOOK_ENV] = name
    os.environ.pop("MPLBACKEND", None)  # Agg would silently drop every figure
    os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")
    if threads:
        os.environ["COVBOOK_THREADS"] = str(threads)
        os.environ["OMP_NUM_THREADS"] = str(threads)
    start = time.perf_counter()
    error = None
    sockets = Path(tempfile.mkdtemp(prefix="covbook-kernel-"))
    try:
        nb = jupytext.read(src)
        nb.metadata["kernelspec"] = {"name": KERNEL, "display_name": "Python 3", "language": "python"}
        out = pm.execute_notebook(
            nb, str(tmp_nb), parameters=params, kernel_name=KERNEL, cwd=str(paths.notebooks),
            progress_bar=False, log_output=False, kernel_manager_class=_ipc_kernel_manager(sockets),
        )
        _hide_injected(out)
        nbformat.write(out, str(tmp_nb))
        if not tmp_claims.is_file():
            error = "the notebook recorded no claims"
    except pm.PapermillExecutionError as err:
        error = f"cell {err.exec_count} (index {err.cell_index}) raised {err.ename}: {err.evalue}".strip()
    except Exception as err:  # noqa: BLE001 - report any failure, keep the other notebooks going
        error = f"{type(err).__name__}: {err}\n{traceback.format_exc(limit=3)}"
    finally:
        shutil.rmtree(sockets, ignore_errors=True)
    seconds = time.perf_counter() - start
    meta = {"notebook": name, "parameters": params, "hash": digest, "seconds": seconds,
            "device_used": _device_name(str(params.get("device", "auto"))),
            "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    if error is None:
        os.replace(tmp_claims, paths.claims / f"{name}.json")
        os.replace(tmp_nb, paths.generated / f"{name}.ipynb")
        write_json_atomic(paths.runs / f"{name}.json", {**meta, "status": "ok"})
        return asdict(Result(name, "ok", seconds))
    paths.failed.mkdir(parents=True, exist_ok=True)
    if tmp_nb.is_file():
        os.replace(tmp_nb, paths.failed / f"{name}.ipynb")
    tmp_claims.unlink(missing_ok=True)
    for stale in (paths.generated / f"{name}.ipynb", paths.claims / f"{name}.json"):
        stale.unlink(missing_ok=True)
    write_json_atomic(paths.runs / f"{name}.json", {**meta, "status": "failed", "error": error})
    return asdict(Result(name, "failed", seconds, error))


def _device_name(device: str) -> str:
    """The device a notebook ran on, in words (``cpu`` or the GPU's name)."""
    import torch

    from covbook._validate import resolve_device

    try:
        dev = resolve_device(device)
    except ValueError:
        return f"{device} (unavailable)"
    return f"cuda ({torch.cuda.get_device_name(dev)})" if dev.type == "cuda" else "cpu"


def select(paths: Paths, names: list[str] | None) -> dict[str, Path]:
    """Resolve notebook names (``01``, ``01_covariance_readout`` or a path) to sources."""
    available = discover(paths)
    if not names:
        return available
    chosen: dict[str, Path] = {}
    for raw in names:
        key = Path(raw).stem
        hits = [n for n in available if n == key or n.split("_", 1)[0] == key]
        if len(hits) != 1:
            raise UsageError(f"unknown notebook {raw!r}; valid: {', '.join(available)}")
        chosen[hits[0]] = available[hits[0]]
    return chosen


def run_notebooks(
    paths: Paths,
    names: list[str] | None = None,
    *,
    profile: str = "quick",
    device: str = "auto",
    seed: int = 0,
    jobs: int = 1,
    force: bool = False,
    progress: bool = True,
) -> list[Result]:
    """Execute (or serve from cache) the selected notebooks; never stops at the first failure."""
    from tqdm import tqdm

    if device not in ("auto", "cpu", "cuda"):
        raise UsageError(f"unknown device {device!r}; valid: auto, cpu, cuda")
    if jobs < 1:
        raise UsageError(f"--jobs must be a positive integer, got {jobs}")
    chosen = select(paths, names)
    profiles = load_profiles(paths.profiles)
    unknown_nb = sorted(set(profiles) - set(discover(paths)))
    if unknown_nb:
        raise UsageError(f"notebooks/profiles.yml names unknown notebook(s): {', '.join(unknown_nb)}")
    src_hash = source_hash(paths.root)
    plan = []
    for name, path in chosen.items():
        params = resolve_parameters(name, notebook_parameters(path), profiles, profile, device, seed)
        plan.append((name, params, content_hash(path, params, src_hash)))
    results: list[Result] = []
    todo = []
    for name, params, digest in plan:
        if not force and _is_cached(paths, name, digest):
            results.append(Result(name, "cached", 0.0))
        else:
            todo.append((name, params, digest))
    bar = tqdm(total=len(plan), desc=f"notebooks ({profile})", unit="nb", disable=not progress, file=sys.stderr)
    for r in results:
        bar.write(f"  cached  {r.name}")
        bar.update(1)
    threads = max(1, (os.cpu_count() or 1) // jobs) if jobs > 1 else None
    with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn")) as pool:
        futs = {pool.submit(execute_one, str(paths.root), n, p, d, threads): n for n, p, d in todo}
        for fut in as_completed(futs):
            try:
                r = Result(**fut.result())
            except Exception as err:  # noqa: BLE001 - a crashed worker is one failed notebook
                r = Result(futs[fut], "failed", 0.0, f"worker crashed: {err}")
            results.append(r)
            mark = "ok    " if r.status == "ok" else "FAILED"
            bar.write(f"  {mark}  {r.name}  {r.seconds:6.1f} s" + (f"\n          {r.error}" if r.error else ""))
            bar.update(1)
    bar.close()
    order = list(chosen)
    return sorted(results, key=lambda r: order.index(r.name))
