"""Tests of covbook.processes: the input laws' exact moments, sampling, limits and error paths."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from covbook.linalg import stationary_covariance
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
    Replay,
    ScaleMixture,
    SkewedExponential,
    StudentT,
)

f64 = F64 = torch.float64


def test_gaussian_moments_match_samples():
    cov = torch.tensor([[2.0, 0.5, 0.0], [0.5, 1.0, 0.2], [0.0, 0.2, 0.5]], dtype=f64)
    mean = torch.tensor([1.0, -2.0, 0.5], dtype=f64)
    p = GaussianIID(cov, mean)
    x = p.sample(400_000, torch.Generator().manual_seed(0))
    assert torch.allclose(x.mean(0), mean, atol=0.01)
    assert torch.allclose(torch.cov(x.T), cov, atol=0.02)
    assert torch.equal(p.mean, mean) and torch.equal(p.covariance, cov)


def test_gaussian_singular_covariance_is_allowed():
    cov = torch.tensor([[1.0, 1.0], [1.0, 1.0]], dtype=f64)
    x = GaussianIID(cov).sample(1000, torch.Generator().manual_seed(1))
    assert torch.allclose(x[:, 0], x[:, 1], atol=1e-6)


def test_sampler_continues_streams_and_is_seeded():
    p = GaussianIID(torch.eye(2, dtype=f64))
    a = p.sampler(torch.Generator().manual_seed(3), 4)
    b = p.sampler(torch.Generator().manual_seed(3), 4)
    x1, x2 = a(5), a(7)
    assert x1.shape == (4, 5, 2) and x2.shape == (4, 7, 2)
    assert torch.equal(x1, b(5)) and not torch.equal(x1[:, :5], x2[:, :5])


@pytest.mark.parametrize(
    "cov, mean, match",
    [
        ([[1.0, 2.0], [0.0, 1.0]], None, "symmetric"),
        ([[1.0, 0.0], [0.0, -1.0]], None, "positive semi-definite"),
        ([[1.0, 0.0, 0.0]], None, "square"),
        ([[float("nan"), 0.0], [0.0, 1.0]], None, "finite"),
        ([[1.0, 0.0], [0.0, 1.0]], [1.0, 2.0, 3.0], "mean must have shape"),
        ("abc", None, "array-like|real numbers"),
    ],
)
def test_gaussian_rejects_bad_parameters(cov, mean, match):
    with pytest.raises(ValueError, match=match):
        GaussianIID(cov, mean)


def test_replay_returns_the_tokens_and_refuses_to_overrun():
    x = torch.arange(12, dtype=f64).reshape(6, 2)
    draw = Replay(x).sampler(torch.Generator(), 1)
    assert torch.equal(torch.cat([draw(2), draw(4)], 1)[0], x)
    with pytest.raises(ValueError, match="6 tokens"):
        draw(1)
    with pytest.raises(ValueError, match="stream"):
        Replay(x).sampler(torch.Generator(), 2)


COV = torch.tensor([[1.0, 0.6], [0.6, 0.8]], dtype=F64)


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def emp_cov(x: torch.Tensor) -> torch.Tensor:
    x = x.reshape(-1, x.shape[-1])
    return x.T @ x / x.shape[0]


# --- mixing laws -----------------------------------------------------------

LAWS = [DiscreteMixing([0.5, 1.5], [0.5, 0.5]), ExponentialMixing(), InverseGaussianMixing(2.0)]


@pytest.mark.parametrize("law", LAWS, ids=lambda w: type(w).__name__)
def test_mixing_law_mean_and_variance(law):
    w = law.sample((400_000,), gen(1))
    assert bool((w > 0).all())
    se = math.sqrt(law.variance / w.numel())
    assert abs(float(w.mean()) - 1.0) < 5 * se
    assert abs(float(w.var()) - law.variance) < 0.03 * max(law.variance, 0.1) + 0.01


@pytest.mark.parametrize("law", LAWS, ids=lambda w: type(w).__name__)
def test_mixing_law_mgf_matches_monte_carlo(law):
    w = law.sample((400_000,), gen(2))
    u = 0.2
    mc = torch.exp(u * w).mean()
    assert abs(float(torch.log(mc)) - float(law.log_mgf(torch.tensor(u)))) < 0.01
    mc_tilt = (w * torch.exp(u * w)).mean() / mc
    assert abs(float(mc_tilt) - float(law.tilted_mean(torch.tensor(u)))) < 0.02


@pytest.mark.parametrize("law", LAWS, ids=lambda w: type(w).__name__)
def test_tilted_mean_is_derivative_of_log_mgf(law):
    u = torch.tensor([0.0, 0.1, 0.3], dtype=F64)
    h = 1e-6
    fd = (law.log_mgf(u + h) - law.log_mgf(u - h)) / (2 * h)
    torch.testing.assert_close(fd, law.tilted_mean(u), rtol=1e-6, atol=1e-8)


def test_mgf_is_infinite_beyond_abscissa():
    assert math.isinf(float(ExponentialMixing().log_mgf(torch.tensor(1.0))))
    assert math.isinf(float(InverseGaussianMixing(2.0).tilted_mean(torch.tensor(1.5))))
    assert math.isfinite(float(DiscreteMixing([0.5, 1.5], [0.5, 0.5]).log_mgf(torch.tensor(500.0))))


def test_inverse_gaussian_large_shape_is_nearly_constant():
    w = InverseGaussianMixing(1e6).sample((10_000,), gen(3))
    assert float((w - 1).abs().max()) < 0.02


@pytest.mark.parametrize(
    "values, probs",
    [([0.5, 1.0], [0.5, 0.5]), ([-1.0, 3.0], [0.5, 0.5]), ([1.0, 1.0], [0.6, 0.6]), ([1.0], [0.5, 0.5]),
     ([0.0], [1.0])],
)
def test_discrete_mixing_rejects_bad_input(values, probs):
    with pytest.raises(ValueError):
        DiscreteMixing(values, probs)


@pytest.mark.parametrize("shape", [0.0, -1.0, float("inf"), float("nan")])
def test_inverse_gaussian_rejects_bad_shape(shape):
    with pytest.raises(ValueError, match="shape"):
        InverseGaussianMixing(shape)


# --- iid laws --------------------------------------------------------------


@pytest.mark.parametrize(
    "proc",
    [ScaleMixture(COV, LAWS[0]), MultivariateLaplace(COV), ScaleMixture(COV, LAWS[2]), StudentT(COV, 5),
     SkewedExponential(2), BimodalGaussian([1.0, -0.5])],
    ids=lambda p: type(p).__name__,
)
def test_iid_laws_have_their_stated_mean_and_covariance(proc):
    x = proc.sampler(gen(4), 4)(100_000)  # (4, n, d)
    assert x.shape == (4, 100_000, proc.dim) and x.dtype == F64
    assert float((x.reshape(-1, proc.dim).mean(0) - proc.mean).abs().max()) < 0.02
    tol = 0.15 if isinstance(proc, StudentT) else 0.03
    assert float((emp_cov(x) - proc.covariance).abs().max()) < tol


def test_scale_mixture_with_unit_scale_is_gaussian_projection_kurtosis():
    lap = MultivariateLaplace(torch.eye(1, dtype=F64)).sample(400_000, gen(5))[:, 0]
    two = ScaleMixture(torch.eye(1, dtype=F64), LAWS[0]).sample(400_000, gen(5))[:, 0]
    kurt = lambda y: float((y**4).mean() / (y**2).mean() ** 2 - 3)  # noqa: E731
    assert abs(kurt(lap) - 3.0) < 0.3  # 3 Var W = 3
    assert abs(kurt(two) - 0.75) < 0.1  # 3 Var W = 3/4


def test_scale_mixture_rejects_non_law():
    with pytest.raises(ValueError, match="MixingLaw"):
        ScaleMixture(COV, 1.0)


def test_student_t_moments_exist_only_when_they_should():
    assert StudentT(COV, 1).mean is None and StudentT(COV, 2).covariance is None
    torch.testing.assert_close(StudentT(COV, 4).covariance, 2 * COV)
    with pytest.raises(ValueError, match="nu"):
        StudentT(COV, 0)
    with pytest.raises(ValueError, match="nu"):
        StudentT(COV, 2.5)


def test_student_t_cauchy_median_of_abs_projection():
    x = StudentT(torch.eye(1, dtype=F64), 1).sample(200_000, gen(6))[:, 0]
    assert abs(float(x.abs().median()) - 1.0) < 0.02  # |Cauchy| has median tan(π/4) = 1


def test_bimodal_rejects_bad_m():
    with pytest.raises(ValueError):
        BimodalGaussian([[1.0, 0.0]])


# --- VAR(1) ----------------------------------------------------------------

A = torch.tensor([[0.7, 0.2], [-0.3, 0.5]], dtype=F64)
Q = torch.tensor([[1.0, 0.3], [0.3, 0.5]], dtype=F64)


def var1_reference(a, q, x1, xi):
    xs = [x1]
    for k in range(1, xi.shape[0]):
        xs.append(a @ xs[-1] + xi[k])
    return torch.stack(xs)


def test_var1_sampler_matches_a_sequential_loop_across_chunks():
    p = VAR1(A, Q)
    g1, g2 = gen(7), gen(7)
    draw = p.sampler(g1, 3)
    x = torch.cat([draw(5), draw(1), draw(40)], dim=1)  # (3, 46, 2)
    # rebuild the same innovations from the second generator and recurse step by step
    ref = []
    z_chunks = [torch.randn(3, n, 2, generator=g2, dtype=F64) for n in (5, 1, 40)]
    z = torch.cat(z_chunks, dim=1)
    from covbook._validate import psd_sqrt_factor

    lq, ls = psd_sqrt_factor(Q), psd_sqrt_factor(p.covariance)
    for r in range(3):
        xi = z[r] @ lq.T
        x1 = z[r, 0] @ ls.T
        ref.append(var1_reference(A, Q, x1, xi))
    torch.testing.assert_close(x, torch.stack(ref), rtol=1e-10, atol=1e-10)


def test_var1_is_stationary_with_lyapunov_covariance_and_lag_one_autocovariance():
    p = VAR1(A, Q)
    x = p.sampler(gen(8), 8)(50_000)  # (8, n, 2)
    sig = p.covariance
    assert float((emp_cov(x[:, :100]) - sig).abs().max()) < 0.5  # first tokens already stationary
    assert float((emp_cov(x) - sig).abs().max()) < 0.05
    lag1 = (x[:, 1:].transpose(1, 2) @ x[:, :-1]).sum(0) / (8 * 49_999)  # Cov(x_{s+1}, x_s) = AΣ
    assert float((lag1 - A @ sig).abs().max()) < 0.05


def test_var1_zero_transition_is_iid_with_noise_covariance():
    p = VAR1(torch.zeros(2, 2), Q)
    torch.testing.assert_close(p.covariance, Q)


@pytest.mark.parametrize("a", [[[1.0]], [[-1.2]], [[0.5, 2.0], [-2.0, 0.5]], [[1.0, 0.0], [0.0, 0.2]]])
def test_var1_rejects_unstable_transition(a):
    q = torch.eye(len(a), dtype=F64)
    with pytest.raises(ValueError, match="stable"):
        VAR1(a, q)


def test_var1_rejects_shape_mismatch():
    with pytest.raises(ValueError):
        VAR1(torch.zeros(2, 3), torch.eye(2))
    with pytest.raises(ValueError):
        VAR1(torch.zeros(2, 2), torch.eye(3))


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(-0.95, 0.95), min_size=4, max_size=4))
def test_lyapunov_solution_satisfies_the_equation(entries):
    a = torch.tensor(entries, dtype=F64).reshape(2, 2) * 0.5  # spectral radius < 0.95
    sig = stationary_covariance(a, Q)
    torch.testing.assert_close(a @ sig @ a.T + Q, sig, rtol=1e-9, atol=1e-9)
    assert float(torch.linalg.eigvalsh(sig).min()) > 0


# --- non-stationary and non-ergodic laws -----------------------------------


def test_random_walk_continues_across_chunks_and_has_no_stationary_law():
    p = RandomWalk(torch.eye(2, dtype=F64))
    assert p.mean is None and p.covariance is None
    draw = p.sampler(gen(10), 2)
    a, b = draw(10), draw(10)
    g = gen(10)
    z = torch.cat([torch.randn(2, 10, 2, generator=g, dtype=F64) for _ in range(2)], dim=1)
    torch.testing.assert_close(torch.cat([a, b], dim=1), torch.cumsum(z, dim=1))


def test_random_walk_variance_grows_linearly():
    x = RandomWalk(torch.eye(1, dtype=F64)).sampler(gen(11), 2000)(400)  # (R, 400, 1)
    v = x[..., 0].var(0)
    assert abs(float(v[-1]) / 400 - 1.0) < 0.1 and abs(float(v[99]) / 100 - 1.0) < 0.1


def test_non_ergodic_streams_keep_their_own_covariance():
    covs = [torch.diag(torch.tensor([2.0, 0.5])), torch.diag(torch.tensor([0.5, 2.0]))]
    p = NonErgodicGaussian(covs)
    torch.testing.assert_close(p.covariance, 1.25 * torch.eye(2, dtype=F64))
    ks = p.components(gen(12), 6)
    x = p.sampler(gen(12), 6)(20_000)  # (6, n, 2)
    for r in range(6):
        torch.testing.assert_close(emp_cov(x[r]), p.component_covariances[ks[r]], atol=0.1, rtol=0)
    assert set(ks.tolist()) == {0, 1}


def test_non_ergodic_rejects_bad_input():
    with pytest.raises(ValueError):
        NonErgodicGaussian([])
    with pytest.raises(ValueError):
        NonErgodicGaussian([np.eye(2), np.eye(3)])
    with pytest.raises(ValueError, match="probs"):
        NonErgodicGaussian([np.eye(2), np.eye(2)], probs=[0.2, 0.2])
    with pytest.raises(ValueError, match="k must"):
        NonErgodicGaussian([np.eye(2)]).component(1)


def test_samplers_are_deterministic_given_the_seed():
    for p in [VAR1(A, Q), RandomWalk(Q), NonErgodicGaussian([Q, 2 * Q]), MultivariateLaplace(Q), StudentT(Q, 2)]:
        torch.testing.assert_close(p.sampler(gen(13), 2)(50), p.sampler(gen(13), 2)(50))
