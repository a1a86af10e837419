"""Tests of covbook.transformer.mean_field: the mean-field maps F_l (discrete and Gaussian contexts), their tail
exponents and logit variances, their derivative in the context law and the collapse constant."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from covbook.attention import softmax_attention
from covbook.markov import asymptotic_covariance
from covbook.transformer import (
    CausalTransformer,
    collapse_constant,
    collapse_readout_sd,
    gauss_hermite_rule,
    gaussian_tail_exponents,
    hidden_states_at,
    mean_field,
    mean_field_discrete,
    mean_field_gaussian,
    mean_field_jacobian,
    mean_field_logit_variances,
    tail_safe_logit_scale,
)


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
    with pytest.raises(ValueError, match="no logit scale"):  # refused, not read at the smallest scale
        tail_safe_logit_scale(cov, bigger[-1:], **kw)
    with pytest.raises(ValueError, match="positional"):
        mean_field_logit_variances(CausalTransformer(vocab_size=3, d_model=4, n_layers=1, pos="learned"),
                                   torch.arange(3), torch.ones(3), torch.arange(3))


def test_mean_field_jacobian_is_a_tangent_derivative():
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


def test_collapse_readout_sd_matches_its_gaussian_model():
    """The SD against a simulation of the law it is derived for: √t δ_t running means of N(0, Σ) steps."""
    v = 4
    m = CausalTransformer(vocab_size=v, d_model=6, n_layers=1, n_heads=2, mlp=True, layer_norm=True, seed=5)
    pi = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    sigma = torch.diag(pi) - torch.outer(pi, pi)
    jac = mean_field_jacobian(m, pi)  # (V, d, V)
    t = torch.tensor([2.0, 5.0, 10.0], dtype=torch.float64)
    w = torch.tensor([0.2, -0.5, 1.3], dtype=torch.float64)
    g = torch.Generator().manual_seed(1)
    n = 40_000
    root = torch.linalg.cholesky(sigma + 1e-12 * torch.eye(v, dtype=torch.float64))
    steps = torch.randn(n, 10, v, generator=g, dtype=torch.float64) @ root.T  # (n, 10, V) iid N(0, Σ)
    sums = steps.cumsum(1)[:, t.long() - 1]  # (n, 3, V)
    delta = sums / t[None, :, None]  # (n, 3, V): running means, exactly Gaussian with the stated covariances
    x = torch.multinomial(pi, n * 3, replacement=True, generator=g).view(n, 3)  # independent last tokens
    jd = torch.einsum("nkdv,nkv->nkd", jac[x], delta)  # (n, 3, d)
    u = ((jd**2).sum(-1) * t * w).sum(-1)  # (n,)
    sd = collapse_readout_sd(m, pi, sigma, t.tolist(), w.tolist())
    c = collapse_constant(m, pi, sigma)
    assert abs(float(u.mean()) - c * float(w.sum())) < 4 * float(u.std()) / math.sqrt(n)
    # the SD of a sample SD is about SD·(1 + κ/2)^{1/2}/√n; 5 % is over 5 of them at this n
    assert float(u.std()) == pytest.approx(sd, rel=0.05)


def test_collapse_functions_take_the_jacobian_the_caller_has():
    m = CausalTransformer(vocab_size=4, d_model=6, n_layers=1, n_heads=2, mlp=True, layer_norm=True, seed=5)
    pi = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    sigma = torch.diag(pi) - torch.outer(pi, pi)
    jac = mean_field_jacobian(m, pi)
    assert collapse_constant(m, pi, sigma, jacobian=jac) == collapse_constant(m, pi, sigma)
    sd = collapse_readout_sd(m, pi, sigma, [10, 40], [0.5, 0.5])
    assert collapse_readout_sd(m, pi, sigma, [10, 40], [0.5, 0.5], jacobian=jac) == sd
    with pytest.raises(ValueError, match="jacobian must be"):
        collapse_constant(m, pi, sigma, jacobian=jac[:, :, :3])


def test_collapse_readout_sd_errors():
    m = CausalTransformer(vocab_size=3, d_model=4, n_layers=1, seed=0)
    pi = torch.full((3,), 1 / 3, dtype=torch.float64)
    sigma = torch.diag(pi) - torch.outer(pi, pi)
    with pytest.raises(ValueError, match="positions"):
        collapse_readout_sd(m, pi, sigma, [5, 5], [0.5, 0.5])
    with pytest.raises(ValueError, match="positions"):
        collapse_readout_sd(m, pi, sigma, [0], [1.0])
    with pytest.raises(ValueError, match="weights"):
        collapse_readout_sd(m, pi, sigma, [5, 6], [1.0])
    with pytest.raises(ValueError, match="one-layer"):
        collapse_readout_sd(CausalTransformer(vocab_size=3, d_model=4, n_layers=2, seed=0), pi, sigma, [5], [1.0])


def test_mean_field_errors():
    m = CausalTransformer(vocab_size=3, d_model=4, n_layers=1, seed=0)
    with pytest.raises(ValueError, match="non-negative"):
        mean_field_discrete(m, torch.tensor([0.5, -0.1, 0.6]))
    with pytest.raises(ValueError, match="shape \\(3,\\)"):
        mean_field_discrete(m, torch.tensor([0.5, 0.5]))
    with pytest.raises(ValueError, match="d_in"):
        mean_field_gaussian(m, torch.eye(2))
    with pytest.raises(ValueError, match="attention-only"):
        mean_field_gaussian(CausalTransformer(d_in=2, d_model=4, n_layers=1, mlp=True), torch.eye(2))
    with pytest.raises(ValueError, match="positional"):
        mean_field_discrete(CausalTransformer(vocab_size=3, d_model=4, n_layers=1, pos="rotary"), torch.ones(3))
