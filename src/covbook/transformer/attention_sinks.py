r"""Early-position attention sinks: a pre-asymptotic regime of the depth collapse (book chapter 08).

The depth-collapse theorem (paper Section 5) says that a NoPE transformer's state h^(L)_t
approaches the mean field F_L(x_t) at rate 1/t.  Its proof treats every context position
alike, but the first positions are different: at s = 1 a head can attend only to its own
token, so h^(l+1)_1 = (I + Σ_heads Θ_V) h^(l)_1: each layer's value map acts on the first
state alone, not on an average of many states, and without layer norm its norm can grow
faster with depth than that of later states.  Its key can then dominate the softmax for the
later queries aligned with it, and such a *sink* keeps a share of the attention that falls
more slowly than its fair share 1/t until t exceeds the sink's weight.  Attention sinks on
the first tokens of trained language models were named and studied by Xiao et al. (2024);
there they are learned, here they are a transient of random models.

The measure is the early-attention ratio of layer l,

.. math:: \chi_l(t) = \frac{t}{k}\,\mathbb E \max_{\text{heads}}
          \sum_{s=1}^{k} \mathrm{softmax}_s\bigl(\ell_l(h_t, h_s)\bigr),

the attention mass of the last query on the first k positions, relative to the share k/t
that keys of the context law get on average (l = 1, ..., L counts the layers from the first).
χ is 1 for uniform attention and of order 1 where the proof's averaging holds; where it grows
with t, a sink holds more than its share at those lengths.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from covbook._validate import check_positive_float, check_positive_int
from covbook.transformer.mean_field import _logit_scale_grid
from covbook.transformer.model import CausalTransformer, _rotary, states_before_last_block

__all__ = ["early_attention_ratio", "sink_free_logit_scale"]


def early_attention_ratio(model: CausalTransformer, contexts: torch.Tensor, k: int = 8, *,
                          hidden: Sequence[torch.Tensor] | None = None) -> torch.Tensor:
    r"""χ_l: the last query's attention mass on the first ``k`` positions over its fair share k/t.

    .. math:: \chi_l = \frac{t}{k}\,\frac1R\sum_{r=1}^{R}\max_{\text{heads}}
              \sum_{s=1}^{k} a^{(l)}_{t,s}(r),

    a^{(l)}_{t,s} the attention weight of position t = T (the contexts' last) on position s at
    layer l, for each of the R contexts.

    Parameters
    ----------
    model : CausalTransformer
    contexts : (R, T) int token ids, or (R, T, d_in) points for a continuous model; T > k
    k : positive int, the number of early positions
    hidden : optional, the states [h^(0), ..., h^(L)] (each (R, T, d)) of ``model(contexts,
        return_hidden=True)``, for a caller that has run the forward already; the ratio reads
        h^(0), ..., h^(L−1) (the keys of the L layers).  Without it the forward runs here, through
        the first L − 1 blocks only (no layer reads the last block's output).

    Returns
    -------
    tensor, shape (L,): χ_1, ..., χ_L, from the first layer to the last.

    Examples
    --------
    >>> m = CausalTransformer(vocab_size=4, d_model=4, n_layers=2, logit_scale=1e-9, seed=0)
    >>> chi = early_attention_ratio(m, torch.zeros(2, 32, dtype=torch.long), k=4)  # uniform attention
    >>> [round(float(c), 6) for c in chi]
    [1.0, 1.0]
    """
    if not isinstance(model, CausalTransformer):
        raise TypeError(f"model must be a CausalTransformer, got {type(model).__name__}")
    k = check_positive_int(k, "k")
    if not isinstance(contexts, torch.Tensor) or contexts.ndim not in (2, 3) or contexts.shape[0] == 0:
        raise ValueError("contexts must be a non-empty tensor of shape (R, T) or (R, T, d_in), got "
                         f"{type(contexts).__name__} {tuple(getattr(contexts, 'shape', ()))}")
    T = contexts.shape[1]
    if T <= k:
        raise ValueError(f"contexts must be longer than k={k} positions, got T={T}")
    positions = torch.arange(T, device=model.device)  # (T,)
    out = []
    with torch.no_grad():
        hs = _states_before_last_block(model, contexts) if hidden is None else _check_hidden(hidden, model, contexts)
        for l, b in enumerate(model.blocks):
            q, kk, _ = b.heads(b.ln_attn(hs[l]))  # (R, H, T, dh)
            if b.rotary:
                q, kk = _rotary(q, positions), _rotary(kk, positions)
            a = torch.softmax(q[..., -1:, :] @ kk.transpose(-1, -2), dim=-1)[..., 0, :]  # (R, H, T)
            out.append(a[..., :k].sum(-1).amax(-1).mean() * T / k)
    return torch.stack(out)  # (L,)


def _states_before_last_block(model: CausalTransformer, contexts: torch.Tensor) -> list[torch.Tensor]:
    """:func:`states_before_last_block` of the contexts on the model's device; a misfit is a ``ValueError``."""
    try:
        return states_before_last_block(model, contexts.to(model.device))
    except ValueError as err:
        raise ValueError(f"contexts do not fit the model: {err}") from err


def _check_hidden(hidden: object, model: CausalTransformer, contexts: torch.Tensor) -> list[torch.Tensor]:
    """``hidden`` as a list of at least L states of shape (R, T, d_model), else ``ValueError``."""
    want = (contexts.shape[0], contexts.shape[1], model.d_model)
    if (not isinstance(hidden, Sequence) or len(hidden) < model.n_layers
            or not all(isinstance(h, torch.Tensor) and tuple(h.shape) == want for h in hidden)):
        raise ValueError(f"hidden must be the model's states [h^(0), ..., h^(L)] on the contexts, each of shape "
                         f"{want}, at least L={model.n_layers} of them")
    return list(hidden)


def sink_free_logit_scale(scales: Sequence[float], contexts: torch.Tensor, *, k: int = 8, chi_max: float = 2.0,
                          **model_kwargs: object) -> tuple[float, float]:
    r"""The largest logit scale in ``scales`` whose model has no early-position sink on pilot contexts.

    For each s (largest first) builds ``CausalTransformer(logit_scale=s, **model_kwargs)`` and
    returns the first s with max_l χ_l ≤ ``chi_max`` (:func:`early_attention_ratio` at the
    contexts' last position), with that max; or the smallest scale and its max χ when none
    qualifies (the caller sees χ > ``chi_max``).  The models are built on the contexts'
    device.  Use pilot contexts drawn apart from the measured ones, as long as the longest
    context measured: while a sink lasts χ grows with t, so it is largest there.

    Parameters
    ----------
    scales : non-empty sequence of positive logit scales
    contexts : pilot contexts, as in :func:`early_attention_ratio`
    k : the number of early positions
    chi_max : positive bound on max_l χ_l (default 2: the first k positions hold at most twice
        their share)

    Returns
    -------
    (scale, chi) : float, float

    Examples
    --------
    >>> ctx = torch.randint(0, 4, (4, 64), generator=torch.Generator().manual_seed(0))
    >>> sink_free_logit_scale([0.01, 0.1], ctx, vocab_size=4, d_model=4, n_layers=2, seed=0)[0]
    0.1
    """
    grid = sorted(_logit_scale_grid(scales), reverse=True)
    chi_max = check_positive_float(chi_max, "chi_max")
    if "logit_scale" in model_kwargs:
        raise ValueError("model_kwargs must not set logit_scale: the scales come from `scales`")
    if not isinstance(contexts, torch.Tensor):
        raise ValueError(f"contexts must be a tensor of shape (R, T) or (R, T, d_in), got {type(contexts).__name__}")
    chi = float("nan")
    for s in grid:
        model = CausalTransformer(logit_scale=s, **model_kwargs).to(contexts.device)  # type: ignore[arg-type]
        chi = float(early_attention_ratio(model, contexts, k).max())
        if chi <= chi_max:
            return s, chi
    return grid[-1], chi
