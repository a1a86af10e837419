"""JSON files of the pipeline: one atomic writer, one verifying reader.

Every JSON file the pipeline writes (claims, run records, timings) goes through
:func:`write_json_atomic`: a temporary file in the same folder, then a rename,
so a reader never sees half a file (:func:`atomic_write` does the same for any
writer, e.g. the model checkpoints of :mod:`covbook.transformer.training`).  :func:`read_json` raises
:class:`DamagedFile`, naming the file, when what is on disk does not parse
(a file truncated by a full disk or a hand edit).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

__all__ = ["DamagedFile", "atomic_write", "write_json_atomic", "read_json"]

_UMASK = os.umask(0o022)  # read once, at import (os.umask can only be read by setting it), and put back
os.umask(_UMASK)


class DamagedFile(ValueError):
    """A pipeline output that exists but does not parse (or has the wrong shape)."""

    def __init__(self, path: str | os.PathLike, reason: str) -> None:
        self.path = Path(path)
        self.reason = reason
        super().__init__(f"{self.path}: damaged ({reason})")


def atomic_write(path: str | os.PathLike, write: Callable[[str], None]) -> None:
    """Create ``path`` atomically: ``write(tmp)`` fills a temporary file in the same folder, then a rename.

    The file gets the mode a plain ``open`` would give it (not the temporary's private 0600).  On any error
    (also Ctrl-C) the temporary file is removed and ``path`` is left as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~_UMASK)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: str | os.PathLike, data: object) -> None:
    """Write JSON to ``path`` atomically (temporary file in the same folder, then rename)."""

    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=1, allow_nan=True)

    atomic_write(path, write)


def read_json(path: str | os.PathLike, expect: type | tuple[type, ...] | None = None) -> object:
    """Parse the JSON file ``path``; :class:`DamagedFile` if it does not parse or is not of type ``expect``.

    A missing file raises ``FileNotFoundError`` as usual.
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise DamagedFile(path, f"not UTF-8 text: {err.reason}") from err
    except json.JSONDecodeError as err:
        raise DamagedFile(path, f"not valid JSON: {err.msg} at line {err.lineno} column {err.colno}") from err
    if expect is not None and not isinstance(data, expect):
        names = expect.__name__ if isinstance(expect, type) else " or ".join(t.__name__ for t in expect)
        raise DamagedFile(path, f"expected a JSON {names}, found {type(data).__name__}")
    return data
