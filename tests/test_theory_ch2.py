"""Tests of the chapter-2 closed forms in covbook.theory (THEOREMS.md T1 b, d, e, f)."""

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
    delta_method_reach,
    elliptical_gain,
    elliptical_kurtosis,
    heavy_tail_mse_exponent,
    laplace_weight_tail_index,
    readout_mse_constant,
    small_logit_gain,
    spectral_radius,
    stationary_covariance,
    student_t_extreme_angle_sd,
    tilted_mean,
    var1_rate_constant,
)

F64 = torch.float64
COV = torch.tensor([[1.0, 0.6], [0.6, 0.8]], dtype=F64)
I2 = torch.eye(2, dtype=F64)
TWO_POINT = DiscreteMixing([0.5, 1.5], [0.5, 0.5])


# --- the elliptical gain ---------------------------------------------------


def test_gain_closed_forms():
    s = torch.tensor([0.0, 0.5, 1.0, 1.9, 4.0], dtype=F64)
    torch.testing.assert_close(elliptical_gain(s, TWO_POINT), 0.5 + 1 / (1 + torch.exp(-s / 2)))
    lap = elliptical_gain(s, ExponentialMixing())
    torch.testing.assert_close(lap[:4], 2 / (2 - s[:4]))
    assert math.isinf(float(lap[4]))
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
        elliptical_gain([0.1], "laplace")


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
