"""Execute the book's notebooks: jupytext -> papermill -> book/generated/, on one executor.

Each MyST-markdown notebook in ``notebooks/`` is read with jupytext, executed by
papermill with the parameters of a profile, and written (atomically) to
``book/generated/NAME.ipynb`` together with its claims (``claims/NAME.json``)
and run record (``runs/NAME.json``: time, profile, device, cache key, status).
A notebook whose cache key is unchanged (see :mod:`covbook.book.cache`) is
served from there.  A failing notebook is reported with its failing cell and
does not stop the others.

Every input problem visible before a kernel starts (unknown notebook or
parameter, a value of the wrong type or sign, a device that is not there) is a
:class:`UsageError`, raised before any kernel starts.

One job, one executor.  A job is :func:`run_job`, submitted to a
``concurrent.futures`` executor: a :class:`LocalPool` (a
``ProcessPoolExecutor`` of ``--jobs`` processes, the default) or a Dask
cluster's ``Client.get_executor()`` (:mod:`covbook.book.distributed`, which
adds only how to reach the workers).  The job starts the notebook's own process
(``python -m covbook.book.runner JOB``, in its own session, so that the
terminal's Ctrl-C reaches only the ``covbook`` command), enforces its time
limit, and stops it when the run is stopped; it runs in the tree itself
(locally) or in a scratch tree built from the bytes it was sent (on a cluster),
and returns the outcome, which the ``covbook`` process alone commits
(:func:`commit_job`: one writer per tree).  Ctrl-C or SIGTERM stops the running
jobs (their kernels go with them), cancels the queue, keeps what finished,
removes the temporaries and raises :class:`Interrupted`.
Temporaries live in ``.covbook/tmp/<run-id>/``, never under ``book/``.
"""

from __future__ import annotations

import ast
import concurrent.futures as cf
import contextlib
import errno
import multiprocessing
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from covbook._jsonio import DamagedFile, read_json, write_json_atomic
from covbook.book.cache import content_hash, file_digest, is_cached, notebook_science, resolve_device
from covbook.book.config import (
    DEFAULT_PROFILE,
    DEVICES,
    Paths,
    Terminated,
    UsageError,
    _myst_code_cells,
    discover,
    load_profiles,
    notebook_parameters,
    oserror_text,
    resolve_parameters,
    select,
)

__all__ = ["Result", "Interrupted", "plan_jobs", "run_notebooks", "run_trees", "run_job", "LocalPool", "clean_stale",
           "execute_uncommitted", "commit_outcome", "commit_job", "commit_files", "commit_rewritten",
           "commit_with_checkpoints", "checkpoint_folder", "prune_checkpoints", "pack_checkpoints",
           "unpack_checkpoints", "CHECKPOINT_ENV", "CHECKPOINT_MAX_BYTES"]

KERNEL = "covbook"  # installed by `make setup` (ipykernel install --name covbook)
KERNEL_DIR_PREFIX = "covbook-kernel-"
STOP_GRACE_S = 3.0  # SIGTERM, then SIGKILL, for a notebook's process
POLL_S = 0.5  # how often a running job looks at the run's stop signal
#: the most checkpoint bytes a job run in a scratch tree (on a cluster) carries each way: to its worker (in the
#: task, which the scheduler keeps until the job ends, so that a job re-run after its worker died gets them
#: again) and back with its result.  Chapter 10, the one chapter with checkpoints, makes about 0.8 MB at
#: ``--profile smoke``, 3 MB at quick and 77 MB at full (two models and their AdamW state, float32).
CHECKPOINT_MAX_BYTES = 256 << 20
#: the folder a notebook keeps its checkpoints in (set per run: keyed on the notebook's cache key;
#: read by covbook.session.checkpoint_dir, which the pipeline must not import)
CHECKPOINT_ENV = "COVBOOK_CHECKPOINT_DIR"
#: the longest temp folder a kernel's socket paths fit under (Unix sockets: ~107 bytes in all)
SOCKET_BASE_MAX = 48
#: where the kernels' config and cache homes live, inside .covbook/ (never the user's HOME)
KERNEL_HOMES = {"MPLCONFIGDIR": "matplotlib", "XDG_CACHE_HOME": "cache", "XDG_CONFIG_HOME": "config",
                "XDG_DATA_HOME": "data", "IPYTHONDIR": "ipython", "JUPYTER_CONFIG_DIR": "jupyter/config",
                "JUPYTER_DATA_DIR": "jupyter/data"}
#: glibc's allocator in the kernels: keep freed memory for reuse instead of returning every large block to the
#: system. By default a block over 32 MiB (a chapter's (queries x keys) logits) is mmap'd and unmapped on each
#: call, so every call page-faults its memory afresh: chapter 08 at quick spent 44 s of system time of its 79 s
#: (35 s user), 10 s with these settings (43.6 s wall). Set only where the environment does not; no effect but
#: speed (the values computed are the same), and none outside glibc.
KERNEL_MALLOC = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(1 << 34), "MALLOC_TOP_PAD_": str(1 << 28)}
#: tags under which myst-nb does not show a cell's stderr (so the build does not refuse it)
STDERR_HIDDEN = {"remove-stderr", "remove-output", "remove-cell"}


@dataclass
class Result:
    """Outcome of one notebook."""

    name: str
    status: str  # "ok" | "cached" | "failed"
    seconds: float
    error: str | None = None
    device_used: str | None = None
    cpu_seconds: float | None = None  # CPU time of the worker and its kernel (user + system)


@dataclass
class Job:
    """One notebook to run: its name, source, parameters and cache key."""

    name: str
    path: Path
    params: dict
    digest: str
    device: str  # resolved: cpu | cuda
    defaults: dict = field(default_factory=dict)  # the notebook's parameters cell


@dataclass
class Interrupted(Exception):
    """Ctrl-C or SIGTERM during a run; ``results`` are the notebooks that finished, ``unfinished`` the others.

    ``exit_status`` is 130 for Ctrl-C (SIGINT), 143 for SIGTERM; ``how`` names the signal.
    """

    results: list[Result] = field(default_factory=list)
    unfinished: list[str] = field(default_factory=list)
    exit_status: int = 130
    how: str = "interrupted"


# ----------------------------------------------------------------------------- the worker


def _kernel_manager(socket_dir: Path | None, pid_file: Path):
    """A kernel manager on IPC sockets in ``socket_dir`` (TCP on localhost when ``None``).

    Its connection file lies in ``socket_dir`` too.  It writes the kernel's pid to
    ``pid_file`` so that whoever cleans up after an interruption can stop a kernel
    that outlived its worker.
    """
    from jupyter_client.manager import AsyncKernelManager

    class CovbookKernelManager(AsyncKernelManager):
        def __init__(self, **kwargs: object) -> None:
            if socket_dir is not None:
                kwargs.setdefault("transport", "ipc")
                kwargs.setdefault("ip", str(socket_dir / "kernel"))
                kwargs.setdefault("connection_file", str(socket_dir / "kernel.json"))
            super().__init__(**kwargs)

        async def start_kernel(self, **kw: object) -> None:  # type: ignore[override]
            await super().start_kernel(**kw)
            pid = getattr(self.provisioner, "pid", None)
            if pid:  # atomically: a reader never sees an empty file
                tmp = pid_file.with_suffix(".tmp")
                tmp.write_text(str(pid))
                os.replace(tmp, pid_file)

    return CovbookKernelManager


