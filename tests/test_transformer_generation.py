"""Tests of covbook.transformer.generation: KV-cache and uncached decoding against the full forward pass, the
tempered next-token law, bad input."""

from __future__ import annotations

import pytest
import torch

from covbook.transformer import CausalTransformer, generate
from covbook.transformer.generation import tempered_softmax


@pytest.mark.parametrize("pos", [None, "learned", "rotary"])
def test_kv_cache_generation_matches_full_forward(pos):
    m = CausalTransformer(vocab_size=5, d_model=8, n_layers=3, n_heads=2, mlp=True, layer_norm=True, pos=pos, seed=3)
    prompt = torch.tensor([[0, 1, 2], [4, 4, 3]])
    seq, probs = generate(m, prompt, 6, temperature=0.7, generator=torch.Generator().manual_seed(0),
                          return_probs=True)
    assert seq.shape == (2, 9) and probs.shape == (2, 6, 5)
    full = torch.softmax(m(seq)[:, 2:-1] / 0.7, dim=-1)  # laws that produced tokens 3..8
    torch.testing.assert_close(probs, full, rtol=1e-10, atol=1e-12)
    greedy = generate(m, prompt, 6, temperature=0)
    torch.testing.assert_close(greedy[:, 3:], m(greedy)[:, 2:-1].argmax(-1))


def test_generate_without_a_kv_cache_matches_the_cached_path():
    class Wrapped(torch.nn.Module):
        def __init__(self, inner: CausalTransformer) -> None:
            super().__init__()
            self.inner, self.vocab_size = inner, inner.vocab_size

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.inner(x)

    m = CausalTransformer(vocab_size=6, d_model=8, n_layers=2, seed=2)
    prompt = torch.tensor([[1, 2, 3], [0, 5, 4]])
    assert torch.equal(generate(m, prompt, 12, temperature=0), generate(Wrapped(m), prompt, 12, temperature=0))


def test_generate_rejects_a_negative_temperature():
    m = CausalTransformer(vocab_size=3, d_model=4, n_layers=1, seed=0)
    with pytest.raises(ValueError, match="temperature"):
        generate(m, torch.tensor([[0]]), 3, temperature=-1.0)


def test_tempered_softmax_is_softmax_of_scaled_logits_and_finite_at_a_subnormal_temperature():
    """softmax(ℓ/τ): exactly torch.softmax at τ = 1, to rounding at τ = 0.5; at a subnormal τ, where ℓ/τ
    overflows, still a law, with equal mass on the tied maxima and none elsewhere."""
    logits = torch.randn(4, 7, generator=torch.Generator().manual_seed(0), dtype=torch.float64)  # (B, V)
    assert torch.equal(tempered_softmax(logits, 1.0), torch.softmax(logits, dim=-1))
    torch.testing.assert_close(tempered_softmax(logits, 0.5), torch.softmax(logits / 0.5, dim=-1), rtol=0, atol=1e-12)
    tied = torch.tensor([[0.0, 1.0, 1.0, -2.0], [3.0, 3.0, 3.0, 3.0], [-1.0, 2.5, -7.0, 2.5]], dtype=torch.float64)
    tau = 1e-310  # subnormal in float64: 1/τ overflows
    assert 0.0 < tau < torch.finfo(torch.float64).tiny
    p = tempered_softmax(tied, tau)  # (3, 4)
    assert bool(torch.isfinite(p).all())
    is_max = tied == tied.amax(-1, keepdim=True)  # (3, 4)
    expected = is_max.double() / is_max.sum(-1, keepdim=True)  # equal mass 1/k on the k tied maxima
    assert torch.equal(p, expected)
