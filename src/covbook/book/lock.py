"""One writer per tree: ``covbook run``, ``build`` and ``clean`` hold ``.covbook/lock``.

The lock is an OS file lock (``flock``) on ``.covbook/lock``, released by the
kernel when the last process holding it dies, so ``kill -9`` leaves no stale
lock.  It belongs to the open file, not to the process: a child started with
:attr:`TreeLock.fd` in ``pass_fds`` (the build's ``jupyter-book``, a run's
workers) holds the tree until it exits too, even if its parent was killed.
Next to it, ``.covbook/lock.json`` says who holds it (pid, command, start time),
so a second invocation can say whom it is waiting for.

Not ``filelock``: its release unlocks the open file (``LOCK_UN``) and it drops the lock in a
forked child, so a child holding the file (the pool's processes, ``jupyter-book``) would lose the tree.
"""

from __future__ import annotations

import errno
import fcntl
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from covbook._jsonio import DamagedFile, read_json, write_json_atomic

__all__ = ["Busy", "Unwritable", "TreeLock", "tree_lock"]


class Busy(RuntimeError):
    """Another covbook command holds the tree's lock (exit status 1)."""


class Unwritable(Busy):
    """``.covbook/`` cannot be written, so the tree cannot be locked (exit status 1)."""


@dataclass(frozen=True)
class TreeLock:
    """The held lock: ``fd`` is the locked file, to pass to children that must hold the tree too."""

    fd: int


ORPHAN_GRACE = 10.0
"""Seconds a command waits for a lock whose recorded holder is gone (``kill -9``): its pool and notebook
processes hold the file until they notice, within about a second, and stop themselves."""


def _holder_gone(info: Path) -> bool:
    """Whether the process the lock's record names has exited (its children may still hold the lock)."""
    try:
        pid = read_json(info, dict).get("pid")
    except (OSError, DamagedFile):
        return False
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise
        return False
    return True


def _wait_for_orphans(fd: int, info: Path) -> bool:
    """Take the lock once the processes a killed holder left behind are gone (at most :data:`ORPHAN_GRACE` s)."""
    deadline = time.monotonic() + ORPHAN_GRACE
    while _holder_gone(info) and time.monotonic() < deadline:
        time.sleep(0.1)
        if _try_lock(fd):
            return True
    return False


def _holder(info: Path) -> str:
    try:
        who = read_json(info, dict)
    except (OSError, DamagedFile):
        return "another covbook process"
    return f"pid {who.get('pid')} ({who.get('command')}, since {who.get('since')})"


def _unwritable(path: Path, err: OSError) -> Unwritable:
    return Unwritable(f"cannot lock the tree: {path} cannot be written ({err.strerror}); covbook keeps its lock, "
                      f"temporaries and timings in {path.parent}, which must be writable")


@contextmanager
def tree_lock(lock_path: Path, command: str, *, wait: bool = False) -> Iterator[TreeLock]:
    """Hold the tree's lock for the duration of the block.

    Raises :class:`Busy`, naming the holder, when another process holds it and
    ``wait`` is false (a holder killed with ``kill -9`` leaves processes that hold the lock until they
    stop themselves: for those it waits up to :data:`ORPHAN_GRACE` seconds); with ``wait``, blocks until it
    is free (saying so once).
    Raises :class:`Unwritable` when ``.covbook/`` cannot be written.
    """
    info = lock_path.with_name(lock_path.name + ".json")
    try:
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:
        raise _unwritable(lock_path, err) from None
    try:
        if not _try_lock(fd) and not _wait_for_orphans(fd, info):
            if not wait:
                raise Busy(f"this tree is locked by {_holder(info)}; wait for it to finish, or pass --wait")
            print(f"covbook: waiting for {_holder(info)} to release {lock_path} ...", file=sys.stderr, flush=True)
            fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            write_json_atomic(info, {"pid": os.getpid(), "command": command,
                                     "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
        except OSError as err:
            raise _unwritable(info, err) from None
        try:
            yield TreeLock(fd)
        finally:
            info.unlink(missing_ok=True)
    finally:
        os.close(fd)  # releases the lock (unless a child still holds the file open)