def _clocked_engine(limit: float | None) -> str:
    """Register papermill's engine with the notebook's clock: ``limit`` seconds from its first cell, then SIGALRM.

    The clock starts at the first cell, not at the kernel's start, so that a machine
    slow to start kernels does not eat into a notebook's limit.
    """
    from papermill.engines import NBClientEngine, papermill_engines

    class ClockedEngine(NBClientEngine):
        @classmethod
        def execute_managed_notebook(cls, nb_man, kernel_name, **kwargs):  # type: ignore[override]
            start = nb_man.cell_start

            def cell_start(cell, cell_index=None, **kw):
                if limit and signal.getitimer(signal.ITIMER_REAL)[0] == 0:
                    signal.setitimer(signal.ITIMER_REAL, float(limit))
                return start(cell, cell_index, **kw)

            nb_man.cell_start = cell_start
            return super().execute_managed_notebook(nb_man, kernel_name, **kwargs)

    papermill_engines.register("covbook", ClockedEngine)
    return "covbook"


def _hide_injected(nb) -> None:
    """Tag papermill's cells so the book does not show them (myst-nb ``remove-cell``)."""
    for cell in nb.cells:
        tags = cell.metadata.setdefault("tags", [])
        if ("injected-parameters" in tags or "parameters" in tags) and "remove-cell" not in tags:
            tags.append("remove-cell")


def _device_name(device: str) -> str:
    """The device a notebook ran on, in words (``cpu`` or the GPU's name)."""
    if device == "cpu":
        return "cpu"
    import torch

    from covbook._validate import resolve_device as torch_device

    try:
        dev = torch_device(device)
    except ValueError:
        return f"{device} (unavailable)"
    return f"cuda ({torch.cuda.get_device_name(dev)})" if dev.type == "cuda" else "cpu"


def _kill_kernel(pid_file: Path) -> None:
    """SIGKILL the kernel whose pid is in ``pid_file`` (it leads its own session) if it still runs."""
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return
    if _is_kernel(pid):
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _is_kernel(pid: int) -> bool:
    """Whether ``pid`` is alive and is an ipykernel (pids are reused: never kill a stranger)."""
    if Path("/proc").is_dir():
        try:
            return b"ipykernel" in Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return False
    try:  # no /proc (macOS)
        out = subprocess.run(["ps", "-p", str(pid), "-o", "command="], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return False
    return "ipykernel" in out.stdout


_KERNEL_PID_FILE: list[Path] = []  # the worker's kernel pid file, for the signal handler


class NotebookTimeout(BaseException):
    """The notebook ran past its time limit (a BaseException, so no ``except Exception`` swallows it)."""


def _unwind(exc: type[BaseException]):
    """A signal handler that stops the worker's kernel first (frees the CPU at once), then raises ``exc``:
    ``KeyboardInterrupt`` for SIGINT and SIGTERM, :class:`NotebookTimeout` for SIGALRM (the time limit)."""

    def handler(signum: int, frame: object) -> None:
        for pid_file in _KERNEL_PID_FILE:
            _kill_kernel(pid_file)
        raise exc

    return handler


def _watch_parent(parent: int, gone) -> None:
    """Call ``gone()`` once the process that started this one (``parent``) is gone (``kill -9``)."""
    while os.getppid() == parent:
        time.sleep(0.5)
    gone()


def socket_parents() -> list[Path]:
    """Where kernel socket folders may be: the temp folder, or a short one when that is too long."""
    return [Path(tempfile.gettempdir()), Path("/tmp") / f"covbook-{os.getuid()}"]


def _socket_dir() -> Path | None:
    """A new folder for a kernel's sockets whose paths fit the Unix limit; ``None``: use TCP instead."""
    base = Path(tempfile.gettempdir())
    if len(str(base)) > SOCKET_BASE_MAX:  # e.g. a CI's deep TMPDIR: socket paths would pass ~107 bytes
        base = socket_parents()[1]
        try:
            base.mkdir(mode=0o700, exist_ok=True)
            if base.stat().st_uid != os.getuid() or not os.access(base, os.W_OK):
                return None
        except OSError:
            return None
    try:
        return Path(tempfile.mkdtemp(prefix=f"{KERNEL_DIR_PREFIX}{os.getpid()}-", dir=base))
    except OSError:
        return None


def _kernel_environment(paths: Paths, runtime: Path) -> None:
    """Give the kernel writable config and cache homes inside ``.covbook/home`` (HOME may be read-only)."""
    home = paths.state / "home"
    for var, sub in KERNEL_HOMES.items():
        d = home / sub
        d.mkdir(parents=True, exist_ok=True)
        os.environ[var] = str(d)
    os.environ["JUPYTER_RUNTIME_DIR"] = str(runtime)
    os.environ["JUPYTER_PLATFORM_DIRS"] = "1"


def _running_cell(nb_path: Path) -> str:
    """The cell that was running when the notebook was stopped: the last one papermill started.

    Papermill saves its copy of the notebook at each cell's start, with the cell's start time.
    """
    try:
        nb = read_json(nb_path, dict)
    except (OSError, DamagedFile):
        return "no cell (the kernel was starting)"
    started = [(i, c) for i, c in enumerate(nb.get("cells", []))
               if c.get("cell_type") == "code" and c.get("metadata", {}).get("papermill", {}).get("start_time")]
    if not started:
        return "no cell (none had started)"
    i, cell = started[-1]
    first = next((ln for ln in "".join(cell.get("source", "")).splitlines() if ln.strip()), "")
    n = cell.get("execution_count")  # not known yet when the kernel died before replying
    return f"{f'cell {n}' if n else 'the cell'} (index {i}: {first.strip()[:60]!r})"


def stderr_problem(nb: dict) -> str | None:
    """The first visible cell whose outputs hold stderr (``nb_output_stderr: warn`` + ``-W``: the build refuses it)."""
    for i, cell in enumerate(nb.get("cells", [])):
        tags = set(cell.get("metadata", {}).get("tags", []))
        if cell.get("cell_type") != "code" or tags & STDERR_HIDDEN:
            continue
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream" and out.get("name") == "stderr":
                text = "".join(out.get("text", "")).strip().splitlines()
                return (f"cell {cell.get('execution_count')} (index {i}) wrote to stderr, which the book build "
                        f"refuses: {text[0][:200] if text else ''!r}")
    return None


def _stage(src: Path, dst: Path) -> Path:
    """A copy of ``src`` in a temporary file next to ``dst`` (same filesystem): a hard link, or copy + fsync.

    ``src`` stays where it is until the commit succeeds; across filesystems (a tmpfs,
    a CI cache volume, a symlink to another disk) a link is impossible and the bytes
    are copied and synced to disk before anything is renamed.
    """
    dst.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dst.name}.", dir=dst.parent)
    os.close(fd)
    try:
        os.unlink(tmp)
        try:
            os.link(src, tmp)
        except OSError as err:
            if err.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EEXIST):
                raise
            with open(src, "rb") as fin, open(tmp, "wb") as fout:
                shutil.copyfileobj(fin, fout, 1 << 20)
                fout.flush()
                os.fsync(fout.fileno())
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)


