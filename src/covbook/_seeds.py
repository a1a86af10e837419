"""One spawning mechanism for every random draw: numpy ``SeedSequence`` keyed by a path.

A stream is named by a run ``seed`` and a *key*, a tuple of non-negative integers (its path
in the tree of streams).  ``SeedSequence(entropy=seed, spawn_key=key)`` pads the entropy to
its pool size before appending the key, so distinct ``(seed, key)`` pairs are distinct
inputs to its hash, and the streams of seeds ``s`` and ``s + 1`` share nothing — unlike
``seed + k``, which gives seed ``s`` stream ``k`` the numbers of seed ``s + 1`` stream ``k − 1``.

This module is shared by the science (sub-streams inside a function, e.g. one task draw per
training chunk) and the notebook-facing :mod:`covbook.streams` (streams named by chapter,
experiment and replicate).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from covbook._validate import check_seed

__all__ = ["sequence", "derive_seed", "encode_name"]

_WORD = 2**32


def _check_key(key: Sequence[int]) -> tuple[int, ...]:
    out = []
    for k in key:
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 0 <= int(k) < _WORD:
            raise ValueError(f"key must be a sequence of integers in [0, 2**32), got {tuple(key)!r}")
        out.append(int(k))
    return tuple(out)


def sequence(seed: int, key: Sequence[int] = ()) -> np.random.SeedSequence:
    """``SeedSequence(entropy=seed, spawn_key=key)`` after checking both.

    Examples
    --------
    >>> sequence(0, (1, 2)).spawn_key
    (1, 2)
    """
    return np.random.SeedSequence(entropy=check_seed(seed), spawn_key=_check_key(key))


def derive_seed(seed: int, *key: int) -> int:
    """The integer seed in [0, 2**63) of stream ``key`` of run ``seed`` (for torch and numpy).

    Examples
    --------
    >>> derive_seed(0, 3) == derive_seed(0, 3) != derive_seed(1, 2)
    True
    """
    return int(sequence(seed, key).generate_state(1, np.uint64)[0] >> np.uint64(1))


def encode_name(name: str) -> tuple[int, ...]:
    """A name as uint32 words, prefixed by its byte length (a prefix-free, injective code).

    Examples
    --------
    >>> encode_name("ab")
    (2, 25185)
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"a stream name must be a non-empty string, got {name!r}")
    raw = name.encode("utf-8")
    padded = raw + b"\0" * (-len(raw) % 4)
    words = np.frombuffer(padded, dtype="<u4")
    return (len(raw), *(int(w) for w in words))
