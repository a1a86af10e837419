"""Execute the book's notebooks (jupytext -> papermill -> ``book/generated/``) on one executor.

A job (:func:`run_job`) runs one notebook in its own process (``python -m covbook.book.runner JOB``, in its own
session: the terminal's Ctrl-C reaches only the ``covbook`` command) under its time limit, and stops it when the
run is stopped.  Jobs go to a ``concurrent.futures`` executor: threads here (:class:`LocalPool`) or a Dask
cluster's (:mod:`covbook.book.distributed`); the two differ only in how they reach their workers.  The
``covbook`` process alone commits each outcome (:func:`commit_job`: one writer per tree, atomic).  A cached
notebook (:mod:`covbook.book.cache`) is served; a failing one does not stop the others; bad input is a
:class:`UsageError` before any kernel starts; Ctrl-C or SIGTERM stops the jobs, keeps what finished and raises
:class:`Interrupted`.  Temporaries live in ``.covbook/tmp/<run-id>/``, never under ``book/``.
"""

from __future__ import annotations

import ast
import concurrent.futures as cf
import math
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
    discover,
    load_profiles,
    myst_code_cells,
    notebook_parameters,
    oserror_text,
    resolve_parameters,
    select,
)
from covbook.book.provenance import git_commit

__all__ = ["Result", "Interrupted", "plan_jobs", "run_notebooks", "run_trees", "run_job", "LocalPool", "clean_stale",
           "execute_uncommitted", "commit_outcome", "commit_job", "commit_files", "commit_rewritten",
           "checkpoint_folder", "prune_checkpoints", "pack_folder", "unpack_folder", "CHECKPOINT_ENV",
           "CHECKPOINT_MAX_BYTES"]

KERNEL = "covbook"  # installed by `make setup` (ipykernel install --name covbook)
KERNEL_DIR_PREFIX = "covbook-kernel-"
STOP_GRACE_S = 3.0  # SIGTERM, then SIGKILL, for a notebook's process
POLL_S = 0.5  # how often a running job looks at the run's stop signal
#: the most checkpoint bytes a cluster job carries each way (chapter 10 makes about 77 MB at full)
CHECKPOINT_MAX_BYTES = 256 << 20
#: the folder a notebook keeps its checkpoints in (read by covbook.session.checkpoint_dir)
CHECKPOINT_ENV = "COVBOOK_CHECKPOINT_DIR"
SOCKET_BASE_MAX = 48  # the longest temp folder a kernel's Unix socket paths (~107 bytes in all) fit under
#: the kernels' config and cache homes, inside .covbook/home (the user's HOME may be read-only)
KERNEL_HOMES = {"MPLCONFIGDIR": "matplotlib", "XDG_CACHE_HOME": "cache", "XDG_CONFIG_HOME": "config",
                "XDG_DATA_HOME": "data", "IPYTHONDIR": "ipython", "JUPYTER_CONFIG_DIR": "jupyter/config",
                "JUPYTER_DATA_DIR": "jupyter/data"}
#: glibc keeps freed memory for reuse instead of unmapping each large block (which page-faults it afresh on each
#: call); speed only, set where the environment does not
KERNEL_MALLOC = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(1 << 34), "MALLOC_TOP_PAD_": str(1 << 28)}
STDERR_HIDDEN = {"remove-stderr", "remove-output", "remove-cell"}  # myst-nb shows no stderr under these tags


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
    """One notebook to run: name, source, parameters, cache key, resolved device (cpu | cuda), parameters cell."""

    name: str
    path: Path
    params: dict
    digest: str
    device: str
    defaults: dict = field(default_factory=dict)


@dataclass
class Interrupted(Exception):
    """Ctrl-C (``exit_status`` 130) or SIGTERM (143) during a run: the Results that finished, the jobs that did not."""

    results: list[Result] = field(default_factory=list)
    unfinished: list[str] = field(default_factory=list)
    exit_status: int = 130
    how: str = "interrupted"


class Stopped(Exception):
    """The run was stopped before this job finished (Ctrl-C, SIGTERM): not finished, not failed."""


class JobFailed(Exception):
    """The notebook's process ended without an outcome (killed, out of memory, past its time limit)."""


class NotebookTimeout(BaseException):
    """The notebook ran past its time limit (a BaseException: no ``except Exception`` swallows it)."""


