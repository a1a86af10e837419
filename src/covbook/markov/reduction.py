"""The Markov reduction of generation: the mean-field kernel K_π and the tests of it.

Xu & Fang (2026), Section 6 (book chapter 09, also used in chapter 10).  In a causal
transformer without positional encoding the terminal state at position t tends to a
deterministic function F_π(x_t) of the current token, where π is the law of the
context tokens (Section 5).  Along a context whose empirical token frequencies are
π̂_t the next-token law is therefore close to the *mean-field Markov kernel*

    K_π(x, ·) = softmax(W_out F_π(x) / τ),        evaluated at π = π̂_t,

so generation is a first-order Markov chain reinforced by its own occupation measure
(the Markov view of generative attention is Ildiz et al., 2024).  This module computes
that kernel (:func:`markov_kernel`), the model's own next-token law, the Markov gap
(TV between the two along a context), the fixed-point residual TV(ν K_π̂, ν) and the
black-box :func:`shuffle_test`.

A *model* here is any ``torch.nn.Module`` that maps long tokens (B, T) to logits
(B, T, V) and has ``logits_from_hidden(h)``, such as
:class:`covbook.transformer.CausalTransformer`.  Token ids are 0..V-1 and context
lengths t are 1-based: "position t" is the context x_1..x_t.

References
----------
H. Xu, G. Fang. Self-Attention as a Covariance Readout. arXiv:2605.10466, 2026.
M. E. Ildiz et al. From Self-Attention to Markov Models: Unveiling the Dynamics of
Generative Transformers. ICML 2024.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch

from covbook._validate import check_positive_int
from covbook.markov._checks import (
    MeanField,
    _default_mean_field,
    _distribution,
    _model_device_dtype,
    _positions,
    _temperature,
    _tokens_torch,
    _vocab_size,
)
from covbook.markov.frequencies import running_frequencies, tv_distance
from covbook.transformer.generation import tempered_softmax

__all__ = [
    "markov_kernel",
    "next_token_probs",
    "markov_gap",
    "fixed_point_residual",
    "shuffle_test",
]


def markov_kernel(
    model: torch.nn.Module, freqs: object, temperature: float = 1.0, *, mean_field: MeanField | None = None
) -> torch.Tensor:
    r"""The mean-field next-token kernel of a NoPE transformer at context law π.

    .. math:: K_\pi(x, \cdot) = \operatorname{softmax}\bigl(W_{\text{out}} F_\pi(x) / \tau\bigr),

    F_π(x) the terminal mean-field state of token x when the context tokens have
    law π (paper Section 5, computed by ``mean_field``; by default
    :func:`covbook.transformer.mean_field_discrete`) and W_out the model's
    read-out (``model.logits_from_hidden``).  Row x is the Markov chain's law of
    the next token after x (paper Section 6).

    Parameters
    ----------
    model : torch module with ``vocab_size`` and ``logits_from_hidden``
    freqs : array-like, shape (V,)
        The context law π (e.g. empirical frequencies π̂_t).
    temperature : float
        τ > 0.
    mean_field : callable (model, freqs) -> (V, d_model), optional

    Returns
    -------
    tensor, shape (V, V), float64, rows summing to 1.
    """
    tau = _temperature(temperature)
    v = _vocab_size(model)
    pi = _distribution(freqs, "freqs")
    if pi.shape != (v,):
        raise ValueError(f"freqs must have shape ({v},) for a vocabulary of {v} tokens, got {tuple(pi.shape)}")
    dev, dtype = _model_device_dtype(model)
    with torch.no_grad():
        h = (mean_field or _default_mean_field)(model, pi.to(device=dev, dtype=dtype))  # (V, d)
        logits = model.logits_from_hidden(h).to(torch.float64)  # (V, V)
    return tempered_softmax(logits, tau)


def _kernels_along(
    model: torch.nn.Module, x: torch.Tensor, pos: list[int], temperature: object, mean_field: MeanField | None
) -> Iterator[tuple[int, int, int, torch.Tensor]]:
    """(b, j, t, K_{π̂_t}) for every sequence b of ``x`` (B, T) and context length t = pos[j].

    π̂_t are the running frequencies of sequence b; the kernel (V, V) is on the CPU.
    """
    freqs = running_frequencies(x.cpu(), _vocab_size(model))  # (B, T, V)
    for b in range(x.shape[0]):
        for j, t in enumerate(pos):
            yield b, j, t, markov_kernel(model, freqs[b, t - 1], temperature, mean_field=mean_field).cpu()


def next_token_probs(model: torch.nn.Module, tokens: object, temperature: float = 1.0) -> torch.Tensor:
    r"""The model's next-token laws p(x_{t+1} = · | x_{1:t}) = softmax(logits_t / τ) at every t.

    Parameters
    ----------
    tokens : long, shape (T,) or (B, T)

    Returns
    -------
    tensor, shape (T, V) or (B, T, V), float64; row t-1 is the law after x_{1:t}.
    """
    tau = _temperature(temperature)
    x, single = _tokens_torch(tokens, _vocab_size(model))
    dev, _ = _model_device_dtype(model)
    with torch.no_grad():
        logits = model(x.to(dev)).to(torch.float64)  # (B, T, V)
    probs = tempered_softmax(logits, tau)
    return probs[0] if single else probs


def markov_gap(
    model: torch.nn.Module,
    tokens: object,
    positions: object | None = None,
    temperature: float = 1.0,
    *,
    mean_field: MeanField | None = None,
) -> torch.Tensor:
    r"""Markov gap: TV between the model's next-token law and the mean-field kernel row.

    .. math:: \mathrm{gap}_t = \mathrm{TV}\bigl(p(\cdot \mid x_{1:t}),\; K_{\hat\pi_t}(x_t, \cdot)\bigr),
              \qquad \hat\pi_t = \tfrac1t \textstyle\sum_{s \le t} e_{x_s},

    Paper Section 6: O(t^{-1/2}) for a NoPE transformer on a stationary ergodic
    context.  For one layer it is 0 exactly: the attention at position t *is*
    the tilted mean over π̂_t.

    Parameters
    ----------
    tokens : long, shape (T,) or (B, T)
    positions : increasing 1-based context lengths t (default 1..T)
    temperature : float

    Returns
    -------
    tensor, shape (n_pos,) or (B, n_pos), float64
    """
    x, single = _tokens_torch(tokens, _vocab_size(model))
    pos = _positions(positions, x.shape[1])
    probs = next_token_probs(model, x, temperature).cpu()  # (B, T, V)
    gap = torch.empty(x.shape[0], len(pos), dtype=torch.float64)
    for b, j, t, k in _kernels_along(model, x, pos, temperature, mean_field):
        gap[b, j] = tv_distance(probs[b, t - 1], k[int(x[b, t - 1])])  # TV to the kernel row of x_t
    return gap[0] if single else gap


def fixed_point_residual(
    model: torch.nn.Module,
    tokens: object,
    positions: object | None = None,
    temperature: float = 1.0,
    *,
    start: int = 0,
    mean_field: MeanField | None = None,
) -> torch.Tensor:
    r"""Residual of the mean-field fixed-point equation π = π K_π along a sequence.

    .. math:: r_t = \mathrm{TV}\bigl(\nu_t K_{\hat\pi_t},\ \nu_t\bigr),\qquad
              \nu_t = \frac{1}{t - t_0}\sum_{t_0 < s \le t} e_{x_s},

    with π̂_t the frequencies of the whole context x_{1:t} (which set the kernel) and ν_t
    the occupation of the tokens after the first t_0 = ``start`` (e.g. the generated
    tokens after a prompt; ``start=0`` gives ν_t = π̂_t).  Along the model's own
    generation the tokens follow, up to the Markov gap, the chain
    x_{s+1} ~ K_{π̂_s}(x_s, ·), so ν_t K − ν_t is an average of martingale increments
    plus drift terms, each O_P((t − t_0)^{-1/2}) (paper Section 6): a limit π* of π̂_t
    must solve π* = π* K_{π*}.

    Parameters
    ----------
    tokens : long, shape (T,) or (B, T)
    positions : increasing 1-based context lengths t > start (default start+1..T)
    temperature : float, τ > 0 (the temperature the tokens were sampled at)
    start : int >= 0, tokens excluded from the occupation ν_t

    Returns
    -------
    tensor, shape (n_pos,) or (B, n_pos), float64
    """
    v = _vocab_size(model)
    x, single = _tokens_torch(tokens, v)
    if isinstance(start, bool) or not isinstance(start, (int, np.integer)) or not 0 <= start < x.shape[1]:
        raise ValueError(f"start must be an integer in [0, {x.shape[1]}), got {start!r}")
    pos = list(range(int(start) + 1, x.shape[1] + 1)) if positions is None else _positions(positions, x.shape[1])
    if pos[0] <= start:
        raise ValueError(f"positions must exceed start={start}, got {pos[0]}")
    tau = _temperature(temperature)
    occ = running_frequencies(x[:, int(start):].cpu(), v)  # (B, T - start, V)
    out = torch.empty(x.shape[0], len(pos), dtype=torch.float64)
    for b, j, t, k in _kernels_along(model, x, pos, tau, mean_field):
        nu = occ[b, t - 1 - int(start)]  # (V,)
        out[b, j] = tv_distance(nu @ k, nu)
    return out[0] if single else out


def shuffle_test(
    model: torch.nn.Module,
    tokens: object,
    positions: object | None = None,
    n_perm: int = 1,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    r"""Black-box shuffle test: does the next-token law depend on the order of the past?

    For each context length t, permute x_1..x_{t-1} uniformly at random, keep
    the current token x_t last, and measure

    .. math:: \mathrm{TV}\bigl(p(\cdot \mid x_{1:t}),\; p(\cdot \mid x_{\sigma(1)}, \dots, x_{\sigma(t-1)}, x_t)\bigr),

    averaged over ``n_perm`` permutations.  Needs only the model's outputs.  For
    a Markov law given π̂_t it is 0 (π̂_t is permutation invariant): exactly 0 for
    a one-layer NoPE transformer, O(t^{-1/2}) for deeper ones (paper Section 6).

    Parameters
    ----------
    tokens : long, shape (T,) or (B, T)
    positions : increasing 1-based context lengths t (default 2..T is sensible)
    n_perm : int
    generator : torch.Generator on the CPU, optional (seeds the permutations)

    Returns
    -------
    tensor, shape (n_pos,) or (B, n_pos), float64
    """
    v = _vocab_size(model)
    x, single = _tokens_torch(tokens, v)
    n_perm = check_positive_int(n_perm, "n_perm")
    pos = _positions(positions, x.shape[1])
    dev, _ = _model_device_dtype(model)
    x = x.to(dev)
    probs = next_token_probs(model, x, temperature)  # (B, T, V)
    out = torch.zeros(x.shape[0], len(pos), dtype=torch.float64)
    for j, t in enumerate(pos):
        for _ in range(n_perm):
            keys = torch.rand(x.shape[0], t - 1, generator=generator)  # (B, t-1)
            perm = torch.argsort(keys, dim=1).to(dev)  # (B, t-1): a uniform permutation per row
            shuffled = torch.cat([torch.gather(x[:, : t - 1], 1, perm), x[:, t - 1 : t]], dim=1)  # (B, t)
            p_shuf = next_token_probs(model, shuffled, temperature)[:, -1]  # (B, V)
            out[:, j] += tv_distance(probs[:, t - 1], p_shuf).cpu() / n_perm
    return out[0] if single else out
