"""Execute the book's notebooks: each job (:func:`run_job`) runs papermill in a child process of its own process
group, on a ``concurrent.futures`` executor (:class:`LocalPool`'s threads, or a Dask cluster's); a stop kills the
group.  The child writes into ``.covbook/tmp/<run-id>/``; the ``covbook`` process alone moves the outputs into place
(:func:`commit_outcome`, the run record last), so a half-written run is never current.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import json
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
from dataclasses import dataclass, field
from pathlib import Path

from covbook._jsonio import DamagedFile, read_json, write_json_atomic
from covbook.book.cache import file_digest, resolve_device
from covbook.book.config import DEFAULT_PROFILE, Paths, Terminated, die_with_parent, oserror_text
from covbook.book.records import git_commit, read_run

__all__ = ["Result", "Interrupted", "Stopped", "run_notebooks", "run_trees", "run_job", "kill_group", "LocalPool",
           "commit_outcome", "commit_job", "commit_rewritten", "checkpoint_folder",
           "prune_checkpoints", "record_timings", "CHECKPOINT_ENV"]

KERNEL = "covbook"  # installed by `make setup` (ipykernel install --name covbook)
STOP_GRACE_S = 3.0  # SIGTERM, then SIGKILL, for a notebook's process group
POLL_S = 0.5  # how often a job looks at the run's stop signal
#: the folder a notebook keeps its checkpoints in (read by covbook.session.checkpoint_dir)
CHECKPOINT_ENV = "COVBOOK_CHECKPOINT_DIR"
#: the kernels' config and cache homes, inside .covbook/home (the user's HOME may be read-only)
KERNEL_HOMES = {"MPLCONFIGDIR": "matplotlib", "XDG_CACHE_HOME": "cache", "XDG_CONFIG_HOME": "config",
                "XDG_DATA_HOME": "data", "IPYTHONDIR": "ipython", "JUPYTER_CONFIG_DIR": "jupyter/config",
                "JUPYTER_DATA_DIR": "jupyter/data"}
STDERR_HIDDEN = {"remove-stderr", "remove-output", "remove-cell"}  # myst-nb shows no stderr under these tags
#: glibc keeps freed memory instead of returning large blocks to the system (without it, chapters 03 and 06 spend
#: much of their CPU mapping and unmapping the same arrays again)
KERNEL_MALLOC = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(1 << 34), "MALLOC_TOP_PAD_": str(1 << 28)}


@dataclass
class Result:
    """Outcome of one notebook."""

    name: str
    status: str  # "ok" | "cached" | "failed"
    seconds: float
    error: str | None = None
    device_used: str | None = None
    cpu_seconds: float | None = None  # CPU time of the notebook's process and its kernel (user + system)


@dataclass
class Interrupted(Exception):
    """Ctrl-C (``exit_status`` 130) or SIGTERM (143) during a run: the Results that finished, the jobs that did not."""

    results: list[Result] = field(default_factory=list)
    unfinished: list[str] = field(default_factory=list)
    exit_status: int = 130
    how: str = "interrupted"


class Stopped(Exception):
    """The run was stopped before this job finished (Ctrl-C, SIGTERM): not finished, not failed."""


def _running_cell(nb_path: Path) -> str:
    """The cell that was running when the notebook stopped: the last one papermill saved with a start time."""
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


def execute(job: dict) -> dict:
    """Execute one notebook with papermill into ``job["dir"]`` (its notebook and claims); returns ``error`` (``None``
    when it ran whole and recorded its claims), ``device_used`` and ``cpu_seconds`` (its kernel's and this one's)."""
    import jupytext
    import nbformat
    import papermill as pm

    from covbook.claims import CLAIMS_FILE_ENV, NOTEBOOK_ENV, RULES_FILE_ENV

    cpu = _cpu_seconds()
    paths, name, folder = Paths(Path(job["root"])), job["name"], Path(job["dir"])
    nb_file, claims_file = folder / f"{name}.ipynb", folder / f"{name}.claims.json"
    os.environ.update({CLAIMS_FILE_ENV: str(claims_file), NOTEBOOK_ENV: name,
                       RULES_FILE_ENV: str(paths.notebooks / "rules" / f"{name}.yml"),
                       CHECKPOINT_ENV: str(checkpoint_folder(paths, name, job["digest"])),
                       "JUPYTER_RUNTIME_DIR": str(folder), "JUPYTER_PLATFORM_DIRS": "1",
                       "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")})
    os.environ.pop("MPLBACKEND", None)  # Agg would silently drop every figure
    if job.get("threads"):
        os.environ["COVBOOK_THREADS"] = os.environ["OMP_NUM_THREADS"] = str(job["threads"])
    for key, value in KERNEL_MALLOC.items():  # read by the kernel's C library when it starts
        os.environ.setdefault(key, value)
    try:
        for var, sub in KERNEL_HOMES.items():
            os.environ[var] = str(paths.state / "home" / sub)
            Path(os.environ[var]).mkdir(parents=True, exist_ok=True)
        nb = jupytext.read(paths.notebooks / f"{name}.md")
        nb.metadata["kernelspec"] = {"name": KERNEL, "display_name": "Python 3", "language": "python"}
        out = pm.execute_notebook(nb, str(nb_file), parameters=job["params"], kernel_name=KERNEL,
                                  cwd=str(paths.notebooks), progress_bar=False, log_output=False)
        for cell in out.cells:  # papermill's cells: not shown in the book
            tags = cell.metadata.setdefault("tags", [])
            if ("injected-parameters" in tags or "parameters" in tags) and "remove-cell" not in tags:
                tags.append("remove-cell")
        nbformat.write(out, str(nb_file))
        error = stderr_problem(out) or (None if claims_file.is_file() else "the notebook recorded no claims")
    except pm.PapermillExecutionError as err:
        error = f"cell {err.exec_count} (index {err.cell_index}) raised {err.ename}: {err.evalue}".strip()
    except OSError as err:  # a full disk, a read-only folder: one line, not a traceback
        error = f"could not write the notebook: {oserror_text(err)}"
    except Exception as err:  # noqa: BLE001 - report any failure, keep the other notebooks going
        if type(err).__name__ == "DeadKernelError":
            error = f"the kernel died in {_running_cell(nb_file)} ({err}; out of memory, or a crash in native code)"
        else:
            error = f"{type(err).__name__}: {err}\n{traceback.format_exc(limit=3)}"
    used = job["device"]  # the device in words: cpu, or cuda (the GPU's name); torch imported only then
    if used != "cpu":
        import torch

        used = f"cuda ({torch.cuda.get_device_name(torch.device(used))})"
    return {"error": error, "device_used": used, "cpu_seconds": _cpu_seconds() - cpu}


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL ``proc``'s descendants (a notebook's kernel runs in a session of its own, which the group's kill does
    not reach), then SIGTERM its process group, SIGKILL after :data:`STOP_GRACE_S`."""
    import psutil  # ipykernel's own dependency

    if proc.poll() is not None:  # reaped: its pid may be another process's now
        return
    with contextlib.suppress(psutil.Error):
        for kid in psutil.Process(proc.pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                kid.kill()
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=STOP_GRACE_S)


