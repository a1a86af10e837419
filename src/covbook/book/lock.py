"""One writer per tree: the commands that write it hold an ``flock`` on ``.covbook/lock``.

The lock belongs to the open file: the kernel releases it when the last process holding the file exits, so
``kill -9`` leaves no stale lock, and a child given :attr:`TreeLock.fd` in ``pass_fds`` (a run's workers, the
build's ``jupyter-book``) holds the tree until it exits.  ``.covbook/lock.json`` names the holder.
Not ``filelock``: its release unlocks the file for every process (``LOCK_UN``) and it closes the file in a
forked child, so a child could go on writing into a tree whose lock is released.
"""

from __future__ import annotations

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

    def __init__(self, path: Path, err: OSError) -> None:
        super().__init__(f"cannot lock the tree: {path} cannot be written ({err.strerror}); covbook keeps its lock, "
                         f"temporaries and timings in {path.parent}, which must be writable")


@dataclass(frozen=True)
class TreeLock:
    """The held lock: ``fd`` is the locked file, to pass to children that must hold the tree too."""

    fd: int


#: seconds to wait for the processes a holder killed with ``kill -9`` left holding the lock (they stop within ~1 s)
ORPHAN_GRACE = 10.0


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except (BlockingIOError, PermissionError):  # EWOULDBLOCK; EACCES on some filesystems
        return False
    return True


def _holder(info: Path) -> tuple[str, bool]:
    """Who holds the lock, by its record, and whether that process has exited."""
    try:
        who = read_json(info, dict)
    except (OSError, DamagedFile):
        return "another covbook process", False
    pid, gone = who.get("pid"), False
    if isinstance(pid, int) and pid > 0:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            gone = True
        except (OSError, OverflowError):  # EPERM: it lives; a pid no process can have
            pass
    return f"pid {pid} ({who.get('command')}, since {who.get('since')})", gone


@contextmanager
def tree_lock(lock_path: Path, command: str, *, wait: bool = False) -> Iterator[TreeLock]:
    """Hold the tree's lock for the block, recording ``command`` as its holder's (with pid and start time).

    Raises :class:`Busy`, naming the holder, when another process holds it (after :data:`ORPHAN_GRACE` for a
    holder that has exited); with ``wait`` it blocks instead, saying so once.  Raises :class:`Unwritable`.
    """
    info = lock_path.with_name(lock_path.name + ".json")
    try:
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:
        raise Unwritable(lock_path, err) from None
    try:
        deadline = time.monotonic() + ORPHAN_GRACE
        while not _try_lock(fd):
            who, gone = _holder(info)
            if gone and time.monotonic() < deadline:
                time.sleep(0.1)
                continue
            if not wait:
                raise Busy(f"this tree is locked by {who}; wait for it to finish, or pass --wait")
            print(f"covbook: waiting for {who} to release {lock_path} ...", file=sys.stderr, flush=True)
            fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            write_json_atomic(info, {"pid": os.getpid(), "command": command,
                                     "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
        except OSError as err:
            raise Unwritable(info, err) from None
        try:
            yield TreeLock(fd)
        finally:
            info.unlink(missing_ok=True)
    finally:
        os.close(fd)  # releases the lock, unless a child still holds the file open
