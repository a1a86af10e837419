"""A finite Markov chain: stationary law, entropy rate, asymptotic covariance, sampling.

Xu & Fang (2026), Sections 5-6 (book chapters 08-09).  Model-free facts about a
row-stochastic kernel K on V states: its stationary law π = πK, its entropy rate,
the asymptotic covariance of the occupation frequencies (the Markov-context
generalisation of the iid covariance in chapter 08's depth-collapse section) and
seeded sampling of stationary chains.
"""

from __future__ import annotations

import torch

from covbook._validate import check_positive_int
from covbook.linalg import lstsq
from covbook.markov._checks import _check_size, _distribution, _kernel
from covbook.markov.frequencies import entropy

__all__ = [
    "stationary_distribution",
    "entropy_rate",
    "asymptotic_covariance",
    "sample_markov_chain",
]


def stationary_distribution(kernel: object) -> torch.Tensor:
    r"""The stationary law π = π K of a row-stochastic kernel K (unique when K is irreducible).

    Solves the linear system (Kᵀ − I) π = 0, 1ᵀπ = 1 by least squares and checks
    the answer.  A kernel with several stationary laws (reducible) has no unique
    answer and raises ``ValueError``; so does one whose solution is not a law.

    Parameters
    ----------
    kernel : array-like, shape (V, V), rows summing to 1

    Returns
    -------
    tensor, shape (V,), float64

    Examples
    --------
    >>> stationary_distribution([[0.5, 0.5], [0.25, 0.75]])
    tensor([0.3333, 0.6667], dtype=torch.float64)
    """
    k = _kernel(kernel).cpu()
    v = k.shape[0]
    eye = torch.eye(v, dtype=torch.float64)
    sv = torch.linalg.svdvals(k.T - eye)  # (V,): one zero per stationary law
    if v > 1 and float(sv[-2]) < 1e-10:
        raise ValueError("kernel has several stationary laws (it is reducible); no unique answer")
    a = torch.cat([k.T - eye, torch.ones(1, v, dtype=torch.float64)])  # (V+1, V)
    b = torch.zeros(v + 1, dtype=torch.float64)
    b[-1] = 1.0
    pi = lstsq(a, b[:, None])[:, 0]  # (V,)
    if float(pi.min()) < -1e-8:
        raise ValueError("kernel's stationary solution is not a probability vector")
    pi = pi.clamp_min(0.0)
    return pi / pi.sum()


def entropy_rate(kernel: object, stationary: object | None = None) -> torch.Tensor:
    r"""Entropy rate of a Markov chain, in nats per token.

    .. math:: h(K) = -\sum_x \pi(x) \sum_y K(x, y) \log K(x, y),

    with π the stationary law of K (computed when not given).  It is the
    entropy of the next token given the current one, averaged over the chain's
    long-run occupation; log V for a uniform kernel, 0 for a deterministic one.

    Parameters
    ----------
    kernel : array-like, shape (V, V), row-stochastic
    stationary : array-like, shape (V,), optional
        The averaging law (e.g. the empirical frequencies of a run).

    Examples
    --------
    >>> round(float(entropy_rate([[0.5, 0.5], [0.5, 0.5]])), 6)
    0.693147
    >>> float(entropy_rate([[0.0, 1.0], [1.0, 0.0]], stationary=[0.5, 0.5]))
    0.0
    """
    k = _kernel(kernel)
    pi = stationary_distribution(k) if stationary is None else _distribution(stationary, "stationary")
    if pi.shape != (k.shape[0],):
        raise ValueError(f"stationary must have shape ({k.shape[0]},), got {tuple(pi.shape)}")
    return (pi.to(k.device) * entropy(k)).sum()