class CheckpointsTooLarge(ValueError):
    """A checkpoint folder over :data:`CHECKPOINT_MAX_BYTES`: it is not carried (the run says so)."""


def _kernel_manager(socket_dir: Path | None, pid_file: Path):
    """A kernel manager on IPC sockets in ``socket_dir`` (TCP when ``None``) that writes its kernel's pid to
    ``pid_file``, so that a clean-up can stop a kernel that outlived its worker."""
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
            if pid:
                write_json_atomic(pid_file, pid)  # a reader never sees an empty file

    return CovbookKernelManager


def _clocked_engine(limit: float | None) -> str:
    """Papermill's engine with the notebook's clock: SIGALRM ``limit`` seconds after its first cell starts (a
    machine slow to start kernels does not eat into the limit)."""
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


def _device_name(device: str) -> str:
    """The device a notebook ran on, in words (``cpu`` or the GPU's name); imports torch only for a GPU."""
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
    """SIGKILL the kernel whose pid is in ``pid_file`` (it leads its own session) if that pid is still an ipykernel
    (pids are reused: never kill a stranger)."""
    try:
        pid = int(pid_file.read_text().strip())
        if Path("/proc").is_dir():
            command = Path(f"/proc/{pid}/cmdline").read_text(errors="replace")
        else:  # macOS
            command = subprocess.run(["ps", "-p", str(pid), "-o", "command="], capture_output=True, text=True,
                                     timeout=5).stdout
        if "ipykernel" in command:
            os.killpg(pid, signal.SIGKILL)
    except (OSError, ValueError, subprocess.SubprocessError):  # gone, or not ours to kill
        pass


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
    if len(str(base)) > SOCKET_BASE_MAX:  # e.g. a CI's deep TMPDIR
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


def _running_cell(nb_path: Path) -> str:
    """The cell that was running when the notebook stopped: the last one papermill started (it saves its copy of
    the notebook at each cell's start, with the start time)."""
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


