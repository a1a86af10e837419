"""Run notebooks on a Dask distributed cluster: ``covbook run|sweep --cluster SPEC``.

The local pool of :mod:`covbook.book.runner` stays the default.  With
``--cluster``, each (notebook, seed) job is a Dask future: the scheduler queues
the jobs, places each on a free worker and, when a worker dies mid-job, runs it
again on another (its ``allowed-failures`` setting, :data:`ALLOWED_FAILURES` on
a local cluster), so nothing is lost and a job's result reaches the client once.

``SPEC`` is

- ``local:N``: a ``distributed.LocalCluster`` of N worker *processes* (one
  thread each, so one notebook at a time per worker), started here and closed
  at the end of the command;
- ``tcp://HOST:PORT`` (or ``tls://``): the address of a running ``dask scheduler``;
- ``PATH.json``: a scheduler file (``dask scheduler --scheduler-file PATH.json``).

What runs where.  The client (the ``covbook`` command) holds the tree's lock,
plans every job (parameters and cache key, exactly as the local pool) and is
the only writer of the tree.  A worker receives the job and the files of
``notebooks/``, builds a scratch tree in its own local directory, executes the
notebook with the local pool's own worker (``python -m covbook.book.runner``,
:func:`covbook.book.runner.execute_one` with ``commit`` off), and *returns* the
executed notebook, its claims and its run record; the client moves them into
its tree with :func:`covbook.book.runner.commit_outcome`, the same commit the
local pool makes.  Workers therefore need the same covbook checkout (science
code, Python, torch, numpy: each job checks) but no shared filesystem.

Checkpoints (chapter 10) travel the same way, as bytes.  A job carries the
checkpoint folder its key has in the client's tree
(``book/generated/checkpoints/NAME/KEY/``, :func:`covbook.book.runner.checkpoint_folder`;
none with ``--force``), the worker puts it where the runner looks for it in the
scratch tree, so the notebook resumes or loads it exactly as a local run would,
and a successful job returns the folder with its other outputs.  The client
commits it with them (:func:`commit_with_checkpoints`): one directory swap,
undone when the outputs fail to commit; a failed, stopped or killed job changes no
checkpoint folder, and a job re-run after its worker died is committed once, like
its notebook.  Each way is at most :data:`CHECKPOINT_MAX_BYTES` (one Dask message;
chapter 10 makes about 0.8 MB at ``--profile smoke``, 3 MB at quick, 77 MB at full);
past it the folder stays where it is and the run says so.

Ctrl-C or SIGTERM sets a Dask ``Event`` that every running job polls (it then
stops its notebook's process, whose kernel goes with it), cancels the queued
futures, keeps what finished and closes a local cluster.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from covbook._jsonio import DamagedFile, read_json, write_json_atomic
from covbook.book.config import DEVICES, Paths, UsageError

__all__ = ["Cluster", "parse_cluster", "open_cluster", "run_trees", "run_remote", "ALLOWED_FAILURES",
           "CHECKPOINT_MAX_BYTES", "CheckpointsTooLarge", "pack_checkpoints", "unpack_checkpoints",
           "commit_with_checkpoints"]

EXTRA = "pip install -e '.[cluster]'"
#: worker deaths a job survives on a local cluster before it is reported failed (Dask's default is 3)
ALLOWED_FAILURES = 3
POLL_S = 1.0  # how often a running job looks at the stop event
STOP_GRACE_S = 3.0  # SIGTERM, then SIGKILL, for a notebook's process on a worker
CONNECT_TIMEOUT_S = 20
SCHEMES = ("tcp", "tls", "ws", "wss")
#: the most checkpoint bytes one job carries each way: to its worker (embedded in the task, which the
#: scheduler keeps until the job ends, so that a job re-run after its worker died gets them again) and
#: back with its result.  Chapter 10, the one chapter with checkpoints, makes about 0.8 MB at
#: ``--profile smoke``, 3 MB at quick and 77 MB at full (two models and their AdamW state, float32).
CHECKPOINT_MAX_BYTES = 256 << 20


class CheckpointsTooLarge(ValueError):
    """A checkpoint folder over :data:`CHECKPOINT_MAX_BYTES`: it is not carried (the run says so)."""


@dataclass
class Cluster:
    """A connection to a Dask cluster: its client, the spec it came from, threads per notebook."""

    client: object  # distributed.Client
    spec: str
    threads: int | None  # COVBOOK_THREADS of each notebook; None: the worker's own environment decides


def parse_cluster(spec: str) -> tuple[str, object]:
    """``("local", N)``, ``("address", "tcp://...")`` or ``("file", Path)``; a :class:`UsageError` otherwise.

    Examples
    --------
    >>> parse_cluster("local:2")
    ('local', 2)
    >>> parse_cluster("tcp://10.0.0.1:8786")
    ('address', 'tcp://10.0.0.1:8786')
    """
    expected = ("--cluster must be local:N (N worker processes here), a scheduler address tcp://HOST:PORT "
                f"or a scheduler file PATH.json; got {spec!r}")
    if spec.startswith("local:"):
        n = spec.removeprefix("local:")
        if not n.isdigit() or int(n) < 1:
            raise UsageError(expected)
        return "local", int(n)
    if "://" in spec:
        scheme, rest = spec.split("://", 1)
        if scheme not in SCHEMES or not rest:
            raise UsageError(expected)
        return "address", spec
    if spec.endswith(".json"):
        path = Path(spec)
        if not path.is_file():
            raise UsageError(f"--cluster: no scheduler file {spec} (start one with `dask scheduler --scheduler-file {spec}`)")
        return "file", path
    raise UsageError(expected)


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (what CI systems, ``timeout`` and SLURM send) stops the run like Ctrl-C, unless someone handles it."""
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


