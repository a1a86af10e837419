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
from covbook.transformer.model import CausalTransformer

__all__ = [
    "cached_mean_field",
    "markov_kernel",
    "kernel_rows",
    "next_token_probs",
    "markov_gap",
    "fixed_point_residual",
    "shuffle_test",
]


def cached_mean_field(mean_field: MeanField | None = None) -> MeanField:
    r"""A ``mean_field`` callable that remembers its results, for one model.

    :func:`markov_gap` and :func:`fixed_point_residual` along the same tokens both need
    the kernel :math:`K_{\hat\pi_t}` at the running frequencies :math:`\hat\pi_t`; passing
    them one cache computes each mean-field state :math:`F_{\hat\pi_t}` once.  Results are
    keyed by the exact frequencies (values, dtype, device) of each law; a batch (B, V) is
    answered from the cache where it can and the laws not seen before are computed in one
    call.  Use a fresh cache per model (the key does not include the model).

    Parameters
    ----------
    mean_field : callable (model, freqs (..., V)) -> (..., V, d_model), optional
        The map to cache (default :func:`covbook.transformer.mean_field_discrete`).

    Examples
    --------
    >>> from covbook.transformer import CausalTransformer
    >>> m = CausalTransformer(vocab_size=3, d_model=4, n_layers=2, seed=0)
    >>> mf = cached_mean_field()
    >>> x = torch.tensor([[0, 1, 2, 1, 0, 1]])
    >>> g = markov_gap(m, x, [3, 6], mean_field=mf)
    >>> r = fixed_point_residual(m, x, [3, 6], mean_field=mf)
    >>> torch.equal(r, fixed_point_residual(m, x, [3, 6]))
    True
    """
    inner = mean_field or _default_mean_field
    if not callable(inner):
        raise ValueError(f"mean_field must be a callable (model, freqs) -> states, got {type(mean_field).__name__}")
    memo: dict[tuple[bytes, str, str], torch.Tensor] = {}

    def cached(model: torch.nn.Module, freqs: torch.Tensor) -> torch.Tensor:
        rows = freqs.detach().reshape(-1, freqs.shape[-1])  # (n, V)
        tag = (str(freqs.dtype), str(freqs.device))
        keys = [(r.tobytes(), *tag) for r in rows.cpu().numpy()]
        new = list(dict.fromkeys(k for k in keys if k not in memo))  # first occurrences, in order
        if new:
            at = {k: i for i, k in reversed(list(enumerate(keys)))}  # first row of each key
            states = inner(model, rows[[at[k] for k in new]])  # (n_new, V, d)
            memo.update(zip(new, states, strict=True))
        return torch.stack([memo[k] for k in keys]).reshape(*freqs.shape[:-1], *memo[keys[0]].shape)

    return cached


#: Laws per mean-field call of :func:`markov_kernel`: bounds the memory of one call
#: (about ``LAWS_PER_CALL`` · V · (V + 8 d_model) floats) whatever the number of laws.
LAWS_PER_CALL = 4096


def markov_kernel(
    model: torch.nn.Module, freqs: object, temperature: float = 1.0, *, mean_field: MeanField | None = None
) -> torch.Tensor:
    r"""The mean-field next-token kernel of a NoPE transformer at context law π.

    .. math:: K_\pi(x, \cdot) = \operatorname{softmax}\bigl(W_{\text{out}} F_\pi(x) / \tau\bigr),

    F_π(x) the terminal mean-field state of token x when the context tokens have
    law π (paper Section 5, computed by ``mean_field``; by default
    :func:`covbook.transformer.mean_field_discrete`) and W_out the model's
    read-out (``model.logits_from_hidden``).  Row x is the Markov chain's law of
    the next token after x (paper Section 6).  A batch of laws is evaluated
    :data:`LAWS_PER_CALL` laws per mean-field call.

    Parameters
    ----------
    model : torch module with ``vocab_size`` and ``logits_from_hidden``
    freqs : array-like, shape (V,) or (n, V)
        The context law π (e.g. empirical frequencies π̂_t), or n of them.
    temperature : float
        τ > 0.
    mean_field : callable (model, freqs (..., V)) -> (..., V, d_model), optional

    Returns
    -------
    tensor, shape (V, V) or (n, V, V), float64, rows summing to 1.
    """
    tau = _temperature(temperature)
    v = _vocab_size(model)
    pi = _distribution(freqs, "freqs")
    if pi.ndim not in (1, 2) or pi.shape[-1] != v or pi.numel() == 0:
        raise ValueError(f"freqs must have shape ({v},) or (n, {v}) for a vocabulary of {v} tokens, "
                         f"got {tuple(pi.shape)}")
    dev, dtype = _model_device_dtype(model)
    if pi.ndim == 1:
        return _kernels(model, pi.to(device=dev, dtype=dtype), tau, mean_field)
    out = torch.empty(pi.shape[0], v, v, dtype=torch.float64, device=dev)  # (n, V, V)
    for i in range(0, pi.shape[0], LAWS_PER_CALL):
        out[i:i + LAWS_PER_CALL] = _kernels(model, pi[i:i + LAWS_PER_CALL].to(device=dev, dtype=dtype), tau,
                                            mean_field)
    return out