def commit_files(moves: list[tuple[Path, Path]]) -> None:
    """Move each ``(src, dst)`` into place as one unit: all of them, or (on any error) none.

    Every file is first staged next to its destination (so a full disk or a
    read-only folder fails before anything changes, and ``src`` may be on another
    filesystem; on an error every ``src`` is left as it was); then each old file is moved aside and the new one
    renamed in, and
    an error half-way puts the old ones back.  A crash half-way leaves files whose
    run record names other digests: never served (:func:`covbook.book.cache.verify_outputs`).
    """
    staged: list[tuple[Path, Path]] = []
    try:
        for src, dst in moves:
            staged.append((_stage(Path(src), Path(dst)), Path(dst)))
        done: list[tuple[Path, Path | None]] = []
        try:
            for tmp, dst in staged:
                backup = None
                if dst.exists():
                    backup = dst.with_name(f".{dst.name}.old-{os.getpid()}")
                    os.replace(dst, backup)
                done.append((dst, backup))
                os.replace(tmp, dst)
        except BaseException:
            for dst, backup in reversed(done):
                if backup is not None:
                    os.replace(backup, dst)
                else:
                    dst.unlink(missing_ok=True)
            raise
        for _, backup in done:
            if backup is not None:
                backup.unlink(missing_ok=True)
        for src, _ in moves:
            Path(src).unlink(missing_ok=True)
    finally:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)


def commit_rewritten(paths: Paths, name: str, new_nb: Path) -> None:
    """Put ``new_nb``, a rewritten copy of chapter ``name``'s executed notebook, in its place.

    When the chapter's run record names the SHA-256 of the notebook as it was, the record, naming
    ``new_nb``'s instead, is committed with it as one unit (:func:`commit_files`): the record stays
    true and the chapter is still served from the cache.  ``new_nb``'s folder takes the record's temporary.
    """
    from covbook.book.records import read_run

    nb_path, rec_path = paths.generated / f"{name}.ipynb", paths.runs / f"{name}.json"
    moves = [(new_nb, nb_path)]
    rec = read_run(rec_path)
    outputs = rec.outputs if rec is not None else None
    if outputs and nb_path.is_file() and outputs.get("notebook") == file_digest(nb_path):
        tmp_rec = new_nb.with_name(f"{name}.run.json")
        write_json_atomic(tmp_rec, {**rec, "outputs": {**outputs, "notebook": file_digest(new_nb)}})
        moves.append((tmp_rec, rec_path))
    commit_files(moves)


def checkpoint_folder(paths: Paths, name: str, digest: str) -> Path:
    """Where notebook ``name`` keeps its checkpoints under cache key ``digest``: ``checkpoints/NAME/KEY``.

    ``KEY`` is the first 16 hex digits of the key.  The one rule for the folder's place, shared by a
    local run (:func:`execute_uncommitted`) and a job run in a scratch tree (:func:`scratch_tree`).
    """
    return paths.checkpoints / name / digest[:16]


def prune_checkpoints(paths: Paths, name: str, digest: str, *, force: bool = False) -> Path:
    """Remove the notebook's checkpoints made under other keys (they can never be used again) and, with
    ``force``, the current one (it retrains); returns the current folder (:func:`checkpoint_folder`).

    Everything else in ``checkpoints/NAME/`` goes too: the hidden staging and backup folders a cluster's
    commit leaves when it is killed half-way (:func:`commit_with_checkpoints`).
    """
    here = checkpoint_folder(paths, name, digest)
    base = here.parent
    if base.is_dir():
        for d in base.iterdir():
            if d != here or force:
                shutil.rmtree(d, ignore_errors=True) if d.is_dir() else d.unlink(missing_ok=True)
    return here


