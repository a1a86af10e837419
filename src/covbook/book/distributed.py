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

What runs where.  The jobs are the local pool's (:func:`covbook.book.runner.run_trees`): the
client (the ``covbook`` command) holds the tree's lock, plans every job, submits each to
``client.get_executor()`` and is the only writer of the tree.  A worker runs
:func:`covbook.book.runner.run_job` in a scratch tree in its own local directory, built from the
files of ``notebooks/`` (one task, :func:`_given`, which the scheduler recomputes when the worker
holding it dies, where scattered data would be lost with it) and the job's checkpoint folder (chapter
10; at most :data:`covbook.book.runner.CHECKPOINT_MAX_BYTES` each way), and *returns* the executed
notebook, its claims and its checkpoints as bytes, which the client commits as a local run does.
Workers therefore need the same covbook checkout (science code, Python, torch, numpy: each job
checks) but no shared filesystem.

Ctrl-C or SIGTERM sets a Dask ``Event`` that every running job polls (it then
stops its notebook's process, whose kernel goes with it), cancels the queued
futures, keeps what finished and closes a local cluster.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from covbook.book.config import DEVICES, Paths, UsageError
from covbook.book.runner import CHECKPOINT_MAX_BYTES, notebook_files, outgoing_checkpoints, run_job, run_trees

__all__ = ["Cluster", "parse_cluster", "open_cluster", "run_on_worker", "run_trees", "ALLOWED_FAILURES"]

EXTRA = "pip install -e '.[cluster]'"
#: worker deaths a job survives on a local cluster before it is reported failed (Dask's default is 3)
ALLOWED_FAILURES = 3
CONNECT_TIMEOUT_S = 20
SCHEMES = ("tcp", "tls", "ws", "wss")


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
            raise UsageError(f"--cluster: no scheduler file {spec} (start one with "
                             f"`dask scheduler --scheduler-file {spec}`)")
        return "file", path
    raise UsageError(expected)


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
    with dask.config.set({"distributed.scheduler.allowed-failures": ALLOWED_FAILURES}):
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

        async def teardown(self, worker) -> None:
            from inspect import isawaitable

            from distributed.client import _global_clients

            for c in list(_global_clients.values()):  # the worker's own client (the jobs' stop events)
                with contextlib.suppress(Exception):
                    closing = c.close()  # a coroutine on the worker's event loop: awaited, not dropped
                    if isawaitable(closing):
                        await closing

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


# ----------------------------------------------------------------------------- the cluster as an executor


@dataclass(frozen=True)
class DaskStop:
    """A cluster run's stop signal, read on a worker: the run's Dask ``Event`` is set, or the scheduler no
    longer wants this task (cancelled, or its client is gone, e.g. ``kill -9``)."""

    name: str

    def __call__(self) -> bool:
        from distributed import Event, get_worker

        return Event(self.name).is_set() or _released(get_worker())

    def set(self) -> None:
        """Stop the run (on the client)."""
        from distributed import Event

        Event(self.name).set()


def _released(worker) -> bool:
    """Whether the scheduler no longer wants the task this thread runs."""
    from distributed.worker import thread_state

    ts = worker.state.tasks.get(getattr(thread_state, "key", None))
    return ts is not None and ts.state == "cancelled"


def _given(files: dict[str, bytes]) -> dict[str, bytes]:
    """The notebooks folder as a task's result: unlike scattered data, the scheduler computes it again (from the
    bytes in the task) when the worker holding it dies, so the jobs that need it are run again, not cancelled."""
    return files


def run_on_worker(job: dict, files: dict[str, bytes], expect: dict, stop: DaskStop,
                  checkpoints: dict[str, bytes] | None = None) -> dict:
    """:func:`covbook.book.runner.run_job` in a scratch tree on this Dask worker, once it has checked that it
    runs the client's covbook code and versions (``expect``, :func:`_identity`) and resolves its device alike."""
    from distributed import get_worker

    from covbook.book.cache import resolve_device

    worker = get_worker()
    got = _identity()
    if got != expect:
        raise RuntimeError(f"worker {worker.address} runs other covbook code or versions than the client "
                           f"({got['environment']} against {expect['environment']})")
    if resolve_device(job["params"].get("device", "auto")) != job["device"]:
        raise RuntimeError(f"worker {worker.address} resolves device {job['params'].get('device')!r} to another "
                           f"device than {job['device']!r}; pass --device explicitly")
    return run_job(job, stop, files, checkpoints, scratch_in=worker.local_directory)


@dataclass
class Cluster:
    """A Dask cluster as :func:`covbook.book.runner.run_trees`' engine: its client, the spec it came from,
    threads per notebook.  Its executor is ``client.get_executor()``; each job carries the notebooks folder
    (one task the scheduler keeps and recomputes, :func:`_given`) and its checkpoints."""

    client: object  # distributed.Client
    spec: str
    threads: int | None  # COVBOOK_THREADS of each notebook; None: the worker's own environment decides
    files: object = None  # the notebooks folder's future, once a run has begun

    @property
    def label(self) -> str:
        return self.spec

    def resolve_device(self, device: str) -> str:
        """``auto`` resolved where the notebooks run: on a worker (waits for one)."""
        from covbook.book.cache import resolve_device

        if device not in DEVICES:
            raise UsageError(f"unknown device {device!r}; valid: {', '.join(DEVICES)}")
        if device == "cpu":
            return "cpu"
        self.client.wait_for_workers(1)
        return self.client.submit(resolve_device, device, pure=False).result()

    def executor(self, paths: Paths, n_jobs: int | None = None):
        self.files = self.client.submit(_given, notebook_files(paths), pure=False)
        return self.client.get_executor(pure=False)

    def stop_signal(self, run_id: str, rundir: Path) -> DaskStop:
        return DaskStop(f"covbook-stop-{run_id}")

    def submit(self, executor, job: dict, paths: Paths, stop: DaskStop, say):
        import dask

        ckpt = outgoing_checkpoints(paths, job["name"], job["digest"], force=job["force"], say=say)
        # a job's checkpoints ride in its task (at most CHECKPOINT_MAX_BYTES): no warning for that
        big = {"distributed.admin.large-graph-warning-threshold": f"{CHECKPOINT_MAX_BYTES + (16 << 20)}B"}
        with dask.config.set(big):
            return executor.submit(run_on_worker, job, self.files, _identity(), stop, ckpt,
                                   key=f"covbook-{job['name']}-{job['key']}")
