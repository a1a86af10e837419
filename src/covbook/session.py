"""Notebook session set-up: seeding, device choice and determinism.

Every chapter's first code cell calls :func:`setup` with its ``profile``,
``seed`` and ``device`` parameters, so a notebook opened alone in Jupyter runs
exactly as it does under ``covbook run``.
"""

from __future__ import annotations

import os
import random
from collections.abc import MutableMapping
from pathlib import Path

import numpy as np
import torch

from covbook._validate import check_seed, resolve_device
from covbook.book.config import PROFILES, PROFILES_FILE, UsageError, load_profiles, project_root
from covbook.claims import NOTEBOOK_ENV  # set by `covbook run` for the notebook it runs

__all__ = ["PROFILES", "setup", "profile_sizes", "apply_profile"]

#: The copy of ``notebooks/profiles.yml`` shipped in the package (a link to it in a checkout),
#: for a notebook opened outside a checkout (Colab, Binder, a download).
PACKAGED_PROFILES = Path(__file__).resolve().parent / "profiles.yml"


def profile_sizes(notebook: str, profile: str) -> dict[str, object]:
    """The parameters ``profile`` sets for ``notebook`` in profiles.yml (empty for ``quick``).

    Read from the checkout's ``notebooks/profiles.yml`` when there is one, else from the copy
    shipped in the package.
    """
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {', '.join(PROFILES)}, got {profile!r}")
    try:
        path = project_root() / PROFILES_FILE
    except UsageError:
        path = PACKAGED_PROFILES
    entry = load_profiles(path).get(notebook)
    if entry is None:
        raise ValueError(f"notebook must be a chapter named in {path.name}, got {notebook!r}")
    return dict(entry.get(profile) or {})


def apply_profile(notebook: str, profile: str, parameters: MutableMapping[str, object]) -> dict[str, object]:
    """Set ``profile``'s sizes for ``notebook`` in ``parameters`` (a notebook's ``globals()``); return them.

    Does nothing under ``covbook run``, which injects the profile's parameters itself (and a
    rehearsal's lengths, which must not be replaced).
    """
    if os.environ.get(NOTEBOOK_ENV):
        return {}
    sizes = profile_sizes(notebook, profile)
    unknown = sorted(set(sizes) - set(parameters))
    if unknown:
        raise ValueError(f"profiles.yml sets {', '.join(unknown)} for {notebook}, which its parameters cell lacks")
    parameters.update(sizes)
    return sizes


def setup(profile: str = "quick", seed: int = 0, device: str = "auto", quiet: bool = False, *,
          notebook: str | None = None, parameters: MutableMapping[str, object] | None = None) -> torch.device:
    """Seed every generator, pick the device and make CPU runs deterministic.

    Returns the torch device (``auto`` means CUDA when available).  Threads can be
    capped with ``COVBOOK_THREADS`` (the runner sets it when running notebooks
    in parallel).  With ``notebook`` and ``parameters`` (the notebook's ``globals()``),
    a reader's ``profile = "smoke"`` (or ``"full"``) in the parameters cell sets that
    profile's sizes from profiles.yml over the cell's values (``quick``, the cell's own
    values, changes nothing); under ``covbook run`` the runner's parameters are kept.

    Examples
    --------
    >>> setup("smoke", 0, "cpu", quiet=True).type
    'cpu'
    """
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {', '.join(PROFILES)}, got {profile!r}")
    seed = check_seed(seed)
    dev = resolve_device(device)
    random.seed(seed)
    np.random.seed(seed)  # noqa: NPY002 - notebooks may use the legacy global generator
    torch.manual_seed(seed)
    threads = os.environ.get("COVBOOK_THREADS")
    if threads:
        torch.set_num_threads(max(1, int(threads)))
    torch.use_deterministic_algorithms(dev.type == "cpu", warn_only=True)
    sizes = apply_profile(notebook, profile, parameters) if notebook is not None and parameters is not None else {}
    if sizes and not quiet:
        print(f"covbook: profile {profile} sets " + ", ".join(f"{k}={v!r}" for k, v in sizes.items()))
    if not quiet:
        print(f"covbook run: profile={profile}, device={dev.type}, seed={seed}, torch {torch.__version__}")
    return dev
