"""Notebook session set-up: seeding, device choice and determinism.

Every chapter's first code cell calls :func:`setup` with its ``profile``,
``seed`` and ``device`` parameters, so a notebook opened alone in Jupyter runs
exactly as it does under ``covbook run``.
"""

from __future__ import annotations

import os
import random
import sys

import numpy as np
import torch

from covbook._validate import check_seed, resolve_device
from covbook.book.config import PROFILES

__all__ = ["PROFILES", "setup"]


def setup(profile: str = "quick", seed: int = 0, device: str = "auto", quiet: bool = False) -> torch.device:
    """Seed every generator, pick the device and make CPU runs deterministic.

    Returns the torch device (``auto`` means CUDA when available).  Threads can be
    capped with ``COVBOOK_THREADS`` (the runner sets it when running notebooks
    in parallel).

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
    _deterministic_algorithms(dev.type == "cpu")
    if not quiet:
        print(f"covbook run: profile={profile}, device={dev.type}, seed={seed}, torch {torch.__version__}")
    return dev


def _deterministic_algorithms(mode: bool) -> None:
    """``torch.use_deterministic_algorithms(mode, warn_only=True)`` without importing torch's compiler.

    The public call also sets the flag of ``torch._inductor.config`` (for
    ``torch.compile``, which covbook does not use), and importing that module loads
    the whole compiler stack: about 2 s of CPU in every kernel.  When the compiler is
    not loaded yet (and torch has the flag's setter), only torch's own flag is set;
    operations see the same setting (``torch.are_deterministic_algorithms_enabled``).
    """
    setter = getattr(torch._C, "_set_deterministic_algorithms", None)
    if setter is None or "torch._inductor.config" in sys.modules:
        torch.use_deterministic_algorithms(mode, warn_only=True)
    else:
        setter(mode, warn_only=True)