def _kernels(model: torch.nn.Module, pi: torch.Tensor, tau: float, mean_field: MeanField | None) -> torch.Tensor:
    """K_π for checked laws ``pi`` (..., V) on the model's device: (..., V, V), float64."""
    with torch.no_grad():
        h = (mean_field or _default_mean_field)(model, pi)  # (..., V, d)
        logits = model.logits_from_hidden(h).to(torch.float64)  # (..., V, V)
    return tempered_softmax(logits, tau)


def _kernel_chunks(
    model: torch.nn.Module, freqs: torch.Tensor, temperature: float = 1.0, *, mean_field: MeanField | None = None,
) -> Iterator[tuple[slice, torch.Tensor]]:
    """:func:`markov_kernel` of the (n, V) laws ``freqs``, :data:`LAWS_PER_CALL` at a time, so that a caller holds
    one chunk's kernels: yields (the chunk's slice of the laws, its (c, V, V) kernels on the model's device)."""
    for i in range(0, freqs.shape[0], LAWS_PER_CALL):
        chunk = slice(i, i + LAWS_PER_CALL)
        yield chunk, markov_kernel(model, freqs[chunk], temperature, mean_field=mean_field)


def kernel_rows(
    model: torch.nn.Module, freqs: object, current: object, temperature: float = 1.0, *,
    mean_field: MeanField | None = None,
) -> torch.Tensor:
    r"""Rows :math:`K_{\pi_i}(x_i, \cdot)` of the kernel at n laws and current tokens, on the CPU.

    The kernel of :func:`markov_kernel` at each law π_i, read at the row of the current token
    x_i: the next-token law the Markov reduction gives after a context with frequencies π_i
    that ends in x_i.  Computed :data:`LAWS_PER_CALL` laws at a time, so its memory is that
    of the (n, V) result, however many laws.

    Parameters
    ----------
    freqs : (n, V) laws; current : (n,) token ids

    Returns
    -------
    tensor, shape (n, V), float64
    """
    v = _vocab_size(model)
    x, single = _tokens_torch(current, v, "current")
    if not single:
        raise ValueError(f"current must be a 1-d array of token ids, got shape {tuple(x.shape)}")
    x = x[0]  # (n,)
    pi = _distribution(freqs, "freqs")
    if pi.ndim != 2 or pi.shape != (x.shape[0], v):
        raise ValueError(f"freqs must have shape ({x.shape[0]}, {v}): one law per current token, "
                         f"got {tuple(pi.shape)}")
    out = torch.empty(x.shape[0], v, dtype=torch.float64)  # (n, V)
    for chunk, k in _kernel_chunks(model, pi, temperature, mean_field=mean_field):  # k: (c, V, V)
        at = x[chunk].to(k.device)  # (c,)
        out[chunk] = k[torch.arange(k.shape[0], device=k.device), at].cpu()
    return out


