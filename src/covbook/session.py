"""Notebook session set-up: seeding, device choice and determinism.

Every chapter's first code cell calls :func:`setup` with its ``profile``,
``seed`` and ``device`` parameters, so a notebook opened alone in Jupyter runs
exactly as it does under ``covbook run``.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import torch

from covbook._validate import check_seed, resolve_device
from covbook.book.config import PROFILES

__all__ = ["PROFILES", "setup", "checkpoint_dir", "CHECKPOINT_ENV"]

#: set by ``covbook run`` for each notebook (keep in step with covbook.book.runner.CHECKPOINT_ENV)
CHECKPOINT_ENV = "COVBOOK_CHECKPOINT_DIR"


def checkpoint_dir() -> Path:
    """The folder this notebook keeps its training checkpoints in, keyed on the code that makes them.

    Under ``covbook run`` it is ``book/generated/checkpoints/NAME/KEY/``, where KEY is
    the notebook's cache key (its source, parameters, the science code, versions,
    device): a checkpoint is part of the cache, so editing the science code (or
    ``covbook run --force``) retrains.  A notebook opened alone in Jupyter gets
    ``book/generated/checkpoints/interactive/KEY/`` with KEY the science code's hash.
    """
    given = os.environ.get(CHECKPOINT_ENV)
    if given:
        Path(given).mkdir(parents=True, exist_ok=True)
        return Path(given)
    from covbook.book.cache import science_hash
    from covbook.book.config import Paths, project_root

    d = Paths(project_root()).checkpoints / "interactive" / science_hash()[:16]
    d.mkdir(parents=True, exist_ok=True)
    return d


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
    torch.use_deterministic_algorithms(dev.type == "cpu", warn_only=True)
    if not quiet:
        print(f"covbook run: profile={profile}, device={dev.type}, seed={seed}, torch {torch.__version__}")
    return dev
