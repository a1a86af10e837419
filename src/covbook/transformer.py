"""A small causal transformer, its mean-field map, and a tiny character-level language model.

This module serves the depth and repetition results of Xu & Fang (2026) (THEOREMS.md T4
and T5).  An L-layer causal transformer with residual attention blocks

    h^(0)_t = E(x_t)  (+ p_t with a learned positional encoding),
    h^(l+1)_t = h^(l)_t + sum_heads Θ_V softmax_{s<=t}(<Θ_Q h^(l)_t, Θ_K h^(l)_s>) h^(l)_s  (+ MLP),

run without positional encoding on a stationary ergodic context, forgets the context: the
terminal state h^(L)_t approaches a deterministic function F_L(x_t) of the current token.
The mean-field recursion (T4) is

    F_0 = E,   F_{l+1}(x) = F_l(x) + sum_heads Θ_V E_μ[F_l(X) e^{a_l(x)ᵀF_l(X)}] / E_μ[e^{a_l(x)ᵀF_l(X)}]
    (+ the token-wise MLP),   a_l(x) = Θ_Kᵀ Θ_Q F_l(x),

with the layer norm applied to the attention/MLP inputs where the model has one.  For
zero-mean Gaussian inputs and attention only, F_l(x) = M_l x with the closed form
M_{l+1} = M_l + sum_heads Θ_V M_l Σ M_lᵀ Θ_Kᵀ Θ_Q M_l: a covariance readout at every depth.

Contents
--------
* :class:`CausalTransformer` -- the model (discrete or continuous tokens, optional heads,
  MLP, layer norm, learned or rotary positions, hidden-state taps, KV-cached decoding).
* :func:`mean_field`, :func:`mean_field_discrete`, :func:`mean_field_gaussian`,
  :func:`gauss_hermite_rule` -- the mean-field maps F_l.
* :func:`generate` -- greedy or temperature sampling with a KV cache.
* :class:`CharTokenizer`, :func:`python_reference_text`, :func:`train_language_model` --
  a character-level language model on the Python Language Reference shipped with CPython
  (``pydoc_data.topics``; no download).
"""

from __future__ import annotations

import hashlib
import math
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from covbook._validate import check_positive_int
from covbook.attention import softmax_attention

__all__ = [
    "CausalTransformer",
    "mean_field",
    "mean_field_discrete",
    "mean_field_gaussian",
    "gauss_hermite_rule",
    "gaussian_tail_exponents",
    "gaussian_polar_rule",
    "hidden_states_at",
    "generate",
    "CharTokenizer",
    "python_reference_text",
    "TrainResult",
    "train_language_model",
    "evaluate_loss",
]

POSITIONS = (None, "learned", "rotary")


# ----------------------------------------------------------------------------- the model