def asymptotic_covariance(kernel: object, stationary: object | None = None) -> torch.Tensor:
    r"""Asymptotic covariance of the token frequencies of a stationary ergodic Markov chain.

    For a chain with kernel K and stationary law π, √t(π̂_t − π) → N(0, Σ) with

    .. math:: \Sigma = \sum_{k\in\mathbb Z} \mathrm{Cov}(e_{x_0}, e_{x_k})
              = D_\pi Z + Z^\top D_\pi - D_\pi - \pi\pi^\top,\qquad
              Z = (I - K + \mathbf 1\pi^\top)^{-1},

    the Markov-chain central limit theorem (Z is the fundamental matrix, D_π = diag π).
    For iid tokens (K = 1πᵀ) it is D_π − ππᵀ; a chain that stays put with probability
    ρ and otherwise draws from π multiplies that by (1 + ρ)/(1 − ρ).

    Parameters
    ----------
    kernel : (V, V) row-stochastic and irreducible
    stationary : (V,), optional (computed from the kernel when not given)

    Returns
    -------
    tensor (V, V), float64, symmetric, rows summing to 0

    Examples
    --------
    >>> asymptotic_covariance([[0.5, 0.5], [0.5, 0.5]])
    tensor([[ 0.2500, -0.2500],
            [-0.2500,  0.2500]], dtype=torch.float64)
    """
    k = _kernel(kernel).cpu()
    v = k.shape[0]
    pi = stationary_distribution(k) if stationary is None else _distribution(stationary, "stationary").cpu()
    if pi.shape != (v,):
        raise ValueError(f"stationary must have shape ({v},), got {tuple(pi.shape)}")
    if not torch.allclose(pi @ k, pi, atol=1e-8, rtol=0.0):
        raise ValueError("stationary is not stationary for kernel (π K ≠ π)")
    eye = torch.eye(v, dtype=torch.float64)
    a = eye - k + torch.outer(torch.ones(v, dtype=torch.float64), pi)  # (V, V)
    if float(torch.linalg.svdvals(a).min()) < 1e-12:
        raise ValueError("kernel is reducible: its frequencies have no asymptotic covariance")
    z = torch.linalg.inv(a)  # (V, V) fundamental matrix
    d = torch.diag(pi)
    sigma = d @ z + z.T @ d - d - torch.outer(pi, pi)
    return 0.5 * (sigma + sigma.T)


def sample_markov_chain(kernel: object, n_chains: int, length: int, *, generator: torch.Generator | None = None,
                        initial: object | None = None) -> torch.Tensor:
    r"""Sample ``n_chains`` paths x_1..x_T of the chain x_{t+1} ~ K(x_t, ·).

    x_1 is drawn from ``initial`` (default: the stationary law, so the paths are
    stationary).  Returns a long tensor of shape (n_chains, length) on the CPU.

    Examples
    --------
    >>> x = sample_markov_chain([[0.0, 1.0], [1.0, 0.0]], 2, 5, initial=[1.0, 0.0])
    >>> x.tolist()
    [[0, 1, 0, 1, 0], [0, 1, 0, 1, 0]]
    """
    k = _kernel(kernel).cpu()
    n_chains = check_positive_int(n_chains, "n_chains")
    length = check_positive_int(length, "length")
    _check_size(n_chains * length, f"{n_chains} chains of length {length}")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    p0 = stationary_distribution(k) if initial is None else _distribution(initial, "initial").cpu()
    if p0.shape != (k.shape[0],):
        raise ValueError(f"initial must have shape ({k.shape[0]},), got {tuple(p0.shape)}")
    cum = torch.cumsum(k, dim=1)  # (V, V)
    cum[:, -1] = 1.0
    out = torch.empty(n_chains, length, dtype=torch.long)
    out[:, 0] = torch.multinomial(p0.expand(n_chains, -1), 1, replacement=True, generator=generator)[:, 0]
    u = torch.rand(n_chains, length - 1, generator=generator, dtype=torch.float64)  # (n, T-1)
    for t in range(1, length):
        rows = cum[out[:, t - 1]]  # (n, V)
        out[:, t] = torch.searchsorted(rows, u[:, t - 1 : t].contiguous(), right=True)[:, 0].clamp_max(k.shape[0] - 1)
    return out
