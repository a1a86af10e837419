"""Run profiles, device choice and seeding for the book's notebooks.

A profile (``smoke``, ``quick``, ``full``) is a set of papermill parameters per
notebook, kept in the one visible file ``notebooks/profiles.yml``.  A
notebook's own ``parameters`` cell holds the quick values, so ``quick`` needs no
entry; ``smoke`` and ``full`` override some of them.  Every notebook also takes
``profile``, ``device`` (auto|cpu|cuda) and ``seed``.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import torch
import yaml

from covbook._validate import resolve_device

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


def setup(profile: str = "quick", seed: int = 0, device: str = "auto", quiet: bool = False) -> torch.device:
    """Seed every generator, pick the device and make CPU runs deterministic.

    Returns the torch device (``auto`` means CUDA when available).  Threads can be
    capped with ``COVBOOK_THREADS`` (the runner sets it when running notebooks
    in parallel).
    """
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {', '.join(PROFILES)}, got {profile!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    dev = resolve_device(device)
    random.seed(seed)
    np.random.seed(seed)  # noqa: NPY002 - notebooks may use the legacy global generator
    torch.manual_seed(seed)
    threads = os.environ.get("COVBOOK_THREADS")
    if threads:
        torch.set_num_threads(max(1, int(threads)))
    torch.use_deterministic_algorithms(dev.type == "cpu", warn_only=True)
    if not quiet:
        print(f"covbook run: profile={profile}, device={dev.type}, seed={seed}, torch {torch.__version__}")
    return dev
