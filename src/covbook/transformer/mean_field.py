r"""The mean-field map of a NoPE causal transformer (paper Section 5, book chapter 08).

Run without positional encoding on a stationary ergodic context, the transformer forgets the
context: the terminal state h^(L)_t approaches a deterministic function F_L(x_t) of the current
token.  The mean-field recursion is

.. math:: F_0 = E,\qquad F_{l+1}(x) = F_l(x) + \sum_{\text{heads}} \Theta_V
          \frac{E_\mu[F_l(X) e^{a_l(x)^\top F_l(X)}]}{E_\mu[e^{a_l(x)^\top F_l(X)}]}
          \ (+\ \text{the token-wise MLP}),\qquad a_l(x) = \Theta_K^\top \Theta_Q F_l(x),

with the layer norm applied to the attention/MLP inputs where the model has one.  For zero-mean
Gaussian inputs and attention only, F_l(x) = M_l x with the closed form
M_{l+1} = M_l + Σ_heads Θ_V M_l Σ M_lᵀ Θ_Kᵀ Θ_Q M_l: a covariance readout at every depth.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from covbook._validate import as_covariance, check_positive_float, psd_sqrt_factor
from covbook.attention import softmax_attention
from covbook.transformer.model import CausalTransformer

__all__ = ["mean_field", "mean_field_discrete", "mean_field_gaussian", "gaussian_tail_exponents",
           "mean_field_logit_variances", "mean_field_with_logit_variances", "tail_safe_logit_scale",
           "mean_field_jacobian", "collapse_constant", "collapse_readout_sd", "gaussian_logit_variances"]


def _check_model(model: object) -> CausalTransformer:
    if not isinstance(model, CausalTransformer):
        raise TypeError(f"model must be a CausalTransformer, got {type(model).__name__}")
    return model


def _check_weights(weights: object, n: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Laws on n points, shape (n,) or (B, n): finite, non-negative, not all zero; each row normalised."""
    try:
        w = torch.as_tensor(weights, dtype=dtype, device=device)
    except (TypeError, ValueError, RuntimeError) as err:
        raise ValueError(f"weights/freqs must be an array of shape ({n},) or (B, {n}), "
                         f"got {type(weights).__name__}") from err
    if w.ndim not in (1, 2) or w.shape[-1] != n or w.numel() == 0:
        raise ValueError(f"weights/freqs must have shape ({n},) or (B, {n}) with B >= 1, got {tuple(w.shape)}")
    if not bool(torch.isfinite(w).all()) or bool((w < 0).any()) or bool((w.sum(-1) <= 0).any()):
        raise ValueError("weights/freqs must be finite, non-negative and not all zero (in every row)")
    return w / w.sum(-1, keepdim=True)


def _embed_points(model: CausalTransformer, pts: object, name: str) -> torch.Tensor:
    """F_0 = E at the given tokens/points: (n, d)."""
    if model.vocab_size is not None:
        try:
            p = torch.as_tensor(pts, device=model.device)
        except (TypeError, ValueError, RuntimeError) as err:
            raise ValueError(f"{name} must be a 1-d tensor of token ids, got {type(pts).__name__}") from err
        if p.ndim != 1 or p.is_floating_point():
            raise ValueError(f"{name} must be a 1-d tensor of token ids for a discrete model")
        return model.embed_tokens(p.long()[None])[0]  # (n, d)
    try:
        p = torch.as_tensor(pts, dtype=model.dtype, device=model.device)
    except (TypeError, ValueError, RuntimeError) as err:
        raise ValueError(f"{name} must be an array of shape (n, {model.d_in}), got {type(pts).__name__}") from err
    if p.ndim != 2:
        raise ValueError(f"{name} must have shape (n, {model.d_in}) for a continuous model")
    return model.embed_tokens(p[None])[0]  # (n, d)