def _laws_along(x: torch.Tensor, pos: list[int], v: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Running frequencies π̂_t and current tokens x_t of every sequence of ``x`` (B, T) at t in ``pos``.

    Returns ((B · n_pos, V) laws, (B · n_pos,) tokens), sequence-major, on the CPU.
    """
    idx = torch.as_tensor(pos) - 1  # (n_pos,)
    freqs = running_frequencies(x.cpu(), v)[:, idx]  # (B, n_pos, V)
    return freqs.reshape(-1, v), x.cpu()[:, idx].reshape(-1)


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


def _laws(model: torch.nn.Module, x: torch.Tensor, temperature: float, probs: torch.Tensor | None,
          single: bool) -> torch.Tensor:
    """The next-token laws (B, T, V) along ``x`` (B, T): ``probs`` as given (checked), else one forward pass."""
    if probs is None:
        return next_token_probs(model, x, temperature).cpu()
    want = (x.shape[1], _vocab_size(model)) if single else (*x.shape, _vocab_size(model))
    if not isinstance(probs, torch.Tensor) or tuple(probs.shape) != want or not probs.is_floating_point():
        raise ValueError(f"probs must be the next-token laws along tokens, a float tensor of shape {want}, got "
                         f"{tuple(probs.shape) if isinstance(probs, torch.Tensor) else type(probs).__name__}")
    return (probs[None] if single else probs).to(torch.float64).cpu()


def _last_law(model: torch.nn.Module, x: torch.Tensor, temperature: float) -> torch.Tensor:
    """The next-token law after the whole of each row of ``x`` (B, T): (B, V), float64.

    A :class:`~covbook.transformer.CausalTransformer` computes the last position alone in its last block
    (``last_only``); any other model gives every position, of which the last is taken.
    """
    if not isinstance(model, CausalTransformer):
        return next_token_probs(model, x, temperature)[:, -1]
    with torch.no_grad():
        logits = model(x, last_only=True)[:, -1].to(torch.float64)  # (B, V)
    return tempered_softmax(logits, _temperature(temperature))


def markov_gap(
    model: torch.nn.Module,
    tokens: object,
    positions: object | None = None,
    temperature: float = 1.0,
    *,
    mean_field: MeanField | None = None,
    probs: torch.Tensor | None = None,
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
    probs : the model's next-token laws along ``tokens`` at this temperature, shape (T, V) or (B, T, V)
        (:func:`next_token_probs`), when the caller already has them; computed otherwise

    Returns
    -------
    tensor, shape (n_pos,) or (B, n_pos), float64
    """
    x, single = _tokens_torch(tokens, _vocab_size(model))
    pos = _positions(positions, x.shape[1])
    v = _vocab_size(model)
    probs = _laws(model, x, temperature, probs, single)[:, torch.as_tensor(pos) - 1]  # (B, n_pos, V)
    laws, current = _laws_along(x, pos, v)  # (B n_pos, V), (B n_pos,)
    rows = kernel_rows(model, laws, current, temperature, mean_field=mean_field)  # (B n_pos, V)
    gap = tv_distance(probs.reshape(-1, v), rows).reshape(x.shape[0], len(pos))  # TV to the kernel row of x_t
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
    nu = running_frequencies(x[:, int(start):].cpu(), v)[:, torch.as_tensor(pos) - 1 - int(start)]  # (B, n_pos, V)
    nu = nu.reshape(-1, v)  # (B n_pos, V)
    laws, _ = _laws_along(x, pos, v)  # (B n_pos, V)
    out = torch.empty(nu.shape[0], dtype=torch.float64)  # (B n_pos,)
    for chunk, k in _kernel_chunks(model, laws, tau, mean_field=mean_field):  # k: (c, V, V)
        n_i = nu[chunk]  # (c, V)
        out[chunk] = tv_distance((n_i[:, None, :] @ k.cpu())[:, 0], n_i)  # TV(ν_t K, ν_t)
    out = out.reshape(x.shape[0], len(pos))
    return out[0] if single else out


def shuffle_test(
    model: torch.nn.Module,
    tokens: object,
    positions: object | None = None,
    n_perm: int = 1,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
    *,
    probs: torch.Tensor | None = None,
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
    probs : the model's next-token laws along ``tokens`` at this temperature, shape (T, V) or (B, T, V)
        (:func:`next_token_probs`), when the caller already has them (e.g. from :func:`markov_gap`'s
        pass over the same tokens); computed otherwise

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
    probs = _laws(model, x, temperature, probs, single).to(dev)  # (B, T, V)
    out = torch.zeros(x.shape[0], len(pos), dtype=torch.float64)
    for j, t in enumerate(pos):
        for _ in range(n_perm):
            keys = torch.rand(x.shape[0], t - 1, generator=generator)  # (B, t-1)
            perm = torch.argsort(keys, dim=1).to(dev)  # (B, t-1): a uniform permutation per row
            shuffled = torch.cat([torch.gather(x[:, : t - 1], 1, perm), x[:, t - 1 : t]], dim=1)  # (B, t)
            p_shuf = _last_law(model, shuffled, temperature)  # (B, V)
            out[:, j] += tv_distance(probs[:, t - 1], p_shuf).cpu() / n_perm
    return out[0] if single else out
