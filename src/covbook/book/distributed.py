"""Run notebooks on a Dask cluster: ``covbook run|sweep --cluster SPEC``.

The client submits each job to ``client.get_executor()`` and alone moves the outputs into place
(:func:`covbook.book.runner.run_trees`); workers share its filesystem and checkout (as on SLURM).  A job whose worker
dies runs again on another (:data:`ALLOWED_FAILURES`); a stop sets a Dask ``Event`` the jobs poll.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from covbook.book.config import UsageError
from covbook.book.runner import LocalPool

__all__ = ["Cluster", "parse_cluster", "open_cluster", "ALLOWED_FAILURES"]

ALLOWED_FAILURES = 3  # worker deaths a job survives on a local cluster before it is reported failed
CONNECT_TIMEOUT_S = 20
LOCAL_WORKERS_PER_CPU = 4  # ``local:N`` starts N worker processes on this machine: at most this many per CPU


def parse_cluster(spec: str) -> tuple[str, object]:
    """``("local", N)`` (1 <= N <= :data:`LOCAL_WORKERS_PER_CPU` per CPU), ``("file", Path)`` (a scheduler file
    that exists) or ``("address", spec)`` (Dask reads it when it connects); a :class:`UsageError` otherwise.

    Examples
    --------
    >>> parse_cluster("local:2")
    ('local', 2)
    >>> parse_cluster("tcp://10.0.0.1:8786")
    ('address', 'tcp://10.0.0.1:8786')
    """
    if spec.startswith("local:"):
        n, most = spec.removeprefix("local:"), LOCAL_WORKERS_PER_CPU * (os.cpu_count() or 1)
        if not (n.isascii() and n.isdigit() and 1 <= int(n) <= most):
            raise UsageError(f"--cluster local:N needs a number of worker processes from 1 to {most} "
                             f"({LOCAL_WORKERS_PER_CPU} per CPU of this machine; for more, start a `dask scheduler` "
                             f"and workers and pass tcp://HOST:PORT), got {spec!r}")
        return "local", int(n)
    if spec.endswith(".json"):
        if not Path(spec).is_file():  # Dask would wait for it forever
            raise UsageError(f"--cluster: no scheduler file {spec} (start one with "
                             f"`dask scheduler --scheduler-file {spec}`)")
        return "file", Path(spec)
    try:  # no host, or a port out of 1-65535: Dask would try to connect until its timeout
        url = urlsplit(spec)
        ok = "://" in spec and bool(url.hostname) and url.port != 0
    except ValueError:
        ok = False
    if not ok:
        raise UsageError("--cluster must be local:N (N worker processes here), a scheduler file PATH.json or a "
                         f"scheduler address SCHEME://HOST:PORT with a port from 1 to 65535; got {spec!r}")
    return "address", spec


@contextmanager
def open_cluster(spec: str) -> Iterator[Cluster]:
    """Start (``local:N``) or connect to a Dask cluster for the block; failing that, a :class:`UsageError`."""
    kind, value = parse_cluster(spec)
    try:
        import dask
        from distributed import Client, LocalCluster
    except ImportError as err:
        raise UsageError("--cluster needs Dask distributed (the cluster extra): pip install -e '.[cluster]'") from err
    with contextlib.ExitStack() as stack:  # closed in reverse: the client, the local cluster, its scratch folder
        stack.enter_context(dask.config.set({"distributed.scheduler.allowed-failures": ALLOWED_FAILURES}))
        if kind == "local":
            import logging

            scratch = stack.enter_context(tempfile.TemporaryDirectory(prefix="covbook-dask-",
                                                                      ignore_cleanup_errors=True))
            local = stack.enter_context(LocalCluster(n_workers=value, threads_per_worker=1, processes=True,
                                                     dashboard_address=None, local_directory=scratch,
                                                     silence_logs=logging.ERROR))
            client = stack.enter_context(Client(local))
            client.register_plugin(_own_process_group(), name="covbook-own-process-group")
        else:
            try:
                client = stack.enter_context(Client(value if kind == "address" else None, timeout=CONNECT_TIMEOUT_S,
                                                    scheduler_file=str(value) if kind == "file" else None))
            except Exception as err:  # noqa: BLE001 - Dask's: an unknown scheme, no port, no scheduler there
                where = "at the address its file names" if kind == "file" else "at that address"
                raise UsageError(f"--cluster {spec}: cannot connect to the scheduler {where} "
                                 f"({type(err).__name__}: {err})") from None
        yield Cluster(value if kind == "local" else 1, spec, client)


def _own_process_group():
    """A local cluster's worker plugin: the worker leaves the terminal's process group (Ctrl-C reaches only the
    client, which stops the jobs and closes the cluster in order) and closes its own client at teardown."""
    from distributed import WorkerPlugin

    class OwnProcessGroup(WorkerPlugin):
        def setup(self, worker) -> None:
            with contextlib.suppress(OSError):  # a session leader, or not allowed: Ctrl-C then reaches it too
                os.setpgid(0, 0)

        async def teardown(self, worker) -> None:
            from inspect import isawaitable

            from distributed.client import _global_clients

            for c in list(_global_clients.values()):  # the worker's own client (the jobs' stop events)
                with contextlib.suppress(Exception):
                    closing = c.close()  # a coroutine on the worker's event loop: awaited, not dropped
                    if isawaitable(closing):
                        await closing

    return OwnProcessGroup()


@dataclass
class Cluster(LocalPool):
    """A Dask cluster as :func:`covbook.book.runner.run_trees`' engine: ``jobs`` local workers share the cores
    (``local:N``; a remote cluster: 1, its workers' environment decides), ``label`` its ``--cluster SPEC``."""

    client: object = None  # distributed.Client

    def resolve_device(self, device: str) -> str:
        """``auto`` resolved where the notebooks run: on a worker (waits for one)."""
        from covbook.book.cache import resolve_device

        if device == "cpu":
            return "cpu"
        self.client.wait_for_workers(1)
        return self.client.submit(resolve_device, device, pure=False).result()

    def executor(self, n_jobs: int):
        return self.client.get_executor(pure=False)

    def stop_signal(self, run_id: str):
        """The run's stop signal, read by its jobs on the workers: a Dask ``Event``."""
        from distributed import Event

        return Event(f"covbook-stop-{run_id}")
