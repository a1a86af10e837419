r"""Several small causal transformers run as one batch: row r of the input runs model ``rows[r]``.

Chapter 09 reads dozens of tiny random models (width 16, a vocabulary of 8) for hundreds of greedy or
sampled steps each.  One model at a time, every decoding step is a few dozen tiny tensor operations whose
cost is their dispatch, not their arithmetic; :class:`ModelBatch` stacks the models' weights so that one
step of every model is one set of batched products (:func:`torch.bmm` with a weight per row).  The
arithmetic of each row is that of its model's :class:`~covbook.transformer.CausalTransformer`:

.. math:: h^{(0)}_t = E x_t,\qquad
          h^{(l+1)}_t = h^{(l)}_t + W_O\,\sum_{s\le t}\mathrm{softmax}_s
          \bigl(\langle\Theta_Q h^{(l)}_t, \Theta_K h^{(l)}_s\rangle\bigr)\,W_V h^{(l)}_s,\qquad
          \ell_t = W_{\rm out} h^{(L)}_t,

for the models without positional encoding, MLP or layer norm (the random models of chapter 09).  It
decodes with a KV cache through :func:`covbook.transformer.generate`, like one model.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from covbook.attention import block_attention
from covbook.transformer.model import CausalTransformer

__all__ = ["ModelBatch"]


class ModelBatch(nn.Module):
    r"""The models of a batch: row r of every input (R, T) runs ``models[rows[r]]``.

    Parameters
    ----------
    models : sequence of :class:`~covbook.transformer.CausalTransformer`
        Discrete-token models of one shape (vocabulary, width, depth, heads, dtype), without positional
        encoding, MLP or layer norm.
    rows : sequence of int, length R
        The model of each batch row (indices into ``models``).

    Examples
    --------
    >>> ms = [CausalTransformer(vocab_size=5, d_model=8, n_layers=2, seed=s) for s in (0, 1)]
    >>> x = torch.tensor([[0, 1, 2], [3, 4, 0], [1, 1, 2]])
    >>> both = ModelBatch(ms, [0, 1, 0])(x)  # (3, 3, 5)
    >>> bool(torch.allclose(both[1], ms[1](x[1:2])[0], rtol=0, atol=1e-12))
    True
    """

    kv_cache = True  #: :func:`covbook.transformer.generate` decodes it with its caches

    def __init__(self, models: Sequence[CausalTransformer], rows: Sequence[int]) -> None:
        super().__init__()
        models = list(models)
        if not models or not all(isinstance(m, CausalTransformer) for m in models):
            raise ValueError("models must be a non-empty sequence of CausalTransformer")
        shape = {(m.vocab_size, m.d_model, m.n_layers, m.n_heads, m.dtype) for m in models}
        if len(shape) != 1 or models[0].vocab_size is None:
            raise ValueError(f"models must share one shape (vocab_size, d_model, n_layers, n_heads, dtype) with "
                             f"discrete tokens, got {sorted(map(str, shape))}")
        if any(m.pos is not None or m.mlp or m.layer_norm for m in models):
            raise ValueError("ModelBatch runs models without positional encoding, MLP or layer norm")
        try:
            idx = torch.as_tensor([int(r) for r in rows], dtype=torch.long)
        except (TypeError, ValueError) as err:
            raise ValueError(f"rows must be a sequence of model indices, got {rows!r}") from err
        if idx.ndim != 1 or idx.numel() == 0 or int(idx.min()) < 0 or int(idx.max()) >= len(models):
            raise ValueError(f"rows must be a non-empty sequence of indices in [0, {len(models)}), got {rows!r}")
        m0 = models[0]
        self.vocab_size, self.d_model, self.n_layers = m0.vocab_size, m0.d_model, m0.n_layers
        self.n_heads, self.attn_chunk, self.rows = m0.n_heads, min(m.attn_chunk for m in models), idx
        with torch.no_grad():
            def stack(get) -> nn.Parameter:  # (R, ...): each row's copy of its model's weight
                return nn.Parameter(torch.stack([get(m) for m in models])[idx.to(m0.device)], requires_grad=False)

            self.embed = stack(lambda m: m.embed.weight)  # (R, V, d)
            self.w_out = stack(lambda m: m.w_out)  # (R, V, d)
            self.w_qkv, self.w_o, self.scales = nn.ParameterList(), nn.ParameterList(), []
            for i in range(self.n_layers):
                self.w_qkv.append(stack(lambda m, i=i: torch.cat(
                    [m.blocks[i].w_q * m.blocks[i].scale, m.blocks[i].w_k, m.blocks[i].w_v]).flatten(0, 1).T))
                self.w_o.append(stack(lambda m, i=i: m.blocks[i].w_o.T))  # (R, H dh, d)

    @property
    def n_rows(self) -> int:
        return int(self.rows.numel())

    def forward(self, x: torch.Tensor, *, caches: list[dict] | None = None, start: int = 0) -> torch.Tensor:
        """Logits (R, T, V) of token ids ``x`` (R, T); ``caches`` (one dict per layer) and ``start`` decode."""
        if not isinstance(x, torch.Tensor) or x.ndim != 2 or x.dtype not in (torch.int64, torch.int32):
            raise ValueError(f"x must be an integer tensor of token ids with shape (R, T), got {type(x).__name__}")
        if x.shape[0] != self.n_rows or x.shape[1] == 0:
            raise ValueError(f"x must have {self.n_rows} rows (one per entry of rows) and at least one token, "
                             f"got {tuple(x.shape)}")
        if int(x.min()) < 0 or int(x.max()) >= self.vocab_size:
            raise ValueError(f"token ids must lie in [0, {self.vocab_size})")
        r = torch.arange(self.n_rows, device=x.device)[:, None]  # (R, 1)
        h = self.embed[r, x.long()]  # (R, T, d)
        H, dh = self.n_heads, self.d_model // self.n_heads
        for i in range(self.n_layers):
            qkv = torch.bmm(h, self.w_qkv[i]).unflatten(-1, (3, H, dh)).permute(2, 0, 3, 1, 4)  # (3, R, H, T, dh)
            q, k, v = qkv[0], qkv[1], qkv[2]
            if caches is not None:
                k, v = _append(caches[i], k, v)  # (R, H, S, dh): the cached keys and values, then these
            n_new, offset = q.shape[-2], k.shape[-2] - q.shape[-2]
            # one new query (a decoding step) sees every cached key: no mask to build
            out = torch.cat([block_attention(q[..., a:a + self.attn_chunk, :],
                                             k[..., :offset + min(n_new, a + self.attn_chunk), :],
                                             v[..., :offset + min(n_new, a + self.attn_chunk), :], causal=n_new > 1)
                             for a in range(0, n_new, self.attn_chunk)], dim=-2)  # (R, H, T, dh)
            h = h + torch.bmm(out.transpose(1, 2).flatten(2), self.w_o[i])  # (R, T, d)
        return torch.bmm(h, self.w_out.transpose(1, 2))  # (R, T, V)


def _append(cache: dict, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Append keys and values (R, H, n, dh) to a layer's cache; return views of all of them (R, H, S, dh).

    The cache keeps buffers of twice the length they last needed, so that decoding T tokens copies
    O(T) entries in all (a concatenation per step would copy O(T²)).
    """
    n_old = cache.get("n", 0)
    n = n_old + k.shape[-2]
    if "kbuf" not in cache or cache["kbuf"].shape[-2] < n:
        grown = [x.new_empty(*x.shape[:-2], 2 * n, x.shape[-1]) for x in (k, v)]  # (R, H, 2n, dh)
        if n_old:
            grown[0][..., :n_old, :] = cache["kbuf"][..., :n_old, :]
            grown[1][..., :n_old, :] = cache["vbuf"][..., :n_old, :]
        cache["kbuf"], cache["vbuf"] = grown
    cache["kbuf"][..., n_old:n, :] = k
    cache["vbuf"][..., n_old:n, :] = v
    cache["n"] = n
    return cache["kbuf"][..., :n, :], cache["vbuf"][..., :n, :]