def _cpu_seconds() -> float:
    """User + system CPU seconds of this process and its waited-for children (the kernel)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _phases(nb_file: Path) -> dict[str, float]:
    """Wall seconds of an executed notebook (``{}`` when unreadable) by phase: ``kernel`` (to the first cell),
    ``setup`` (hidden cells, the first import), ``figures``, ``claims`` (folded cells recording them), ``science``."""
    from datetime import datetime

    import nbformat

    def when(stamp: str) -> float:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()

    try:
        nb = nbformat.read(str(nb_file), as_version=4)
        cells = [c for c in nb.cells if c.cell_type == "code"]
        first = min(when(c.metadata["papermill"]["start_time"]) for c in cells
                    if c.metadata.get("papermill", {}).get("start_time"))  # a cell never run has none
        kernel = max(0.0, first - when(nb.metadata["papermill"]["start_time"]))
    except (OSError, KeyError, TypeError, ValueError, AttributeError):
        return {}
    out = {"kernel": kernel, "setup": 0.0, "science": 0.0, "claims": 0.0, "figures": 0.0}
    imported = False
    for cell in cells:
        tags = cell.metadata.get("tags", [])
        if "parameters" in tags or "injected-parameters" in tags or "remove-cell" in tags:
            kind = "setup"
        elif not imported and "import " in cell.source:
            kind, imported = "setup", True
        elif "figure" in cell.metadata.get("mystnb", {}):
            kind = "figures"
        elif "hide-input" in tags and "claims." in cell.source:
            kind = "claims"
        else:
            kind = "science"
        out[kind] += float(cell.metadata.get("papermill", {}).get("duration") or 0.0)
    return {k: round(v, 3) for k, v in out.items()}


def execute_uncommitted(job: dict) -> dict:
    """Execute one notebook into ``job["rundir"]``; returns its outcome: ``name``, run record ``meta``, ``error``."""
    import jupytext
    import nbformat
    import papermill as pm

    from covbook.claims import CLAIMS_FILE_ENV, NOTEBOOK_ENV, RULES_FILE_ENV

    paths, name, params, rundir = Paths(Path(job["root"])), job["name"], job["params"], Path(job["rundir"])
    tmp_nb, tmp_claims, pid_file = (rundir / f"{name}{s}" for s in (".ipynb", ".claims.json", ".kernel.pid"))
    os.environ.update({CLAIMS_FILE_ENV: str(tmp_claims), NOTEBOOK_ENV: name,
                       RULES_FILE_ENV: str(paths.notebooks / "rules" / f"{name}.yml"),
                       "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")})
    os.environ.pop("MPLBACKEND", None)  # Agg would silently drop every figure
    if job.get("threads"):
        os.environ["COVBOOK_THREADS"] = os.environ["OMP_NUM_THREADS"] = str(job["threads"])
    for key, value in KERNEL_MALLOC.items():  # read by the kernel's C library when it starts
        os.environ.setdefault(key, value)
    limit, error, sockets = job.get("timeout"), None, _socket_dir()
    start, cpu_start = time.perf_counter(), _cpu_seconds()
    try:
        os.environ[CHECKPOINT_ENV] = str(prune_checkpoints(paths, name, job["digest"], force=bool(job.get("force"))))
        for var, sub in KERNEL_HOMES.items():
            os.environ[var] = str(paths.state / "home" / sub)
            Path(os.environ[var]).mkdir(parents=True, exist_ok=True)
        os.environ.update(JUPYTER_RUNTIME_DIR=str(sockets or rundir), JUPYTER_PLATFORM_DIRS="1")
        nb = jupytext.read(paths.notebooks / f"{name}.md")
        nb.metadata["kernelspec"] = {"name": KERNEL, "display_name": "Python 3", "language": "python"}
        try:
            out = pm.execute_notebook(nb, str(tmp_nb), parameters=params, kernel_name=KERNEL,
                                      cwd=str(paths.notebooks), progress_bar=False, log_output=False,
                                      kernel_manager_class=_kernel_manager(sockets, pid_file),
                                      engine_name=_clocked_engine(limit))
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        for cell in out.cells:  # papermill's cells: not shown in the book
            tags = cell.metadata.setdefault("tags", [])
            if ("injected-parameters" in tags or "parameters" in tags) and "remove-cell" not in tags:
                tags.append("remove-cell")
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
    meta = {"notebook": name, "parameters": params, "hash": job["digest"], "seconds": time.perf_counter() - start,
            "cpu_seconds": _cpu_seconds() - cpu_start,  # the kernel is a reaped child by now
            "phases": _phases(tmp_nb), "device_used": _device_name(job.get("device") or params.get("device", "auto")),
            "rehearsal": bool(job.get("rehearse")), "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "commit": git_commit(paths.root)}  # the commit that made the run (the page's banner names it)
    return {"name": name, "meta": meta, "error": error, "rundir": str(rundir)}


def _worker_main(job_file: str) -> int:
    """Entry point of a notebook's process: run the job in ``job_file``, write its outcome next to it."""
    job = read_json(job_file, dict)

    def unwind(exc: type[BaseException]):
        def handler(signum: int, frame: object) -> None:  # the kernel first: that frees the CPU at once
            _kill_kernel(Path(job["rundir"]) / f"{job['name']}.kernel.pid")
            raise exc

        return handler

    for signum, exc in ((signal.SIGTERM, KeyboardInterrupt), (signal.SIGINT, KeyboardInterrupt),
                        (signal.SIGALRM, NotebookTimeout)):
        signal.signal(signum, unwind(exc))
    # stop (as on SIGTERM) when the process that started it is gone
    threading.Thread(target=_watch_parent, args=(job["parent"], lambda: os.kill(os.getpid(), signal.SIGTERM)),
                     daemon=True).start()
    try:
        outcome = execute_uncommitted(job)
    except KeyboardInterrupt:
        return 130
    write_json_atomic(Path(job_file).with_suffix(".result.json"), outcome)
    return 0