def execute_uncommitted(job: dict) -> dict:
    """Execute one notebook into ``job["rundir"]``; returns its outcome: name, run record ``meta``, ``error``."""
    import jupytext
    import nbformat
    import papermill as pm

    paths = Paths(Path(job["root"]))
    name, params, rundir = job["name"], job["params"], Path(job["rundir"])
    from covbook.claims import CLAIMS_FILE_ENV, NOTEBOOK_ENV, RULES_FILE_ENV

    src = paths.notebooks / f"{name}.md"
    tmp_nb, tmp_claims = rundir / f"{name}.ipynb", rundir / f"{name}.claims.json"
    pid_file = rundir / f"{name}.kernel.pid"
    os.environ[CLAIMS_FILE_ENV] = str(tmp_claims)
    os.environ[NOTEBOOK_ENV] = name
    os.environ[RULES_FILE_ENV] = str(paths.notebooks / "rules" / f"{name}.yml")
    os.environ.pop("MPLBACKEND", None)  # Agg would silently drop every figure
    os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")
    if job.get("threads"):
        os.environ["COVBOOK_THREADS"] = str(job["threads"])
        os.environ["OMP_NUM_THREADS"] = str(job["threads"])
    for key, value in KERNEL_MALLOC.items():  # read by the kernel's C library when it starts
        os.environ.setdefault(key, value)
    limit = job.get("timeout")
    start = time.perf_counter()
    cpu_start = _cpu_seconds()
    error = None
    sockets = _socket_dir()
    runtime = sockets or rundir
    try:
        # keyed on the cache key (made by covbook.session.checkpoint_dir when the notebook asks); --force retrains
        os.environ[CHECKPOINT_ENV] = str(prune_checkpoints(paths, name, job["digest"], force=bool(job.get("force"))))
        _kernel_environment(paths, runtime)
        nb = jupytext.read(src)
        nb.metadata["kernelspec"] = {"name": KERNEL, "display_name": "Python 3", "language": "python"}
        manager = _kernel_manager(sockets, pid_file)
        try:
            out = pm.execute_notebook(
                nb, str(tmp_nb), parameters=params, kernel_name=KERNEL, cwd=str(paths.notebooks),
                progress_bar=False, log_output=False, kernel_manager_class=manager,
                engine_name=_clocked_engine(limit),
            )
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        _hide_injected(out)
        nbformat.write(out, str(tmp_nb))
        error = stderr_problem(out)
        if error is None and not tmp_claims.is_file():
            error = "the notebook recorded no claims"
    except NotebookTimeout:
        error = (f"timed out after {limit:g} s (the notebook's time limit, from its first cell; set it with "
                 f"--timeout) in {_running_cell(tmp_nb)}")
    except pm.PapermillExecutionError as err:
        error = f"cell {err.exec_count} (index {err.cell_index}) raised {err.ename}: {err.evalue}".strip()
    except OSError as err:  # a full disk, a read-only folder: one line, not a traceback
        error = f"could not write the notebook: {oserror_text(err)}"
    except Exception as err:  # noqa: BLE001 - report any failure, keep the other notebooks going
        if type(err).__name__ == "DeadKernelError":
            error = f"the kernel died in {_running_cell(tmp_nb)} ({err}; out of memory, or a crash in native code)"
        else:
            error = f"{type(err).__name__}: {err}\n{traceback.format_exc(limit=3)}"
    finally:
        _kill_kernel(pid_file)
        pid_file.unlink(missing_ok=True)
        if sockets is not None:
            shutil.rmtree(sockets, ignore_errors=True)
    seconds = time.perf_counter() - start
    cpu = _cpu_seconds() - cpu_start  # the kernel is a reaped child by now (papermill waited for it)
    # the device the run resolved (cpu | cuda) names it without importing torch (2 s) on a CPU
    device_used = _device_name(str(job.get("device") or params.get("device", "auto")))
    phases = _phases(tmp_nb if tmp_nb.is_file() else None)
    meta = {"notebook": name, "parameters": params, "hash": job["digest"], "seconds": seconds,
            "cpu_seconds": cpu, "phases": phases, "device_used": device_used, "rehearsal": bool(job.get("rehearse")),
            "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    return {"name": name, "meta": meta, "error": error, "rundir": str(rundir)}


def commit_outcome(paths: Paths, outcome: dict) -> dict:
    """Move one executed notebook's temporaries (in ``outcome["rundir"]``) into ``paths``' tree; a Result dict.

    The one place where a run's outputs enter a tree, called by the ``covbook`` process alone
    (:func:`commit_job`), whichever executor ran the job.
    """
    name, meta, error = outcome["name"], outcome["meta"], outcome["error"]
    seconds, device_used, cpu = meta["seconds"], meta["device_used"], meta.get("cpu_seconds")
    rundir = Path(outcome["rundir"])
    tmp_nb, tmp_claims = rundir / f"{name}.ipynb", rundir / f"{name}.claims.json"
    tmp_record = rundir / f"{name}.run.json"
    for d in (paths.claims, paths.runs):
        d.mkdir(parents=True, exist_ok=True)
    if error is None:
        try:
            outputs = {"notebook": file_digest(tmp_nb), "claims": file_digest(tmp_claims)}
            write_json_atomic(tmp_record, {**meta, "status": "ok", "outputs": outputs})
            commit_files([(tmp_claims, paths.claims / f"{name}.json"), (tmp_nb, paths.generated / f"{name}.ipynb"),
                          (tmp_record, paths.runs / f"{name}.json")])
        except OSError as err:
            error = f"could not write the outputs: {oserror_text(err)}; the last good outputs are kept"
        else:
            _forget_failure(paths, name)  # a failed copy no longer applies
            return asdict(Result(name, "ok", seconds, device_used=device_used, cpu_seconds=cpu))
    _keep_failure(paths, name, tmp_nb, {**meta, "status": "failed", "error": error})
    return asdict(Result(name, "failed", seconds, error, device_used, cpu))


def _cpu_seconds() -> float:
    """User + system CPU seconds of this process and its waited-for children (the kernel)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _phases(nb_file: Path | None) -> dict[str, float]:
    """Wall seconds of an executed notebook by phase, from papermill's per-cell times.

    ``kernel``: from papermill's start to the first cell (kernel start-up); ``setup``:
    the parameters cells, the setup cell and the first cell that imports (Python,
    torch, covbook); ``figures``: cells that make a captioned figure; ``claims``:
    folded cells that record claims or glue numbers; ``science``: every other cell.
    Empty when the notebook or its times cannot be read.
    """
    if nb_file is None:
        return {}
    try:
        import nbformat

        nb = nbformat.read(str(nb_file), as_version=4)
        start = _when(nb.metadata["papermill"]["start_time"])
        cells = [c for c in nb.cells if c.cell_type == "code"]
        first = min(_when(c.metadata["papermill"]["start_time"]) for c in cells
                    if c.metadata.get("papermill", {}).get("start_time"))  # a cell never run has none
    except (OSError, KeyError, TypeError, ValueError, AttributeError):
        return {}
    out = {"kernel": max(0.0, first - start), "setup": 0.0, "science": 0.0, "claims": 0.0, "figures": 0.0}
    imported = False
    for cell in cells:
        tags = cell.metadata.get("tags", [])
        duration = float(cell.metadata.get("papermill", {}).get("duration") or 0.0)
        if "parameters" in tags or "injected-parameters" in tags or "remove-cell" in tags:
            kind = "setup"
        elif not imported and "import " in cell.source:
            kind, imported = "setup", True
        elif "figure" in cell.metadata.get("mystnb", {}):
            kind = "figures"
        elif "hide-input" in tags and ("claims." in cell.source):
            kind = "claims"
        else:
            kind = "science"
        out[kind] += duration
    return {k: round(v, 3) for k, v in out.items()}


def _when(stamp: str) -> float:
    """Seconds since the epoch of papermill's ISO time stamp."""
    from datetime import datetime

    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _forget_failure(paths: Paths, name: str) -> None:
    """Remove the failed copy of ``name`` and its record from ``failed/``."""
    for stale in (paths.failed / f"{name}.ipynb", paths.failed / f"{name}.json"):
        stale.unlink(missing_ok=True)


def _whole(nb_path: Path) -> bool:
    """Whether ``nb_path`` is a whole notebook (a write cut short by a full disk is not)."""
    try:
        return isinstance(read_json(nb_path, dict).get("cells"), list)
    except (OSError, DamagedFile):
        return False


def _keep_failure(paths: Paths, name: str, tmp_nb: Path, record: dict) -> None:
    """Write the failed notebook and its record to ``failed/`` as one unit; the last good outputs stay.

    Best effort: where even that cannot be written (a full disk), nothing is
    half-written and the error still reaches the summary.
    """
    rec_tmp = tmp_nb.with_name(f"{name}.failed.json")
    try:
        write_json_atomic(rec_tmp, record)
        moves = [(rec_tmp, paths.failed / f"{name}.json")]
        if _whole(tmp_nb):
            moves.insert(0, (tmp_nb, paths.failed / f"{name}.ipynb"))
        else:  # none, or cut short by a full disk: an older failed copy would not be this run's
            (paths.failed / f"{name}.ipynb").unlink(missing_ok=True)
        commit_files(moves)
    except OSError:
        pass


def _worker_main(job_file: str) -> int:
    """Entry point of a notebook's process: run the job in ``job_file``, write its outcome next to it."""
    signal.signal(signal.SIGTERM, _unwind(KeyboardInterrupt))
    signal.signal(signal.SIGINT, _unwind(KeyboardInterrupt))
    signal.signal(signal.SIGALRM, _unwind(NotebookTimeout))
    job = read_json(job_file, dict)
    _KERNEL_PID_FILE.append(Path(job["rundir"]) / f"{job['name']}.kernel.pid")
    # stop (as on SIGTERM) when the covbook process that started it is gone
    threading.Thread(target=_watch_parent, args=(job["parent"], lambda: os.kill(os.getpid(), signal.SIGTERM)),
                     daemon=True).start()
    try:
        outcome = execute_uncommitted(job)
    except KeyboardInterrupt:
        return 130
    write_json_atomic(Path(job_file).with_suffix(".result.json"), outcome)
    return 0


# ----------------------------------------------------------------------------- the run


def clean_stale(paths: Paths) -> list[str]:
    """Remove what earlier runs left behind; call it holding the tree's lock.

    Run folders in ``.covbook/tmp`` (no run of this tree is going on, so all are
    stale; a kernel listed there that still runs is stopped), the old
    ``book/generated/.tmp``, and kernel socket folders in the system temp folder
    whose worker is gone.  Returns what was removed.
    """
    removed = []
    if paths.tmp.is_dir():
        for rundir in paths.tmp.iterdir():
            for pid_file in rundir.glob("*.kernel.pid"):
                _kill_kernel(pid_file)
            shutil.rmtree(rundir, ignore_errors=True)
            removed.append(str(rundir))
    legacy = paths.generated / ".tmp"
    if legacy.exists():
        shutil.rmtree(legacy, ignore_errors=True)
        removed.append(str(legacy))
    for d in [d for parent in socket_parents() for d in parent.glob(f"{KERNEL_DIR_PREFIX}*")]:
        pid_text = d.name[len(KERNEL_DIR_PREFIX):].split("-", 1)[0]
        if not pid_text.isdigit():
            continue  # not ours, or from an old covbook: leave it
        if not _pid_alive(int(pid_text)):
            shutil.rmtree(d, ignore_errors=True)
            removed.append(str(d))
    return removed


def _pid_alive(pid: int) -> bool:
    """Whether process ``pid`` runs; a zombie (dead, not yet reaped by its parent) does not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True  # no /proc (macOS): trust kill(0)
    return state != "Z"


def plan_jobs(
    paths: Paths, names: list[str] | None, *, profile: str, device: str, seed: int, rehearse: bool = False,
    resolved_device: str | None = None,
) -> list[Job]:
    """Resolve notebooks, parameters and cache keys; every usage error is raised here, before any kernel."""
    chosen = select(paths, names)
    profiles = load_profiles(paths.profiles)
    unknown_nb = sorted(set(profiles) - set(discover(paths)))
    if unknown_nb:
        raise UsageError(f"notebooks/profiles.yml names unknown notebook(s): {', '.join(unknown_nb)}")
    if rehearse and profile == DEFAULT_PROFILE:
        raise UsageError(f"--rehearse needs another --profile than {profile}: {profile} is the notebooks' own "
                         "defaults, which set no lengths")
    dev = resolved_device or resolve_device(device)
    jobs = []
    for name, path in chosen.items():
        check_cells(path)
        defaults = notebook_parameters(path)
        params = resolve_parameters(name, defaults, profiles, profile, device, seed, rehearse=rehearse)
        science = notebook_science(path)  # the science modules this notebook imports
        jobs.append(Job(name, path, params, content_hash(path, params, science, dev), dev, defaults))
    return jobs


def check_cells(path: Path) -> None:
    """Parse every code cell of a MyST notebook: a syntax error is a :class:`UsageError` before any kernel starts.

    IPython's line magics and shell escapes (``%...``, ``!...``) are not Python and are skipped;
    a cell magic (``%%...``) makes its cell not Python.
    """
    for index, (_, source) in enumerate(_myst_code_cells(path.read_text(encoding="utf-8"))):
        if source.lstrip().startswith("%%"):
            continue
        lines = [ln[: len(ln) - len(ln.lstrip())] + "pass" if ln.lstrip().startswith(("%", "!")) else ln
                 for ln in source.splitlines()]
        try:
            ast.parse("\n".join(lines), filename=path.name)
        except SyntaxError as err:
            raise UsageError(f"{path.name}: code cell {index + 1} line {err.lineno}: {err.msg} "
                             f"(found before any kernel started)") from None


def _record_timing(paths: Paths, job: Job, result: Result, profile_key: str) -> None:
    """Keep the latest measured run time per notebook, device and profile (the plan's calibration)."""
    try:
        timings = read_json(paths.timings, dict) if paths.timings.is_file() else {}
    except DamagedFile:
        timings = {}
    timings.setdefault(job.name, {}).setdefault(job.device, {})[profile_key] = {
        "parameters": {**job.defaults, **job.params}, "seconds": result.seconds, "cpu_seconds": result.cpu_seconds,
        "device_used": result.device_used,
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    write_json_atomic(paths.timings, timings)


# ----------------------------------------------------------------------------- checkpoints as bytes (a scratch tree's)


class CheckpointsTooLarge(ValueError):
    """A checkpoint folder over :data:`CHECKPOINT_MAX_BYTES`: it is not carried (the run says so)."""


def pack_checkpoints(folder: Path, limit: int | None = None) -> dict[str, bytes] | None:
    """The files of a checkpoint folder, by POSIX path relative to it; ``None`` when there is no folder.

    Hidden files (the temporaries of an atomic write cut short) and anything but a plain file (a
    link) are left out.  Raises :class:`CheckpointsTooLarge` when the files add up to more than
    ``limit`` bytes (default :data:`CHECKPOINT_MAX_BYTES`; measured before any is read), so that a
    transfer never passes it.
    """
    limit = CHECKPOINT_MAX_BYTES if limit is None else limit
    folder = Path(folder)
    if not folder.is_dir():
        return None
    files = [p for p in sorted(folder.rglob("*"))
             if p.is_file() and not p.is_symlink()
             and not any(part.startswith(".") for part in p.relative_to(folder).parts)]
    size = sum(p.stat().st_size for p in files)
    if size > limit:
        raise CheckpointsTooLarge(f"the checkpoints of {folder.name} are {size / 2**20:.1f} MiB, over the "
                                  f"{limit / 2**20:.0f} MiB a cluster job carries (CHECKPOINT_MAX_BYTES)")
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in files}


def _inside(rel: str) -> bool:
    """Whether a packed path stays inside its folder (relative, no ``..``, not hidden)."""
    parts = Path(rel).parts
    return bool(parts) and not Path(rel).is_absolute() and not any(part in ("..", "") or part.startswith(".")
                                                                   for part in parts)


def unpack_checkpoints(files: dict[str, bytes], folder: Path, *, sync: bool = False) -> None:
    """Write :func:`pack_checkpoints`' ``files`` into ``folder`` (made if missing); ``sync``: fsync each file.

    A path outside ``folder`` is refused (``ValueError``) before anything is written.
    """
    bad = [rel for rel in files if not _inside(rel)]
    if bad:
        raise ValueError(f"refusing a checkpoint file outside its folder: {bad[0]}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for rel, data in files.items():
        dst = folder / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        with open(dst, "wb") as f:
            f.write(data)
            if sync:
                f.flush()
                os.fsync(f.fileno())


def outgoing_checkpoints(paths: Paths, name: str, digest: str, *, force: bool,
                         say=None) -> dict[str, bytes] | None:
    """The checkpoints a job carries to a scratch tree: its key's folder in ``paths`` (``None`` with ``force``,
    which retrains, or when there is none).  Folders of other keys are removed (:func:`prune_checkpoints`);
    the current one stays until a successful job replaces it.  ``say``: where a note goes when the folder
    is over :data:`CHECKPOINT_MAX_BYTES` (then ``None``).
    """
    here = prune_checkpoints(paths, name, digest)
    if force:
        return None
    try:
        return pack_checkpoints(here)
    except CheckpointsTooLarge as err:
        if say is not None:
            say(f"  note    {name}: {err}: not sent, the job trains afresh")
        return None


def scratch_tree(scratch: Path, job: dict, files: dict[str, bytes], checkpoints: dict[str, bytes] | None) -> None:
    """Fill a job's scratch tree: ``notebooks/`` from ``files``, and the job's checkpoint folder (where
    :func:`checkpoint_folder` puts it) from ``checkpoints``."""
    (scratch / "notebooks").mkdir()
    for rel, data in files.items():
        dst = scratch / "notebooks" / rel
        if ".." in Path(rel).parts or Path(rel).is_absolute():
            raise RuntimeError(f"refusing a notebook file outside the scratch tree: {rel}")
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(data)
    (scratch / "_config.yml").write_text("# scratch tree of one covbook job\n")
    if checkpoints is not None:
        unpack_checkpoints(checkpoints, checkpoint_folder(Paths(scratch), job["name"], job["digest"]))


def returned_checkpoints(scratch: Path, job: dict, outcome: dict) -> tuple[dict[str, bytes] | None, str | None]:
    """What a finished job returns of its checkpoint folder: the packed folder of a successful run
    (``None`` for a failed one, or when it made none) and a note when the folder is too large to carry."""
    if outcome.get("error") is not None:
        return None, None
    try:
        return pack_checkpoints(checkpoint_folder(Paths(scratch), job["name"], job["digest"])), None
    except CheckpointsTooLarge as err:
        return None, f"{err}: not brought back, the next run of {job['name']} trains afresh"


def notebook_files(paths: Paths) -> dict[str, bytes]:
    """The files of ``notebooks/`` (sources, profiles, rules in sub-folders) by relative path: a scratch tree's."""
    root = paths.notebooks.resolve()
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)}


# ----------------------------------------------------------------------------- one job, on any executor


class Stopped(Exception):
    """The run was stopped before this job finished (Ctrl-C, SIGTERM): it is not finished, not failed."""


class JobFailed(Exception):
    """The notebook's process ended without an outcome (killed, out of memory, past its time limit)."""


@dataclass(frozen=True)
class StopFile:
    """A local run's stop signal: the file exists (the ``covbook`` process makes it on Ctrl-C or SIGTERM)."""

    path: str

    def __call__(self) -> bool:
        return os.path.exists(self.path)

    def set(self) -> None:
        Path(self.path).touch()


def run_job(job: dict, stop, files: dict[str, bytes] | None = None, checkpoints: dict[str, bytes] | None = None,
            scratch_in: str | None = None) -> dict:
    """Run one notebook in its own process; returns its uncommitted outcome (commit it with :func:`commit_job`).

    ``job``: name, params, digest, device, threads, rehearse, force, ``timeout`` (seconds from the
    first cell), ``root`` and ``rundir`` (the tree it runs in and its temporaries' folder there),
    ``lock_fd`` (the tree's lock, held by the notebook's process too, or ``None``).  ``stop``: a
    callable, true once the run is stopped (then the process is stopped and :class:`Stopped` raised).
    With ``files`` (``notebooks/`` as bytes, :func:`notebook_files`) the job runs instead in a
    scratch tree made in ``scratch_in`` with ``checkpoints`` (:func:`pack_checkpoints`), and returns
    the notebook, its claims and (when it succeeded) its checkpoint folder as bytes.
    """
    if stop():
        raise Stopped(job["name"])
    name, scratch = job["name"], None
    if files is not None:
        scratch = Path(tempfile.mkdtemp(prefix=f"covbook-{name}-", dir=scratch_in))
        job = {**job, "root": str(scratch), "rundir": str(scratch / ".covbook" / "tmp" / "job"), "lock_fd": None}
    rundir = Path(job["rundir"])
    try:
        if scratch is not None:
            scratch_tree(scratch, job, files, checkpoints)
        rundir.mkdir(parents=True, exist_ok=True)
        job_file, log = rundir / f"{name}.job.json", rundir / f"{name}.log"
        write_json_atomic(job_file, {**job, "parent": os.getpid()})
        with open(log, "wb") as out:
            proc = subprocess.Popen([sys.executable, "-m", "covbook.book.runner", str(job_file)], stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True,
                                    pass_fds=() if job.get("lock_fd") is None else (job["lock_fd"],))
        try:
            overdue = _wait(proc, stop, job.get("timeout"))
        finally:
            _stop_process(proc, rundir / f"{name}.kernel.pid")
        try:
            outcome = read_json(job_file.with_suffix(".result.json"), dict)
        except (OSError, DamagedFile):
            if overdue:
                raise JobFailed(f"timed out after {job['timeout']:g} s (the notebook's time limit; set it with "
                                "--timeout)") from None
            tail = log.read_text(errors="replace")[-2000:]
            raise JobFailed(f"the notebook's process exited with status {proc.returncode}\n{tail}".strip()) from None
        payload = {"outcome": {k: outcome[k] for k in ("name", "meta", "error")}, "notebook": None, "claims": None,
                   "checkpoints": None, "note": None}
        if scratch is not None:
            nb, claims = rundir / f"{name}.ipynb", rundir / f"{name}.claims.json"
            packed, note = returned_checkpoints(scratch, job, outcome)
            payload.update(notebook=nb.read_bytes() if nb.is_file() else None, checkpoints=packed, note=note,
                           claims=claims.read_bytes() if claims.is_file() else None)
        return payload
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


def _wait(proc: subprocess.Popen, stop, limit: float | None) -> bool:
    """Wait for the notebook's process; raise :class:`Stopped` when ``stop()`` turns true.  Returns whether it
    ran past ``limit`` + a margin (its own clock, from its first cell, should have stopped it: then it is stopped)."""
    start = asked = time.monotonic()
    while proc.poll() is None:  # the notebook's end is seen within 0.1 s, a stop within POLL_S
        time.sleep(0.1)
        now = time.monotonic()
        if limit and now - start > limit + STOP_GRACE_S + 30:
            return True
        if now - asked > POLL_S:
            if stop():
                raise Stopped
            asked = now
    return False


def _stop_process(proc: subprocess.Popen, pid_file: Path) -> None:
    """SIGTERM the notebook's process (it stops its kernel), SIGKILL after a grace period; then its kernel
    and socket folder if it could not clean up."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    _kill_kernel(pid_file)
    for d in [d for parent in socket_parents() for d in parent.glob(f"{KERNEL_DIR_PREFIX}{proc.pid}-*")]:
        shutil.rmtree(d, ignore_errors=True)


# ----------------------------------------------------------------------------- the commit (the client's)


def commit_with_checkpoints(paths: Paths, outcome: dict, checkpoints: dict[str, bytes] | None,
                            digest: str) -> dict:
    """:func:`commit_outcome`, and the job's checkpoint folder with it, as one unit.

    With ``checkpoints`` (what a scratch tree returned) and a successful ``outcome``, the files are written
    and synced into a hidden folder next to ``checkpoints/NAME/KEY`` (same filesystem), the old folder
    is renamed aside, the new one renamed in, then the outputs are committed: when they commit, the old
    folder is removed; when they do not (or on any error, Ctrl-C included), the new folder goes and
    the old one comes back.  A failed outcome, or a failure to write the checkpoints (the run then fails,
    its last good outputs kept), leaves the folder as it was.  Killed half-way, the tree holds the old
    folder, the new one or none, never a partial one; hidden leftovers go at the next run
    (:func:`prune_checkpoints`).  Returns the Result as a dict.
    """
    if checkpoints is None or outcome["error"] is not None:
        return commit_outcome(paths, outcome)
    dst = checkpoint_folder(paths, outcome["name"], digest)
    staged = backup = None
    swapped = False

    def undo() -> None:
        if swapped:
            shutil.rmtree(dst, ignore_errors=True)
        if backup is not None and not dst.exists():
            os.replace(backup, dst)

    try:
        try:
            dst.parent.mkdir(parents=True, exist_ok=True)
            staged = Path(tempfile.mkdtemp(prefix=f".{dst.name}.new-", dir=dst.parent))
            unpack_checkpoints(checkpoints, staged, sync=True)
            if dst.exists():
                backup = dst.with_name(f".{dst.name}.old-{os.getpid()}-{uuid.uuid4().hex[:8]}")
                os.replace(dst, backup)
            os.replace(staged, dst)
            swapped = True
        except (OSError, ValueError) as err:
            undo()
            text = oserror_text(err) if isinstance(err, OSError) else str(err)
            return commit_outcome(paths, {**outcome, "error": f"could not write the checkpoints: {text}; "
                                                              "the last good outputs are kept"})
        except BaseException:  # Ctrl-C
            undo()
            raise
        try:
            result = commit_outcome(paths, outcome)
        except BaseException:
            undo()
            raise
        if result["status"] != "ok":
            undo()
        elif backup is not None:
            shutil.rmtree(backup, ignore_errors=True)
        return result
    finally:
        if staged is not None and staged.exists():
            shutil.rmtree(staged, ignore_errors=True)


def commit_job(fut, paths: Paths, name: str, rundir: Path, digest: str, say=None) -> Result | None:
    """Commit a finished job's outputs into ``paths`` (the notebook and claims it returned as bytes are first
    put in ``rundir``); a failed Result, committing nothing, when it raised.  ``say``: where its note goes.

    ``None`` for a job the run's stop reached first (not finished, nothing committed).
    """
    try:
        payload = fut.result()
    except Stopped:
        return None
    except JobFailed as err:
        return Result(name, "failed", 0.0, str(err))
    except Exception as err:  # noqa: BLE001 - a killed worker (KilledWorker), a broken pool, a refused worker
        return Result(name, "failed", 0.0, f"{type(err).__name__}: {err}")
    for suffix, data in ((".ipynb", payload["notebook"]), (".claims.json", payload["claims"])):
        if data is not None:
            (rundir / f"{name}{suffix}").write_bytes(data)
    if payload.get("note") and say is not None:
        say(f"  note    {name}: {payload['note']}")
    return Result(**commit_with_checkpoints(paths, {**payload["outcome"], "rundir": str(rundir)},
                                            payload.get("checkpoints"), digest))


# ----------------------------------------------------------------------------- the local executor


def _pool_worker(parent: int) -> None:
    """A pool process: out of the terminal's process group (Ctrl-C reaches only the ``covbook`` process, which
    stops the jobs in order), and gone when that process is (``kill -9``): its job's process then stops itself."""
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)
    threading.Thread(target=_watch_parent, args=(parent, lambda: os._exit(1)), daemon=True).start()


