"""Random token laws: draws from the flat Dirichlet law on the probability simplex."""

from __future__ import annotations

import torch

__all__ = ["flat_dirichlet"]


def flat_dirichlet(shape: int | tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    r"""Draws of the flat Dirichlet law on the simplex of the last axis, float64 of shape ``shape``.

    .. math:: \pi_v = E_v / \textstyle\sum_u E_u, \qquad E_v \sim \mathrm{Exp}(1)\ \text{iid},

    which is Dirichlet(1, ..., 1) (each π_v has mean 1/V and variance (V − 1)/(V²(V + 1))).
    Several rows (``shape`` (n, V)) are n independent draws, e.g. the rows of a random stochastic
    matrix.  Raises ``ValueError`` for a last axis below 2.
    """
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if not shape or shape[-1] < 2:
        raise ValueError(f"shape must end in a vocabulary of at least 2, got {shape!r}")
    e = torch.empty(shape, dtype=torch.float64).exponential_(generator=generator)  # (..., V)
    return e / e.sum(-1, keepdim=True)
