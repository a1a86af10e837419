"""One writer per tree: ``covbook run``, ``build`` and ``clean`` hold ``.covbook/lock``.

The lock is the ``filelock`` package's (an OS file lock, released by the kernel
when its holder dies, so ``kill -9`` leaves no stale lock).  Next to it,
``.covbook/lock.json`` says who holds it (pid, command, start time), so a second
invocation can say whom it is waiting for.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from covbook._jsonio import DamagedFile, read_json, write_json_atomic

__all__ = ["Busy", "tree_lock"]


class Busy(RuntimeError):
    """Another covbook command holds the tree's lock (exit status 1)."""


def _holder(info: Path) -> str:
    try:
        who = read_json(info, dict)
    except (OSError, DamagedFile):
        return "another covbook process"
    return f"pid {who.get('pid')} ({who.get('command')}, since {who.get('since')})"


@contextmanager
def tree_lock(lock_path: Path, command: str, *, wait: bool = False) -> Iterator[None]:
    """Hold the tree's lock for the duration of the block.

    Raises :class:`Busy`, naming the holder, when another process holds it and
    ``wait`` is false; with ``wait``, blocks until it is free (saying so once).
    """
    from filelock import FileLock, Timeout

    lock_path.parent.mkdir(parents=True, exist_ok=True)
    info = lock_path.with_name(lock_path.name + ".json")
    lock = FileLock(str(lock_path))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        if not wait:
            raise Busy(f"this tree is locked by {_holder(info)}; wait for it to finish, or pass --wait") from None
        print(f"covbook: waiting for {_holder(info)} to release {lock_path} ...", file=sys.stderr, flush=True)
        lock.acquire()
    try:
        write_json_atomic(info, {"pid": os.getpid(), "command": command,
                                 "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
        yield
    finally:
        info.unlink(missing_ok=True)
        lock.release()