@dataclass
class LocalPool:
    """Jobs on this machine: a ``ProcessPoolExecutor`` of ``jobs`` processes, each job in the tree itself.

    ``lock_fd``: the tree's lock, which the pool's processes and the notebooks' hold too, so that the tree
    stays locked until the last of them is gone.
    """

    jobs: int = 1
    lock_fd: int | None = None
    label: str = ""

    @property
    def threads(self) -> int | None:
        """COVBOOK_THREADS of each notebook: the cores shared out between the jobs (``None``: one job, all)."""
        return max(1, (os.cpu_count() or 1) // self.jobs) if self.jobs > 1 else None

    def resolve_device(self, device: str) -> str:
        return resolve_device(device)

    def executor(self, paths: Paths, n_jobs: int | None = None) -> cf.Executor:
        """A pool of ``jobs`` processes (no more than ``n_jobs``, the jobs to run), forked so they hold the lock."""
        ctx = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else None)
        return cf.ProcessPoolExecutor(min(self.jobs, n_jobs or self.jobs), mp_context=ctx, initializer=_pool_worker,
                                      initargs=(os.getpid(),))

    def stop_signal(self, run_id: str, rundir: Path) -> StopFile:
        return StopFile(str(rundir / "stop"))

    def submit(self, executor: cf.Executor, job: dict, paths: Paths, stop, say) -> cf.Future:
        return executor.submit(run_job, {**job, "lock_fd": self.lock_fd}, stop)


