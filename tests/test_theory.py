"""Closed forms of the Gaussian readout against Monte Carlo and identities."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from covbook.theory import (
    covariance_readout,
    logit_variance,
    readout_mse_constant,
    scale_to_logit_variance,
    tilt_vector,
)

f64 = torch.float64


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
