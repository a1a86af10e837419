"""Run records (``book/generated/runs/NAME.json``): the one reader of what a notebook run wrote.

A record (written by :mod:`covbook.book.runner`) holds the notebook, its parameters, the cache key, the
seconds, the device, whether it was a rehearsal, its status and the SHA-256 of the outputs it committed.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path

from covbook._jsonio import DamagedFile, read_json

__all__ = ["RunRecord", "read_run", "run_ok"]


class RunRecord(Mapping):
    """One run record: typed accessors over the stored JSON object (a read-only mapping of it).

    >>> r = RunRecord({"notebook": "01_a", "status": "ok", "parameters": {"profile": "smoke", "seed": 3}})
    >>> r.ok, r.profile, r.seed, r["notebook"]
    (True, 'smoke', 3, '01_a')
    """

    def __init__(self, data: Mapping[str, object], path: str | os.PathLike | None = None) -> None:
        if not isinstance(data, Mapping):
            raise ValueError(f"a run record must be a JSON object, got {type(data).__name__}")
        if not isinstance(data.get("parameters", {}), (Mapping, type(None))):
            raise DamagedFile(path or "run record", "its parameters are not an object")
        self._data = dict(data)

    def __getitem__(self, key: str) -> object:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    @property
    def status(self) -> str:
        """``ok`` or ``failed``."""
        return str(self._data.get("status", "unknown"))

    @property
    def ok(self) -> bool:
        """Whether the run succeeded."""
        return self.status == "ok"

    @property
    def parameters(self) -> dict[str, object]:
        """The parameters the notebook ran with (profile, seed, device and its sizes)."""
        return dict(self._data.get("parameters") or {})

    @property
    def seed(self) -> int | None:
        """The seed the run used."""
        s = self.parameters.get("seed")
        return s if isinstance(s, int) else None

    @property
    def key(self) -> str | None:
        """The cache key (content hash) the run was made for."""
        h = self._data.get("hash")
        return h if isinstance(h, str) else None

    @property
    def device_used(self) -> str:
        """The device the run resolved (``cpu`` or ``cuda``); empty when not recorded."""
        return str(self._data.get("device_used") or "")

    @property
    def rehearsal(self) -> bool:
        """Whether the run was a rehearsal (the full profile's shapes at short lengths)."""
        return bool(self._data.get("rehearsal"))

    @property
    def profile(self) -> str | None:
        """The profile the run used."""
        p = self.parameters.get("profile")
        return None if p is None else str(p)

    @property
    def seconds(self) -> float | None:
        """Wall seconds of the run."""
        s = self._data.get("seconds")
        return float(s) if isinstance(s, int | float) else None

    @property
    def outputs(self) -> dict[str, str] | None:
        """``{"claims": sha256, "notebook": sha256}`` of the committed outputs (``None`` in older records)."""
        o = self._data.get("outputs")
        return dict(o) if isinstance(o, Mapping) else None

    @property
    def error(self) -> str | None:
        """Why a failed run failed."""
        e = self._data.get("error")
        return None if e is None else str(e)


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
