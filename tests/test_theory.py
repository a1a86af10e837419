"""Tests of covbook.theory: closed forms against Monte Carlo, identities and error paths."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from covbook.attention import readout_paths
from covbook.processes import (
    VAR1,
    BimodalGaussian,
    DiscreteMixing,
    ExponentialMixing,
    GaussianIID,
    InverseGaussianMixing,
    MultivariateLaplace,
    NonErgodicGaussian,
    RandomWalk,
    ScaleMixture,
    SkewedExponential,
    StudentT,
)
from covbook.theory import (
    covariance_readout,
    delta_method_reach,
    elliptical_gain,
    elliptical_kurtosis,
    heavy_tail_mse_exponent,
    laplace_rate_fraction,
    laplace_weight_tail_index,
    logit_variance,
    normalised_error_sd,
    quadratic_error_moments,
    readout_error_covariance,
    readout_mse_constant,
    scale_to_logit_variance,
    small_logit_gain,
    small_logit_remainder,
    spectral_radius,
    stationary_covariance,
    student_t_extreme_angle_sd,
    tilt_vector,
    tilted_mean,
    tilted_mean_expansion,
    var1_error_covariance,
    var1_rate_constant,
)

f64 = F64 = torch.float64


def rand(seed, *shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=f64)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), d=st.integers(1, 4))
def test_readout_is_the_tilted_mean(seed, d):
    # tilted mean E[X e^{a·X}]/E[e^{a·X}] by importance weights on exact Gaussian quadrature in 1-d
    a = rand(seed, d, d)
    cov = a @ a.T + 0.1 * torch.eye(d, dtype=f64)
    tq, tk, tv = rand(seed + 1, d, d) * 0.3, rand(seed + 2, d, d) * 0.3, rand(seed + 3, 2, d)
    q, mu = rand(seed + 4, d), rand(seed + 5, d)
    aa = tilt_vector(tq, tk, q)
    # the gradient of log M(a) = a·μ + aᵀΣa/2 by finite differences
    logm = lambda v: v @ mu + 0.5 * v @ cov @ v  # noqa: E731
    eps = 1e-6
    grad = torch.stack([(logm(aa + eps * e) - logm(aa - eps * e)) / (2 * eps) for e in torch.eye(d, dtype=f64)])
    assert torch.allclose(covariance_readout(tq, tk, tv, cov, q, mu), tv @ grad, atol=1e-6)


def test_readout_zero_mean_is_theta_v_sigma_theta_k_theta_q():
    d = 3
    tq, tk, tv, b = rand(0, d, d), rand(1, d, d), rand(2, 2, d), rand(3, d, d)
    cov = b @ b.T
    q = rand(4, 5, d)
    expected = q @ (tv @ cov @ tk.T @ tq).T
    assert torch.allclose(covariance_readout(tq, tk, tv, cov, q), expected)


def test_mse_constant_matches_monte_carlo():
    # t·E|out_t − out_∞|² → C: check against the delta-method variance computed by Monte Carlo
    d = 2
    cov = torch.tensor([[1.0, 0.4], [0.4, 0.8]], dtype=f64)
    tq, tk, tv = 0.7 * torch.eye(d, dtype=f64), torch.eye(d, dtype=f64), rand(7, 2, d)
    q = torch.tensor([1.0, -0.5], dtype=f64)
    x = rand(8, 2_000_000, d) @ torch.linalg.cholesky(cov).T
    a = tilt_vector(tq, tk, q)
    w = torch.exp(x @ a)
    lim = covariance_readout(tq, tk, tv, cov, q)
    mc = (w[:, None] ** 2 * ((x @ tv.T - lim) ** 2)).sum(1).mean() / w.mean() ** 2
    assert readout_mse_constant(tq, tk, tv, cov, q).item() == pytest.approx(mc.item(), rel=0.03)


def test_mse_constant_degenerate_zero_query():
    # a = 0: uniform weights, C = tr Θ_V Σ Θ_Vᵀ (the variance of a sample mean)
    cov = torch.diag(torch.tensor([1.0, 2.0], dtype=f64))
    eye = torch.eye(2, dtype=f64)
    assert readout_mse_constant(eye, eye, eye, cov, torch.zeros(2)).item() == pytest.approx(3.0)


def test_logit_variance_and_rescaling():
    cov = torch.diag(torch.tensor([1.0, 4.0], dtype=f64))
    eye = torch.eye(2, dtype=f64)
    q = torch.tensor([[1.0, 1.0], [0.0, 0.5]], dtype=f64)
    assert torch.allclose(logit_variance(eye, eye, cov, q), torch.tensor([5.0, 1.0], dtype=f64))
    tq = scale_to_logit_variance(eye, eye, cov, q, 2.0)
    assert logit_variance(tq, eye, cov, q).max().item() == pytest.approx(2.0)


@pytest.mark.parametrize("s", [0.0, -1.0, float("nan"), float("inf")])
def test_rescaling_rejects_bad_target(s):
    eye = torch.eye(2, dtype=f64)
    with pytest.raises(ValueError, match="positive finite"):
        scale_to_logit_variance(eye, eye, eye, torch.ones(1, 2), s)


def test_rescaling_rejects_zero_queries():
    eye = torch.eye(2, dtype=f64)
    with pytest.raises(ValueError, match="zero logit variance"):
        scale_to_logit_variance(eye, eye, eye, torch.zeros(1, 2), 1.0)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(cov=[[1.0, 0.0], [0.0, -1.0]]), "positive semi-definite"),
        (dict(q=torch.ones(3)), "last dim"),
        (dict(mean=torch.ones(3)), "mean"),
        (dict(theta_v=torch.ones(2, 3)), "theta_v"),
        (dict(q=torch.tensor([float("inf"), 0.0])), "finite"),
    ],
)
def test_covariance_readout_rejects_bad_input(kwargs, match):
    eye = torch.eye(2, dtype=f64)
    args = dict(theta_q=eye, theta_k=eye, theta_v=eye, cov=eye, q=torch.ones(2), mean=None)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        covariance_readout(**args)


COV = torch.tensor([[1.0, 0.6], [0.6, 0.8]], dtype=F64)
I2 = torch.eye(2, dtype=F64)
TWO_POINT = DiscreteMixing([0.5, 1.5], [0.5, 0.5])


# --- the elliptical gain ---------------------------------------------------


def test_gain_closed_forms():
    s = torch.tensor([0.0, 0.5, 1.0, 1.9, 4.0], dtype=F64)
    torch.testing.assert_close(elliptical_gain(s, TWO_POINT), 0.5 + 1 / (1 + torch.exp(-s / 2)))
    lap = elliptical_gain(s[:4], ExponentialMixing())
    torch.testing.assert_close(lap, 2 / (2 - s[:4]))
    with pytest.raises(ValueError, match="s must be below 2"):
        elliptical_gain(s, ExponentialMixing())
    torch.testing.assert_close(elliptical_gain(s, "two_point"), elliptical_gain(s, TWO_POINT))
    nig = elliptical_gain(s[:4], InverseGaussianMixing(2.0))
    torch.testing.assert_close(nig, torch.sqrt(2 / (2 - s[:4])))


def test_gain_of_a_constant_scale_is_one():
    s = torch.linspace(0, 50, 11, dtype=F64)
    torch.testing.assert_close(elliptical_gain(s, DiscreteMixing([1.0], [1.0])), torch.ones_like(s))


@settings(max_examples=40, deadline=None)
@given(st.floats(0.05, 0.95), st.floats(0.0, 20.0), st.floats(0.01, 3.0))
def test_gain_is_at_least_one_and_increasing_for_any_two_point_law(p, s, ds):
    # two-point law with E W = 1: values 1 - c(1 - p) and 1 + c p, probabilities p and 1 - p
    c = 0.9
    law = DiscreteMixing([1 - c * (1 - p), 1 + c * p], [p, 1 - p])  # E W = 1
    g0, g1 = elliptical_gain([s], law), elliptical_gain([s + ds], law)
    assert float(g0) >= 1 - 1e-12
    assert float(g1) > float(g0) - 1e-12


def test_gain_rejects_negative_s_and_non_law():
    with pytest.raises(ValueError, match="non-negative"):
        elliptical_gain([-0.1], TWO_POINT)
    with pytest.raises(ValueError, match="MixingLaw"):
        elliptical_gain([0.1], 3.0)
    with pytest.raises(ValueError, match="mixing law name"):
        elliptical_gain([0.1], "cauchy")


def test_small_logit_expansion_matches_the_gain_to_second_order():
    for law, kappa in [(TWO_POINT, 0.75), (ExponentialMixing(), 3.0), (InverseGaussianMixing(2.0), 1.5)]:
        assert elliptical_kurtosis(law) == pytest.approx(kappa)
        for s in [1e-2, 1e-3]:
            err = abs(float(elliptical_gain([s], law) - small_logit_gain([s], law)))
            assert err < 2 * s**2  # O(s²), with a constant < 2 for these laws
            assert err > 0


# --- the tilted mean -------------------------------------------------------


def test_tilted_mean_gaussian_is_mu_plus_sigma_a():
    p = GaussianIID(COV, mean=[1.0, -2.0])
    a = torch.tensor([[0.3, -0.1], [0.0, 0.0]], dtype=F64)
    torch.testing.assert_close(tilted_mean(p, a), torch.tensor([1.0, -2.0], dtype=F64) + a @ COV)


@settings(max_examples=30, deadline=None)
@given(st.floats(-1, 1), st.floats(-1, 1))
def test_tilted_mean_of_an_elliptical_law_points_along_sigma_a(a1, a2):
    a = torch.tensor([a1, a2], dtype=F64) * 0.6  # s < 2 for the Laplace law
    for law in [TWO_POINT, ExponentialMixing(), InverseGaussianMixing(2.0)]:
        out = tilted_mean(ScaleMixture(COV, law), a)
        target = COV @ a
        cross = out[0] * target[1] - out[1] * target[0]
        assert abs(float(cross)) < 1e-12
        assert float(out @ target) >= float(target @ target) - 1e-12  # gain >= 1


def test_tilted_mean_equals_grad_log_mgf_by_monte_carlo_for_counterexamples():
    g = torch.Generator().manual_seed(0)
    a = torch.tensor([0.3, -0.4], dtype=F64)
    for p in [SkewedExponential(2), BimodalGaussian([1.5, 0.5]), MultivariateLaplace(COV)]:
        x = p.sample(400_000, g)  # (n, 2)
        w = torch.exp(x @ a)
        mc = (w[:, None] * x).sum(0) / w.sum()
        torch.testing.assert_close(mc, tilted_mean(p, a), atol=0.03, rtol=0)


def test_counterexample_closed_forms():
    a = torch.tensor([0.5, -1.0], dtype=F64)
    torch.testing.assert_close(tilted_mean(SkewedExponential(2), a), torch.tensor([1.0, -0.5], dtype=F64))
    m = torch.tensor([2.0, 0.0], dtype=F64)
    torch.testing.assert_close(tilted_mean(BimodalGaussian(m), a), a + m * math.tanh(1.0))


def test_tilted_mean_var1_uses_the_stationary_covariance():
    A = torch.tensor([[0.5, 0.0], [0.0, -0.5]], dtype=F64)
    a = torch.tensor([1.0, 1.0], dtype=F64)
    torch.testing.assert_close(tilted_mean(VAR1(A, I2), a), a / 0.75)


@pytest.mark.parametrize(
    "proc, a, match",
    [
        (StudentT(I2, 3), [0.1, 0.1], "no limit"),
        (RandomWalk(I2), [0.1, 0.1], "no limit"),
        (MultivariateLaplace(I2), [1.5, 0.0], "no limit"),
        (SkewedExponential(2), [1.0, 0.0], "no limit"),
        (NonErgodicGaussian([I2, 2 * I2]), [0.1, 0.1], "component"),
        (GaussianIID(I2), [0.1, 0.1, 0.1], "last dim"),
    ],
)
def test_tilted_mean_errors(proc, a, match):
    with pytest.raises(ValueError, match=match):
        tilted_mean(proc, a)


def test_tilted_mean_is_the_attention_limit_for_a_skewed_law():
    p = SkewedExponential(2)
    a = torch.tensor([[0.3, -0.4]], dtype=F64)
    out = readout_paths(p, a, I2, I2, I2, [200_000], streams=4, seed=1)[:, -1, 0]  # (4, 2)
    torch.testing.assert_close(out.mean(0), tilted_mean(p, a[0]), atol=0.02, rtol=0)


# --- VAR(1) ----------------------------------------------------------------


def test_stationary_covariance_closed_form_and_degenerate_case():
    rho = 0.8
    torch.testing.assert_close(stationary_covariance([[rho]], [[1.0]]), torch.tensor([[1 / (1 - rho**2)]], dtype=F64))
    Q = torch.tensor([[1.0, 0.3], [0.3, 0.5]], dtype=F64)
    torch.testing.assert_close(stationary_covariance(torch.zeros(2, 2), Q), Q)


def test_stationary_covariance_matches_the_series():
    A = torch.tensor([[0.7, 0.2], [-0.3, 0.5]], dtype=F64)
    Q = torch.tensor([[1.0, 0.3], [0.3, 0.5]], dtype=F64)
    series, p = torch.zeros(2, 2, dtype=F64), torch.eye(2, dtype=F64)
    for _ in range(400):
        series, p = series + p @ Q @ p.T, A @ p
    torch.testing.assert_close(stationary_covariance(A, Q), series)
    assert spectral_radius(A) < 1


def test_stationary_covariance_errors():
    with pytest.raises(ValueError, match="stable"):
        stationary_covariance([[1.0]], [[1.0]])
    with pytest.raises(ValueError, match="square"):
        stationary_covariance(torch.zeros(2, 3), I2)
    with pytest.raises(ValueError):
        stationary_covariance(torch.zeros(2, 2), -I2)


def test_var1_rate_constant_reduces_to_iid_for_zero_transition():
    q = torch.tensor([[0.4, -0.3], [1.0, 0.2]], dtype=F64)
    got = var1_rate_constant(I2, I2, I2, torch.zeros(2, 2), COV, q)
    torch.testing.assert_close(got, readout_mse_constant(I2, I2, I2, COV, q))


def test_var1_rate_constant_scalar_small_tilt_is_the_long_run_variance():
    # a = 0: C = Σ_h tr Γ_h = σ² (1 + ρ)/(1 - ρ), the long-run variance of an AR(1)
    for rho in [0.6, -0.6]:
        got = float(var1_rate_constant([[1.0]], [[1.0]], [[1.0]], [[rho]], [[1.0]], [0.0]))
        sigma2 = 1 / (1 - rho**2)
        assert got == pytest.approx(sigma2 * (1 + rho) / (1 - rho), rel=1e-12)


def test_var1_rate_constant_against_simulation():
    # t·MSE of the streamed readout over AR(1) contexts against the constant
    rho, a = 0.7, 0.5
    p = VAR1([[rho]], [[1 - rho**2]])  # unit stationary variance
    t, r = 10_000, 300
    out = readout_paths(p, [[a]], [[1.0]], [[1.0]], [[1.0]], [t], streams=r, seed=3)[:, 0, 0, 0]  # (R,)
    tmse = t * float(((out - a) ** 2).mean())
    c = float(var1_rate_constant([[1.0]], [[1.0]], [[1.0]], [[rho]], [[1 - rho**2]], [a]))
    se = t * float(((out - a) ** 2).std()) / math.sqrt(r)
    assert abs(tmse - c) < 4 * se + 0.05 * c
    assert c > float(readout_mse_constant([[1.0]], [[1.0]], [[1.0]], [[1.0]], [a]))


def test_var1_error_covariance_traces_are_the_rate_constants_and_it_reduces_to_iid():
    A = torch.tensor([[0.8, 0.2], [-0.1, 0.6]], dtype=F64)
    q = torch.tensor([[0.4, -0.3], [1.0, 0.2], [-0.5, 0.5]], dtype=F64)
    V = var1_error_covariance(I2, I2, I2, A, COV, q)  # (3, 2, 3, 2)
    traces = torch.stack([torch.trace(V[j, :, j, :]) for j in range(3)])
    torch.testing.assert_close(traces, var1_rate_constant(I2, I2, I2, A, COV, q))
    flat = V.reshape(6, 6)
    torch.testing.assert_close(flat, flat.T)  # a covariance: symmetric, positive definite
    assert float(torch.linalg.eigvalsh(flat).min()) > 0
    torch.testing.assert_close(var1_error_covariance(I2, I2, I2, torch.zeros(2, 2), COV, q),
                               readout_error_covariance(I2, I2, I2, COV, q))


def test_quadratic_error_moments_against_normalised_error_sd_and_simulation():
    q = torch.tensor([[0.4, -0.3], [1.0, 0.2]], dtype=F64)
    V = readout_error_covariance(I2, I2, I2, COV, q)
    c = readout_mse_constant(I2, I2, I2, COV, q)
    mean, sd = quadratic_error_moments(V, c)
    assert mean == pytest.approx(1.0) and sd == pytest.approx(normalised_error_sd(I2, I2, I2, COV, q))
    # Monte Carlo of the quadratic form (1/m) Σ_j |err_j|²/c_j with √t err ~ N(0, V)
    g = torch.Generator().manual_seed(5)
    e = torch.randn(200_000, 4, generator=g, dtype=F64) @ torch.linalg.cholesky(V.reshape(4, 4)).T  # (n, 4)
    qf = ((e.reshape(-1, 2, 2) ** 2).sum(-1) / c).mean(-1)  # (n,)
    assert float(qf.std()) == pytest.approx(sd, rel=0.02)


def test_var1_error_covariance_against_simulation():
    # the SD over streams of t·|err|²/C_A of an AR(1) context against the long-run quadratic form
    rho, a = 0.7, 0.5
    p = VAR1([[rho]], [[1 - rho**2]])
    t, r = 10_000, 400
    out = readout_paths(p, [[a]], [[1.0]], [[1.0]], [[1.0]], [t], streams=r, seed=4)[:, 0, 0, 0]  # (R,)
    V = var1_error_covariance([[1.0]], [[1.0]], [[1.0]], [[rho]], [[1 - rho**2]], [[a]])  # (1, 1, 1, 1)
    mean, sd = quadratic_error_moments(V, V.reshape(1))
    assert sd == pytest.approx(math.sqrt(2.0))  # one query, one dimension: χ²₁
    stat = (t * (out - a) ** 2 / V.reshape(())).numpy()  # (R,)
    assert abs(stat.std() - sd) < 0.2 * sd


def test_var1_rate_constant_rejects_unstable():
    with pytest.raises(ValueError, match="stable"):
        var1_rate_constant(I2, I2, I2, 1.1 * I2, I2, [0.1, 0.1])


def test_gain_matches_numerical_integration_for_the_two_point_law():
    # direct integration of E[Y e^Y] / (s E e^Y) over the mixture density of Y = aᵀX
    s = 1.3
    y = np.linspace(-40, 40, 400_001)
    dens = sum(0.5 * np.exp(-(y**2) / (2 * w * s)) / np.sqrt(2 * np.pi * w * s) for w in (0.5, 1.5))
    num, den = np.trapezoid(y * np.exp(y) * dens, y), np.trapezoid(np.exp(y) * dens, y)
    assert num / (s * den) == pytest.approx(float(elliptical_gain([s], TWO_POINT)), rel=1e-8)


# --- heavy tails and rates -------------------------------------------------


def test_laplace_tail_index_matches_the_empirical_weight_tail():
    s = 1.0
    y = MultivariateLaplace(torch.eye(1, dtype=F64)).sample(400_000, torch.Generator().manual_seed(4))[:, 0]
    w = torch.exp(y)  # weights e^{aX} with a = 1, s = 1
    # P(w > x) = ½ x^{-α}: compare at two levels
    for x in [5.0, 20.0]:
        emp = float((w > x).double().mean())
        assert emp == pytest.approx(0.5 * x ** -float(laplace_weight_tail_index([s])), rel=0.08)


def test_heavy_tail_exponent_and_errors():
    torch.testing.assert_close(heavy_tail_mse_exponent([2.0, 4.0, 1.2]), torch.tensor([-1.0, -1.0, -0.2], dtype=F64))
    with pytest.raises(ValueError, match="alpha"):
        heavy_tail_mse_exponent([1.0])
    with pytest.raises(ValueError, match="positive"):
        laplace_weight_tail_index([0.0])


def test_student_t_angle_spread_against_monte_carlo_and_limits():
    rng = np.random.default_rng(0)
    n = 400_000
    for nu in [1, 3]:
        z, y = np.abs(rng.standard_normal(n)), rng.standard_normal(n)
        w = z**nu
        mc = np.sqrt((w * np.arctan2(y, z) ** 2).sum() / w.sum())
        assert student_t_extreme_angle_sd(nu) == pytest.approx(mc, rel=0.01)
    # more degrees of freedom: Z_a concentrates at larger values, the angle spread shrinks
    assert student_t_extreme_angle_sd(1) > student_t_extreme_angle_sd(5) > student_t_extreme_angle_sd(50)
    with pytest.raises(ValueError, match="nu"):
        student_t_extreme_angle_sd(0)


def test_delta_method_reach_is_monotone_and_bounded():
    t = torch.tensor([1e2, 1e4, 1e6, 1e8], dtype=F64)
    r3, r6 = delta_method_reach(torch.full((4,), 3.0), t), delta_method_reach(torch.full((4,), 6.0), t)
    assert bool((r3[1:] > r3[:-1]).all()) and bool((r6 < r3).all())
    assert bool(((r6 > 0) & (r3 < 1)).all())
    assert float(delta_method_reach([0.0], [1e6])) > 0.999
    with pytest.raises(ValueError):
        delta_method_reach([-1.0], [10.0])


# --- the cumulant expansion, the joint error covariance, the Laplace deficit ----------


def test_small_logit_remainder_is_second_order():
    s = torch.tensor([0.01, 0.02], dtype=F64)
    r = small_logit_remainder(s, "laplace")  # s²/(2(2 - s)) ≈ s²/4
    torch.testing.assert_close(r, s**2 / (2 * (2 - s)))
    assert float(small_logit_remainder(0.3, "gaussian")) == 0.0


def test_expansion_matches_the_exact_tilted_mean_to_third_order():
    p = SkewedExponential(3)
    for r in (1e-2, 2e-2):
        a = r * torch.tensor([1.0, -0.5, 0.3], dtype=F64)
        err = (tilted_mean(p, a) - tilted_mean_expansion(p, a)).abs().max()
        assert float(err) <= float((a.abs() ** 3 / (1 - a.abs())).max()) + 1e-15
    g = GaussianIID(COV, [1.0, 2.0])
    a = torch.tensor([[0.3, -0.2]], dtype=F64)
    torch.testing.assert_close(tilted_mean_expansion(g, a), tilted_mean(g, a))


def test_expansion_refuses_a_law_without_cumulants():
    with pytest.raises(ValueError, match="third cumulant"):
        tilted_mean_expansion(StudentT(I2, 1), [0.1, 0.0])


def test_joint_error_covariance_diagonal_blocks_are_the_rate_constant():
    g = torch.Generator().manual_seed(0)
    tq, tk, tv = (torch.randn(2, 2, generator=g, dtype=F64) for _ in range(3))
    q = torch.randn(3, 2, generator=g, dtype=F64)
    V = readout_error_covariance(tq, tk, tv, COV, q)
    C = readout_mse_constant(tq, tk, tv, COV, q)
    torch.testing.assert_close(torch.stack([torch.trace(V[j, :, j, :]) for j in range(3)]), C)
    flat = V.reshape(6, 6)
    torch.testing.assert_close(flat, flat.T)
    assert float(torch.linalg.eigvalsh(flat).min()) > -1e-10


def test_laplace_rate_fraction_rises_to_one():
    rho, C = laplace_rate_fraction(0.25, [1e2, 1e4, 1e8])
    assert 0 < float(rho[0]) < float(rho[1]) < float(rho[2]) <= 1
    assert float(rho[2]) > 0.9999
    rho_big, _ = laplace_rate_fraction(0.25, [1e4], cut=2.0)
    assert float(rho_big[0]) > float(rho[1])
    with pytest.raises(ValueError, match="below 1/2"):
        laplace_rate_fraction(0.6, [10.0])


def test_laplace_rate_constant_matches_monte_carlo():
    # C = E[|X - g a|^2 e^{2aX}]/M^2 for Laplace tokens in R^2, s = 0.1 (finite fourth moment of weights)
    s = 0.1
    _, C = laplace_rate_fraction(s, [10.0])
    x = MultivariateLaplace(I2).sample(2_000_000, torch.Generator().manual_seed(1))
    a = torch.tensor([s**0.5, 0.0], dtype=F64)
    w = torch.exp(x @ a)
    g = 1 / (1 - s / 2)
    mc = float((((x - g * a) ** 2).sum(-1) * w**2).mean() / w.mean() ** 2)
    assert abs(mc - C) / C < 0.03


def test_reach_allowance_brackets_the_gaussian_deficit():
    from covbook.theory import reach_allowance

    b0, r0 = reach_allowance([0.0], [100, 1000])
    assert abs(b0) < 0.01 and r0 > 0.99
    b2, r2 = reach_allowance([2.0, 2.0], [200, 2000, 20000])
    assert 0 < b2 < 0.3 and 0.5 < r2 < 1
    with pytest.raises(ValueError, match="at least two"):
        reach_allowance([1.0], [100])