@contextmanager
def open_cluster(spec: str) -> Iterator[Cluster]:
    """Start (``local:N``) or connect to a Dask cluster for the duration of the block.

    Every problem visible before a job is submitted (a bad spec, Dask not
    installed, no scheduler at the address, a worker running other code) is a
    :class:`UsageError`.
    """
    kind, value = parse_cluster(spec)
    try:
        import dask
        from distributed import Client, LocalCluster
    except ImportError as err:
        raise UsageError(f"--cluster needs Dask distributed, the optional cluster extra: {EXTRA}") from err
    local = scratch = None
    with _sigterm_as_interrupt(), dask.config.set({"distributed.scheduler.allowed-failures": ALLOWED_FAILURES}):
        try:
            if kind == "local":
                import logging

                scratch = tempfile.mkdtemp(prefix="covbook-dask-")
                local = LocalCluster(n_workers=value, threads_per_worker=1, processes=True, dashboard_address=None,
                                     local_directory=scratch, silence_logs=logging.ERROR)
                client = Client(local)
                client.register_plugin(_own_process_group(), name="covbook-own-process-group")
            elif kind == "address":
                client = Client(value, timeout=CONNECT_TIMEOUT_S)
            else:
                client = Client(scheduler_file=str(value), timeout=CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError) as err:
            if scratch:
                shutil.rmtree(scratch, ignore_errors=True)
            raise UsageError(f"--cluster {spec}: cannot reach the scheduler ({type(err).__name__}: {err})") from err
        try:
            _check_workers(client, spec)
            n = value if kind == "local" else 0
            yield Cluster(client, spec, max(1, (os.cpu_count() or 1) // n) if n > 1 else None)
        finally:
            client.close()
            if local is not None:
                local.close()
            if scratch:
                shutil.rmtree(scratch, ignore_errors=True)


def _quiet_closed_client(hook):
    """``sys.unraisablehook`` without the "IOLoop is closed" that a worker's closed client prints when collected
    after its loop (the worker's stderr is the command's); every other message goes to ``hook``."""
    def quiet(unraisable) -> None:
        exc, obj = getattr(unraisable, "exc_value", None), getattr(unraisable, "object", None)
        if not (isinstance(exc, RuntimeError) and str(exc) == "IOLoop is closed"
                and "Client.__del__" in getattr(obj, "__qualname__", "")):
            hook(unraisable)

    return quiet


def _own_process_group():
    """A worker plugin of a local cluster: the worker process leaves the terminal's process group, so that
    Ctrl-C reaches only the client, which then stops the jobs and closes the cluster in order."""
    from distributed import WorkerPlugin

    class OwnProcessGroup(WorkerPlugin):
        def setup(self, worker) -> None:
            try:
                os.setpgid(0, 0)
            except OSError:  # a session leader, or not allowed: Ctrl-C then reaches the worker too
                pass
            sys.unraisablehook = _quiet_closed_client(sys.unraisablehook)

        def teardown(self, worker) -> None:
            from distributed.client import _global_clients

            for c in list(_global_clients.values()):  # the worker's own client (the jobs' stop events)
                with contextlib.suppress(Exception):
                    c.close()

    return OwnProcessGroup()


def _identity() -> dict:
    """What a worker's results depend on: its science code and versions (compared with the client's)."""
    from covbook.book.cache import environment, science_hash

    return {"science": science_hash(), "environment": environment()}


def _check_workers(client, spec: str) -> None:
    """Refuse workers whose covbook code or versions differ from the client's (their results would be
    cached under the wrong key)."""
    mine = _identity()
    other = {addr: got for addr, got in client.run(_identity).items() if got != mine}
    if other:
        addr, got = next(iter(other.items()))
        raise UsageError(f"--cluster {spec}: {len(other)} worker(s) run other covbook code or versions than this "
                         f"checkout (e.g. {addr}: {got['environment']}); install the same covbook checkout there")


def _resolve_device(cluster: Cluster, device: str) -> str:
    """``auto`` resolved where the notebooks run: on a worker (waits for one)."""
    from covbook.book.cache import resolve_device

    if device not in DEVICES:
        raise UsageError(f"unknown device {device!r}; valid: {', '.join(DEVICES)}")
    if device == "cpu":
        return "cpu"
    cluster.client.wait_for_workers(1)
    return cluster.client.submit(resolve_device, device, pure=False).result()


# ----------------------------------------------------------------------------- checkpoints as bytes


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


def commit_with_checkpoints(paths: Paths, outcome: dict, checkpoints: dict[str, bytes] | None,
                            digest: str) -> dict:
    """:func:`covbook.book.runner.commit_outcome`, and the job's checkpoint folder with it, as one unit.

    With ``checkpoints`` (what the worker returned) and a successful ``outcome``, the files are written
    and synced into a hidden folder next to ``checkpoints/NAME/KEY`` (same filesystem), the old folder
    is renamed aside, the new one renamed in, then the outputs are committed: when they commit, the old
    folder is removed; when they do not (or on any error, Ctrl-C included), the new folder goes and
    the old one comes back.  A failed outcome, or a failure to write the checkpoints (the run then fails,
    its last good outputs kept), leaves the folder as it was.  Killed half-way, the tree holds the old
    folder, the new one or none, never a partial one; hidden leftovers go at the next run
    (:func:`covbook.book.runner.prune_checkpoints`).  Returns the Result as a dict.
    """
    from covbook.book.runner import _oserror_text, checkpoint_folder, commit_outcome

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
            text = _oserror_text(err) if isinstance(err, OSError) else str(err)
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


# ----------------------------------------------------------------------------- on a worker


def run_remote(job: dict, files: dict[str, bytes], expect: dict, stop: str,
               checkpoints: dict[str, bytes] | None = None) -> dict:
    """Execute one notebook on this Dask worker in a scratch tree; return its outputs (bytes) and outcome.

    ``job``: the local pool's job (name, params, digest, device, threads, rehearse, force);
    ``files``: ``notebooks/`` by relative path; ``expect``: the client's :func:`_identity`;
    ``stop``: the name of the run's stop event; ``checkpoints``: the job's checkpoint folder in the
    client's tree (:func:`pack_checkpoints`), if any.  A successful job returns its checkpoint folder
    too (``checkpoints``, ``None`` when the notebook made none or it is over :data:`CHECKPOINT_MAX_BYTES`,
    then said in ``note``).
    """
    from distributed import Event, get_worker

    from covbook.book.cache import resolve_device

    worker = get_worker()
    got = _identity()
    if got != expect:
        raise RuntimeError(f"worker {worker.address} runs other covbook code or versions than the client "
                           f"({got['environment']} against {expect['environment']})")
    if resolve_device(job["params"].get("device", "auto")) != job["device"]:
        raise RuntimeError(f"worker {worker.address} resolves device {job['params'].get('device')!r} to another "
                           f"device than {job['device']!r}; pass --device explicitly")
    scratch = Path(tempfile.mkdtemp(prefix=f"covbook-{job['name']}-", dir=worker.local_directory))
    try:
        scratch_tree(scratch, job, files, checkpoints)
        rundir = scratch / ".covbook" / "tmp" / "job"
        rundir.mkdir(parents=True)
        job_file = rundir / f"{job['name']}.job.json"
        write_json_atomic(job_file, {**job, "root": str(scratch), "rundir": str(rundir), "parent": os.getpid(),
                                     "commit": False})
        with open(rundir / "log", "wb") as log:
            proc = subprocess.Popen([sys.executable, "-m", "covbook.book.runner", str(job_file)],
                                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            event, asked = Event(stop), time.monotonic()
            while proc.poll() is None:  # the notebook's end is seen within 0.1 s, the stop event within POLL_S
                time.sleep(0.1)
                if time.monotonic() - asked > POLL_S:
                    if event.is_set() or _released(worker):
                        raise RuntimeError("stopped by the client")
                    asked = time.monotonic()
        finally:
            _stop_process(proc)
        try:
            outcome = read_json(job_file.with_suffix(".result.json"), dict)
        except (OSError, DamagedFile):
            tail = (rundir / "log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"the notebook's process on {worker.address} exited with status "
                               f"{proc.returncode}\n{tail}".strip()) from None
        name = job["name"]
        nb, claims = rundir / f"{name}.ipynb", rundir / f"{name}.claims.json"
        packed, note = returned_checkpoints(scratch, job, outcome)
        return {"outcome": {k: outcome[k] for k in ("name", "meta", "error")}, "worker": worker.address,
                "notebook": nb.read_bytes() if nb.is_file() else None,
                "claims": claims.read_bytes() if claims.is_file() else None,
                "checkpoints": packed, "note": note}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def scratch_tree(scratch: Path, job: dict, files: dict[str, bytes], checkpoints: dict[str, bytes] | None) -> None:
    """Fill a job's scratch tree: ``notebooks/`` from ``files``, and the job's checkpoint folder (where the
    runner's :func:`covbook.book.runner.checkpoint_folder` puts it) from ``checkpoints``."""
    from covbook.book.runner import checkpoint_folder

    (scratch / "notebooks").mkdir()
    for rel, data in files.items():
        dst = scratch / "notebooks" / rel
        if ".." in Path(rel).parts or Path(rel).is_absolute():
            raise RuntimeError(f"refusing a notebook file outside the scratch tree: {rel}")
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(data)
    (scratch / "_config.yml").write_text("# scratch tree of one covbook job on a Dask worker\n")
    if checkpoints is not None:
        unpack_checkpoints(checkpoints, checkpoint_folder(Paths(scratch), job["name"], job["digest"]))


def returned_checkpoints(scratch: Path, job: dict, outcome: dict) -> tuple[dict[str, bytes] | None, str | None]:
    """What a finished job returns of its checkpoint folder: the packed folder of a successful run
    (``None`` for a failed one, or when it made none) and a note when the folder is too large to carry."""
    from covbook.book.runner import checkpoint_folder

    if outcome.get("error") is not None:
        return None, None
    try:
        return pack_checkpoints(checkpoint_folder(Paths(scratch), job["name"], job["digest"])), None
    except CheckpointsTooLarge as err:
        return None, f"{err}: not brought back, the next run of {job['name']} trains afresh"


def _released(worker) -> bool:
    """Whether the scheduler no longer wants this task (cancelled, or its client is gone, e.g. ``kill -9``)."""
    from distributed.worker import thread_state

    ts = worker.state.tasks.get(getattr(thread_state, "key", None))
    return ts is not None and ts.state == "cancelled"


def _stop_process(proc: subprocess.Popen) -> None:
    """SIGTERM (the runner's worker stops its kernel), then SIGKILL after a grace period."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# ----------------------------------------------------------------------------- on the client


def _notebook_files(paths: Paths) -> dict[str, bytes]:
    """The files of ``notebooks/`` (sources, profiles, rules in sub-folders), by relative path: what a scratch
    tree needs."""
    root = paths.notebooks.resolve()
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)}


def outgoing_checkpoints(paths: Paths, name: str, digest: str, *, force: bool,
                         say=None) -> dict[str, bytes] | None:
    """The checkpoints a job carries to its worker: its key's folder in ``paths`` (``None`` with ``force``,
    which retrains, or when there is none).  Folders of other keys are removed, as a local run does
    (:func:`covbook.book.runner.prune_checkpoints`); the current one stays until a successful job replaces it.
    ``say``: where a note goes when the folder is over :data:`CHECKPOINT_MAX_BYTES` (then ``None``).
    """
    from covbook.book.runner import prune_checkpoints

    here = prune_checkpoints(paths, name, digest)
    if force:
        return None
    try:
        return pack_checkpoints(here)
    except CheckpointsTooLarge as err:
        if say is not None:
            say(f"  note    {name}: {err}: not sent, the job trains afresh")
        return None


def _collect(fut, paths: Paths, name: str, rundir: Path, digest: str, say=None):
    """Commit a finished future's outputs and checkpoints into ``paths`` (:func:`commit_with_checkpoints`);
    a failed Result if it raised.  ``say``: where the job's note goes."""
    from covbook.book.runner import Result

    try:
        payload = fut.result()
    except Exception as err:  # noqa: BLE001 - a killed worker (KilledWorker), a refused worker, a lost scheduler
        return Result(name, "failed", 0.0, f"on the cluster: {type(err).__name__}: {err}")
    for suffix, data in ((".ipynb", payload["notebook"]), (".claims.json", payload["claims"])):
        if data is not None:
            (rundir / f"{name}{suffix}").write_bytes(data)
    if payload.get("note") and say is not None:
        say(f"  note    {name}: {payload['note']}")
    return Result(**commit_with_checkpoints(paths, {**payload["outcome"], "rundir": str(rundir)},
                                            payload.get("checkpoints"), digest))


def run_trees(
    cluster: Cluster,
    trees: list[tuple[Paths, int]],
    names: list[str] | None,
    *,
    profile: str,
    device: str,
    force: bool = False,
    progress: bool = True,
    rehearse: bool = False,
) -> list[list]:
    """Run ``names`` in every (tree, seed) of ``trees`` on the cluster, all jobs at once; Results per tree.

    Plans and cache checks are the local pool's (:func:`covbook.book.runner.plan_jobs`,
    :func:`covbook.book.cache.is_cached`); call it holding the lock of every tree.  Raises
    :class:`covbook.book.runner.Interrupted` on Ctrl-C or SIGTERM, listing what finished and what not.
    """
    import dask
    from distributed import Event
    from tqdm import tqdm

    from covbook.book import runner
    from covbook.book.cache import is_cached

    dev = _resolve_device(cluster, device)
    plans = [runner.plan_jobs(p, names, profile=profile, device=device, seed=seed, rehearse=rehearse,
                              resolved_device=dev) for p, seed in trees]
    label = (lambda i, name: name) if len(trees) == 1 else (lambda i, name: f"{name} (seed {trees[i][1]})")
    results: list[list] = [[] for _ in trees]
    todo = []
    bar = tqdm(total=sum(map(len, plans)), desc=f"notebooks ({profile}, {cluster.spec})", unit="nb",
               disable=not progress, file=sys.stderr)
    for i, ((paths, _), plan) in enumerate(zip(trees, plans)):
        runner.clean_stale(paths)
        for job in plan:
            if not force and is_cached(paths, job.name, job.digest):
                results[i].append(runner.Result(job.name, "cached", 0.0))
                (paths.failed / f"{job.name}.ipynb").unlink(missing_ok=True)  # no longer applies
                bar.write(f"  cached  {label(i, job.name)}")
                bar.update(1)
            else:
                todo.append((i, job))
    run_id = f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    rundirs = [paths.tmp / run_id for paths, _ in trees]
    profile_key = profile + ("+rehearse" if rehearse else "")
    client = cluster.client
    stop = Event(f"covbook-stop-{run_id}", client=client)
    pending: dict = {}
    try:
        if todo:
            for d in rundirs:
                d.mkdir(parents=True, exist_ok=True)
            [files] = client.scatter([_notebook_files(trees[0][0])], hash=False)  # one future: the whole folder
            expect = _identity()
            # a job's checkpoints ride in its task (at most CHECKPOINT_MAX_BYTES): no warning for that
            big = {"distributed.admin.large-graph-warning-threshold": f"{CHECKPOINT_MAX_BYTES + (16 << 20)}B"}
            for i, job in todo:
                payload = {"name": job.name, "params": job.params, "digest": job.digest, "device": job.device,
                           "threads": cluster.threads, "rehearse": rehearse, "force": force}
                ckpt = outgoing_checkpoints(trees[i][0], job.name, job.digest, force=force, say=bar.write)
                with dask.config.set(big):
                    fut = client.submit(run_remote, payload, files, expect, stop.name, ckpt, pure=False,
                                        key=f"covbook-{job.name}-seed{trees[i][1]}-{run_id}")
                pending[fut] = (i, job)
        while pending:
            for fut in [f for f in pending if f.done()]:
                i, job = pending.pop(fut)
                r = _collect(fut, trees[i][0], job.name, rundirs[i], job.digest, say=bar.write)
                results[i].append(r)
                if r.status == "ok":
                    runner._record_timing(trees[i][0], job, r, profile_key)
                mark = "ok    " if r.status == "ok" else "FAILED"
                bar.write(f"  {mark}  {label(i, r.name)}  {r.seconds:6.1f} s" + (f"\n          {r.error}" if r.error else ""))
                bar.update(1)
            time.sleep(0.1)
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not interrupt the clean-up
        try:
            stop.set()  # running jobs stop their notebooks
            client.cancel([f for f in pending if not f.done()], force=True)
            for fut, (i, job) in list(pending.items()):  # finished before it could be stopped: kept
                if fut.status == "finished":
                    del pending[fut]
                    results[i].append(_collect(fut, trees[i][0], job.name, rundirs[i], job.digest, say=bar.write))
        finally:
            bar.close()
            for d in rundirs:
                shutil.rmtree(d, ignore_errors=True)
            signal.signal(signal.SIGINT, signal.default_int_handler)
        done = [(i, r) for i, rs in enumerate(results) for r in rs]
        raise runner.Interrupted([r for _, r in done], [label(i, job.name) for i, job in pending.values()]) from None
    bar.close()
    for d in rundirs:
        shutil.rmtree(d, ignore_errors=True)
    return [sorted(rs, key=lambda r, i=i: [j.name for j in plans[i]].index(r.name)) for i, rs in enumerate(results)]
