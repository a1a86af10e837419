"""Tests of covbook.transformer.attention_sinks: the early-attention ratio χ_l against an explicit loop over
heads and positions, its degenerate cases, and the choice of a sink-free logit scale."""

from __future__ import annotations

import math

import torch

from covbook.transformer import CausalTransformer, early_attention_ratio, sink_free_logit_scale
from covbook.transformer.model import _rotary


def _chi_reference(model: CausalTransformer, x: torch.Tensor, k: int) -> torch.Tensor:
    """χ_l by explicit loops: per context and head, softmax of the last query's logits over all keys."""
    _, hs = model(x, return_hidden=True)
    T = x.shape[1]
    out = []
    for l, b in enumerate(model.blocks):
        per_ctx = []
        for r in range(x.shape[0]):
            best = 0.0
            for hd in range(b.n_heads):
                wq, wk = b.w_q[hd].detach() * b.scale, b.w_k[hd].detach()  # (dh, d)
                h = b.ln_attn(hs[l][r]).detach()  # (T, d)
                q, keys = h @ wq.T, h @ wk.T  # (T, dh)
                if b.rotary:
                    q, keys = _rotary(q, torch.arange(T)), _rotary(keys, torch.arange(T))
                logits = torch.stack([q[-1] @ keys[s] for s in range(T)])  # (T,)
                best = max(best, float(torch.softmax(logits, 0)[:k].sum()))
            per_ctx.append(best)
        out.append(sum(per_ctx) / len(per_ctx) * T / k)
    return torch.tensor(out, dtype=torch.float64)


def test_early_attention_ratio_matches_a_loop_over_heads_and_positions():
    x = torch.randint(0, 6, (3, 40), generator=torch.Generator().manual_seed(1))
    for kw in ({}, {"layer_norm": True, "mlp": True}, {"pos": "rotary"}):
        m = CausalTransformer(vocab_size=6, d_model=8, n_layers=3, n_heads=2, logit_scale=1.5, seed=3, **kw)
        torch.testing.assert_close(early_attention_ratio(m, x, k=5), _chi_reference(m, x, 5), rtol=1e-10,
                                   atol=1e-12, msg=str(kw))


def test_identical_tokens_give_uniform_attention_at_any_scale():
    """All tokens equal: every position has the same state at every layer, so χ_l = 1 exactly."""
    for scale in (0.1, 3.0):
        m = CausalTransformer(vocab_size=4, d_model=8, n_layers=3, logit_scale=scale, seed=0)
        chi = early_attention_ratio(m, torch.full((2, 24), 2, dtype=torch.long), k=6)
        torch.testing.assert_close(chi, torch.ones(3, dtype=torch.float64), rtol=1e-12, atol=1e-12)


def test_continuous_and_rotary_models_are_measured():
    cont = CausalTransformer(d_in=2, d_model=4, n_layers=2, seed=0)
    x = torch.randn(2, 20, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    assert early_attention_ratio(cont, x, k=4).shape == (2,)
    rot = CausalTransformer(vocab_size=5, d_model=8, n_layers=2, pos="rotary", seed=0)
    chi = early_attention_ratio(rot, torch.randint(0, 5, (2, 20), generator=torch.Generator().manual_seed(0)), k=4)
    assert chi.shape == (2,) and bool(torch.isfinite(chi).all()) and float(chi.min()) > 0


def test_a_deep_model_without_layer_norm_grows_a_sink_at_large_scale():
    """The first position's state grows with depth and its key wins: χ of the last layer far above 1."""
    x = torch.randint(0, 8, (8, 256), generator=torch.Generator().manual_seed(0))
    small = early_attention_ratio(CausalTransformer(vocab_size=8, d_model=8, n_layers=4, logit_scale=0.01, seed=1), x)
    assert float((small - 1).abs().max()) < 0.05
    chis = [float(early_attention_ratio(CausalTransformer(vocab_size=8, d_model=8, n_layers=4, logit_scale=s,
                                                          seed=s_seed), x)[-1])
            for s in (1.0, 2.0) for s_seed in range(4)]
    assert max(chis) > 2.0


def test_sink_free_logit_scale_is_the_largest_scale_within_the_bound():
    kw = dict(vocab_size=8, d_model=8, n_layers=4, seed=8)
    ctx = torch.randint(0, 8, (8, 128), generator=torch.Generator().manual_seed(0))
    grid = [0.1, 0.3, 1.0, 3.0]
    chis = {s: float(early_attention_ratio(CausalTransformer(logit_scale=s, **kw), ctx).max()) for s in grid}
    bound = sorted(chis.values())[1] * (1 + 1e-9)  # exactly the two smallest χ qualify
    ok = [s for s in grid if chis[s] <= bound]
    assert sink_free_logit_scale(grid, ctx, chi_max=bound, **kw) == (max(ok), chis[max(ok)])
    s, chi = sink_free_logit_scale(grid, ctx, chi_max=min(chis.values()) / 2, **kw)
    assert s == min(grid) and chi == chis[min(grid)] and math.isfinite(chi)