def _rotary(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    r"""Rotate consecutive halves of the last dim of ``x`` (..., T, d) by angles pos·θ_i.

    .. math:: (x_i, x_{i+d/2}) \mapsto (x_i\cos p\theta_i - x_{i+d/2}\sin p\theta_i,
              x_i\sin p\theta_i + x_{i+d/2}\cos p\theta_i),\quad \theta_i = \mathrm{base}^{-2i/d}
    """
    half = x.shape[-1] // 2
    theta = base ** (-torch.arange(half, dtype=x.dtype, device=x.device) * 2.0 / x.shape[-1])  # (d/2,)
    ang = positions.to(x.dtype)[:, None] * theta[None, :]  # (T, d/2)
    cos, sin = torch.cos(ang), torch.sin(ang)  # (T, d/2)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)  # (..., T, d)


class _Block(nn.Module):
    """One residual block: h <- h + Attn(LN(h)); h <- h + MLP(LN(h)) (LN and MLP optional)."""

    def __init__(self, d_model: int, n_heads: int, mlp: bool, layer_norm: bool, rotary: bool,
                 logit_scale: float, gen: torch.Generator, dtype: torch.dtype) -> None:
        super().__init__()
        dh = d_model // n_heads
        self.n_heads, self.d_head, self.rotary = n_heads, dh, rotary
        self.scale = float(logit_scale) / math.sqrt(dh)

        def init(*shape: int, fan_in: int) -> nn.Parameter:
            return nn.Parameter(torch.randn(*shape, generator=gen, dtype=dtype) / math.sqrt(fan_in))

        self.w_q = init(n_heads, dh, d_model, fan_in=d_model)  # (H, dh, d)
        self.w_k = init(n_heads, dh, d_model, fan_in=d_model)  # (H, dh, d)
        self.w_v = init(n_heads, dh, d_model, fan_in=d_model)  # (H, dh, d)
        self.w_o = init(d_model, n_heads * dh, fan_in=n_heads * dh)  # (d, H*dh)
        self.ln1 = nn.LayerNorm(d_model, dtype=dtype) if layer_norm else None
        self.ln2 = nn.LayerNorm(d_model, dtype=dtype) if (layer_norm and mlp) else None
        self.mlp: nn.Sequential | None = None
        if mlp:
            self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model, dtype=dtype), nn.GELU(),
                                     nn.Linear(4 * d_model, d_model, dtype=dtype))
            for lin in (self.mlp[0], self.mlp[2]):
                with torch.no_grad():
                    lin.weight.copy_(torch.randn(lin.weight.shape, generator=gen, dtype=dtype)
                                     / math.sqrt(lin.in_features))
                    lin.bias.zero_()

    def heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries (scaled), keys and values per head: each (..., H, T, dh)."""
        h, dh, d = self.w_q.shape
        w = torch.cat([self.w_q, self.w_k, self.w_v]).reshape(3 * h * dh, d)  # (3 H dh, d)
        qkv = (x @ w.T).unflatten(-1, (3, h, dh))  # (..., T, 3, H, dh)
        qkv = qkv.movedim(-3, 0).transpose(-3, -2)  # (3, ..., H, T, dh)
        return qkv[0] * self.scale, qkv[1], qkv[2]

    def merge(self, out: torch.Tensor) -> torch.Tensor:
        """(..., H, T, dh) head outputs -> (..., T, d) through W_O."""
        out = out.transpose(-3, -2)  # (..., T, H, dh)
        return out.reshape(*out.shape[:-2], -1) @ self.w_o.T  # (..., T, d)

    def ln_attn(self, h: torch.Tensor) -> torch.Tensor:
        return self.ln1(h) if self.ln1 is not None else h

    def token_mlp(self, h: torch.Tensor) -> torch.Tensor:
        """The token-wise part: h + MLP(LN(h)), or h without an MLP."""
        if self.mlp is None:
            return h
        return h + self.mlp(self.ln2(h) if self.ln2 is not None else h)

    def forward(self, h: torch.Tensor, positions: torch.Tensor, cache: dict | None, chunk: int) -> torch.Tensor:
        # h (B, T, d); positions (T,) absolute positions of these tokens
        q, k, v = self.heads(self.ln_attn(h))  # (B, H, T, dh)
        if self.rotary:
            q, k = _rotary(q, positions), _rotary(k, positions)
        if cache is not None:
            if "k" in cache:
                k, v = torch.cat([cache["k"], k], dim=-2), torch.cat([cache["v"], v], dim=-2)  # (B, H, S, dh)
            cache["k"], cache["v"] = k, v
        n_new, offset = q.shape[-2], k.shape[-2] - q.shape[-2]
        parts = []
        for i in range(0, n_new, chunk):
            j = min(n_new, i + chunk)
            parts.append(softmax_attention(q[..., i:j, :], k[..., : offset + j, :], v[..., : offset + j, :],
                                           causal=True))  # (B, H, j-i, dh)
        return self.token_mlp(h + self.merge(torch.cat(parts, dim=-2)))


class CausalTransformer(nn.Module):
    r"""A small causal transformer without positional encoding by default (THEOREMS.md T4, T5).

    .. math:: h^{(0)}_t = E x_t\,(+p_t),\qquad
              h^{(l+1)}_t = h^{(l)}_t + \sum_{\text{heads}} \Theta_V \sum_{s\le t}
              \mathrm{softmax}_s\big(\langle\Theta_Q \tilde h^{(l)}_t, \Theta_K \tilde h^{(l)}_s\rangle\big)
              \tilde h^{(l)}_s\ (+\,\mathrm{MLP}),

    with :math:`\tilde h = \mathrm{LN}(h)` when ``layer_norm`` (pre-norm) and :math:`\tilde h = h`
    otherwise.  Per head, :math:`\Theta_Q = (\text{logit\_scale}/\sqrt{d_h}) W_Q`,
    :math:`\Theta_K = W_K` and :math:`\Theta_V = W_O^{(h)} W_V` (see :meth:`head_matrices`).
    Weights are drawn N(0, 1/fan_in) (embeddings N(0, 1)), so attention logits are O(logit_scale).

    Parameters
    ----------
    vocab_size : int, optional
        Discrete tokens 0..V-1: an embedding table and an output head ``w_out`` (V, d_model).
    d_in : int, optional
        Continuous tokens in R^{d_in}: a linear embedding ``embed.weight`` (d_model, d_in), no head.
        Exactly one of ``vocab_size`` and ``d_in`` must be given.
    d_model, n_layers, n_heads : int
        Width, depth and heads per layer (``d_model`` divisible by ``n_heads``).
    mlp : bool
        Add a token-wise MLP (width 4 d_model, GELU) to every block.
    layer_norm : bool
        Pre-norm layer norms on the attention and MLP inputs and before the output head.
    pos : {None, "learned", "rotary"}
        Positional encoding; None (the default) is the paper's NoPE setting.
    max_len : int
        Longest sequence (learned positions only).
    logit_scale : float
        Multiplies every attention logit (the initial "temperature" of attention).
    dtype : torch.dtype
        Parameter dtype (float64 by default; float32 for training).
    seed : int, optional
        Seed of the initialisation (else drawn from the global torch generator).  For one seed,
        models that differ only in ``pos`` share every other weight.
    attn_chunk : int
        Queries processed at once in attention (bounds memory at attn_chunk × T per head).

    Examples
    --------
    >>> m = CausalTransformer(vocab_size=5, d_model=8, n_layers=2, seed=0)
    >>> logits, hs = m(torch.tensor([[0, 1, 2, 3]]), return_hidden=True)
    >>> tuple(logits.shape), len(hs), tuple(hs[-1].shape)
    ((1, 4, 5), 3, (1, 4, 8))
    """

    def __init__(
        self,
        *,
        vocab_size: int | None = None,
        d_in: int | None = None,
        d_model: int,
        n_layers: int,
        n_heads: int = 1,
        mlp: bool = False,
        layer_norm: bool = False,
        pos: str | None = None,
        max_len: int = 4096,
        logit_scale: float = 1.0,
        dtype: torch.dtype = torch.float64,
        seed: int | None = None,
        attn_chunk: int = 1024,
    ) -> None:
        super().__init__()
        if (vocab_size is None) == (d_in is None):
            raise ValueError("give exactly one of vocab_size (discrete tokens) or d_in (continuous tokens)")
        d_model = check_positive_int(d_model, "d_model")
        n_layers = check_positive_int(n_layers, "n_layers")
        n_heads = check_positive_int(n_heads, "n_heads")
        max_len = check_positive_int(max_len, "max_len")
        self.attn_chunk = check_positive_int(attn_chunk, "attn_chunk")
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
        if pos not in POSITIONS:
            raise ValueError(f"pos must be one of None, 'learned', 'rotary', got {pos!r}")
        if pos == "rotary" and (d_model // n_heads) % 2:
            raise ValueError(f"rotary positions need an even head dim, got d_model/n_heads={d_model // n_heads}")
        if not (isinstance(logit_scale, (int, float)) and math.isfinite(logit_scale)):
            raise ValueError(f"logit_scale must be a finite number, got {logit_scale!r}")
        if dtype not in (torch.float32, torch.float64):
            raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
        gen = torch.Generator().manual_seed(int(seed)) if seed is not None else None
        if gen is None:
            gen = torch.Generator().manual_seed(int(torch.randint(0, 2**62, (1,)).item()))
        self.vocab_size = None if vocab_size is None else check_positive_int(vocab_size, "vocab_size")
        self.d_in = None if d_in is None else check_positive_int(d_in, "d_in")
        self.d_model, self.n_layers, self.n_heads = d_model, n_layers, n_heads
        self.mlp, self.layer_norm, self.pos, self.max_len = bool(mlp), bool(layer_norm), pos, max_len
        self.logit_scale = float(logit_scale)
        if self.vocab_size is not None:
            self.embed = nn.Embedding(self.vocab_size, d_model, dtype=dtype)
            with torch.no_grad():
                self.embed.weight.copy_(torch.randn(self.vocab_size, d_model, generator=gen, dtype=dtype))
        else:
            self.embed = nn.Linear(self.d_in, d_model, bias=False, dtype=dtype)
            with torch.no_grad():
                self.embed.weight.copy_(torch.randn(d_model, self.d_in, generator=gen, dtype=dtype)
                                        / math.sqrt(self.d_in))
        self.blocks = nn.ModuleList(
            _Block(d_model, n_heads, self.mlp, self.layer_norm, pos == "rotary", self.logit_scale, gen, dtype)
            for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model, dtype=dtype) if (layer_norm and vocab_size is not None) else None
        self.w_out = (nn.Parameter(torch.randn(self.vocab_size, d_model, generator=gen, dtype=dtype)
                                   / math.sqrt(d_model)) if self.vocab_size is not None else None)
        # drawn last, so that models differing only in `pos` share all other weights for one seed
        self.pos_emb = (nn.Parameter(torch.randn(max_len, d_model, generator=gen, dtype=dtype))
                        if pos == "learned" else None)

    # -- configuration ------------------------------------------------------------------
    @property
    def dtype(self) -> torch.dtype:
        return self.blocks[0].w_q.dtype

    @property
    def device(self) -> torch.device:
        return self.blocks[0].w_q.device

    def config(self) -> dict[str, object]:
        """The constructor arguments (for checkpoints and reports)."""
        return {"vocab_size": self.vocab_size, "d_in": self.d_in, "d_model": self.d_model,
                "n_layers": self.n_layers, "n_heads": self.n_heads, "mlp": self.mlp,
                "layer_norm": self.layer_norm, "pos": self.pos, "max_len": self.max_len,
                "logit_scale": self.logit_scale, "dtype": str(self.dtype).replace("torch.", "")}

    def head_matrices(self, layer: int) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """(Θ_Q, Θ_K, Θ_V) of every head of ``layer``: shapes (d_h, d), (d_h, d), (d, d).

        Θ_Q includes the logit scale and 1/sqrt(d_h), so the logit is (Θ_Q h_t)ᵀ(Θ_K h_s) and the
        head adds Θ_V times the softmax-weighted average of the (normalised) states.  The matrices
        are detached copies (for analysis, not training).
        """
        if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < self.n_layers:
            raise ValueError(f"layer must be an int in [0, {self.n_layers}), got {layer!r}")
        b = self.blocks[layer]
        dh = b.d_head
        with torch.no_grad():
            return [(b.w_q[h] * b.scale, b.w_k[h].clone(), b.w_o[:, h * dh:(h + 1) * dh] @ b.w_v[h])
                    for h in range(self.n_heads)]

    # -- forward ------------------------------------------------------------------------
    def _check_input(self, x: torch.Tensor) -> torch.Tensor:
        if not isinstance(x, torch.Tensor):
            raise ValueError(f"x must be a torch.Tensor, got {type(x).__name__}")
        if self.vocab_size is not None:
            if x.ndim != 2 or x.dtype not in (torch.int64, torch.int32):
                raise ValueError(f"x must be an integer tensor of token ids with shape (B, T), got "
                                 f"{x.dtype} {tuple(x.shape)}")
            if x.numel() and (int(x.min()) < 0 or int(x.max()) >= self.vocab_size):
                raise ValueError(f"token ids must lie in [0, {self.vocab_size}), got range "
                                 f"[{int(x.min())}, {int(x.max())}]")
            return x.long()
        if x.ndim != 3 or x.shape[-1] != self.d_in or not x.is_floating_point():
            raise ValueError(f"x must be a float tensor of shape (B, T, {self.d_in}), got {x.dtype} {tuple(x.shape)}")
        if not bool(torch.isfinite(x).all()):
            raise ValueError("x must be finite (no NaN or inf)")
        return x.to(self.dtype)

    def embed_tokens(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        """h^(0): E x_t (+ p_t for learned positions), shape (B, T, d)."""
        x = self._check_input(x)
        h = self.embed(x)  # (B, T, d)
        if x.shape[1] == 0:
            raise ValueError("x must contain at least one token")
        if self.pos == "learned":
            if start + x.shape[1] > self.max_len:
                raise ValueError(f"sequence of length {start + x.shape[1]} exceeds max_len={self.max_len} "
                                 f"of the learned positional encoding")
            h = h + self.pos_emb[start:start + x.shape[1]]  # (B, T, d)
        return h

    def forward(self, x: torch.Tensor, return_hidden: bool = False, *, caches: list[dict] | None = None,
                start: int = 0) -> torch.Tensor | tuple[torch.Tensor, list[torch.Tensor]]:
        """Logits (B, T, V) for token ids, or the final hidden state (B, T, d) for continuous inputs.

        With ``return_hidden=True`` also the hidden states [h^(0), ..., h^(L)], each (B, T, d)
        (the residual stream, before the final layer norm).  ``caches`` (one dict per layer)
        and ``start`` (the position of x's first token) are for incremental decoding.
        """
        h = self.embed_tokens(x, start)  # (B, T, d)
        positions = torch.arange(start, start + h.shape[1], device=h.device)  # (T,)
        hidden = [h]
        for i, block in enumerate(self.blocks):
            h = block(h, positions, None if caches is None else caches[i], self.attn_chunk)  # (B, T, d)
            hidden.append(h)
        out = self.logits_from_hidden(h) if self.vocab_size is not None else h
        return (out, hidden) if return_hidden else out

    def logits_from_hidden(self, h: torch.Tensor) -> torch.Tensor:
        """Vocabulary logits W_out LN_f(h), shape (..., V); no temperature (callers divide by τ)."""
        if self.w_out is None:
            raise ValueError("logits_from_hidden needs a model built with vocab_size (discrete tokens)")
        if h.shape[-1] != self.d_model:
            raise ValueError(f"h must have last dim d_model={self.d_model}, got shape {tuple(h.shape)}")
        if self.ln_f is not None:
            h = self.ln_f(h)
        return h @ self.w_out.T  # (..., V)


def hidden_states_at(model: CausalTransformer, x: torch.Tensor, positions: Sequence[int], *,
                     batch: int = 8) -> torch.Tensor:
    """Hidden states h^(l)_t at selected 1-based positions t, in batches of sequences.

    Returns a tensor of shape (L+1, B, len(positions), d_model) (no gradient).
    """
    pos = [int(p) for p in positions]
    T = x.shape[1] if isinstance(x, torch.Tensor) and x.ndim >= 2 else 0
    if not pos or any(p < 1 or p > T for p in pos):
        raise ValueError(f"positions must be a non-empty list of ints in [1, T={T}]")
    batch = check_positive_int(batch, "batch")
    idx = torch.tensor(pos, device=x.device) - 1  # (n,)
    outs = []
    with torch.no_grad():
        for i in range(0, x.shape[0], batch):
            _, hs = model(x[i:i + batch], return_hidden=True)
            outs.append(torch.stack([h[:, idx] for h in hs]))  # (L+1, b, n, d)
    return torch.cat(outs, dim=1)  # (L+1, B, n, d)


# ----------------------------------------------------------------------------- mean field


def _check_weights(weights: object, n: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    w = torch.as_tensor(weights, dtype=dtype, device=device)
    if w.ndim != 1 or w.shape[0] != n:
        raise ValueError(f"weights/freqs must have shape ({n},), got {tuple(w.shape)}")
    if not bool(torch.isfinite(w).all()) or bool((w < 0).any()) or float(w.sum()) <= 0:
        raise ValueError("weights/freqs must be finite, non-negative and not all zero")
    return w / w.sum()


def _embed_points(model: CausalTransformer, pts: object, name: str) -> torch.Tensor:
    """F_0 = E at the given tokens/points: (n, d)."""
    if model.vocab_size is not None:
        p = torch.as_tensor(pts, device=model.device)
        if p.ndim != 1 or p.is_floating_point():
            raise ValueError(f"{name} must be a 1-d tensor of token ids for a discrete model")
        return model.embed_tokens(p.long()[None])[0]  # (n, d)
    p = torch.as_tensor(pts, dtype=model.dtype, device=model.device)
    if p.ndim != 2:
        raise ValueError(f"{name} must have shape (n, {model.d_in}) for a continuous model")
    return model.embed_tokens(p[None])[0]  # (n, d)


def mean_field(model: CausalTransformer, support: object, weights: object, queries: object) -> torch.Tensor:
    r"""Mean-field states F_l at ``queries`` for a context law μ = Σ_i w_i δ_{support_i} (T4).

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
    weights : (N,), non-negative (normalised here)
    queries : token ids (m,) or points (m, d_in)

    Returns
    -------
    tensor, shape (L+1, m, d_model): F_0, ..., F_L at the queries.
    """
    if model.pos is not None:
        raise ValueError(f"the mean-field map needs a model without positional encoding, got pos={model.pos!r}")
    with torch.no_grad():
        hs = _embed_points(model, support, "support")  # (N, d)
        hq = _embed_points(model, queries, "queries")  # (m, d)
        w = _check_weights(weights, hs.shape[0], model.dtype, model.device)  # (N,)
        keep = w > 0
        hs, logw = hs[keep], torch.log(w[keep])  # (N', d), (N',)
        m = hq.shape[0]
        layers = [hq]
        for b in model.blocks:
            h = torch.cat([hq, hs])  # (m + N', d) queries: the m query points and the support
            q, _, _ = b.heads(b.ln_attn(h))  # (H, m+N', dh)
            _, k, v = b.heads(b.ln_attn(hs))  # (H, N', dh)
            ones = torch.ones(*q.shape[:-1], 1, dtype=q.dtype, device=q.device)  # (H, m+N', 1)
            k_aug = torch.cat([k, logw.expand(k.shape[0], -1)[..., None]], dim=-1)  # (H, N', dh+1)
            out = softmax_attention(torch.cat([q, ones], dim=-1), k_aug, v)  # (H, m+N', dh)
            h = b.token_mlp(h + b.merge(out))  # (m + N', d)
            hq, hs = h[:m], h[m:]
            layers.append(hq)
    return torch.stack(layers)  # (L+1, m, d)


def mean_field_discrete(model: CausalTransformer, freqs: object) -> torch.Tensor:
    r"""Mean-field terminal states F_L(x) for every token x, context token frequencies ``freqs``.

    The exact expectation over the vocabulary law π = ``freqs`` of :func:`mean_field`:

    .. math:: F_{l+1}(x) = F_l(x) + \sum_{\text{heads}}\Theta_V
              \frac{E_\pi[\tilde F_l(X) e^{a_l(x)^\top \tilde F_l(X)}]}{E_\pi[e^{a_l(x)^\top \tilde F_l(X)}]}
              \ (+\text{MLP}).

    Returns a tensor of shape (V, d_model).  With :meth:`CausalTransformer.logits_from_hidden`
    it gives the Markov kernel K_π(x, ·) = softmax(W_out F_L(x) / τ) of THEOREMS.md T5.

    Examples
    --------
    >>> m = CausalTransformer(vocab_size=3, d_model=4, n_layers=1, seed=0)
    >>> mean_field_discrete(m, torch.tensor([0.5, 0.5, 0.0])).shape
    torch.Size([3, 4])
    """
    if model.vocab_size is None:
        raise ValueError("mean_field_discrete needs a model built with vocab_size")
    tokens = torch.arange(model.vocab_size, device=model.device)  # (V,)
    return mean_field(model, tokens, freqs, tokens)[-1]


def mean_field_gaussian(model: CausalTransformer, cov: object) -> list[torch.Tensor]:
    r"""Closed-form mean-field matrices [M_0, ..., M_L] for zero-mean Gaussian inputs, attention only.

    F_l(x) = M_l x with M_0 = E (the embedding, shape (d_model, d_in)) and

    .. math:: M_{l+1} = M_l + \sum_{\text{heads}} \Theta_V M_l \Sigma M_l^\top \Theta_K^\top \Theta_Q M_l ,

    the tilted mean of the Gaussian F_l(X) ~ N(0, M_l Σ M_lᵀ) under the tilt a_l(x) = Θ_Kᵀ Θ_Q M_l x:
    a covariance readout at every depth (THEOREMS.md T4).

    Examples
    --------
    >>> m = CausalTransformer(d_in=2, d_model=4, n_layers=3, seed=0)
    >>> [tuple(M.shape) for M in mean_field_gaussian(m, torch.eye(2))]
    [(4, 2), (4, 2), (4, 2), (4, 2)]
    """
    if model.d_in is None:
        raise ValueError("mean_field_gaussian needs a model built with d_in (continuous tokens)")
    if model.mlp or model.layer_norm or model.pos is not None:
        raise ValueError("the Gaussian closed form holds for attention-only models without layer norm or "
                         "positions; use mean_field with gauss_hermite_rule otherwise")
    from covbook._validate import as_covariance

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
    readout error grows like e^{s_l(x)} (THEOREMS.md T1(g)).  For x ~ N(0, Σ),

    .. math:: \mathbb E_x e^{s_l(x)} < \infty \iff \kappa_l := rac{1}{2\lambda_{\max}(\Sigma^{1/2}B_l\Sigma^{1/2})} > 1,

    and P(e^{s_l(x)} > c) decays like c^{-κ_l}: averaged over random queries the mean squared error
    then decays like t^{-min(1, κ_l)} instead of 1/t.  Returns [κ_0, ..., κ_{L-1}].

    Examples
    --------
    >>> m = CausalTransformer(d_in=2, d_model=4, n_layers=2, seed=0, logit_scale=0.1)
    >>> all(k > 1 for k in gaussian_tail_exponents(m, torch.eye(2)))
    True
    """
    from covbook._validate import as_covariance, psd_sqrt_factor

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


def gauss_hermite_rule(cov: object, n_nodes: int, mean: object | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Tensor-product Gauss–Hermite rule for N(mean, cov): points (n^d, d) and weights (n^d,).

    .. math:: E f(X) \approx \sum_i w_i f(\mu + L z_i), \qquad L L^\top = \Sigma,

    exact for polynomials of degree < 2n in each coordinate; use it as the ``support`` of
    :func:`mean_field` for Gaussian contexts with MLPs or layer norm.

    Examples
    --------
    >>> pts, w = gauss_hermite_rule(torch.eye(1), 5)
    >>> round(float((w * pts[:, 0] ** 2).sum()), 12)
    1.0
    """
    from covbook._validate import as_covariance, psd_sqrt_factor

    sigma = as_covariance(cov, "cov")
    d = sigma.shape[0]
    n_nodes = check_positive_int(n_nodes, "n_nodes")
    if n_nodes ** d > 2_000_000:
        raise ValueError(f"n_nodes**d = {n_nodes ** d} points is too many; lower n_nodes")
    z, wz = np.polynomial.hermite_e.hermegauss(n_nodes)  # probabilists' Hermite: weight e^{-z²/2}
    wz = wz / wz.sum()
    grids = np.meshgrid(*([z] * d), indexing="ij")
    zs = torch.as_tensor(np.stack([g.reshape(-1) for g in grids], axis=1))  # (n^d, d)
    ws = torch.as_tensor(np.prod(np.meshgrid(*([wz] * d), indexing="ij"), axis=0).reshape(-1))  # (n^d,)
    mu = torch.zeros(d, dtype=torch.float64) if mean is None else torch.as_tensor(mean, dtype=torch.float64)
    if mu.shape != (d,):
        raise ValueError(f"mean must have shape ({d},), got {tuple(mu.shape)}")
    return mu + zs @ psd_sqrt_factor(sigma).T, ws  # (n^d, d), (n^d,)


def gaussian_polar_rule(cov: object, n_r: int, n_theta: int, r_max: float = 10.0,
                        mean: object | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Polar quadrature for a two-dimensional Gaussian N(mean, cov): points (n_r n_θ, 2), weights.

    With X = μ + L r (cos θ, sin θ), L Lᵀ = Σ,

    .. math:: E f(X) = rac{1}{2\pi}\int_0^{2\pi}\!\!\int_0^\infty f\,r e^{-r^2/2}\,dr\,d	heta
              pprox \sum_{i,j} w_i\,	frac{1}{n_	heta}\, f(\mu + L r_i(\cos	heta_j, \sin	heta_j)),

    Gauss–Legendre in r on [0, r_max] (weights w_i ∝ r_i e^{-r_i²/2}) and the trapezoid rule in θ.
    Unlike a tensor Gauss–Hermite rule it converges fast for integrands that are smooth in
    (r, θ) but not at the origin, such as a layer norm of a linear embedding, which depends on
    the direction of x only.

    Examples
    --------
    >>> pts, w = gaussian_polar_rule(torch.eye(2), 40, 16)
    >>> round(float((w * (pts ** 2).sum(1)).sum()), 10)
    2.0
    """
    from covbook._validate import as_covariance, psd_sqrt_factor

    sigma = as_covariance(cov, "cov", size=2)
    n_r, n_theta = check_positive_int(n_r, "n_r"), check_positive_int(n_theta, "n_theta")
    if not (isinstance(r_max, (int, float)) and r_max > 0):
        raise ValueError(f"r_max must be a positive number, got {r_max!r}")
    z, wz = np.polynomial.legendre.leggauss(n_r)
    r = 0.5 * r_max * (z + 1.0)  # (n_r,) nodes on [0, r_max]
    wr = 0.5 * r_max * wz * r * np.exp(-0.5 * r**2)  # (n_r,)
    wr = wr / wr.sum()
    theta = 2.0 * np.pi * np.arange(n_theta) / n_theta  # (n_θ,)
    unit = np.stack([np.cos(theta), np.sin(theta)], axis=1)  # (n_θ, 2)
    zs = torch.as_tensor((r[:, None, None] * unit[None]).reshape(-1, 2))  # (n_r n_θ, 2)
    ws = torch.as_tensor(np.repeat(wr / n_theta, n_theta))  # (n_r n_θ,)
    mu = torch.zeros(2, dtype=torch.float64) if mean is None else torch.as_tensor(mean, dtype=torch.float64)
    if mu.shape != (2,):
        raise ValueError(f"mean must have shape (2,), got {tuple(mu.shape)}")
    return mu + zs @ psd_sqrt_factor(sigma).T, ws  # (n, 2), (n,)


# ----------------------------------------------------------------------------- generation


def generate(model: CausalTransformer, prompt: torch.Tensor, steps: int, *, temperature: float = 1.0,
             generator: torch.Generator | None = None,
             return_probs: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    r"""Continue token sequences by sampling x_{t+1} ~ softmax(logits_t / τ), with a KV cache.

    ``temperature=0`` is greedy decoding (argmax; ties go to the lowest token id).

    Parameters
    ----------
    model : CausalTransformer with vocab_size
    prompt : LongTensor (B, T0), T0 >= 1
    steps : int, number of new tokens
    temperature : float >= 0
    generator : torch.Generator, optional (for reproducible sampling)
    return_probs : bool
        Also return the next-token laws p(· | x_{1:t}) at temperature τ (one-hot for greedy)
        that produced each new token: shape (B, steps, V).

    Returns
    -------
    LongTensor (B, T0 + steps) [, probs (B, steps, V)]

    Examples
    --------
    >>> m = CausalTransformer(vocab_size=4, d_model=8, n_layers=2, seed=0)
    >>> generate(m, torch.tensor([[1, 2]]), 5, temperature=0).shape
    torch.Size([1, 7])
    """
    if model.vocab_size is None:
        raise ValueError("generate needs a model built with vocab_size")
    steps = check_positive_int(steps, "steps")
    if not (isinstance(temperature, (int, float)) and math.isfinite(temperature) and temperature >= 0):
        raise ValueError(f"temperature must be a finite number >= 0, got {temperature!r}")
    prompt = model._check_input(prompt)
    if prompt.shape[1] == 0:
        raise ValueError("prompt must contain at least one token")
    caches: list[dict] = [{} for _ in range(model.n_layers)]
    seq, probs = [prompt], []
    with torch.no_grad():
        logits = model(prompt, caches=caches, start=0)[:, -1]  # (B, V)
        pos = prompt.shape[1]
        for i in range(steps):
            if temperature == 0:
                nxt = logits.argmax(-1)  # (B,)
                p = torch.nn.functional.one_hot(nxt, model.vocab_size).to(logits.dtype)  # (B, V)
            else:
                p = torch.softmax(logits / temperature, dim=-1)  # (B, V)
                nxt = torch.multinomial(p, 1, generator=generator)[:, 0]  # (B,)
            seq.append(nxt[:, None])
            probs.append(p)
            if i + 1 < steps:
                logits = model(nxt[:, None], caches=caches, start=pos)[:, -1]  # (B, V)
                pos += 1
    out = torch.cat(seq, dim=1)  # (B, T0 + steps)
    return (out, torch.stack(probs, dim=1)) if return_probs else out


# ----------------------------------------------------------------------------- text and training


class CharTokenizer:
    """Character-level tokenizer: the sorted set of characters of a text.

    Examples
    --------
    >>> tok = CharTokenizer("hello")
    >>> tok.vocab_size, tok.encode("hole").tolist(), tok.decode(tok.encode("hole"))
    (4, [1, 3, 2, 0], 'hole')
    """

    def __init__(self, text: str) -> None:
        if not isinstance(text, str) or not text:
            raise ValueError("CharTokenizer needs a non-empty string")
        self.chars = sorted(set(text))
        self.index = {c: i for i, c in enumerate(self.chars)}

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def __len__(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> torch.Tensor:
        """LongTensor (len(text),) of character ids."""
        try:
            return torch.tensor([self.index[c] for c in text], dtype=torch.long)
        except KeyError as err:
            raise ValueError(f"character {err.args[0]!r} is not in the tokenizer's vocabulary") from err

    def decode(self, ids: object) -> str:
        """The string of the ids (any 1-d integer sequence)."""
        arr = np.asarray(ids.cpu() if isinstance(ids, torch.Tensor) else ids).reshape(-1)
        if arr.size and (arr.min() < 0 or arr.max() >= self.vocab_size):
            raise ValueError(f"ids must lie in [0, {self.vocab_size})")
        return "".join(self.chars[int(i)] for i in arr)


def python_reference_text(max_chars: int | None = None) -> str:
    """The Python Language Reference topics shipped with CPython (``pydoc_data.topics``).

    The topics are joined in sorted key order with blank lines; deterministic for a given
    Python version.  No download.  ``max_chars`` truncates the text.
    """
    from pydoc_data.topics import topics

    text = "\n\n".join(topics[k].strip() for k in sorted(topics))
    if max_chars is not None:
        text = text[: check_positive_int(max_chars, "max_chars")]
    return text


@dataclass
class TrainResult:
    """Losses of :func:`train_language_model` (natural log, per character)."""

    steps: list[int] = field(default_factory=list)
    train_loss: list[float] = field(default_factory=list)
    val_steps: list[int] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)
    seconds: float = 0.0
    resumed_from: int = 0

    @property
    def final_val_loss(self) -> float:
        return self.val_loss[-1] if self.val_loss else float("nan")


def evaluate_loss(model: CausalTransformer, tokens: torch.Tensor, seq_len: int, *, max_windows: int = 64,
                  batch_size: int = 16) -> float:
    """Mean next-token cross-entropy (nats) over evenly spaced non-overlapping windows of ``tokens``."""
    seq_len = check_positive_int(seq_len, "seq_len")
    n_win = min(max_windows, (len(tokens) - 1) // seq_len)
    if n_win < 1:
        raise ValueError(f"need more than seq_len={seq_len} tokens to evaluate, got {len(tokens)}")
    starts = np.linspace(0, len(tokens) - seq_len - 1, n_win).astype(int)
    total, count = 0.0, 0
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for i in range(0, n_win, batch_size):
            s = torch.as_tensor(starts[i:i + batch_size])
            idx = s[:, None] + torch.arange(seq_len + 1)[None]  # (b, seq_len+1)
            win = tokens[idx].to(model.device)
            logits = model(win[:, :-1])  # (b, seq_len, V)
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), win[:, 1:].reshape(-1),
                                                     reduction="sum")
            total, count = total + float(loss), count + win[:, 1:].numel()
    model.train(was_training)
    return total / count


def _fingerprint(model: CausalTransformer, tokens: torch.Tensor, args: dict) -> str:
    h = hashlib.sha256(repr((model.config(), sorted(args.items()))).encode())
    h.update(tokens.cpu().numpy().astype(np.int64).tobytes())
    return h.hexdigest()[:16]


def _atomic_save(obj: object, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        torch.save(obj, tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def train_language_model(
    model: CausalTransformer,
    tokens: torch.Tensor,
    *,
    steps: int,
    batch_size: int,
    seq_len: int,
    lr: float,
    seed: int,
    checkpoint: str | os.PathLike | None = None,
    progress: bool = False,
    val_fraction: float = 0.1,
    eval_every: int | None = None,
    eval_windows: int = 64,
    checkpoint_every: int = 100,
    weight_decay: float = 0.01,
    grad_clip: float = 1.0,
) -> TrainResult:
    r"""Train ``model`` as a next-token predictor on ``tokens`` with AdamW; returns the losses.

    Minimises the mean cross-entropy :math:`-\frac1{BT}\sum \log p(x_{t+1}\mid x_{1:t})` over random
    windows of ``seq_len + 1`` tokens from the first ``1 - val_fraction`` of ``tokens``; the
    validation loss is :func:`evaluate_loss` on the last ``val_fraction``.  The learning rate warms
    up linearly over the first 5% of the steps, then follows a cosine down to lr/10.

    Deterministic given ``seed`` on CPU (the windows come from a generator seeded with it).  With
    ``checkpoint``, the model, optimiser, generator and losses are saved atomically every
    ``checkpoint_every`` steps and at the end; an existing checkpoint (of the same model
    configuration, data and arguments) is resumed, and a finished one is just loaded.  A
    checkpoint made with different settings is an error.  ``progress`` shows a plain ``tqdm``
    bar on stdout.
    """
    steps = check_positive_int(steps, "steps")
    batch_size = check_positive_int(batch_size, "batch_size")
    seq_len = check_positive_int(seq_len, "seq_len")
    eval_every = check_positive_int(eval_every if eval_every is not None else max(1, steps // 10), "eval_every")
    if model.vocab_size is None:
        raise ValueError("train_language_model needs a model built with vocab_size")
    if not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0):
        raise ValueError(f"lr must be a positive number, got {lr!r}")
    if not 0 < val_fraction < 1:
        raise ValueError(f"val_fraction must lie in (0, 1), got {val_fraction!r}")
    tokens = torch.as_tensor(tokens)
    if tokens.ndim != 1 or tokens.is_floating_point():
        raise ValueError("tokens must be a 1-d integer tensor")
    if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= model.vocab_size):
        raise ValueError(f"tokens must lie in [0, {model.vocab_size})")
    n_val = int(len(tokens) * val_fraction)
    train, val = tokens[: len(tokens) - n_val], tokens[len(tokens) - n_val:]
    if len(train) <= seq_len + 1 or len(val) <= seq_len + 1:
        raise ValueError(f"too few tokens ({len(tokens)}) for seq_len={seq_len} and val_fraction={val_fraction}")
    if model.pos == "learned" and seq_len > model.max_len:
        raise ValueError(f"seq_len={seq_len} exceeds the model's max_len={model.max_len}")

    args = {"steps": steps, "batch_size": batch_size, "seq_len": seq_len, "lr": float(lr), "seed": int(seed),
            "val_fraction": float(val_fraction), "eval_every": eval_every, "weight_decay": float(weight_decay),
            "grad_clip": float(grad_clip), "eval_windows": eval_windows}
    fp = _fingerprint(model, tokens, args)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.99), weight_decay=weight_decay)
    warm = max(1, steps // 20)

    def lr_at(step: int) -> float:
        if step < warm:
            return lr * (step + 1) / warm
        frac = (step - warm) / max(1, steps - warm)
        return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))

    gen = torch.Generator().manual_seed(int(seed))
    res, start = TrainResult(), 0
    path = Path(checkpoint) if checkpoint is not None else None
    if path is not None and path.exists():
        state = torch.load(path, map_location=model.device, weights_only=False)
        if state.get("fingerprint") != fp:
            raise ValueError(f"checkpoint {path} was made with another model, data or settings; delete it to retrain")
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        gen.set_state(state["generator"])
        res = TrainResult(**state["result"])
        start = res.resumed_from = state["step"]

    def save(step: int) -> None:
        if path is not None:
            _atomic_save({"fingerprint": fp, "model": model.state_dict(), "optimizer": opt.state_dict(),
                          "generator": gen.get_state(), "result": asdict(res), "step": step,
                          "config": model.config()}, path)

    t0 = time.perf_counter()
    model.train()
    bar = None
    if progress and start < steps:
        from tqdm import tqdm

        bar = tqdm(total=steps, initial=start, file=sys.stdout, desc="training", mininterval=2.0)
    for step in range(start, steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        s = torch.randint(0, len(train) - seq_len - 1, (batch_size,), generator=gen)  # (B,)
        win = train[s[:, None] + torch.arange(seq_len + 1)[None]].to(model.device)  # (B, seq_len+1)
        logits = model(win[:, :-1])  # (B, seq_len, V)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), win[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        opt.step()
        res.steps.append(step + 1)
        res.train_loss.append(float(loss.detach()))
        if (step + 1) % eval_every == 0 or step + 1 == steps:
            res.val_steps.append(step + 1)
            res.val_loss.append(evaluate_loss(model, val, seq_len, max_windows=eval_windows))
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{float(loss):.3f}", refresh=False)
        if (step + 1) % checkpoint_every == 0 or step + 1 == steps:
            res.seconds += time.perf_counter() - t0
            t0 = time.perf_counter()
            save(step + 1)
    if bar is not None:
        bar.close()
    model.eval()
    return res