# ----------------------------------------------------------------------------- the run


def _close(executor: object, bar: object, rundirs: list[Path], *, wait: bool) -> None:
    """Shut the executor down (waiting for its workers, or not after a stop), close the bar, remove run folders."""
    if executor is not None:
        executor.shutdown(wait=wait)
    if bar is not None:
        bar.close()
    for d in rundirs:
        shutil.rmtree(d, ignore_errors=True)


def run_trees(
    engine,
    trees: list[tuple[Paths, int]],
    names: list[str] | None,
    *,
    profile: str,
    device: str,
    force: bool = False,
    progress: bool = True,
    rehearse: bool = False,
    timeout: float | None = None,
) -> list[list[Result]]:
    """Run ``names`` in every (tree, seed) of ``trees`` on ``engine``'s executor, all jobs at once; Results per tree.

    ``engine``: a :class:`LocalPool` or a :class:`covbook.book.distributed.Cluster`.  Call it holding the
    lock of every tree.  Each notebook has a time limit: ``timeout`` seconds, or by default
    :func:`covbook.book.plan.time_limit`.  Raises :class:`Interrupted` on Ctrl-C or SIGTERM
    (:class:`~covbook.book.config.Terminated`), listing what finished and what did not.
    """
    from tqdm import tqdm

    from covbook.book.plan import time_limit

    dev = engine.resolve_device(device)
    plans = [plan_jobs(p, names, profile=profile, device=device, seed=seed, rehearse=rehearse, resolved_device=dev)
             for p, seed in trees]
    label = (lambda i, name: name) if len(trees) == 1 else (lambda i, name: f"{name} (seed {trees[i][1]})")
    results: list[list[Result]] = [[] for _ in trees]
    todo: list[tuple[int, Job]] = []
    for i, ((paths, _), plan) in enumerate(zip(trees, plans)):
        clean_stale(paths)
        for job in plan:
            if force or not is_cached(paths, job.name, job.digest):
                todo.append((i, job))
                continue
            results[i].append(Result(job.name, "cached", 0.0))
            _forget_failure(paths, job.name)  # a failure under this key no longer applies: its good result stands
    run_id = f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    rundirs = [paths.tmp / run_id for paths, _ in trees]
    profile_key = profile + ("+rehearse" if rehearse else "")
    pending: dict[cf.Future, tuple[int, Job]] = {}
    executor = stop = None
    bar = None
    try:
        if todo:
            for d in rundirs:
                d.mkdir(parents=True, exist_ok=True)
            stop = engine.stop_signal(run_id, rundirs[0])
            executor = engine.executor(trees[0][0], len(todo))
            notes: list[str] = []
            for i, job in todo:
                paths = trees[i][0]
                payload = {"name": job.name, "params": job.params, "digest": job.digest, "device": job.device,
                           "threads": engine.threads, "rehearse": rehearse, "force": force,
                           "timeout": float(timeout) if timeout else time_limit(paths, job, profile),
                           "root": str(paths.root), "rundir": str(rundirs[i]), "key": f"seed{trees[i][1]}-{run_id}"}
                pending[engine.submit(executor, payload, paths, stop, notes.append)] = (i, job)
        where = f", {engine.label}" if engine.label else ""
        bar = tqdm(total=sum(map(len, plans)), desc=f"notebooks ({profile}{where})", unit="nb",
                   disable=not progress, file=sys.stderr)
        for i, rs in enumerate(results):
            for r in rs:
                bar.write(f"  cached  {label(i, r.name)}")
                bar.update(1)
        for note in notes if todo else []:
            bar.write(note)
        while pending:
            done, _ = cf.wait(list(pending), timeout=0.2, return_when=cf.FIRST_COMPLETED)
            for fut in done:
                i, job = pending.pop(fut)
                r = commit_job(fut, trees[i][0], job.name, rundirs[i], job.digest, say=bar.write) or Result(
                    job.name, "failed", 0.0, "stopped on its worker before it finished")
                results[i].append(r)
                if r.status == "ok":
                    _record_timing(trees[i][0], job, r, profile_key)
                mark = "ok    " if r.status == "ok" else "FAILED"
                cpu = f"  (CPU {r.cpu_seconds:6.1f} s)" if r.cpu_seconds is not None else ""
                bar.write(f"  {mark}  {label(i, r.name)}  {r.seconds:6.1f} s{cpu}"
                          + (f"\n          {r.error}" if r.error else ""))
                bar.update(1)
    except KeyboardInterrupt as interrupt:
        term = isinstance(interrupt, Terminated)
        previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not interrupt the clean-up
        try:
            _stop_jobs(stop, pending, trees, rundirs, results)
        finally:
            _close(executor, bar, rundirs, wait=False)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            signal.signal(signal.SIGTERM, previous)
        order = [(i, j.name) for i, plan in enumerate(plans) for j in plan]
        finished = [(i, r.name, r) for i, rs in enumerate(results) for r in rs]
        unfinished = sorted((i, j.name) for i, j in pending.values())
        raise Interrupted([r for i, n, r in sorted(finished, key=lambda x: order.index(x[:2]))],
                          [label(i, n) for i, n in sorted(unfinished, key=order.index)],
                          143 if term else 130, "stopped by SIGTERM" if term else "interrupted") from None
    _close(executor, bar, rundirs, wait=True)
    return [sorted(rs, key=lambda r, i=i: [j.name for j in plans[i]].index(r.name)) for i, rs in enumerate(results)]