def mean_field(model: CausalTransformer, support: object, weights: object, queries: object) -> torch.Tensor:
    r"""Mean-field states F_l at ``queries`` for a context law μ = Σ_i w_i δ_{support_i}.

    .. math:: F_{l+1}(x) = F_l(x) + \sum_{\text{heads}} \Theta_V
              \frac{\sum_i w_i\, \tilde F_l(s_i)\, e^{(\Theta_Q \tilde F_l(x))^\top \Theta_K \tilde F_l(s_i)}}
                   {\sum_i w_i\, e^{(\Theta_Q \tilde F_l(x))^\top \Theta_K \tilde F_l(s_i)}}
              \ (+\ \text{the token-wise MLP}),

    :math:`\tilde F = \mathrm{LN}(F)` where the model has layer norm.  This is the exact
    infinite-context limit for contexts with marginal μ (a discrete vocabulary law, or a
    quadrature rule for a continuous law, see :func:`gauss_hermite_rule`).  The attention
    runs through :func:`covbook.attention.softmax_attention` with log w_i appended to the keys.

    Parameters
    ----------
    model : CausalTransformer
        Without positional encoding.
    support : token ids (N,) or points (N, d_in)
    weights : (N,), or (B, N) for B laws on one support at once; non-negative (each row normalised here)
    queries : token ids (m,) or points (m, d_in)

    Returns
    -------
    tensor, shape (L+1, m, d_model), or (L+1, B, m, d_model) for B laws: F_0, ..., F_L at the queries.
    One batched call gives each law's states as B calls with one law would: the laws are grouped by
    the support points they weight, and each group runs the one-law arithmetic on its rows.
    """
    with torch.no_grad():
        return _mean_field_states(model, support, weights, queries)


def _mean_field_states(model: CausalTransformer, support: object, weights: object,
                       queries: object, logit_variances: list | None = None) -> torch.Tensor:
    """The recursion of :func:`mean_field`, differentiable in ``weights`` (no ``no_grad``).

    With a list ``logit_variances``, appends per layer the (H, m) variances under μ of the
    queries' logits against the support (see :func:`mean_field_logit_variances`).
    """
    _check_model(model)
    if model.pos is not None:
        raise ValueError(f"the mean-field map needs a model without positional encoding, got pos={model.pos!r}")
    hs = _embed_points(model, support, "support")  # (N, d)
    hq = _embed_points(model, queries, "queries")  # (m, d)
    w = _check_weights(weights, hs.shape[0], model.dtype, model.device)  # (N,) or (B, N)
    if w.ndim == 1:
        return _recursion(model, hs, hq, w, w > 0, logit_variances)
    # B laws: one batched pass per set of support points with positive weight (the points a law
    # drops), so that each law's states are those of the one-law call, with the same arithmetic
    states = hq.new_empty(model.n_layers + 1, w.shape[0], *hq.shape)  # (L+1, B, m, d)
    parts: list[list[torch.Tensor]] = []
    patterns, group = torch.unique((w > 0).to(torch.uint8), dim=0, return_inverse=True)  # (P, N), (B,)
    rows = [torch.nonzero(group == i).squeeze(1) for i in range(patterns.shape[0])]
    for keep, r in zip(patterns.bool(), rows, strict=True):
        part: list[torch.Tensor] = []
        states[:, r] = _recursion(model, hs, hq.expand(r.numel(), -1, -1), w[r], keep, part)
        parts.append(part)
    if logit_variances is not None:
        for layer in range(model.n_layers):
            var = w.new_empty(w.shape[0], *parts[0][layer].shape[1:])  # (B, H, m)
            for part, r in zip(parts, rows, strict=True):
                var[r] = part[layer]
            logit_variances.append(var)
    return states


#: Logits per block of queries in the mean-field attention (2 MiB of float64): a block of the softmax that
#: stays in cache runs about twice as fast as one pass over every query, with the same values to rounding
#: (bit for bit for blocks of 16 queries or more, as measured for chapter 08's quadrature rules).
_BLOCK_LOGITS = 2**18


