"""Tests of covbook.transformer: the causal model, its mean-field map, generation and training."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from covbook.attention import softmax_attention
from covbook.transformer import (
    CausalTransformer,
    CharTokenizer,
    evaluate_loss,
    gauss_hermite_rule,
    gaussian_polar_rule,
    gaussian_tail_exponents,
    generate,
    hidden_states_at,
    mean_field,
    mean_field_discrete,
    mean_field_gaussian,
    mean_field_logit_variances,
    python_reference_text,
    spaced_windows,
    tail_safe_logit_scale,
    train_language_model,
)


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


def test_one_layer_output_is_exactly_the_mean_field_of_the_empirical_frequencies():
    """For one layer, h_t^(1) = F_1^{π̂_t}(x_t) exactly, π̂_t the frequencies of x_1..x_t."""
    m = CausalTransformer(vocab_size=6, d_model=8, n_layers=1, n_heads=2, mlp=True, layer_norm=True, seed=5)
    x = torch.randint(0, 6, (1, 40), generator=torch.Generator().manual_seed(2))
    _, hs = m(x, return_hidden=True)
    for t in (1, 7, 40):
        freqs = torch.bincount(x[0, :t], minlength=6).double()
        torch.testing.assert_close(hs[1][0, t - 1], mean_field_discrete(m, freqs)[x[0, t - 1]],
                                   rtol=1e-10, atol=1e-10)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=4, max_size=4).filter(lambda c: sum(c) > 0), st.integers(0, 3))
def test_mean_field_weights_are_frequencies(counts, query):
    """Property: the mean-field step equals causal attention over a context with those counts."""
    m = CausalTransformer(vocab_size=4, d_model=4, n_layers=1, seed=6)
    ctx = torch.repeat_interleave(torch.arange(4), torch.tensor(counts))  # tokens with these counts
    f = mean_field(m, torch.arange(4), torch.tensor(counts, dtype=torch.float64), torch.tensor([query]))[1, 0]
    h = m.embed(torch.cat([ctx, torch.tensor([query])]))  # (n+1, d)
    (tq, tk, tv), = m.head_matrices(0)
    keys, q = h[:-1], h[-1]
    ref = h[-1] + tv @ softmax_attention((tq @ q)[None], keys @ tk.T, keys)[0]
    torch.testing.assert_close(f, ref, rtol=1e-10, atol=1e-10)


def test_point_mass_context_reads_out_that_token():
    m = CausalTransformer(vocab_size=3, d_model=4, n_layers=1, seed=0)
    f = mean_field_discrete(m, torch.tensor([0.0, 1.0, 0.0]))
    (_, _, tv), = m.head_matrices(0)
    torch.testing.assert_close(f, m.embed.weight + (tv @ m.embed.weight[1])[None])


def test_gaussian_closed_form_matches_quadrature_and_reduces_to_covariance_readout():
    cov = torch.tensor([[1.0, 0.3], [0.3, 0.5]], dtype=torch.float64)
    m = CausalTransformer(d_in=2, d_model=4, n_layers=3, n_heads=2, logit_scale=0.7, seed=1)
    ms = mean_field_gaussian(m, cov)
    pts, w = gauss_hermite_rule(cov, 40)
    xq = torch.tensor([[0.5, -1.0], [1.2, 0.1]], dtype=torch.float64)
    fs = mean_field(m, pts, w, xq)  # (L+1, 2, d)
    for layer, m_l in enumerate(ms):
        torch.testing.assert_close(fs[layer], xq @ m_l.T, rtol=1e-8, atol=1e-8)
    # one layer, identity embedding: M_1 = I + Θ_V Σ Θ_Kᵀ Θ_Q, the covariance readout
    one = CausalTransformer(d_in=2, d_model=2, n_layers=1, seed=2)
    with torch.no_grad():
        one.embed.weight.copy_(torch.eye(2))
    (tq, tk, tv), = one.head_matrices(0)
    torch.testing.assert_close(mean_field_gaussian(one, cov)[1], torch.eye(2) + tv @ cov @ tk.T @ tq)


def test_terminal_state_forgets_the_context_at_rate_one_over_t():
    """E|h_t^(2) − F_2(x_t)|² falls about 64-fold from t = 8 to t = 512 (MLP model, discrete tokens).

    A 1/sqrt(t) law would give 8, no forgetting 1.
    """
    m = CausalTransformer(vocab_size=5, d_model=8, n_layers=2, n_heads=2, mlp=True, seed=8)
    freqs = torch.tensor([0.4, 0.25, 0.15, 0.12, 0.08], dtype=torch.float64)
    x = torch.multinomial(freqs, 512 * 32, replacement=True, generator=torch.Generator().manual_seed(0))
    x = x.view(32, 512)
    f = mean_field_discrete(m, freqs)  # (V, d)
    hs = hidden_states_at(m, x, [8, 512])  # (3, R, 2, d)
    err = ((hs[2] - f[x[:, [7, 511]]]) ** 2).sum(-1).mean(0)  # (2,)
    ratio = float(err[0] / err[1])
    assert 16 < ratio < 256, ratio


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


def test_input_and_mean_field_errors():
    m = CausalTransformer(vocab_size=3, d_model=4, n_layers=1, seed=0)
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        m(torch.tensor([[0, 3]]))
    with pytest.raises(ValueError, match="shape \\(B, T\\)"):
        m(torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="non-negative"):
        mean_field_discrete(m, torch.tensor([0.5, -0.1, 0.6]))
    with pytest.raises(ValueError, match="shape \\(3,\\)"):
        mean_field_discrete(m, torch.tensor([0.5, 0.5]))
    with pytest.raises(ValueError, match="d_in"):
        mean_field_gaussian(m, torch.eye(2))
    c = CausalTransformer(d_in=2, d_model=4, n_layers=1, seed=0)
    with pytest.raises(ValueError, match="shape \\(B, T, 2\\)"):
        c(torch.zeros(1, 3, 5))
    with pytest.raises(ValueError, match="attention-only"):
        mean_field_gaussian(CausalTransformer(d_in=2, d_model=4, n_layers=1, mlp=True), torch.eye(2))
    with pytest.raises(ValueError, match="positional"):
        mean_field_discrete(CausalTransformer(vocab_size=3, d_model=4, n_layers=1, pos="rotary"), torch.ones(3))
    learned = CausalTransformer(vocab_size=3, d_model=4, n_layers=1, pos="learned", max_len=4)
    with pytest.raises(ValueError, match="max_len"):
        learned(torch.zeros(1, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="temperature"):
        generate(m, torch.tensor([[0]]), 3, temperature=-1.0)
    with pytest.raises(ValueError, match="positions"):
        hidden_states_at(m, torch.zeros(1, 3, dtype=torch.long), [4])


def test_char_tokenizer_roundtrip_and_errors():
    text = python_reference_text(max_chars=5000)
    assert len(text) == 5000 and "assert" in text
    tok = CharTokenizer(text)
    assert tok.decode(tok.encode(text)) == text
    with pytest.raises(ValueError, match="not in the tokenizer"):
        tok.encode("\u2603")
    with pytest.raises(ValueError, match="non-empty"):
        CharTokenizer("")
    with pytest.raises(ValueError, match="ids must lie"):
        tok.decode([tok.vocab_size])


def test_spaced_windows_are_disjoint_random_and_inside_the_text():
    starts = spaced_windows(1000, 6, 80, generator=torch.Generator().manual_seed(3))  # (6,)
    assert starts.shape == (6,) and int(starts[-1]) + 80 <= 1000
    assert bool((starts[1:] - starts[:-1] >= 80).all())  # disjoint: a stride of 166 >= 80
    offsets = {int(spaced_windows(1000, 6, 80, generator=torch.Generator().manual_seed(s))[0]) for s in range(20)}
    assert len(offsets) > 1 and max(offsets) <= 1000 // 6 - 80  # the random start moves
    assert spaced_windows(1000, 6, 80).tolist() == [0, 166, 332, 498, 664, 830]
    tight = spaced_windows(100, 4, 40)  # too short for disjoint windows: evenly spaced, overlapping
    assert tight.tolist() == [0, 20, 40, 60]
    assert spaced_windows(10, 1, 10).tolist() == [0]
    with pytest.raises(ValueError, match="length"):
        spaced_windows(10, 2, 11)
    with pytest.raises(ValueError, match="n_windows"):
        spaced_windows(10, 0, 5)
    with pytest.raises(TypeError, match="generator"):
        spaced_windows(10, 2, 5, generator=3)


def _tiny(seed: int = 0) -> tuple[CausalTransformer, torch.Tensor]:
    text = python_reference_text(max_chars=6000)
    tok = CharTokenizer(text)
    model = CausalTransformer(vocab_size=tok.vocab_size, d_model=16, n_layers=1, n_heads=2, mlp=True,
                              layer_norm=True, dtype=torch.float32, seed=seed)
    return model, tok.encode(text)


def test_training_lowers_the_loss_and_resumes_deterministically(tmp_path, monkeypatch):
    kw = {"steps": 12, "batch_size": 8, "seq_len": 16, "lr": 2e-2, "seed": 0, "eval_every": 4,
          "checkpoint_every": 4}
    model, tokens = _tiny()
    val = tokens[len(tokens) - int(0.1 * len(tokens)):]
    before = evaluate_loss(model, val, 16)
    res = train_language_model(model, tokens, **kw)
    assert res.final_val_loss < before - 0.5
    assert len(res.train_loss) == 12 and res.val_steps == [4, 8, 12]
    # interrupted after step 9 (an exception inside step 10), then resumed from the step-8 checkpoint
    ck = tmp_path / "ck.pt"
    calls = {"n": 0}
    real_clip = torch.nn.utils.clip_grad_norm_

    def flaky_clip(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 10:
            raise KeyboardInterrupt
        return real_clip(*args, **kwargs)

    m1, _ = _tiny()
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", flaky_clip)
    with pytest.raises(KeyboardInterrupt):
        train_language_model(m1, tokens, **{**kw, "checkpoint": ck})
    monkeypatch.undo()
    m1, _ = _tiny()
    part = train_language_model(m1, tokens, **{**kw, "checkpoint": ck})
    assert part.resumed_from == 8
    m2, _ = _tiny()
    again = train_language_model(m2, tokens, **{**kw, "checkpoint": ck})  # finished: just loads
    assert again.train_loss == part.train_loss == res.train_loss
    for p, q in zip(m2.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(p, q)
    with pytest.raises(ValueError, match="another model"):
        train_language_model(_tiny()[0], tokens, **{**kw, "lr": 3e-2, "checkpoint": ck})


def test_training_errors():
    model, tokens = _tiny()
    with pytest.raises(ValueError, match="lr"):
        train_language_model(model, tokens, steps=1, batch_size=2, seq_len=8, lr=0.0, seed=0)
    with pytest.raises(ValueError, match="too few tokens"):
        train_language_model(model, tokens[:20], steps=1, batch_size=2, seq_len=8, lr=1e-3, seed=0)
    with pytest.raises(ValueError, match="tokens must lie"):
        train_language_model(model, tokens + 1000, steps=1, batch_size=2, seq_len=8, lr=1e-3, seed=0)


def test_models_differing_only_in_positions_share_weights():
    a = CausalTransformer(vocab_size=5, d_model=4, n_layers=2, seed=3)
    b = CausalTransformer(vocab_size=5, d_model=4, n_layers=2, seed=3, pos="learned", max_len=8)
    for name, p in a.named_parameters():
        assert torch.equal(p, dict(b.named_parameters())[name])


def test_polar_rule_matches_gauss_hermite_on_smooth_integrands():
    cov = torch.tensor([[1.0, 0.3], [0.3, 0.5]], dtype=torch.float64)
    m = CausalTransformer(d_in=2, d_model=4, n_layers=2, mlp=True, logit_scale=0.5, seed=3)
    xq = torch.tensor([[0.5, -1.0], [1.2, 0.1]], dtype=torch.float64)
    a = mean_field(m, *gauss_hermite_rule(cov, 40), xq)
    b = mean_field(m, *gaussian_polar_rule(cov, 60, 64), xq)
    torch.testing.assert_close(a, b, rtol=1e-7, atol=1e-7)
    with pytest.raises(ValueError, match="2x2"):
        gaussian_polar_rule(torch.eye(3), 4, 4)


def test_tail_exponent_is_the_largest_logit_variance_per_unit_whitened_query():
    """κ_0 = 1 / (2 max_z s(Lz)/|z|²), s(x) the logit variance of query x at layer 1; κ scales as 1/scale²."""
    cov = torch.tensor([[1.0, 0.3], [0.3, 0.5]], dtype=torch.float64)
    chol = torch.linalg.cholesky(cov)
    m = CausalTransformer(d_in=2, d_model=4, n_layers=1, logit_scale=0.7, seed=4)
    (tq, tk, _), = m.head_matrices(0)
    e = m.embed.weight.detach()  # (d, d_in)
    theta = torch.linspace(0, torch.pi, 2001, dtype=torch.float64)
    z = torch.stack([torch.cos(theta), torch.sin(theta)], 1)  # (n, 2) unit whitened queries
    a = (z @ chol.T) @ e.T @ tq.T @ tk  # (n, d): tilt vectors a(x) = Θ_KᵀΘ_Q E x
    s = ((a @ e @ cov @ e.T) * a).sum(1)  # (n,): logit variance aᵀ(EΣEᵀ)a
    kappa = gaussian_tail_exponents(m, cov)[0]
    assert 1.0 / (2.0 * float(s.max())) == pytest.approx(kappa, rel=1e-5)
    m2 = CausalTransformer(d_in=2, d_model=4, n_layers=1, logit_scale=1.4, seed=4)
    assert gaussian_tail_exponents(m2, cov)[0] == pytest.approx(kappa / 4, rel=1e-10)


def test_logit_variances_are_the_gaussian_quadratic_forms_and_bound_by_kappa():
    """Attention only, Gaussian tokens: s_l(x) = max_heads aᵀ M_lΣM_lᵀ a, a = Θ_KᵀΘ_Q M_l x, and
    s_l(x) <= |z|²/(2κ_l) for the whitened query z."""
    cov = torch.tensor([[1.0, 0.3], [0.3, 0.5]], dtype=torch.float64)
    m = CausalTransformer(d_in=2, d_model=4, n_layers=2, n_heads=2, logit_scale=0.5, seed=5)
    xq = torch.randn(7, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    s = mean_field_logit_variances(m, *gauss_hermite_rule(cov, 24), xq)  # (L, m)
    assert s.shape == (2, 7)
    ms = mean_field_gaussian(m, cov)
    for layer in range(2):
        c = ms[layer] @ cov @ ms[layer].T  # (d, d)
        exact = torch.stack([(((xq @ ms[layer].T) @ (tk.T @ tq).T) @ c * ((xq @ ms[layer].T) @ (tk.T @ tq).T)).sum(1)
                             for tq, tk, _ in m.head_matrices(layer)]).amax(0)  # (m,)
        torch.testing.assert_close(s[layer], exact, rtol=1e-9, atol=1e-12)
        z2 = (torch.linalg.solve(torch.linalg.cholesky(cov), xq.T) ** 2).sum(0)  # (m,) |z|²
        assert bool((s[layer] <= z2 / (2 * gaussian_tail_exponents(m, cov)[layer]) + 1e-9).all())
    kw = dict(d_in=2, d_model=4, n_layers=2, n_heads=2, seed=5)
    best = tail_safe_logit_scale(cov, [0.05, 0.1, 0.2, 0.4, 0.8, 1.6], **kw)
    assert min(gaussian_tail_exponents(CausalTransformer(logit_scale=best, **kw), cov)) >= 2
    bigger = [s for s in [0.05, 0.1, 0.2, 0.4, 0.8, 1.6] if s > best]
    assert all(min(gaussian_tail_exponents(CausalTransformer(logit_scale=s, **kw), cov)) < 2 for s in bigger)
    with pytest.raises(ValueError, match="scales"):
        tail_safe_logit_scale(cov, [], **kw)
    with pytest.raises(ValueError, match="positional"):
        mean_field_logit_variances(CausalTransformer(vocab_size=3, d_model=4, n_layers=1, pos="learned"),
                                   torch.arange(3), torch.ones(3), torch.arange(3))


# ---------------------------------------------------------------------------
# the derivative of the mean field, the rate constant, checkpoints, divergence
# ---------------------------------------------------------------------------


def test_mean_field_jacobian_is_a_tangent_derivative():
    from covbook.transformer import mean_field_jacobian

    m = CausalTransformer(vocab_size=4, d_model=6, n_layers=2, n_heads=2, mlp=True, layer_norm=True, seed=3)
    pi = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    jac = mean_field_jacobian(m, pi)  # (V, d, V)
    assert jac.shape == (4, 6, 4)
    delta = torch.tensor([0.02, -0.01, 0.0, -0.01], dtype=torch.float64)  # tangent: sums to 0
    first_order = jac @ delta  # (V, d)
    exact = mean_field_discrete(m, pi + delta) - mean_field_discrete(m, pi)
    assert float((exact - first_order).abs().max()) < 0.05 * float(exact.abs().max())
    with pytest.raises(ValueError, match="positive"):
        mean_field_jacobian(m, torch.tensor([0.0, 0.2, 0.4, 0.4]))


def test_collapse_constant_matches_iid_simulation():
    from covbook.markov import asymptotic_covariance
    from covbook.transformer import collapse_constant

    v = 4
    m = CausalTransformer(vocab_size=v, d_model=6, n_layers=1, n_heads=2, mlp=True, layer_norm=True, seed=5)
    pi = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    c = collapse_constant(m, pi, asymptotic_covariance(torch.outer(torch.ones(v, dtype=torch.float64), pi)))
    g = torch.Generator().manual_seed(0)
    t = 400
    x = torch.multinomial(pi.expand(300, v), t, replacement=True, generator=g)  # (300, t)
    h = hidden_states_at(m, x, [t])[-1, :, 0]  # (300, d)
    sq = ((h - mean_field_discrete(m, pi)[x[:, -1]]) ** 2).sum(-1) * t  # (300,)
    assert abs(float(sq.mean()) - c) < 4 * float(sq.std()) / math.sqrt(300) + 0.05 * c
    with pytest.raises(ValueError, match="one-layer"):
        collapse_constant(CausalTransformer(vocab_size=v, d_model=6, n_layers=2, seed=0), pi, torch.eye(v))


def test_checkpoint_fingerprint_and_damaged_checkpoints(tmp_path):
    from covbook.transformer import checkpoint_fingerprint, load_checkpoint

    m = CausalTransformer(vocab_size=5, d_model=8, n_layers=1, seed=0, dtype=torch.float32)
    toks = torch.randint(0, 5, (400,), generator=torch.Generator().manual_seed(0))
    kw = dict(steps=4, batch_size=2, seq_len=8, lr=1e-3, seed=0)
    fp = checkpoint_fingerprint(m, toks, **kw)
    assert fp == checkpoint_fingerprint(m, toks, **kw, grad_clip=1.0)  # the default, spelled out
    assert fp != checkpoint_fingerprint(m, toks, **kw, grad_clip=0.5)
    bad = tmp_path / "garbage.pt"
    bad.write_bytes(b"not a checkpoint at all")
    with pytest.raises(ValueError, match="damaged"):
        load_checkpoint(bad)
    with pytest.raises(ValueError, match="damaged"):
        train_language_model(m, toks, **kw, checkpoint=bad)
    good = tmp_path / "good.pt"
    train_language_model(m, toks, **kw, checkpoint=good)
    assert load_checkpoint(good, fingerprint=fp)["step"] == 4
    with pytest.raises(ValueError, match="another model"):
        load_checkpoint(good, fingerprint="0" * 16)


def test_window_losses_average_to_evaluate_loss():
    from covbook.transformer import window_losses

    m = CausalTransformer(vocab_size=5, d_model=8, n_layers=1, seed=0)
    toks = torch.randint(0, 5, (300,), generator=torch.Generator().manual_seed(1))
    wl = window_losses(m, toks, 10, max_windows=7, batch_size=3)
    assert wl.shape == (7,)
    assert float(wl.mean()) == pytest.approx(evaluate_loss(m, toks, 10, max_windows=7), rel=1e-12)


def test_divergent_training_names_the_step_and_the_learning_rate():
    m = CausalTransformer(vocab_size=5, d_model=8, n_layers=1, seed=0, dtype=torch.float32)
    toks = torch.randint(0, 5, (400,), generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="diverged at step .* lower lr"):
        train_language_model(m, toks, steps=20, batch_size=2, seq_len=8, lr=1e6, seed=0, grad_clip=1e9)


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
