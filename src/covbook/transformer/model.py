r"""The causal transformer of the depth and repetition chapters (paper Sections 5-6).

An L-layer causal transformer with residual attention blocks

.. math:: h^{(0)}_t = E x_t\ (+\,p_t),\qquad
          h^{(l+1)}_t = h^{(l)}_t + \sum_{\text{heads}} \Theta_V \sum_{s\le t}
          \mathrm{softmax}_s(\langle\Theta_Q h^{(l)}_t, \Theta_K h^{(l)}_s\rangle)\, h^{(l)}_s
          \ (+\,\mathrm{MLP}),

without positional encoding by default (the paper's NoPE setting), with optional heads, MLP,
pre-norm layer norm, learned or rotary positions, hidden-state taps and KV-cached decoding.
Its infinite-context limit is :mod:`covbook.transformer.mean_field` (book chapter 08).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from covbook._validate import check_fits, check_positive_int, check_seed
from covbook.attention import block_attention

__all__ = ["CausalTransformer", "hidden_states_at", "states_before_last_block", "POSITIONS"]

POSITIONS = (None, "learned", "rotary")


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

    def forward(self, h: torch.Tensor, positions: torch.Tensor, cache: dict | None, chunk: int,
                at: Sequence[int] | None = None) -> torch.Tensor:
        # h (B, T, d); positions (T,) absolute positions of these tokens; ``at``: the outputs at these 0-based
        # indices of the T tokens only, (B, len(at), d), each query seeing the keys up to its own
        q, k, v = self.heads(self.ln_attn(h))  # (B, H, T, dh)
        if self.rotary:
            q, k = _rotary(q, positions), _rotary(k, positions)
        if cache is not None:
            if "k" in cache:
                k, v = torch.cat([cache["k"], k], dim=-2), torch.cat([cache["v"], v], dim=-2)  # (B, H, S, dh)
            cache["k"], cache["v"] = k, v
        n_new, offset = q.shape[-2], k.shape[-2] - q.shape[-2]
        if at is not None:  # one query per index, over the keys s <= its position: (B, H, len(at), dh)
            out = torch.cat([block_attention(q[..., t:t + 1, :], k[..., : offset + t + 1, :],
                                             v[..., : offset + t + 1, :]) for t in at], dim=-2)
            return self.token_mlp(h[:, list(at)] + self.merge(out))
        parts = []
        for i in range(0, n_new, chunk):
            j = min(n_new, i + chunk)
            parts.append(block_attention(q[..., i:j, :], k[..., : offset + j, :], v[..., : offset + j, :],
                                         causal=True))
        return self.token_mlp(h + self.merge(torch.cat(parts, dim=-2)))


class CausalTransformer(nn.Module):
    r"""A small causal transformer without positional encoding by default (paper Sections 5-6; book chapters 08-10).

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
        if isinstance(logit_scale, bool) or not (isinstance(logit_scale, (int, float)) and math.isfinite(logit_scale)):
            raise ValueError(f"logit_scale must be a finite number, got {logit_scale!r}")
        if dtype not in (torch.float32, torch.float64):
            raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
        width = 12 if mlp else 4  # attention (+ MLP) weights per layer, in units of d_model²
        n_tok = (check_positive_int(vocab_size, "vocab_size") if vocab_size is not None
                 else check_positive_int(d_in, "d_in"))
        n_params = n_layers * width * d_model**2 + 2 * n_tok * d_model + max_len * d_model
        check_fits((n_params,), "d_model, n_layers and vocab_size", itemsize=8 if dtype == torch.float64 else 4)
        if seed is None:
            seed = int(torch.randint(0, 2**62, (1,)).item())
        # torch's layers initialise themselves from the global generator before their weights are
        # overwritten from `gen`: fork it, so that a seeded model leaves the global stream untouched
        self.logit_scale = float(logit_scale)
        with torch.random.fork_rng(devices=[]):
            self._build(vocab_size, d_in, d_model, n_layers, n_heads, mlp, layer_norm, pos, max_len,
                        dtype, torch.Generator().manual_seed(check_seed(seed)))

    def _build(self, vocab_size: int | None, d_in: int | None, d_model: int, n_layers: int, n_heads: int,
               mlp: bool, layer_norm: bool, pos: str | None, max_len: int, dtype: torch.dtype,
               gen: torch.Generator) -> None:
        """Create the layers and draw every weight from ``gen``."""
        self.vocab_size = None if vocab_size is None else check_positive_int(vocab_size, "vocab_size")
        self.d_in = None if d_in is None else check_positive_int(d_in, "d_in")
        self.d_model, self.n_layers, self.n_heads = d_model, n_layers, n_heads
        self.mlp, self.layer_norm, self.pos, self.max_len = bool(mlp), bool(layer_norm), pos, max_len
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
                start: int = 0, last_only: bool = False) -> torch.Tensor | tuple[torch.Tensor, list[torch.Tensor]]:
        """Logits (B, T, V) for token ids, or the final hidden state (B, T, d) for continuous inputs.

        With ``return_hidden=True`` also the hidden states [h^(0), ..., h^(L)], each (B, T, d)
        (the residual stream, before the final layer norm).  ``caches`` (one dict per layer)
        and ``start`` (the position of x's first token) are for incremental decoding.
        ``last_only=True`` gives the last position's output alone, (B, 1, V) or (B, 1, d): the last
        block computes its query at that position only (the keys and values, at every position).
        """
        if last_only and return_hidden:
            raise ValueError("last_only gives the last position's output alone; it cannot return every hidden state")
        h = self.embed_tokens(x, start)  # (B, T, d)
        positions = torch.arange(start, start + h.shape[1], device=h.device)  # (T,)
        hidden = [h]
        for i, block in enumerate(self.blocks):
            at = [h.shape[1] - 1] if last_only and i == len(self.blocks) - 1 else None
            h = block(h, positions, None if caches is None else caches[i], self.attn_chunk, at)  # (B, T or 1, d)
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
    if not isinstance(x, torch.Tensor) or x.ndim < 2:
        raise ValueError(f"x must be a tensor of shape (B, T) or (B, T, d_in), got {type(x).__name__}")
    try:
        pos = [int(p) for p in positions]
    except (TypeError, ValueError) as err:
        raise ValueError(f"positions must be a sequence of ints, got {positions!r}") from err
    T = x.shape[1]
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


def states_before_last_block(model: CausalTransformer, x: torch.Tensor) -> list[torch.Tensor]:
    """The states [h^(0), ..., h^(L−1)] of ``model`` on the sequences ``x`` (B, T) or (B, T, d_in), each (B, T, d).

    Those of ``model(x, return_hidden=True)`` bit for bit, without running the last block, whose output
    no later layer reads (for a caller that needs the last states at a few positions only, or the keys of
    every layer).  No gradient.  A model that is not a :class:`CausalTransformer` is a ``TypeError``; bad
    sequences a ``ValueError`` naming ``x``.
    """
    if not isinstance(model, CausalTransformer):
        raise TypeError(f"model must be a CausalTransformer, got {type(model).__name__}")
    with torch.no_grad():
        h = model.embed_tokens(x)  # (B, T, d)
        positions = torch.arange(h.shape[1], device=h.device)  # (T,)
        hidden = [h]
        for block in model.blocks[:-1]:
            hidden.append(block(hidden[-1], positions, None, model.attn_chunk))  # (B, T, d)
    return hidden
