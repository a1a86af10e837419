"""Run records (``book/generated/runs/NAME.json``, ``book/edition/runs/NAME.json``): the one reader of what a
notebook run wrote.

A record (written by :mod:`covbook.book.runner`) holds the notebook, its parameters, the cache key (``hash``),
the seconds, the device, whether it was a rehearsal, its status, the commit and the SHA-256 of the outputs it
committed; a stored larger run's (:mod:`covbook.book.edition`) also the key's device and environment.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from covbook._jsonio import DamagedFile, read_json

__all__ = ["RunRecord", "read_run", "run_ok"]


def _typed(key: str, kind: type | tuple[type, ...], cast=lambda x: x, default=None) -> property:
    """A read-only field of the record: ``cast(value)`` when it is a ``kind``, else ``default``."""
    return property(lambda self: cast(self[key]) if isinstance(self.get(key), kind) else default)


class RunRecord(dict):
    """One run record: the stored JSON object, with typed fields.

    >>> r = RunRecord({"notebook": "01_a", "status": "ok", "parameters": {"profile": "smoke", "seed": 3}})
    >>> r.ok, r.profile, r.seed, r["notebook"]
    (True, 'smoke', 3, '01_a')
    """

    def __init__(self, data: Mapping[str, object], path: str | os.PathLike | None = None) -> None:
        if not isinstance(data, Mapping):
            raise ValueError(f"a run record must be a JSON object, got {type(data).__name__}")
        if not isinstance(data.get("parameters", {}), (Mapping, type(None))):
            raise DamagedFile(path or "run record", "its parameters are not an object")
        super().__init__(data)

    status = property(lambda self: str(self.get("status", "unknown")), doc="``ok`` or ``failed``.")
    ok = property(lambda self: self.status == "ok", doc="Whether the run succeeded.")
    parameters = property(lambda self: dict(self.get("parameters") or {}), doc="The parameters it ran with.")
    seed = property(lambda self: s if isinstance(s := self.parameters.get("seed"), int) else None)
    profile = property(lambda self: None if (p := self.parameters.get("profile")) is None else str(p))
    key = _typed("hash", str)  # the cache key the run was made for
    device_used = property(lambda self: str(self.get("device_used") or ""), doc="``cpu`` or the GPU, in words.")
    rehearsal = property(lambda self: bool(self.get("rehearsal")), doc="A rehearsal (full shapes, short lengths).")
    seconds = _typed("seconds", (int, float), float)  # wall seconds
    outputs = _typed("outputs", Mapping, dict)  # {"claims": sha256, "notebook": sha256} of the committed outputs
    error = property(lambda self: None if (e := self.get("error")) is None else str(e), doc="Why it failed.")


def read_run(path: str | os.PathLike) -> RunRecord | None:
    """The run record at ``path``; ``None`` when there is none.  Raises :class:`DamagedFile` if it does not parse."""
    p = Path(path)
    return RunRecord(read_json(p, dict), p) if p.is_file() else None


def run_ok(path: str | os.PathLike) -> bool:
    """Whether ``path`` holds the record of a successful run (a missing or damaged record is not)."""
    try:
        rec = read_run(path)
    except (OSError, DamagedFile):
        return False
    return rec is not None and rec.ok