def _attention_in_blocks(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """:func:`softmax_attention` of q (..., M, d_k) over k, v, by blocks of queries: shape (..., M, d_v).

    Each query's softmax is a row of its own, so the blocks give the values of one call, to rounding.
    """
    batch = math.prod(torch.broadcast_shapes(q.shape[:-2], k.shape[:-2]))
    rows = max(1, _BLOCK_LOGITS // max(1, batch * k.shape[-2]))
    if rows >= q.shape[-2]:
        return softmax_attention(q, k, v)
    return torch.cat([softmax_attention(q[..., i:i + rows, :], k, v) for i in range(0, q.shape[-2], rows)], dim=-2)


def _recursion(model: CausalTransformer, hs: torch.Tensor, hq: torch.Tensor, w: torch.Tensor, keep: torch.Tensor,
               logit_variances: list | None) -> torch.Tensor:
    """F_0, ..., F_L at the queries for laws ``w`` (..., N) on the support states ``hs`` (N, d).

    ``keep`` (N,) marks the support points with positive weight in every law of the batch (the
    others are dropped); ``hq`` is (..., m, d).  Returns (L+1, ..., m, d).
    """
    w = w[..., keep]  # (..., N')
    hs, logw = hs[keep].expand(*w.shape, -1), torch.log(w)  # (..., N', d), (..., N')
    m = hq.shape[-2]
    layers = [hq]
    for i, b in enumerate(model.blocks):
        if i == model.n_layers - 1:  # the last layer: no later layer reads the support's states
            h = hq  # (..., m, d): the queries alone, each row's arithmetic as in the full batch
        else:
            h = torch.cat([hq, hs], dim=-2)  # (..., m + N', d) queries: the m query points and the support
        q, _, _ = b.heads(b.ln_attn(h))  # (..., H, m+N', dh)
        _, k, v = b.heads(b.ln_attn(hs))  # (..., H, N', dh)
        ones = torch.ones(*q.shape[:-1], 1, dtype=q.dtype, device=q.device)  # (..., H, m+N', 1)
        k_aug = torch.cat([k, logw[..., None, :, None].expand(*k.shape[:-1], 1)], dim=-1)  # (..., H, N', dh+1)
        out = _attention_in_blocks(torch.cat([q, ones], dim=-1), k_aug, v)  # (..., H, m+N', dh)
        if logit_variances is not None:
            logits = q[..., :m, :] @ k.transpose(-1, -2)  # (..., H, m, N')
            wb = w[..., None, None, :]  # (..., 1, 1, N')
            mean = (logits * wb).sum(-1, keepdim=True)  # (..., H, m, 1)
            logit_variances.append((((logits - mean) ** 2) * wb).sum(-1))  # (..., H, m)
        h = b.token_mlp(h + b.merge(out))  # (..., m + N', d)
        hq, hs = h[..., :m, :], h[..., m:, :]
        layers.append(hq)
    return torch.stack(layers)  # (L+1, ..., m, d)


def mean_field_logit_variances(model: CausalTransformer, support: object, weights: object,
                               queries: object) -> torch.Tensor:
    r"""Variance of the mean-field attention logits of each query, per layer (largest over heads).

    At layer l a query x attends to context tokens X ~ μ = Σ_i w_i δ_{support_i} with logits
    ℓ_l(x, X) = (Θ_Q F̃_l(x))ᵀ Θ_K F̃_l(X) (scaled as in the model), and

    .. math:: s_l(x) = \max_{\text{heads}} \mathrm{Var}_{X\sim\mu}\, \ell_l(x, X).

    For Gaussian logits the 1/t constant of the readout grows like e^{s} and the delta-method
    regime needs t ≫ e^{2s} (:func:`covbook.theory.delta_method_reach`, book chapters 01, 03
    and 08); for an attention-only model on Gaussian tokens s_l(x) = xᵀB_l x of
    :func:`gaussian_tail_exponents`.

    Parameters
    ----------
    model, support, weights, queries : as in :func:`mean_field`

    Returns
    -------
    tensor, shape (L, m), or (L, B, m) for B laws: s_0, ..., s_{L-1} at the queries.

    Examples
    --------
    >>> m = CausalTransformer(vocab_size=3, d_model=4, n_layers=2, seed=0)
    >>> s = mean_field_logit_variances(m, torch.arange(3), torch.tensor([1.0, 0.0, 0.0]), torch.arange(3))
    >>> tuple(s.shape), float(s.abs().max())   # one support token: the logits do not vary
    ((2, 3), 0.0)
    """
    return mean_field_with_logit_variances(model, support, weights, queries)[1]


def mean_field_with_logit_variances(model: CausalTransformer, support: object, weights: object,
                                    queries: object) -> tuple[torch.Tensor, torch.Tensor]:
    r""":func:`mean_field` and :func:`mean_field_logit_variances` from one pass of the recursion.

    The two functions run the same recursion F_0, ..., F_L; a caller that needs both (book
    chapter 08 reads the states and the logit variances on the same quadrature rule) pays for
    it once.  The values are those of the two functions, bit for bit.

    Parameters
    ----------
    model, support, weights, queries : as in :func:`mean_field`

    Returns
    -------
    (F, s) : tensors of shapes (L+1, m, d_model) and (L, m).

    Examples
    --------
    >>> m = CausalTransformer(vocab_size=3, d_model=4, n_layers=2, seed=0)
    >>> w, x = torch.tensor([0.5, 0.3, 0.2]), torch.arange(3)
    >>> F, s = mean_field_with_logit_variances(m, x, w, x)
    >>> bool((F == mean_field(m, x, w, x)).all()), bool((s == mean_field_logit_variances(m, x, w, x)).all())
    (True, True)
    """
    variances: list[torch.Tensor] = []
    with torch.no_grad():
        F = _mean_field_states(model, support, weights, queries, logit_variances=variances)  # (L+1, m, d)
    return F, torch.stack([v.amax(-2) for v in variances])  # (L+1, ..., m, d), (L, ..., m): max over heads


def mean_field_discrete(model: CausalTransformer, freqs: object) -> torch.Tensor:
    r"""Mean-field terminal states F_L(x) for every token x, context token frequencies ``freqs``.

    The exact expectation over the vocabulary law π = ``freqs`` of :func:`mean_field`:

    .. math:: F_{l+1}(x) = F_l(x) + \sum_{\text{heads}}\Theta_V
              \frac{E_\pi[\tilde F_l(X) e^{a_l(x)^\top \tilde F_l(X)}]}{E_\pi[e^{a_l(x)^\top \tilde F_l(X)}]}
              \ (+\text{MLP}).

    ``freqs`` of shape (V,) gives a tensor of shape (V, d_model); a batch of laws, (B, V), gives
    (B, V, d_model) from one pass of the recursion.  With :meth:`CausalTransformer.logits_from_hidden`
    it gives the Markov kernel K_π(x, ·) = softmax(W_out F_L(x) / τ) of the repetition result
    (paper Section 6, book chapter 09).

    Examples
    --------
    >>> m = CausalTransformer(vocab_size=3, d_model=4, n_layers=1, seed=0)
    >>> mean_field_discrete(m, torch.tensor([0.5, 0.5, 0.0])).shape
    torch.Size([3, 4])
    >>> mean_field_discrete(m, torch.tensor([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]])).shape
    torch.Size([2, 3, 4])
    """
    if _check_model(model).vocab_size is None:
        raise ValueError("mean_field_discrete needs a model built with vocab_size")
    tokens = torch.arange(model.vocab_size, device=model.device)  # (V,)
    return mean_field(model, tokens, freqs, tokens)[-1]  # (V, d) or (B, V, d)


def mean_field_gaussian(model: CausalTransformer, cov: object) -> list[torch.Tensor]:
    r"""Closed-form mean-field matrices [M_0, ..., M_L] for zero-mean Gaussian inputs, attention only.

    F_l(x) = M_l x with M_0 = E (the embedding, shape (d_model, d_in)) and

    .. math:: M_{l+1} = M_l + \sum_{\text{heads}} \Theta_V M_l \Sigma M_l^\top \Theta_K^\top \Theta_Q M_l ,

    the tilted mean of the Gaussian F_l(X) ~ N(0, M_l Σ M_lᵀ) under the tilt a_l(x) = Θ_Kᵀ Θ_Q M_l x:
    a covariance readout at every depth (paper Section 5, book chapter 08).

    Examples
    --------
    >>> m = CausalTransformer(d_in=2, d_model=4, n_layers=3, seed=0)
    >>> [tuple(M.shape) for M in mean_field_gaussian(m, torch.eye(2))]
    [(4, 2), (4, 2), (4, 2), (4, 2)]
    """
    if _check_model(model).d_in is None:
        raise ValueError("mean_field_gaussian needs a model built with d_in (continuous tokens)")
    if model.mlp or model.layer_norm or model.pos is not None:
        raise ValueError("the Gaussian closed form holds for attention-only models without layer norm or "
                         "positions; use mean_field with gauss_hermite_rule otherwise")
    sigma = as_covariance(cov, "cov", size=model.d_in).to(device=model.device, dtype=model.dtype)
    with torch.no_grad():
        ms = [model.embed.weight.detach().clone()]  # (d, d_in)
        for layer in range(model.n_layers):
            m_l = ms[-1]
            c = m_l @ sigma @ m_l.T  # (d, d)
            ms.append(m_l + sum(tv @ c @ tk.T @ tq @ m_l for tq, tk, tv in model.head_matrices(layer)))
    return ms


def gaussian_tail_exponents(model: CausalTransformer, cov: object) -> list[float]:
    r"""Tail exponents κ_l of the rate constant over Gaussian queries, one per layer (attention only).

    At layer l+1 a query x has logit variance s_l(x) = xᵀ B_l x with
    B_l = M_lᵀ Θ_Qᵀ Θ_K M_l Σ M_lᵀ Θ_Kᵀ Θ_Q M_l (the largest over heads), and the 1/t constant of the
    readout error grows like e^{s_l(x)} (paper Section 3, book chapter 03).  For x ~ N(0, Σ),

    .. math:: \mathbb E_x e^{s_l(x)} < \infty \iff
              \kappa_l := \frac{1}{2\lambda_{\max}(\Sigma^{1/2}B_l\Sigma^{1/2})} > 1,

    and P(e^{s_l(x)} > c) decays like c^{-κ_l}: averaged over random queries the mean squared error
    then decays like t^{-min(1, κ_l)} instead of 1/t.  Returns [κ_0, ..., κ_{L-1}].

    Examples
    --------
    >>> m = CausalTransformer(d_in=2, d_model=4, n_layers=2, seed=0, logit_scale=0.1)
    >>> all(k > 1 for k in gaussian_tail_exponents(m, torch.eye(2)))
    True
    """
    ms = mean_field_gaussian(model, cov)
    sigma = as_covariance(cov, "cov", size=model.d_in).to(device=model.device, dtype=model.dtype)
    root = psd_sqrt_factor(sigma)  # (d_in, d_in), root rootᵀ = Σ
    kappas = []
    with torch.no_grad():
        for layer in range(model.n_layers):
            m_l = ms[layer]
            c = m_l @ sigma @ m_l.T  # (d, d): covariance of F_l(X)
            lam = 0.0
            for tq, tk, _ in model.head_matrices(layer):
                a = tk.T @ tq @ m_l @ root  # (d, d_in): tilt of the whitened query
                lam = max(lam, float(torch.linalg.eigvalsh(a.T @ c @ a).max()))
            kappas.append(math.inf if lam <= 0 else 1.0 / (2.0 * lam))
    return kappas



def gaussian_logit_variances(model: CausalTransformer, cov: object, queries: object) -> torch.Tensor:
    r"""Mean-field logit variances s_l(x) = xᵀ B_l x in closed form, Gaussian tokens, attention only.

    For μ = N(0, Σ) and an attention-only model F_l(X) = M_l X (:func:`mean_field_gaussian`), the
    logit of a query x against X at layer l+1 is (Θ_Q M_l x)ᵀ Θ_K M_l X, Gaussian in X, with variance

    .. math:: s_l(x) = \max_{\text{heads}} \bigl|(M_l\Sigma M_l^\top)^{1/2}\,\Theta_K^\top\Theta_Q M_l x\bigr|^2
              = x^\top B_l x

    (the B_l of :func:`gaussian_tail_exponents`): the values :func:`mean_field_logit_variances` gives
    on a Gauss–Hermite rule (exact for this quadratic integrand), without the rule.

    Parameters
    ----------
    model : CausalTransformer, attention only, continuous tokens
    cov : (d_in, d_in) covariance Σ
    queries : (m, d_in) points

    Returns
    -------
    tensor, shape (L, m): s_0, ..., s_{L-1} at the queries.

    Examples
    --------
    >>> m = CausalTransformer(d_in=2, d_model=4, n_layers=2, seed=0)
    >>> x = torch.randn(5, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    >>> from covbook.transformer import gauss_hermite_rule
    >>> rule = gauss_hermite_rule(torch.eye(2), 16)
    >>> bool(torch.allclose(gaussian_logit_variances(m, torch.eye(2), x), mean_field_logit_variances(m, *rule, x)))
    True
    """
    ms = mean_field_gaussian(model, cov)
    sigma = as_covariance(cov, "cov", size=model.d_in).to(device=model.device, dtype=model.dtype)
    try:
        x = torch.as_tensor(queries, dtype=model.dtype, device=model.device)
    except (TypeError, ValueError, RuntimeError) as err:
        raise ValueError(f"queries must be an array of shape (m, {model.d_in}), got {type(queries).__name__}") from err
    if x.ndim != 2 or x.shape[1] != model.d_in:
        raise ValueError(f"queries must have shape (m, {model.d_in}), got {tuple(x.shape)}")
    out = []
    with torch.no_grad():
        for layer in range(model.n_layers):
            m_l = ms[layer]
            c = m_l @ sigma @ m_l.T  # (d, d): covariance of F_l(X)
            per_head = []
            for tq, tk, _ in model.head_matrices(layer):
                a = x @ (tk.T @ tq @ m_l).T  # (m, d): the tilt Θ_KᵀΘ_Q M_l x of each query
                per_head.append(((a @ c) * a).sum(-1))  # (m,)
            out.append(torch.stack(per_head).amax(0))
    return torch.stack(out)  # (L, m)


def _logit_scale_grid(scales: object) -> list[float]:
    """A non-empty list of positive finite logit scales, or ValueError naming ``scales``."""
    try:
        grid = [float(s) for s in scales]  # type: ignore[union-attr]
    except (TypeError, ValueError) as err:
        raise ValueError(f"scales must be a sequence of positive numbers, got {scales!r}") from err
    if not grid or not all(math.isfinite(s) and s > 0 for s in grid):
        raise ValueError(f"scales must be a non-empty sequence of positive numbers, got {scales!r}")
    return grid


def tail_safe_logit_scale(cov: object, scales: Sequence[float], kappa_min: float = 2.0,
                          **model_kwargs: object) -> float:
    r"""The largest logit scale in ``scales`` whose model has every tail exponent κ_l ≥ ``kappa_min``.

    Builds ``CausalTransformer(logit_scale=s, **model_kwargs)`` (attention only, continuous
    tokens) for each s and keeps those with min_l κ_l ≥ ``kappa_min``
    (:func:`gaussian_tail_exponents`).  With κ_l ≥ 2 a whitened Gaussian query z has logit
    variance s_l(x) ≤ |z|²/4 at every layer, so the tilted laws of the mean field stay within a
    few standard deviations of the context law (book chapter 08).  Without that bound the mean
    field of a deep random model can grow by orders of magnitude with depth and its tilted laws
    leave the nodes of any affordable quadrature.

    Raises ``ValueError`` naming the best scale's min_l κ_l when no scale of ``scales`` qualifies:
    such a model is refused, never read at a scale that breaks the bound.

    Examples
    --------
    >>> tail_safe_logit_scale(torch.eye(2), [0.1, 100.0], d_in=2, d_model=4, n_layers=2, seed=0)
    0.1
    """
    grid = _logit_scale_grid(scales)
    kappa_min = check_positive_float(kappa_min, "kappa_min")
    kappas = {s: min(gaussian_tail_exponents(CausalTransformer(logit_scale=float(s), **model_kwargs), cov))
              for s in grid}
    ok = [s for s, k in kappas.items() if k >= kappa_min]
    if not ok:
        best = max(kappas, key=kappas.get)
        raise ValueError(f"scales: no logit scale of {grid} gives every tail exponent kappa_l >= {kappa_min} for "
                         f"this model (the best, {best}, gives min kappa_l = {kappas[best]:.3g}); give smaller scales")
    return max(ok)


def mean_field_jacobian(model: CausalTransformer, freqs: object) -> torch.Tensor:
    r"""Derivative of the terminal mean-field states F_L(x; π) in the context law π, on the simplex.

    .. math:: J_x[:, v] = \frac{d}{dh}\Big|_{h=0} F_L\bigl(x;\ \pi + h\,(e_v - \pi)\bigr),

    one (d_model, V) matrix per token x, by central differences with step h = 1e-5 in float64
    (error O(h²) times the third derivative, far below any sampling error it is compared with).
    For a direction δ in the simplex's tangent space (1ᵀδ = 0), J_x δ is the first-order
    change of F_L(x) when π moves by δ.

    Returns
    -------
    tensor, shape (V, d_model, V), float64
    """
    if _check_model(model).vocab_size is None:
        raise ValueError("mean_field_jacobian needs a model built with vocab_size")
    v = model.vocab_size
    tokens = torch.arange(v, device=model.device)  # (V,)
    pi = _check_weights(freqs, v, torch.float64, model.device)  # (V,)
    if bool((pi <= 0).any()):
        raise ValueError("freqs must be positive for every token (the derivative is taken inside the simplex)")
    h = 1e-5
    eye = torch.eye(v, dtype=torch.float64, device=model.device)  # (V, V)
    cols = []
    for j in range(v):
        step = h * (eye[j] - pi)  # (V,) a tangent direction, so π ± step stays a law
        plus = mean_field(model, tokens, (pi + step).to(model.dtype), tokens)[-1]  # (V, d)
        minus = mean_field(model, tokens, (pi - step).to(model.dtype), tokens)[-1]  # (V, d)
        cols.append((plus - minus).to(torch.float64) / (2 * h))
    return torch.stack(cols, dim=-1)  # (V, d, V)


def _collapse_inputs(model: CausalTransformer, freqs: object, covariance: object, jacobian: torch.Tensor | None,
                     name: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The checked (J, Σ, π) of :func:`collapse_constant` and :func:`collapse_readout_sd`: J computed unless given."""
    if _check_model(model).n_layers != 1:
        raise ValueError(f"{name} is the exact delta-method law of a one-layer model; got "
                         f"n_layers={model.n_layers} (deeper models also average the errors of earlier layers)")
    if jacobian is None:
        jac = mean_field_jacobian(model, freqs)  # (V, d, V)
    else:
        v, d = model.vocab_size, model.d_model
        if not isinstance(jacobian, torch.Tensor) or tuple(jacobian.shape) != (v, d, v):
            raise ValueError(f"jacobian must be mean_field_jacobian(model, freqs), a tensor of shape ({v}, {d}, {v}), "
                             f"got {getattr(jacobian, 'shape', type(jacobian).__name__)}")
        jac = jacobian.to(torch.float64)
    v = jac.shape[0]
    sigma = as_covariance(covariance, "covariance", size=v).to(jac.device)
    pi = _check_weights(freqs, v, torch.float64, jac.device)  # (V,)
    return jac, sigma, pi


def collapse_constant(model: CausalTransformer, freqs: object, covariance: object, *,
                      jacobian: torch.Tensor | None = None) -> float:
    r"""The constant C of t·E|h^(1)_t − F_1(x_t)|² → C for a one-layer model on a dependent context.

    A one-layer NoPE model computes h^(1)_t = F_1(x_t; π̂_t) exactly (book chapter 09), so
    by the delta method, when √t(π̂_t − π) → N(0, Σ) and x_t ~ π,

    .. math:: t\,\mathbb E\bigl|h^{(1)}_t - F_1(x_t;\pi)\bigr|^2 \to
              C = \sum_x \pi(x)\, \mathrm{tr}\bigl(J_x \Sigma J_x^\top\bigr),

    J_x from :func:`mean_field_jacobian`.  For iid tokens Σ = diag π − ππᵀ; for a stationary
    ergodic Markov chain Σ is its asymptotic covariance
    (:func:`covbook.markov.asymptotic_covariance`), which carries the chain's
    autocorrelations.  (The conditional law of π̂_t given the last token x_t changes Σ only
    at order 1/t.)

    Parameters
    ----------
    model : one-layer CausalTransformer with vocab_size, no positions
    freqs : (V,) the context's marginal law π (positive)
    covariance : (V, V) the asymptotic covariance Σ of √t(π̂_t − π)
    jacobian : (V, d_model, V), optional
        ``mean_field_jacobian(model, freqs)`` when the caller has it (it costs 2V mean fields).
    """
    jac, sigma, pi = _collapse_inputs(model, freqs, covariance, jacobian, "collapse_constant")
    per_token = torch.einsum("xdv,vw,xdw->x", jac, sigma, jac)  # (V,): tr(J_x Σ J_xᵀ)
    return float((pi * per_token).sum())


def collapse_readout_sd(model: CausalTransformer, freqs: object, covariance: object, positions: object,
                        weights: object, *, jacobian: torch.Tensor | None = None) -> float:
    r"""SD of one chain's u = Σ_j w_j t_j |h^(1)_{t_j} − F_1(x_{t_j})|², in the delta-method Gaussian limit.

    With A_x = J_xᵀ J_x (J_x from :func:`mean_field_jacobian`), y_t = t|J_{x_t} δ_t|² for
    δ_t = π̂_t − π.  In the limit √t δ_t ~ N(0, Σ) and, the frequencies being running means,
    Cov(√s δ_s, √t δ_t) = √(s/t) Σ for s ≤ t.  Gaussian fourth moments and last tokens drawn
    from π, independently at distinct positions, give

    .. math:: \mathrm{Var}\,y_t = \sum_x \pi(x)\bigl[2\,\mathrm{tr}(A_x\Sigma A_x\Sigma) + c_x^2\bigr] - C^2,
              \qquad \mathrm{Cov}(y_s, y_t) = 2\,\frac{s}{t}\,\mathrm{tr}(A\Sigma A\Sigma)\quad(s < t),

    c_x = tr(A_x Σ), C = Σ_x π(x) c_x (:func:`collapse_constant`), A = Σ_x π(x) A_x, and
    SD(u) = (wᵀ K w)^{1/2} for K that covariance over the positions.  It is the SD the
    theory predicts, so a window built from it does not move with the sample's own spread
    (whose heavy right tail makes a sample SE small exactly when the sample mean is low).

    Parameters
    ----------
    model : one-layer CausalTransformer with vocab_size, no positions
    freqs : (V,) the context's marginal law π (positive)
    covariance : (V, V) the asymptotic covariance Σ of √t(π̂_t − π)
    positions : (n,) distinct positions t_j ≥ 1
    weights : (n,) the weights w_j
    jacobian : (V, d_model, V), optional, as for :func:`collapse_constant`

    Examples
    --------
    >>> m = CausalTransformer(vocab_size=3, d_model=4, n_layers=1, seed=0)
    >>> pi = torch.full((3,), 1 / 3, dtype=torch.float64)
    >>> sigma = torch.diag(pi) - torch.outer(pi, pi)
    >>> one = collapse_readout_sd(m, pi, sigma, [100], [1.0])
    >>> bool(one > 0) and collapse_readout_sd(m, pi, sigma, [100, 10**9], [0.5, 0.5]) < one
    True
    """
    _check_model(model)
    t = np.asarray(positions, dtype=float)
    w = np.asarray(weights, dtype=float)
    if t.ndim != 1 or t.size == 0 or not np.all(np.isfinite(t)) or np.any(t < 1) or np.unique(t).size != t.size:
        raise ValueError(f"positions must be a non-empty 1-d array of distinct positions >= 1, got {positions!r}")
    if w.shape != t.shape or not np.all(np.isfinite(w)):
        raise ValueError(f"weights must be {t.size} finite numbers (one per position), got shape {w.shape}")
    jac, sigma, pi = _collapse_inputs(model, freqs, covariance, jacobian, "collapse_readout_sd")
    a_x = torch.einsum("xdv,xdw->xvw", jac, jac)  # (V, V, V): A_x = J_xᵀ J_x
    c_x = torch.einsum("xvw,wv->x", a_x, sigma)  # (V,)
    c = float((pi * c_x).sum())
    a = (pi[:, None, None] * a_x).sum(0)  # (V, V)
    cross = 2 * float(torch.trace(a @ sigma @ a @ sigma))
    own = float((pi * (2 * torch.einsum("xvw,wu,xuz,zv->x", a_x, sigma, a_x, sigma) + c_x**2)).sum()) - c**2
    k = cross * np.minimum.outer(t, t) / np.maximum.outer(t, t)  # (n, n)
    np.fill_diagonal(k, own)
    return float(np.sqrt(max(float(w @ k @ w), 0.0)))
