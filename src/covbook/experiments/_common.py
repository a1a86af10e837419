r"""Checks and grids the chapters' experiments share (one implementation each)."""

from __future__ import annotations

import numpy as np

from covbook._validate import check_positive_int

__all__ = ["log_checkpoints", "check_length", "check_streams"]


def log_checkpoints(t_end: int, n: int, start: int = 100) -> np.ndarray:
    r"""``n`` log-spaced context lengths from ``start`` to about ``t_end`` (duplicates dropped): shape (≤ n,).

    :math:`\lfloor 10^{\,\log_{10} t_0 + k(\log_{10} t_{\rm end} - \log_{10} t_0)/(n-1)}\rfloor`,
    :math:`k = 0, \dots, n-1` (the last can fall one short of ``t_end`` by rounding).

    Examples
    --------
    >>> log_checkpoints(10_000, 3).tolist()
    [100, 1000, 10000]
    >>> log_checkpoints(1000, 3, start=10).tolist()
    [10, 100, 1000]
    """
    return np.unique(np.logspace(np.log10(start), np.log10(t_end), n).astype(int))


def check_length(t: object, name: str, least: int = 101) -> int:
    """A positive int context length of at least ``least`` (the checkpoints start at 100)."""
    t = check_positive_int(t, name)
    if t < least:
        raise ValueError(f"{name} must be at least {least} (the checkpoints run from t = 100), got {t}")
    return t


def check_streams(n: object, name: str = "n_streams") -> int:
    """At least two streams: the standard errors are across streams."""
    n = check_positive_int(n, name)
    if n < 2:
        raise ValueError(f"{name} must be at least 2 (standard errors across streams), got {n}")
    return n
