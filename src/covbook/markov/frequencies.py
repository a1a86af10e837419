"""Empirical and running token frequencies, total variation, entropy, attractor contrasts.

Xu & Fang (2026), Section 6 (book chapters 09-10).  The Markov reduction evaluates the
mean-field kernel at the context's empirical frequencies π̂_t; this module computes
π̂ (at the end of a run, or at every context length t), the total-variation distance
and entropy of token laws, and the within-run / between-prompt TV contrast that says
whether runs from different prompts settle on different attractors (chapter 09's
fixed-point section, chapter 10's trained model).
"""

from __future__ import annotations

import numpy as np
import torch

from covbook.markov._checks import _check_size, _distribution, _tokens_np, _vocab_tokens

__all__ = [
    "empirical_frequencies",
    "running_frequencies",
    "tv_distance",
    "entropy",
    "within_between_tv",
    "attractor_contrast",
]


def empirical_frequencies(tokens: object, vocab_size: int) -> torch.Tensor:
    r"""Token frequencies π̂(x) = (1/T) Σ_s 1[x_s = x] along the last axis.

    Parameters
    ----------
    tokens : int array, shape (..., T), T >= 1
    vocab_size : int
        V; every id must lie in 0..V-1.

    Returns
    -------
    tensor, shape (..., V), float64

    Examples
    --------
    >>> empirical_frequencies([0, 2, 2, 1], 3)
    tensor([0.2500, 0.2500, 0.5000], dtype=torch.float64)
    """
    arr, v = _vocab_tokens(tokens, vocab_size)
    rows = arr.reshape(-1, arr.shape[-1])  # (R, T)
    _check_size(rows.shape[0] * v, f"frequencies of {rows.shape[0]} sequences over {v} tokens")
    counts = np.zeros((rows.shape[0], v))  # (R, V)
    np.add.at(counts, (np.repeat(np.arange(rows.shape[0]), rows.shape[1]), rows.reshape(-1)), 1.0)
    return torch.as_tensor((counts / rows.shape[1]).reshape(*arr.shape[:-1], v))


def running_frequencies(tokens: object, vocab_size: int) -> torch.Tensor:
    r"""Frequencies of every prefix: row t-1 is π̂_t = (1/t) Σ_{s≤t} e_{x_s}.

    Returns
    -------
    tensor, shape (..., T, V), float64

    Examples
    --------
    >>> running_frequencies([1, 0], 2)
    tensor([[0.0000, 1.0000],
            [0.5000, 0.5000]], dtype=torch.float64)
    """
    arr, v = _vocab_tokens(tokens, vocab_size)
    _check_size(2 * arr.size * v, f"running frequencies of {arr.size} tokens over {v} tokens")
    onehot = np.zeros((*arr.shape, v))  # (..., T, V)
    np.put_along_axis(onehot, arr[..., None], 1.0, axis=-1)
    counts = np.cumsum(onehot, axis=-2)  # (..., T, V)
    t = np.arange(1, arr.shape[-1] + 1)[:, None]  # (T, 1)
    return torch.as_tensor(counts / t)


def tv_distance(p: object, q: object) -> torch.Tensor:
    r"""Total variation TV(p, q) = ½ Σ_y |p(y) − q(y)| along the last axis.

    Examples
    --------
    >>> tv_distance([1.0, 0.0], [0.25, 0.75])
    tensor(0.7500, dtype=torch.float64)
    """
    pp = _distribution(p, "p")
    qq = _distribution(q, "q").to(pp.device)
    if pp.shape[-1] != qq.shape[-1]:
        raise ValueError(f"p and q must have the same number of outcomes, got {pp.shape[-1]} and {qq.shape[-1]}")
    return 0.5 * (pp - qq).abs().sum(-1)


def entropy(p: object) -> torch.Tensor:
    r"""Shannon entropy H(p) = −Σ_y p(y) log p(y) in nats (0 log 0 = 0), along the last axis.

    Examples
    --------
    >>> round(float(entropy([0.5, 0.5, 0.0])), 6)
    0.693147
    """
    d = _distribution(p, "p")
    return -torch.where(d > 0, d * torch.log(d.clamp_min(1e-300)), torch.zeros_like(d)).sum(-1)


def within_between_tv(runs: object, vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Ergodicity check: TV of token frequencies within runs and between runs.

    Each run (row) is split into halves A, B.  *Within*: TV(π̂_A, π̂_B) of the
    same run.  *Between*: TV(π̂_{B_i}, π̂_{B_j}) of the second halves of two runs
    i < j.  For an ergodic chain both are sampling noise of the same size; when
    runs settle on different attractors, *between* is much larger.

    Parameters
    ----------
    runs : int array, shape (R, T), R >= 2, T >= 2

    Returns
    -------
    (within (R,), between (R(R-1)/2,)), float64 tensors

    Examples
    --------
    >>> w, b = within_between_tv([[0, 0, 0, 0], [1, 1, 1, 1]], 2)
    >>> w.tolist(), b.tolist()
    ([0.0, 0.0], [1.0])
    """
    arr = _tokens_np(runs, "runs", ndim=(2,))
    if arr.shape[0] < 2 or arr.shape[1] < 2:
        raise ValueError(f"runs must have shape (R, T) with R >= 2 runs of T >= 2 tokens, got {arr.shape}")
    half = arr.shape[1] // 2
    first = empirical_frequencies(arr[:, :half], vocab_size)  # (R, V)
    second = empirical_frequencies(arr[:, half:], vocab_size)  # (R, V)
    within = tv_distance(first, second)  # (R,)
    i, j = torch.triu_indices(arr.shape[0], arr.shape[0], offset=1)
    between = tv_distance(second[i], second[j])  # (R(R-1)/2,)
    return within, between


def attractor_contrast(runs: object, vocab_size: int) -> tuple[float, float]:
    r"""Between-run minus within-run TV of token frequencies, with a jackknife SE over runs.

    .. math:: \Delta = \overline{\mathrm{TV}}_{\text{between}} - \overline{\mathrm{TV}}_{\text{within}},

    the means of :func:`within_between_tv`.  For runs of one ergodic chain (or windows of
    a stationary text) Δ is sampling noise around 0 (to O(1/T)); runs that settle on
    different attractors give Δ > 0.  The standard error is the leave-one-run-out
    jackknife, which accounts for the dependence of the pairwise *between* distances.

    Parameters
    ----------
    runs : int array, shape (R, T), R >= 3, T >= 2

    Returns
    -------
    (Δ, jackknife SE)

    Examples
    --------
    >>> d, se = attractor_contrast([[0, 0, 0, 0], [1, 1, 1, 1], [2, 2, 2, 2]], 3)
    >>> d, se
    (1.0, 0.0)
    """
    arr = _tokens_np(runs, "runs", ndim=(2,))
    if arr.shape[0] < 3:
        raise ValueError(f"runs must hold at least 3 runs for a jackknife SE, got shape {arr.shape}")
    within, between = within_between_tv(arr, vocab_size)
    r = arr.shape[0]
    i, j = torch.triu_indices(r, r, offset=1)
    full = float(between.mean() - within.mean())
    loo = []
    for k in range(r):
        keep_pairs = (i != k) & (j != k)
        keep_runs = torch.arange(r) != k
        loo.append(float(between[keep_pairs].mean() - within[keep_runs].mean()))
    loo_arr = np.array(loo)
    se = float(np.sqrt((r - 1) / r * ((loo_arr - loo_arr.mean()) ** 2).sum()))
    return full, se