def _stop_jobs(stop, pending: dict, trees: list, rundirs: list[Path], results: list[list[Result]]) -> None:
    """Stop a run: cancel the queued jobs, signal the running ones and wait for them to stop; jobs that finished
    before the stop reached them are committed and kept (taken out of ``pending``)."""
    if stop is not None:
        stop.set()
    for fut in pending:
        fut.cancel()
    cf.wait(list(pending), timeout=POLL_S + 2 * STOP_GRACE_S + 5)
    for fut, (i, job) in list(pending.items()):
        if fut.done() and not fut.cancelled():
            r = commit_job(fut, trees[i][0], job.name, rundirs[i], job.digest)
            if r is not None:
                results[i].append(r)
                del pending[fut]


def run_notebooks(
    paths: Paths,
    names: list[str] | None = None,
    *,
    profile: str = DEFAULT_PROFILE,
    device: str = "auto",
    seed: int = 0,
    jobs: int = 1,
    force: bool = False,
    progress: bool = True,
    rehearse: bool = False,
    cluster: object | None = None,
    timeout: float | None = None,
    lock_fd: int | None = None,
) -> list[Result]:
    """Execute (or serve from cache) the selected notebooks of one tree; never stops at the first failure.

    Call it holding the tree's lock (the CLI does; ``lock_fd``, its file, is passed on to the local
    pool, so that the tree stays locked until the last of its processes is gone).  ``jobs`` local
    processes (:class:`LocalPool`), or ``cluster``'s workers (a :class:`covbook.book.distributed.Cluster`).
    Raises :class:`UsageError` before starting anything, :class:`Interrupted` on Ctrl-C or SIGTERM;
    see :func:`run_trees`.
    """
    if device not in DEVICES:
        raise UsageError(f"unknown device {device!r}; valid: {', '.join(DEVICES)}")
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise UsageError(f"--jobs must be a positive integer, got {jobs}")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                or not timeout > 0):
        raise UsageError(f"--timeout must be a positive number of seconds, got {timeout}")
    engine = cluster if cluster is not None else LocalPool(jobs, lock_fd)
    return run_trees(engine, [(paths, seed)], names, profile=profile, device=device, force=force,
                     progress=progress, rehearse=rehearse, timeout=timeout)[0]


if __name__ == "__main__":
    sys.exit(_worker_main(sys.argv[1]))
