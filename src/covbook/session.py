"""Notebook session set-up: seeding, device choice, determinism and the random streams.

Every chapter's imports cell calls :func:`setup` with its ``profile``, ``seed`` and
``device`` parameters and its ``chapter`` name, so a notebook opened alone in Jupyter runs
exactly as it does under ``covbook run``.  Every random draw of the chapter then comes from
:data:`streams` (a :class:`covbook.streams.Streams` for that seed and chapter):
``streams.torch_generator("configs")``, ``streams.seed_for("mse", replicate=c)``,
``streams.generator("bootstrap")`` — never from seed arithmetic such as ``seed + c``.
"""

from __future__ import annotations

import os
import random
import sys
from collections.abc import MutableMapping
from pathlib import Path

import numpy as np
import torch

from covbook._validate import check_seed, resolve_device
from covbook.book.config import DEFAULT_PROFILE, PROFILES, PROFILES_FILE, UsageError, load_profiles, project_root
from covbook.claims import NOTEBOOK_ENV  # set by `covbook run` for the notebook it runs
from covbook.streams import Replicate, Streams

__all__ = ["PROFILES", "setup", "streams", "Streams", "profile_sizes", "apply_profile", "checkpoint_dir",
           "CHECKPOINT_ENV"]

#: The copy of ``notebooks/profiles.yml`` shipped in the package (a link to it in a checkout),
#: for a notebook opened outside a checkout (Colab, Binder, a download).
PACKAGED_PROFILES = Path(__file__).resolve().parent / "profiles.yml"


def profile_sizes(notebook: str, profile: str) -> dict[str, object]:
    """The parameters ``profile`` sets for ``notebook`` (``NN_name`` or ``NN``) in profiles.yml.

    Empty for the default profile (``quick``: the parameters cell's own values).  Read from the checkout's
    ``notebooks/profiles.yml`` when there is one, else from the copy shipped in the package.
    """
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {', '.join(PROFILES)}, got {profile!r}")
    try:
        path = project_root() / PROFILES_FILE
    except UsageError:
        path = PACKAGED_PROFILES
    entries = load_profiles(path)
    hits = [k for k in entries if k == notebook or k.split("_", 1)[0] == notebook]
    if len(hits) != 1:
        raise ValueError(f"notebook must be a chapter named in {path.name}, got {notebook!r}")
    return dict(entries[hits[0]].get(profile) or {})


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


class _SessionStreams:
    """The streams of the chapter that :func:`setup` set up (the same methods as :class:`Streams`)."""

    def __init__(self) -> None:
        self.current: Streams | None = None

    def _get(self) -> Streams:
        if self.current is None:
            raise RuntimeError("no chapter is set up: call covbook.session.setup(profile, seed, device, "
                               "chapter=...) before drawing from covbook.session.streams")
        return self.current

    def seed_for(self, experiment: str, replicate: Replicate = ()) -> int:
        """See :meth:`Streams.seed_for`."""
        return self._get().seed_for(experiment, replicate)

    def generator(self, experiment: str, replicate: Replicate = ()) -> np.random.Generator:
        """See :meth:`Streams.generator`."""
        return self._get().generator(experiment, replicate)

    def torch_generator(self, experiment: str, replicate: Replicate = (),
                        device: str | torch.device = "cpu") -> torch.Generator:
        """See :meth:`Streams.torch_generator`."""
        return self._get().torch_generator(experiment, replicate, device)

    def sequence(self, experiment: str, replicate: Replicate = ()) -> np.random.SeedSequence:
        """See :meth:`Streams.sequence`."""
        return self._get().sequence(experiment, replicate)


#: The random streams of the chapter set up last (named by seed, chapter, experiment, replicate).
streams = _SessionStreams()


def setup(profile: str = DEFAULT_PROFILE, seed: int = 0, device: str = "auto", quiet: bool = False,
          chapter: str | None = None, *, parameters: MutableMapping[str, object] | None = None) -> torch.device:
    """Seed every generator, pick the device, make CPU runs deterministic and name the streams.

    With ``chapter`` (e.g. ``"01"``), :data:`streams` becomes ``Streams(seed, chapter)`` and the
    global generators (``random``, ``numpy.random``, ``torch``) are seeded from its stream
    ``"global"``; without it they are seeded with ``seed`` itself.

    Returns the torch device (``auto`` means CUDA when available).  Threads can be
    capped with ``COVBOOK_THREADS`` (the runner sets it when running notebooks
    in parallel).  With ``chapter`` and ``parameters`` (the notebook's ``globals()``), a
    reader's ``profile = "smoke"`` (or ``"full"``) in the parameters cell sets that profile's
    sizes from profiles.yml over the cell's values (``quick``, the cell's own values, changes
    nothing); under ``covbook run`` the runner's parameters are kept.

    Examples
    --------
    >>> setup("smoke", 0, "cpu", quiet=True).type
    'cpu'
    """
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {', '.join(PROFILES)}, got {profile!r}")
    seed = check_seed(seed)
    dev = resolve_device(device)
    # the global generators too are a stream of their own (for draws without a generator argument)
    global_seed = seed
    if chapter is not None:
        streams.current = Streams(seed, chapter)
        global_seed = streams.current.seed_for("global")
    random.seed(global_seed)
    np.random.seed(global_seed % 2**32)  # noqa: NPY002 - notebooks may use the legacy global generator
    torch.manual_seed(global_seed)
    threads = os.environ.get("COVBOOK_THREADS")
    if threads:
        torch.set_num_threads(max(1, int(threads)))
    _deterministic_algorithms(dev.type == "cpu")
    sizes = apply_profile(chapter, profile, parameters) if chapter is not None and parameters is not None else {}
    if sizes and not quiet:
        print(f"covbook: profile {profile} sets " + ", ".join(f"{k}={v!r}" for k, v in sizes.items()))
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
