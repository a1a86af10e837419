"""Independent random streams named by (seed, chapter, experiment, replicate).

Every random draw of a chapter comes from one :class:`Streams`, made by
:func:`covbook.session.setup` from the run's ``seed`` and the chapter's name::

    dev = setup(profile, seed, device, chapter="01")
    gen = streams.torch_generator("configs")                 # a torch.Generator
    res = readout_paths(..., seed=streams.seed_for("mse", replicate=c))
    rng = streams.generator("bootstrap", replicate=(i, j))   # a numpy Generator

The stream ``(experiment, replicate)`` of chapter ``chapter`` at run seed ``seed`` is
``SeedSequence(entropy=seed, spawn_key=key)`` with ``key`` the prefix-free code of
``(chapter, experiment, replicate)`` (:mod:`covbook._seeds`): the same names give the same
numbers, and any two distinct ``(seed, chapter, experiment, replicate)`` give two distinct
inputs to the SeedSequence hash — in particular sweep seeds ``s`` and ``s + 1`` share no
stream, which seed arithmetic (``seed + c``) cannot promise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from covbook import _seeds
from covbook._validate import check_seed

__all__ = ["Streams", "Replicate"]

#: A replicate index: one integer, or a tuple of them for nested loops (e.g. ``(nu, j)``).
Replicate = int | Sequence[int]


def _replicate_key(replicate: Replicate) -> tuple[int, ...]:
    reps = (replicate,) if isinstance(replicate, (int, np.integer)) and not isinstance(replicate, bool) else replicate
    try:
        reps = tuple(reps)
    except TypeError as err:
        raise ValueError(f"replicate must be a non-negative integer or a tuple of them, got {replicate!r}") from err
    if not all(isinstance(r, (int, np.integer)) and not isinstance(r, bool) and 0 <= int(r) < 2**32 for r in reps):
        raise ValueError(f"replicate must be a non-negative integer or a tuple of them, got {replicate!r}")
    return (len(reps), *(int(r) for r in reps))


@dataclass(frozen=True)
class Streams:
    """The random streams of one chapter at one run seed.

    Parameters
    ----------
    seed : int
        The run's seed (``covbook run --seed``), in [0, 2**63).
    chapter : str
        The chapter's name, e.g. ``"01"``.

    Examples
    --------
    >>> s = Streams(0, "01")
    >>> s.seed_for("mse", replicate=2) == Streams(0, "01").seed_for("mse", replicate=2)
    True
    >>> s.seed_for("mse", replicate=2) == Streams(1, "01").seed_for("mse", replicate=1)
    False
    """

    seed: int
    chapter: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "seed", check_seed(self.seed))
        _seeds.encode_name(self.chapter)  # raises on a bad name

    def key(self, experiment: str, replicate: Replicate = ()) -> tuple[int, ...]:
        """The spawn key: the prefix-free code of (chapter, experiment, replicate)."""
        return (*_seeds.encode_name(self.chapter), *_seeds.encode_name(experiment), *_replicate_key(replicate))

    def sequence(self, experiment: str, replicate: Replicate = ()) -> np.random.SeedSequence:
        """The ``SeedSequence`` of stream (experiment, replicate)."""
        return _seeds.sequence(self.seed, self.key(experiment, replicate))

    def seed_for(self, experiment: str, replicate: Replicate = ()) -> int:
        """An integer seed in [0, 2**63) for a library function's ``seed=`` argument."""
        return int(self.sequence(experiment, replicate).generate_state(1, np.uint64)[0] >> np.uint64(1))

    def generator(self, experiment: str, replicate: Replicate = ()) -> np.random.Generator:
        """A numpy ``Generator`` (PCG64) on stream (experiment, replicate)."""
        return np.random.Generator(np.random.PCG64(self.sequence(experiment, replicate)))

    def torch_generator(self, experiment: str, replicate: Replicate = (),
                        device: str | torch.device = "cpu") -> torch.Generator:
        """A ``torch.Generator`` on ``device`` seeded with :meth:`seed_for` (experiment, replicate)."""
        return torch.Generator(device=device).manual_seed(self.seed_for(experiment, replicate))
