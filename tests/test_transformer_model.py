"""Tests of covbook.transformer.model: the causal transformer's forward pass against a reference loop, chunked
attention and causality, positions, hidden-state taps, seeding and bad input."""

from __future__ import annotations

import math

import pytest
import torch

from covbook.transformer import CausalTransformer, hidden_states_at


def _reference_forward(model: CausalTransformer, x: torch.Tensor) -> list[torch.Tensor]:
    """Slow loop over positions and heads, straight from the definition (attention only, no LN)."""
    h = model.embed(x)  # (B, T, d)
    hs = [h]
    for layer in range(model.n_layers):
        new = h.clone()
        for t in range(h.shape[1]):
            for tq, tk, tv in model.head_matrices(layer):
                logits = (h[:, : t + 1] @ tk.T) @ (tq @ h[:, t].unsqueeze(-1))  # (B, t+1, 1)
                w = torch.softmax(logits[..., 0], dim=-1)  # (B, t+1)
                new[:, t] += (w.unsqueeze(-1) * h[:, : t + 1]).sum(1) @ tv.T
        h = new
        hs.append(h)
    return hs


def test_forward_matches_reference_loop():
    m = CausalTransformer(vocab_size=6, d_model=6, n_layers=2, n_heads=2, seed=1)
    x = torch.randint(0, 6, (3, 9), generator=torch.Generator().manual_seed(0))
    _, hs = m(x, return_hidden=True)
    ref = _reference_forward(m, x)
    for a, b in zip(hs, ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("pos", [None, "learned", "rotary"])
def test_chunked_attention_and_causality(pos):
    m = CausalTransformer(vocab_size=7, d_model=8, n_layers=2, n_heads=2, mlp=True, layer_norm=True, pos=pos, seed=2)
    x = torch.randint(0, 7, (2, 20), generator=torch.Generator().manual_seed(1))
    full = m(x)
    m.attn_chunk = 3
    torch.testing.assert_close(m(x), full, rtol=1e-12, atol=1e-12)
    y = x.clone()
    y[:, 12:] = (y[:, 12:] + 1) % 7  # change the future only
    torch.testing.assert_close(m(y)[:, :12], full[:, :12], rtol=1e-12, atol=1e-12)
    assert not torch.allclose(m(y)[:, 12:], full[:, 12:])


@pytest.mark.parametrize("pos", [None, "learned", "rotary"])
@pytest.mark.parametrize("n_layers", [1, 3])
def test_last_only_is_the_last_position_of_the_full_pass(pos, n_layers):
    m = CausalTransformer(vocab_size=7, d_model=8, n_layers=n_layers, n_heads=2, mlp=True, layer_norm=True, pos=pos,
                          seed=3, attn_chunk=4)
    x = torch.randint(0, 7, (3, 11), generator=torch.Generator().manual_seed(2))
    last = m(x, last_only=True)  # (3, 1, V)
    assert last.shape == (3, 1, 7)
    torch.testing.assert_close(last, m(x)[:, -1:], rtol=1e-12, atol=1e-12)
    c = CausalTransformer(d_in=2, d_model=8, n_layers=2, seed=1)  # continuous inputs: the last hidden state
    z = torch.randn(2, 5, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(c(z, last_only=True), c(z)[:, -1:], rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="last_only"):
        m(x, return_hidden=True, last_only=True)


def test_rotary_depends_on_relative_positions_only():
    m = CausalTransformer(vocab_size=5, d_model=8, n_layers=2, n_heads=2, pos="rotary", seed=4)
    x = torch.randint(0, 5, (2, 10), generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(m(x, start=37), m(x), rtol=1e-10, atol=1e-10)
    nope = CausalTransformer(vocab_size=5, d_model=8, n_layers=2, n_heads=2, seed=4)
    assert not torch.allclose(nope(x), m(x))


def test_continuous_model_and_hidden_states_at():
    m = CausalTransformer(d_in=3, d_model=4, n_layers=2, seed=0)
    x = torch.randn(5, 11, 3, dtype=torch.float64)
    out, hs = m(x, return_hidden=True)
    assert out.shape == (5, 11, 4) and len(hs) == 3
    torch.testing.assert_close(out, hs[-1])
    sel = hidden_states_at(m, x, [1, 4, 11], batch=2)
    assert sel.shape == (3, 5, 3, 4)
    torch.testing.assert_close(sel[2, :, 1], hs[2][:, 3])


def test_seed_makes_models_reproducible():
    a = CausalTransformer(vocab_size=5, d_model=4, n_layers=2, mlp=True, seed=7)
    b = CausalTransformer(vocab_size=5, d_model=4, n_layers=2, mlp=True, seed=7)
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q)


def test_models_differing_only_in_positions_share_weights():
    a = CausalTransformer(vocab_size=5, d_model=4, n_layers=2, seed=3)
    b = CausalTransformer(vocab_size=5, d_model=4, n_layers=2, seed=3, pos="learned", max_len=8)
    for name, p in a.named_parameters():
        assert torch.equal(p, dict(b.named_parameters())[name])


def test_logits_from_hidden_and_errors():
    m = CausalTransformer(vocab_size=4, d_model=4, n_layers=1, layer_norm=True, seed=0)
    logits, hs = m(torch.tensor([[1, 2, 3]]), return_hidden=True)
    torch.testing.assert_close(m.logits_from_hidden(hs[-1]), logits)
    with pytest.raises(ValueError, match="last dim"):
        m.logits_from_hidden(torch.zeros(3))
    with pytest.raises(ValueError, match="vocab_size"):
        CausalTransformer(d_in=2, d_model=4, n_layers=1).logits_from_hidden(torch.zeros(4))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"d_model": 4, "n_layers": 1}, "exactly one"),
        ({"vocab_size": 3, "d_in": 2, "d_model": 4, "n_layers": 1}, "exactly one"),
        ({"vocab_size": 3, "d_model": 6, "n_layers": 1, "n_heads": 4}, "divisible"),
        ({"vocab_size": 3, "d_model": 4, "n_layers": 1, "pos": "sinusoid"}, "pos must be"),
        ({"vocab_size": 3, "d_model": 6, "n_layers": 1, "n_heads": 2, "pos": "rotary"}, "even head dim"),
        ({"vocab_size": 3, "d_model": 4, "n_layers": 0}, "n_layers"),
        ({"vocab_size": 3, "d_model": 4, "n_layers": 1, "logit_scale": math.nan}, "logit_scale"),
        ({"vocab_size": 3, "d_model": 4, "n_layers": 1, "dtype": torch.int64}, "dtype"),
    ],
)
def test_constructor_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        CausalTransformer(**kwargs)