def _remove(path: Path) -> None:
    """Remove a file or a folder, if it is there."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _stage(src: Path, dst: Path) -> Path:
    """A copy of file ``src`` in a hidden temporary next to ``dst``: a hard link, or (across filesystems) a copy
    synced to disk.  A folder is staged next to ``dst`` by the caller and returned as it is."""
    if src.is_dir():
        return src
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.{uuid.uuid4().hex[:8]}")
    try:
        try:
            os.link(src, tmp)
        except OSError:
            with open(src, "rb") as fin, open(tmp, "wb") as fout:
                shutil.copyfileobj(fin, fout, 1 << 20)
                fout.flush()
                os.fsync(fout.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def commit_files(moves: list[tuple[Path, Path]]) -> None:
    """Move each ``(src, dst)`` (a file, or a folder staged next to ``dst``) into place as one unit: all or, on any
    error (Ctrl-C too), none: each file is staged first (a full disk fails before anything changes), then each old
    ``dst`` renamed aside and the new one in; an error half-way puts the old ones back.  A crash half-way leaves
    files whose run record names other digests: never served (:func:`covbook.book.cache.is_cached`)."""
    staged: list[tuple[Path, Path]] = []
    done: list[tuple[Path, Path | None]] = []
    try:
        for src, dst in moves:
            staged.append((_stage(Path(src), Path(dst)), Path(dst)))
        for tmp, dst in staged:
            backup = dst.with_name(f".{dst.name}.old-{uuid.uuid4().hex[:8]}") if dst.exists() else None
            if backup is not None:
                os.replace(dst, backup)
            done.append((dst, backup))
            os.replace(tmp, dst)
    except BaseException:
        for dst, backup in reversed(done):
            if backup is None or dst.is_dir():
                _remove(dst)
            if backup is not None:
                os.replace(backup, dst)
        raise
    finally:
        for tmp, _ in staged:
            if not tmp.is_dir():
                tmp.unlink(missing_ok=True)
    for _, backup in done:
        if backup is not None:
            _remove(backup)
    for src, _ in moves:
        Path(src).unlink(missing_ok=True)  # a folder was renamed into place


def commit_rewritten(paths: Paths, name: str, new_nb: Path) -> None:
    """Put ``new_nb``, a rewritten copy of chapter ``name``'s executed notebook, in its place, with its run record
    (naming ``new_nb``'s SHA-256, written next to it) when that named the old one: it stays served from the cache."""
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
    """Where notebook ``name`` keeps its checkpoints under cache key ``digest``: ``checkpoints/NAME/KEY[:16]``."""
    return paths.checkpoints / name / digest[:16]


def prune_checkpoints(paths: Paths, name: str, digest: str, *, force: bool = False) -> Path:
    """Remove everything in ``checkpoints/NAME/`` but the current key's folder (other keys can never be used again;
    hidden leftovers of a killed commit go too), and with ``force`` that one too; returns the current folder."""
    here = checkpoint_folder(paths, name, digest)
    if here.parent.is_dir():
        for d in here.parent.iterdir():
            if d != here or force:
                _remove(d)
    return here


def commit_outcome(paths: Paths, outcome: dict, checkpoints: dict[str, bytes] | None = None) -> dict:
    """The one place where a run's outputs enter a tree: its notebook, claims, run record and (with ``checkpoints``,
    what a scratch tree returned) checkpoint folder, from ``outcome["rundir"]``, as one unit; a Result dict.  A
    failure keeps the last good outputs and writes ``failed/``."""
    name, meta, error = outcome["name"], outcome["meta"], outcome["error"]
    rundir = Path(outcome["rundir"])
    tmp_nb, tmp_claims, tmp_record = (rundir / f"{name}{s}" for s in (".ipynb", ".claims.json", ".run.json"))
    moves = [(tmp_claims, paths.claims / f"{name}.json"), (tmp_nb, paths.generated / f"{name}.ipynb")]
    staged = None
    try:
        if error is None and checkpoints is not None:
            dst = checkpoint_folder(paths, name, meta["hash"])
            try:
                dst.parent.mkdir(parents=True, exist_ok=True)
                staged = Path(tempfile.mkdtemp(prefix=f".{dst.name}.new-", dir=dst.parent))
                unpack_folder(checkpoints, staged, sync=True)
                moves.append((staged, dst))
            except (OSError, ValueError) as err:
                text = oserror_text(err) if isinstance(err, OSError) else str(err)
                error = f"could not write the checkpoints: {text}; the last good outputs are kept"
        if error is None:
            try:
                outputs = {"notebook": file_digest(tmp_nb), "claims": file_digest(tmp_claims)}
                write_json_atomic(tmp_record, {**meta, "status": "ok", "outputs": outputs})
                commit_files([*moves, (tmp_record, paths.runs / f"{name}.json")])  # the record last
            except OSError as err:
                error = f"could not write the outputs: {oserror_text(err)}; the last good outputs are kept"
            else:
                _forget_failure(paths, name)  # a failed copy no longer applies
                return asdict(Result(name, "ok", meta["seconds"], None, meta["device_used"], meta["cpu_seconds"]))
    finally:
        if staged is not None:
            shutil.rmtree(staged, ignore_errors=True)
    _keep_failure(paths, name, tmp_nb, {**meta, "status": "failed", "error": error})
    return asdict(Result(name, "failed", meta["seconds"], error, meta["device_used"], meta["cpu_seconds"]))


def _forget_failure(paths: Paths, name: str) -> None:
    """Remove the failed copy of ``name`` and its record from ``failed/``."""
    for stale in (paths.failed / f"{name}.ipynb", paths.failed / f"{name}.json"):
        stale.unlink(missing_ok=True)


def _keep_failure(paths: Paths, name: str, tmp_nb: Path, record: dict) -> None:
    """Write the failed notebook (when whole) and its record to ``failed/`` as one unit; best effort (a full disk
    leaves nothing half-written, and the error still reaches the summary)."""
    rec_tmp = tmp_nb.with_name(f"{name}.failed.json")
    try:
        whole = isinstance(read_json(tmp_nb, dict).get("cells"), list)
    except (OSError, DamagedFile):
        whole = False  # none, or cut short by a full disk
    try:
        write_json_atomic(rec_tmp, record)
        if not whole:  # an older failed copy would not be this run's
            (paths.failed / f"{name}.ipynb").unlink(missing_ok=True)
        notebook = [(tmp_nb, paths.failed / f"{name}.ipynb")] if whole else []
        commit_files([*notebook, (rec_tmp, paths.failed / f"{name}.json")])
    except OSError:
        pass


def commit_job(fut: cf.Future, paths: Paths, name: str, rundir: Path, say=None) -> Result | None:
    """Commit a finished job's outcome into ``paths`` (:func:`commit_outcome`; the notebook and claims a scratch
    tree returned as bytes are first put in ``rundir``); a failed Result, committing nothing, when the job raised;
    ``None`` when the run's stop reached it first.  ``say``: where the job's note goes."""
    try:
        payload = fut.result()
    except Stopped:
        return None
    except Exception as err:  # noqa: BLE001 - the process died (JobFailed), a killed worker, a broken pool
        return Result(name, "failed", 0.0, str(err) if isinstance(err, JobFailed) else f"{type(err).__name__}: {err}")
    for suffix, data in ((".ipynb", payload["notebook"]), (".claims.json", payload["claims"])):
        if data is not None:
            (rundir / f"{name}{suffix}").write_bytes(data)
    if payload["note"] and say is not None:
        say(f"  note    {name}: {payload['note']}")
    return Result(**commit_outcome(paths, {**payload["outcome"], "rundir": str(rundir)}, payload["checkpoints"]))


def _inside(rel: str) -> bool:
    """Whether a packed path stays inside its folder (relative, no ``..``, not hidden)."""
    parts = Path(rel).parts
    return bool(parts) and not Path(rel).is_absolute() and not any(p in ("..", "") or p.startswith(".") for p in parts)


def pack_folder(folder: Path, limit: float | None = None) -> dict[str, bytes] | None:
    """The plain files of ``folder`` by POSIX path relative to it, hidden ones (a write cut short) and links left
    out; ``None`` when there is no folder.

    Raises :class:`CheckpointsTooLarge`, before reading any, when they add up to more than ``limit`` bytes
    (default :data:`CHECKPOINT_MAX_BYTES`).
    """
    limit = CHECKPOINT_MAX_BYTES if limit is None else limit
    folder = Path(folder)
    if not folder.is_dir():
        return None
    files = [p for p in sorted(folder.rglob("*"))
             if p.is_file() and not p.is_symlink() and _inside(p.relative_to(folder).as_posix())]
    size = sum(p.stat().st_size for p in files)
    if size > limit:
        raise CheckpointsTooLarge(f"the checkpoints of {folder.name} are {size / 2**20:.1f} MiB, over the "
                                  f"{limit / 2**20:.0f} MiB a cluster job carries (CHECKPOINT_MAX_BYTES)")
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in files}