def run_job(job: dict, stop) -> dict:
    """Run one notebook in a child process; returns its outcome, not yet in the tree (for :func:`commit_outcome`).

    ``job``: :func:`run_trees`' payload.  Once ``stop.is_set()`` the child is killed and :class:`Stopped` raised.
    Each call has a folder of its own under ``job["rundir"]``: a job run again (its cluster worker died) never meets
    the files of the first attempt."""
    name, limit = job["name"], job.get("timeout")
    if stop.is_set():
        raise Stopped(name)
    prune_checkpoints(Paths(Path(job["root"])), name, job["digest"], force=bool(job.get("force")))
    Path(job["rundir"]).mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=job["rundir"]))
    job_file = folder / f"{name}.job.json"
    write_json_atomic(job_file, {**job, "dir": str(folder), "parent": os.getpid()})
    start = time.monotonic()
    with open(folder / "log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "covbook.book.runner", str(job_file)], stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    overdue = False
    try:
        while proc.poll() is None and not (overdue := bool(limit) and time.monotonic() - start > limit):
            if stop.is_set():
                raise Stopped(name)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=POLL_S)
    finally:
        kill_group(proc)
    try:
        outcome = {"error": None} if overdue else read_json(folder / "outcome.json", dict)
    except (OSError, DamagedFile):
        tail = (folder / "log").read_text(errors="replace")[-2000:]
        outcome = {"error": f"the notebook's process exited with status {proc.returncode}\n{tail}".strip()}
    if overdue:
        outcome["error"] = (f"timed out after {limit:g} s (the notebook's time limit; set it with --timeout) in "
                            f"{_running_cell(folder / f'{name}.ipynb')}")
    meta = {"notebook": name, "parameters": job["params"], "hash": job["digest"], "seconds": time.monotonic() - start,
            "cpu_seconds": outcome.get("cpu_seconds"), "device_used": outcome.get("device_used", job["device"]),
            "rehearsal": bool(job.get("rehearse")), "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "commit": job.get("commit")}
    return {"name": name, "dir": str(folder), "meta": meta, "error": outcome["error"]}


def _put(src: Path, dst: Path) -> None:
    """Move file ``src`` to ``dst`` atomically: to a unique name next to it first (a copy across filesystems), then
    a rename; the temporary is gone whatever happens."""
    tmp = dst.with_name(f".{dst.name}.{uuid.uuid4().hex[:8]}")
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        shutil.move(src, tmp)
        os.replace(tmp, dst)
    finally:
        tmp.unlink(missing_ok=True)


def commit_outcome(paths: Paths, outcome: dict) -> Result:
    """The one place where a run's outputs enter a tree: its notebook and claims, then its run record (naming their
    SHA-256) moved into place (:func:`_put`), the record written in the job's own folder first.  A failure writes
    ``failed/`` and leaves the last good outputs."""
    name, error, meta = outcome["name"], outcome["error"], outcome["meta"]
    nb, claims, record = (Path(outcome["dir"]) / f"{name}{s}" for s in (".ipynb", ".claims.json", ".run.json"))
    if error is None:
        try:
            outputs = {"notebook": file_digest(nb), "claims": file_digest(claims)}
            record.write_text(json.dumps({**meta, "status": "ok", "outputs": outputs}, indent=1))
            for src, dst in ((claims, paths.claims / f"{name}.json"), (nb, paths.generated / f"{name}.ipynb"),
                             (record, paths.runs / f"{name}.json")):  # the record last
                _put(src, dst)
        except OSError as err:
            error = f"could not write the outputs: {oserror_text(err)}; the run is not served"
        else:
            for stale in (paths.failed / f"{name}.ipynb", paths.failed / f"{name}.json"):  # no longer applies
                stale.unlink(missing_ok=True)
            return Result(name, "ok", meta["seconds"], None, meta["device_used"], meta["cpu_seconds"])
    with contextlib.suppress(OSError):  # best effort: the error still reaches the summary
        try:
            whole = isinstance(json.loads(nb.read_bytes()).get("cells"), list)
        except (OSError, ValueError, AttributeError):
            whole = False  # none, or cut short by a full disk
        if whole:
            _put(nb, paths.failed / f"{name}.ipynb")
        else:  # an older failed copy would not be this run's
            (paths.failed / f"{name}.ipynb").unlink(missing_ok=True)
        record.write_text(json.dumps({**meta, "status": "failed", "error": error}, indent=1))
        _put(record, paths.failed / f"{name}.json")
    return Result(name, "failed", meta["seconds"], error, meta["device_used"], meta["cpu_seconds"])


def commit_job(fut: cf.Future, paths: Paths, name: str) -> Result | None:
    """:func:`commit_outcome` of a finished job; a failed Result if it raised (a killed worker), None if stopped."""
    try:
        outcome = fut.result()
    except Stopped:
        return None
    except Exception as err:  # noqa: BLE001 - a worker killed too often, a broken pool
        return Result(name, "failed", 0.0, f"{type(err).__name__}: {err}")
    return commit_outcome(paths, outcome)


def commit_rewritten(paths: Paths, name: str, new_nb: Path) -> None:
    """Put ``new_nb``, a rewritten copy of chapter ``name``'s executed notebook, in its place, then its run record
    (naming ``new_nb``'s SHA-256, written next to it) when that named the old one: it stays served from the cache."""
    nb_path, rec_path = paths.generated / f"{name}.ipynb", paths.runs / f"{name}.json"
    rec = read_run(rec_path)
    outputs = rec.outputs if rec is not None else None
    follows = bool(outputs) and nb_path.is_file() and outputs.get("notebook") == file_digest(nb_path)
    if follows:
        tmp_rec = new_nb.with_name(f"{name}.run.json")
        write_json_atomic(tmp_rec, {**rec, "outputs": {**outputs, "notebook": file_digest(new_nb)}})
    _put(new_nb, nb_path)
    if follows:
        _put(tmp_rec, rec_path)


def checkpoint_folder(paths: Paths, name: str, digest: str) -> Path:
    """Where notebook ``name`` keeps its checkpoints under cache key ``digest``: ``checkpoints/NAME/KEY[:16]``."""
    return paths.checkpoints / name / digest[:16]


def prune_checkpoints(paths: Paths, name: str, digest: str, *, force: bool = False) -> Path:
    """Remove ``checkpoints/NAME/`` but the current key's folder (with ``force`` that too); return that folder."""
    here = checkpoint_folder(paths, name, digest)
    for d in here.parent.iterdir() if here.parent.is_dir() else []:
        if d != here or force:
            shutil.rmtree(d) if d.is_dir() and not d.is_symlink() else d.unlink()
    return here


@dataclass
class LocalPool:
    """Jobs on this machine: ``jobs`` threads, each waiting on its notebook's process (``Cluster`` extends it)."""

    jobs: int = 1
    label: str = ""
    resolve_device = staticmethod(resolve_device)

    @property
    def threads(self) -> int | None:
        """COVBOOK_THREADS of each notebook: the cores shared out between the jobs (``None``: one job, all)."""
        return max(1, (os.cpu_count() or 1) // self.jobs) if self.jobs > 1 else None

    def executor(self, n_jobs: int) -> cf.Executor:
        return cf.ThreadPoolExecutor(min(self.jobs, n_jobs), thread_name_prefix="covbook-job")

    def stop_signal(self, run_id: str) -> threading.Event:
        return threading.Event()


def run_trees(engine, trees: list[tuple[Paths, int]], names: list[str] | None, *, profile: str, device: str,
              force: bool = False, progress: bool = True, rehearse: bool = False,
              timeout: float | None = None) -> list[list[Result]]:
    """Run ``names`` in every (tree, seed) of ``trees`` on ``engine`` (a :class:`LocalPool` or a
    :class:`covbook.book.distributed.Cluster`), all jobs at once, longest first by the plan's estimate (unknown ones
    first); Results per tree, in the notebooks' order.  Raises :class:`Interrupted` on Ctrl-C or SIGTERM; any other
    error stops the jobs before it goes on."""
    from tqdm import tqdm

    from covbook.book.plan import plan_jobs

    commits = [git_commit(paths.root) for paths, _ in trees]  # the commit that made the runs (the page's banner)
    dev = engine.resolve_device(device)
    plans = [plan_jobs(p, names, profile=profile, device=device, seed=seed, rehearse=rehearse, resolved_device=dev,
                       force=force, timeout=timeout) for p, seed in trees]
    order = [(i, job) for i, plan in enumerate(plans) for job in plan]  # the order of the Results
    done: dict[tuple[int, str], Result] = {}
    todo = sorted([(i, job) for i, job in order if not job.cached],  # longest first (LPT), unknown first; stable
                  key=lambda t: -math.inf if t[1].expected is None else -t[1].expected)
    run_id = f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    pending: dict = {}  # future -> (tree, plan.Job)
    executor = stop = None
    stopped, previous = False, signal.getsignal(signal.SIGTERM)
    bar = tqdm(total=len(order), desc=f"notebooks ({profile}{', ' + engine.label if engine.label else ''})",
               unit="nb", disable=not progress, file=sys.stderr)

    def finished(i: int, name: str, r: Result) -> None:
        done[i, name] = r
        cpu = f"  (CPU {r.cpu_seconds:6.1f} s)" if r.cpu_seconds is not None else ""
        text = "cached  " if r.status == "cached" else f"{'ok    ' if r.status == 'ok' else 'FAILED'}  "
        bar.write(f"  {text}{label(i, name)}" + ("" if r.status == "cached" else f"  {r.seconds:6.1f} s{cpu}")
                  + (f"\n          {r.error}" if r.error else ""))
        bar.update(1)

    def label(i: int, name: str) -> str:
        return name if len(trees) == 1 else f"{name} (seed {trees[i][1]})"

    try:
        for paths, _ in trees:  # what earlier runs left (we hold the tree's lock)
            shutil.rmtree(paths.tmp, ignore_errors=True)
        for i, job in order:
            if job.cached:  # a failure under this key no longer applies
                for stale in (trees[i][0].failed / f"{job.name}.ipynb", trees[i][0].failed / f"{job.name}.json"):
                    stale.unlink(missing_ok=True)
                finished(i, job.name, Result(job.name, "cached", 0.0))
        if todo:  # (each job makes its tree's folder of the run, rundir)
            stop, executor = engine.stop_signal(run_id), engine.executor(len(todo))
        for i, job in todo:
            payload = {"name": job.name, "params": job.params, "digest": job.digest, "device": job.device,
                       "threads": engine.threads, "rehearse": rehearse, "force": force, "timeout": job.limit,
                       "commit": commits[i], "root": str(trees[i][0].root), "rundir": str(trees[i][0].tmp / run_id)}
            pending[executor.submit(run_job, payload, stop)] = (i, job)
        while pending:
            for fut in cf.wait(list(pending), timeout=0.2, return_when=cf.FIRST_COMPLETED)[0]:
                i, job = pending.pop(fut)
                finished(i, job.name, commit_job(fut, trees[i][0], job.name)
                         or Result(job.name, "failed", 0.0, "stopped on its worker before it finished"))
        return [[done[i, job.name] for job in plan] for i, plan in enumerate(plans)]
    except BaseException as error:  # Ctrl-C, SIGTERM, or an error here (a full disk): the jobs stop too
        interrupted, term, stopped = isinstance(error, KeyboardInterrupt), isinstance(error, Terminated), True
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not interrupt the clean-up
        if stop is not None:  # cancel the queue, stop the running jobs; keep those that finished before the stop
            stop.set()
        for fut in pending:
            fut.cancel()
        cf.wait(list(pending), timeout=POLL_S + 2 * STOP_GRACE_S + 5)
        for fut, (i, job) in list(pending.items()) if interrupted else []:
            r = commit_job(fut, trees[i][0], job.name) if fut.done() and not fut.cancelled() else None
            if r is not None:
                done[i, job.name] = r
        if not interrupted:
            raise
        raise Interrupted([done[i, job.name] for i, job in order if (i, job.name) in done],
                          [label(i, job.name) for i, job in order if (i, job.name) not in done],
                          143 if term else 130, "stopped by SIGTERM" if term else "interrupted") from None
    finally:  # after a stop: not waiting for the executor's workers, signals back as they were
        if executor is not None:
            executor.shutdown(wait=not stopped)
        bar.close()
        for paths, _ in trees:
            shutil.rmtree(paths.tmp / run_id, ignore_errors=True)
        if stopped:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            signal.signal(signal.SIGTERM, previous)
        record_timings([(trees[i][0], job, done[i, job.name]) for i, job in order if (i, job.name) in done],
                       profile + ("+rehearse" if rehearse else ""))


def record_timings(ran: list[tuple[Paths, object, Result]], profile_key: str) -> None:
    """Keep each successful run's time per notebook, device and profile in its tree's ``.covbook/timings.json``."""
    for paths in {paths for paths, _, r in ran if r.status == "ok"}:
        try:
            timings = read_json(paths.timings, dict) if paths.timings.is_file() else {}
        except DamagedFile:
            timings = {}
        for job, r in [(job, r) for p, job, r in ran if p == paths and r.status == "ok"]:
            timings.setdefault(job.name, {}).setdefault(job.device, {})[profile_key] = {
                "parameters": {**job.defaults, **job.params}, "seconds": r.seconds, "cpu_seconds": r.cpu_seconds,
                "device_used": r.device_used, "when": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        write_json_atomic(paths.timings, timings)


def run_notebooks(paths: Paths, names: list[str] | None = None, *, profile: str = DEFAULT_PROFILE,
                  device: str = "auto", seed: int = 0, jobs: int = 1, force: bool = False, progress: bool = True,
                  rehearse: bool = False, cluster: object | None = None, timeout: float | None = None) -> list[Result]:
    """Execute (or serve from cache) the selected notebooks of one tree on a :class:`LocalPool` or ``cluster``."""
    engine = cluster if cluster is not None else LocalPool(jobs)
    return run_trees(engine, [(paths, seed)], names, profile=profile, device=device, force=force,
                     progress=progress, rehearse=rehearse, timeout=timeout)[0]


if __name__ == "__main__":  # the notebook's process (run_job starts it): the job's outcome next to its file
    die_with_parent()
    _job = read_json(sys.argv[1], dict)
    if os.getppid() != _job["parent"]:  # the parent died before the watch was set
        sys.exit(1)
    write_json_atomic(Path(sys.argv[1]).with_name("outcome.json"), execute(_job))
