"""One writer per tree: the commands that write it hold ``.covbook/lock`` (``filelock``, released when its
process exits, ``kill -9`` too); ``.covbook/lock.json`` names the holder.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

from covbook._jsonio import DamagedFile, read_json, write_json_atomic

__all__ = ["Busy", "tree_lock"]


class Busy(RuntimeError):
    """Another covbook command holds the tree's lock, or ``.covbook/`` cannot be written (exit status 1)."""


def _holder(info: Path) -> str:
    """Who holds the lock, by its record."""
    try:
        who = read_json(info, dict)
    except (OSError, DamagedFile):
        return "another covbook process"
    return f"pid {who.get('pid')} ({who.get('command')}, since {who.get('since')})"


@contextmanager
def tree_lock(lock_path: Path, command: str, *, wait: bool = False) -> Iterator[FileLock]:
    """Hold the tree's lock for the block, recording ``command`` as its holder's (with pid and start time); when
    another process holds it, :class:`Busy` naming the holder, or with ``wait`` a wait (said once)."""
    info, lock = lock_path.with_name(lock_path.name + ".json"), FileLock(lock_path)
    try:
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            lock.acquire(timeout=0)
        except Timeout:
            if not wait:
                raise Busy(f"this tree is locked by {_holder(info)}; wait for it to finish, or pass --wait") from None
            print(f"covbook: waiting for {_holder(info)} to release {lock_path} ...", file=sys.stderr, flush=True)
            lock.acquire()
        write_json_atomic(info, {"pid": os.getpid(), "command": command, "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    except OSError as err:
        lock.release()
        raise Busy(f"cannot lock the tree: {lock_path} cannot be written ({err.strerror}); covbook keeps its lock, "
                   f"temporaries and timings in {lock_path.parent}, which must be writable") from None
    try:
        yield lock
    finally:
        info.unlink(missing_ok=True)
        lock.release()