def unpack_folder(files: dict[str, bytes], folder: Path, *, sync: bool = False) -> None:
    """Write :func:`pack_folder`'s ``files`` into ``folder`` (made if missing); ``sync``: fsync each file.

    A path outside ``folder`` is refused (``ValueError``) before anything is written.
    """
    bad = [rel for rel in files if not _inside(rel)]
    if bad:
        raise ValueError(f"refusing a file outside its folder: {bad[0]}")
    Path(folder).mkdir(parents=True, exist_ok=True)
    for rel, data in files.items():
        (Path(folder) / rel).parent.mkdir(parents=True, exist_ok=True)
        with open(Path(folder) / rel, "wb") as f:
            f.write(data)
            if sync:
                f.flush()
                os.fsync(f.fileno())


def notebook_files(paths: Paths) -> dict[str, bytes]:
    """The files of ``notebooks/`` (sources, profiles, rules) by relative path, hidden ones left out."""
    root = paths.notebooks.resolve()
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)}


def outgoing_checkpoints(paths: Paths, name: str, digest: str, *, force: bool, say=None) -> dict[str, bytes] | None:
    """The checkpoints a cluster job carries: its key's folder (:func:`prune_checkpoints` removes the others), or
    ``None`` with ``force`` (it retrains), without one, or over :data:`CHECKPOINT_MAX_BYTES` (said to ``say``)."""
    here = prune_checkpoints(paths, name, digest)
    if force:
        return None
    try:
        return pack_folder(here)
    except CheckpointsTooLarge as err:
        if say is not None:
            say(f"  note    {name}: {err}: not sent, the job trains afresh")
        return None


