"""Run profiles, device choice and seeding for the book's notebooks.

A profile (``smoke``, ``quick``, ``full``) is a set of papermill parameters per
notebook, kept in the one visible file ``notebooks/profiles.yml``.  A
notebook's own ``parameters`` cell holds the quick values, so ``quick`` needs no
entry; ``smoke`` and ``full`` override some of them.  Every notebook also takes
``profile``, ``device`` (auto|cpu|cuda) and ``seed``.
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from covbook.session import setup  # noqa: F401 - re-exported for notebooks written before covbook.session

__all__ = ["PROFILES", "COMMON_PARAMETERS", "project_root", "load_profiles", "setup"]

PROFILES = ("smoke", "quick", "full")
COMMON_PARAMETERS = ("profile", "device", "seed")
PROFILES_FILE = Path("notebooks") / "profiles.yml"


def project_root(start: str | os.PathLike | None = None) -> Path:
    """The covbook checkout containing ``start`` (default: the working directory)."""
    here = Path(start or Path.cwd()).resolve()
    for p in (here, *here.parents):
        if (p / PROFILES_FILE).is_file() and (p / "_config.yml").is_file():
            return p
    raise ValueError(f"not inside a covbook checkout (no {PROFILES_FILE} above {here})")


def load_profiles(path: str | os.PathLike) -> dict[str, dict[str, dict]]:
    """Read the profiles file: ``{notebook: {profile: {param: value}}}``.

    Raises ``ValueError`` on an unknown profile name or a malformed entry.
    """
    with open(path, encoding="utf-8") as fh:
        raw = yaml.safe_load(fh) or {}
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: expected a mapping of notebook names to profiles")
    for nb, per in raw.items():
        if not isinstance(per, dict):
            raise ValueError(f"{path}: entry {nb!r} must map profile names to parameters")
        for prof, params in per.items():
            if prof not in PROFILES:
                raise ValueError(f"{path}: {nb}: unknown profile {prof!r}; valid: {', '.join(PROFILES)}")
            if params is not None and not isinstance(params, dict):
                raise ValueError(f"{path}: {nb}.{prof} must be a mapping of parameter names to values")
            per[prof] = params or {}
    return raw