def test_input_errors():
    m = CausalTransformer(vocab_size=3, d_model=4, n_layers=1, seed=0)
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        m(torch.tensor([[0, 3]]))
    with pytest.raises(ValueError, match="shape \\(B, T\\)"):
        m(torch.tensor([0, 1]))
    c = CausalTransformer(d_in=2, d_model=4, n_layers=1, seed=0)
    with pytest.raises(ValueError, match="shape \\(B, T, 2\\)"):
        c(torch.zeros(1, 3, 5))
    learned = CausalTransformer(vocab_size=3, d_model=4, n_layers=1, pos="learned", max_len=4)
    with pytest.raises(ValueError, match="max_len"):
        learned(torch.zeros(1, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="positions"):
        hidden_states_at(m, torch.zeros(1, 3, dtype=torch.long), [4])


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(("m", "t"), [(7, 7), (3, 9), (1, 5)])
def test_block_attention_is_the_reference_bit_for_bit(dtype, m, t, causal):
    """The models' attention gives softmax_attention's values and gradients exactly, causal or not."""
    from covbook.attention import block_attention, softmax_attention

    gen = torch.Generator().manual_seed(m * 10 + t)
    q, k, v = (torch.randn(2, 3, n, 4, generator=gen, dtype=dtype).requires_grad_() for n in (m, t, t))
    fast, ref = block_attention(q, k, v, causal=causal), softmax_attention(q, k, v, causal=causal)
    assert torch.equal(fast, ref)
    g_fast = torch.autograd.grad(fast.square().sum(), (q, k, v))
    g_ref = torch.autograd.grad(ref.square().sum(), (q, k, v))
    assert all(torch.equal(a, b) for a, b in zip(g_fast, g_ref))


def test_block_attention_falls_back_to_the_reference_on_overflow_and_bad_input():
    from covbook.attention import block_attention, softmax_attention

    q = torch.tensor([[[1e200], [1e200]]], dtype=torch.float64)  # logits overflow float64
    k = torch.tensor([[[1e200], [-1e200]]], dtype=torch.float64)
    v = torch.tensor([[[1.0], [3.0]]], dtype=torch.float64)
    out = block_attention(q, k, v, causal=True)
    assert torch.isfinite(out).all() and torch.equal(out, softmax_attention(q, k, v, causal=True))
    with pytest.raises(ValueError, match="finite"):
        block_attention(torch.full((1, 2, 1), float("nan")), k.float(), v.float(), causal=True)


def test_a_seeded_model_leaves_the_global_generator_untouched() -> None:
    torch.manual_seed(7)
    before = torch.get_rng_state()
    CausalTransformer(vocab_size=5, d_model=8, n_layers=2, n_heads=2, mlp=True, layer_norm=True, seed=3)
    CausalTransformer(d_in=3, d_model=4, n_layers=1, n_heads=1, seed=3)
    assert torch.equal(torch.get_rng_state(), before)


def test_the_weights_depend_on_the_seed_alone() -> None:
    torch.manual_seed(1)
    a = CausalTransformer(vocab_size=5, d_model=8, n_layers=2, n_heads=2, mlp=True, seed=3)
    torch.manual_seed(2)
    b = CausalTransformer(vocab_size=5, d_model=8, n_layers=2, n_heads=2, mlp=True, seed=3)
    for (name, p), (_, q) in zip(a.state_dict().items(), b.state_dict().items()):
        assert torch.equal(p, q), name