def scratch_tree(scratch: Path, job: dict, files: dict[str, bytes], checkpoints: dict[str, bytes] | None) -> None:
    """Fill a job's scratch tree: ``notebooks/`` from ``files`` and its checkpoint folder from ``checkpoints``."""
    unpack_folder(files, scratch / "notebooks")
    (scratch / "_config.yml").write_text("# scratch tree of one covbook job\n")
    if checkpoints is not None:
        unpack_folder(checkpoints, checkpoint_folder(Paths(scratch), job["name"], job["digest"]))


def returned_checkpoints(scratch: Path, job: dict, outcome: dict) -> tuple[dict[str, bytes] | None, str | None]:
    """What a finished scratch-tree job returns of its checkpoint folder (``None`` when it failed or made none),
    and a note when the folder is too large to carry."""
    if outcome.get("error") is not None:
        return None, None
    try:
        return pack_folder(checkpoint_folder(Paths(scratch), job["name"], job["digest"])), None
    except CheckpointsTooLarge as err:
        return None, f"{err}: not brought back, the next run of {job['name']} trains afresh"


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
    """Run one notebook in its own process; returns its uncommitted outcome (for :func:`commit_job`).

    ``job``: name, params, digest, device, threads, rehearse, force, ``timeout`` (seconds from the first cell),
    ``root``, ``rundir`` (temporaries), ``lock_fd`` (the tree's lock, held by the process too, or ``None``).
    ``stop()``: true once the run is stopped (then the process is stopped, :class:`Stopped` raised).  With
    ``files`` (``notebooks/`` as bytes) it runs in a scratch tree in ``scratch_in`` with ``checkpoints``, and
    returns the notebook, claims and checkpoints as bytes.
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
    """Wait for the notebook's process, raising :class:`Stopped` once ``stop()`` is true; returns whether it ran
    past ``limit`` and a margin (its own clock, from its first cell, should have stopped it)."""
    start = asked = time.monotonic()
    while proc.poll() is None:  # the end is seen within 0.1 s, a stop within POLL_S
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
    """SIGTERM the notebook's process (it stops its kernel), SIGKILL after a grace period; then its kernel and
    socket folder if it could not clean up."""
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


def clean_stale(paths: Paths) -> list[str]:
    """Remove (holding the tree's lock) and return what earlier runs left: run folders in ``.covbook/tmp`` (their
    kernels stopped), the old ``book/generated/.tmp``, kernel socket folders whose worker is gone."""
    removed = []
    for rundir in sorted(paths.tmp.iterdir()) if paths.tmp.is_dir() else []:
        for pid_file in rundir.glob("*.kernel.pid"):
            _kill_kernel(pid_file)
        shutil.rmtree(rundir, ignore_errors=True)
        removed.append(str(rundir))
    if (paths.generated / ".tmp").exists():
        shutil.rmtree(paths.generated / ".tmp", ignore_errors=True)
        removed.append(str(paths.generated / ".tmp"))
    for d in [d for parent in socket_parents() for d in parent.glob(f"{KERNEL_DIR_PREFIX}*")]:
        pid_text = d.name[len(KERNEL_DIR_PREFIX):].split("-", 1)[0]
        if pid_text.isdigit() and not _pid_alive(int(pid_text)):  # not ours, or from an old covbook: left alone
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
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True  # no /proc (macOS): trust kill(0)


def plan_jobs(paths: Paths, names: list[str] | None, *, profile: str, device: str, seed: int, rehearse: bool = False,
              resolved_device: str | None = None) -> list[Job]:
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
        jobs.append(Job(name, path, params, content_hash(path, params, notebook_science(path), dev), dev, defaults))
    return jobs


def check_cells(path: Path) -> None:
    """Parse every code cell of a MyST notebook: a syntax error is a :class:`UsageError`.
    Line magics and shell escapes (``%...``, ``!...``) are skipped, and cells under a cell magic (``%%...``)."""
    cells = [source for _, source in myst_code_cells(path.read_text(encoding="utf-8"))]
    for index, source in enumerate(cells):
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
        "device_used": result.device_used, "when": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    write_json_atomic(paths.timings, timings)


@dataclass
class LocalPool:
    """Jobs on this machine, each in the tree itself: ``jobs`` threads, each waiting on its notebook's process (as a
    Dask worker's thread does), which holds the tree's lock ``lock_fd`` too, so that the tree stays locked until the
    last of them is gone.  :class:`covbook.book.distributed.Cluster` has the same methods.
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
        """``jobs`` threads, no more than ``n_jobs``."""
        return cf.ThreadPoolExecutor(min(self.jobs, n_jobs or self.jobs), thread_name_prefix="covbook-job")

    def stop_signal(self, run_id: str, rundir: Path) -> StopFile:
        return StopFile(str(rundir / "stop"))

    def submit(self, executor: cf.Executor, job: dict, paths: Paths, stop, say) -> cf.Future:
        return executor.submit(run_job, {**job, "lock_fd": self.lock_fd}, stop)


def run_trees(engine, trees: list[tuple[Paths, int]], names: list[str] | None, *, profile: str, device: str,
              force: bool = False, progress: bool = True, rehearse: bool = False,
              timeout: float | None = None) -> list[list[Result]]:
    """Run ``names`` in every (tree, seed) of ``trees`` on ``engine``, all jobs at once; Results per tree, in the
    notebooks' order.

    ``engine``: a :class:`LocalPool` or a :class:`covbook.book.distributed.Cluster`; call it holding every tree's
    lock.  The jobs are submitted longest first (the plan's estimate, :func:`covbook.book.plan.expected_seconds`;
    unknown ones first), so that the longest do not start last.  A notebook's time limit is ``timeout`` seconds,
    else :func:`covbook.book.plan.limit_for` of that estimate.  Raises :class:`Interrupted` on Ctrl-C or SIGTERM;
    any other error stops the jobs before it goes on.
    """
    from tqdm import tqdm

    from covbook.book.plan import expected_seconds, limit_for

    dev = engine.resolve_device(device)
    plans = [plan_jobs(p, names, profile=profile, device=device, seed=seed, rehearse=rehearse, resolved_device=dev)
             for p, seed in trees]
    # (tree, notebook) -> its place in the notebooks' order, the order of the Results
    rank = {key: k for k, key in enumerate((i, job.name) for i, plan in enumerate(plans) for job in plan)}

    def label(i: int, name: str) -> str:
        return name if len(trees) == 1 else f"{name} (seed {trees[i][1]})"

    results: list[tuple[int, Result]] = []
    todo: list[tuple[float | None, int, Job]] = []
    for i, ((paths, _), plan) in enumerate(zip(trees, plans)):
        clean_stale(paths)
        for job in plan:
            if force or not is_cached(paths, job.name, job.digest):
                todo.append((expected_seconds(paths, job), i, job))
            else:
                results.append((i, Result(job.name, "cached", 0.0)))
                _forget_failure(paths, job.name)  # a failure under this key no longer applies
    todo.sort(key=lambda t: -math.inf if t[0] is None else -t[0])  # longest first (LPT), unknown first; stable
    run_id = f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    rundirs = [paths.tmp / run_id for paths, _ in trees]
    pending: dict[cf.Future, tuple[int, Job]] = {}
    executor = stop = None
    bar = tqdm(total=len(rank), desc=f"notebooks ({profile}{', ' + engine.label if engine.label else ''})",
               unit="nb", disable=not progress, file=sys.stderr)
    try:
        for i, r in results:
            bar.write(f"  cached  {label(i, r.name)}")
            bar.update(1)
        if todo:
            for d in rundirs:
                d.mkdir(parents=True, exist_ok=True)
            stop = engine.stop_signal(run_id, rundirs[0])
            executor = engine.executor(trees[0][0], len(todo))
        for expected, i, job in todo:
            paths = trees[i][0]
            payload = {"name": job.name, "params": job.params, "digest": job.digest, "device": job.device,
                       "threads": engine.threads, "rehearse": rehearse, "force": force,
                       "timeout": float(timeout) if timeout else limit_for(expected, profile),
                       "root": str(paths.root), "rundir": str(rundirs[i]), "key": f"seed{trees[i][1]}-{run_id}"}
            pending[engine.submit(executor, payload, paths, stop, bar.write)] = (i, job)
        while pending:
            done, _ = cf.wait(list(pending), timeout=0.2, return_when=cf.FIRST_COMPLETED)
            for fut in done:
                i, job = pending.pop(fut)
                r = commit_job(fut, trees[i][0], job.name, rundirs[i], say=bar.write) or Result(
                    job.name, "failed", 0.0, "stopped on its worker before it finished")
                results.append((i, r))
                if r.status == "ok":
                    _record_timing(trees[i][0], job, r, profile + ("+rehearse" if rehearse else ""))
                cpu = f"  (CPU {r.cpu_seconds:6.1f} s)" if r.cpu_seconds is not None else ""
                bar.write(f"  {'ok    ' if r.status == 'ok' else 'FAILED'}  {label(i, r.name)}  {r.seconds:6.1f} s"
                          f"{cpu}" + (f"\n          {r.error}" if r.error else ""))
                bar.update(1)
    except BaseException as error:  # Ctrl-C, SIGTERM, or an error here (a full disk): the jobs stop too
        interrupted, term = isinstance(error, KeyboardInterrupt), isinstance(error, Terminated)
        previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not interrupt the clean-up
        try:  # cancel the queue, stop the running jobs; keep those that finished before the stop reached them
            if stop is not None:
                stop.set()
            for fut in pending:
                fut.cancel()
            cf.wait(list(pending), timeout=POLL_S + 2 * STOP_GRACE_S + 5)
            for fut, (i, job) in list(pending.items()) if interrupted else []:
                r = commit_job(fut, trees[i][0], job.name, rundirs[i]) if fut.done() and not fut.cancelled() else None
                if r is not None:
                    results.append((i, r))
                    del pending[fut]
        finally:
            _close(executor, bar, rundirs, wait=False)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            signal.signal(signal.SIGTERM, previous)
        if not interrupted:
            raise
        unfinished = sorted(((i, j.name) for i, j in pending.values()), key=rank.__getitem__)
        raise Interrupted([r for _, r in sorted(results, key=lambda x: rank[x[0], x[1].name])],
                          [label(i, n) for i, n in unfinished], 143 if term else 130,
                          "stopped by SIGTERM" if term else "interrupted") from None
    _close(executor, bar, rundirs, wait=True)
    per_tree: list[list[Result]] = [[] for _ in trees]
    for i, r in sorted(results, key=lambda x: rank[x[0], x[1].name]):
        per_tree[i].append(r)
    return per_tree


def _close(executor: cf.Executor | None, bar, rundirs: list[Path], *, wait: bool) -> None:
    """Shut the executor down (waiting for its workers, or not after a stop), close the bar, remove run folders."""
    if executor is not None:
        executor.shutdown(wait=wait)
    bar.close()
    for d in rundirs:
        shutil.rmtree(d, ignore_errors=True)


def run_notebooks(paths: Paths, names: list[str] | None = None, *, profile: str = DEFAULT_PROFILE,
                  device: str = "auto", seed: int = 0, jobs: int = 1, force: bool = False, progress: bool = True,
                  rehearse: bool = False, cluster: object | None = None, timeout: float | None = None,
                  lock_fd: int | None = None) -> list[Result]:
    """Execute (or serve from cache) the selected notebooks of one tree, ``jobs`` at a time here (:class:`LocalPool`,
    holding the tree's lock ``lock_fd``) or on ``cluster``'s workers: :func:`run_trees`.  :class:`UsageError`
    before anything."""
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
