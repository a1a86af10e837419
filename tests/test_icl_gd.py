"""Tests of covbook.icl.gd: population/empirical GD, least squares and the closed-form risks."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from covbook import icl
from covbook.icl import (
    empirical_gd,
    gd_one_step_risk,
    gd_optimal_risk,
    gd_optimal_step,
    linear_attention_predict,
    make_regression_tasks,
    max_stable_step,
    ols,
    ols_risk,
    population_gd,
)

COV3 = torch.tensor([[1.0, 0.3, 0.0], [0.3, 0.8, 0.1], [0.0, 0.1, 0.5]], dtype=torch.float64)


# ----------------------------------------------------------------------------- gradient descent


@settings(max_examples=30, deadline=None)
@given(st.floats(0.01, 1.9), st.integers(0, 12))
def test_population_gd_closed_form(eta, k):
    w = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    it = population_gd(COV3, w, eta, k)
    m = torch.eye(3, dtype=torch.float64) - eta * COV3
    assert torch.allclose(it[-1], (torch.eye(3, dtype=torch.float64) - torch.linalg.matrix_power(m, k)) @ w,
                          atol=1e-10)


def test_population_gd_converges_iff_stable():
    cov = torch.diag(torch.tensor([1.0, 0.25], dtype=torch.float64))
    w = torch.tensor([1.0, 1.0], dtype=torch.float64)
    assert max_stable_step(cov) == pytest.approx(2.0)
    ok = population_gd(cov, w, 1.9, 200, check_stable=True)
    assert (ok[-1] - w).norm() < 1e-6
    bad = population_gd(cov, w, 2.1, 200)
    assert (bad[-1] - w).norm() > 1e3
    with pytest.raises(ValueError, match="not a stable step"):
        population_gd(cov, w, 2.1, 10, check_stable=True)
    with pytest.raises(ValueError, match="steps"):
        population_gd(cov, w, 0.5, -1)
    with pytest.raises(ValueError, match="last dim"):
        population_gd(cov, torch.ones(3), 0.5, 2)


def test_preconditioned_gd_with_inverse_covariance_is_newton():
    w = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    it = population_gd(COV3, w, 1.0, 1, precondition=torch.linalg.inv(COV3))
    assert torch.allclose(it[1], w, atol=1e-10)


def test_empirical_gd_one_step_is_linear_attention_and_many_steps_reach_ols():
    t = make_regression_tasks(4, 30, 3, cov_x=COV3, noise=0.3, seed=2)
    v = empirical_gd(t.x, t.y, 0.5, steps=1)
    assert torch.allclose((v[1] * t.x_query).sum(-1), linear_attention_predict(t, 0.5), atol=1e-12)
    v = empirical_gd(t.x, t.y, 1.0, steps=3000)
    assert torch.allclose(v[-1], ols(t.x, t.y), atol=1e-8)


def test_ols_recovers_w_and_matches_lstsq():
    t = make_regression_tasks(3, 10, 4, seed=0)
    assert torch.allclose(ols(t.x, t.y), t.w, atol=1e-10)
    tn = make_regression_tasks(3, 10, 4, noise=1.0, seed=0)
    ref = torch.linalg.lstsq(tn.x, tn.y[..., None]).solution[..., 0]
    assert torch.allclose(ols(tn.x, tn.y), ref, atol=1e-10)
    with pytest.raises(ValueError, match="y must have shape"):
        ols(tn.x, tn.y[:, :5])
    with pytest.raises(ValueError, match="ridge"):
        ols(tn.x, tn.y, ridge=-1.0)


# ----------------------------------------------------------------------------- risks


def _mc_risk(n, d, eta, noise, reps=20_000, seed=0):
    t = make_regression_tasks(reps, n, d, noise=noise, seed=seed)
    if eta is None:
        v = ols(t.x, t.y)
    else:
        v = empirical_gd(t.x, t.y, eta, 1)[-1]
    per = ((v - t.w) ** 2).sum(-1).numpy() / d  # (reps,)
    return per.mean(), per.std() / np.sqrt(reps)


@pytest.mark.parametrize("n, d, eta, noise", [(10, 4, 0.6, 0.0), (5, 3, 1.0, 0.5), (40, 6, 0.9, 1.0)])
def test_one_step_risk_closed_form(n, d, eta, noise):
    mean, se = _mc_risk(n, d, eta, noise)
    assert abs(mean - gd_one_step_risk(n, d, eta, noise)) < 4 * se


@pytest.mark.parametrize("n, d, noise", [(12, 4, 0.5), (3, 8, 0.3), (6, 6, 0.0)])
def test_ols_risk_closed_form(n, d, noise):
    mean, se = _mc_risk(n, d, None, noise)
    assert abs(mean - ols_risk(n, d, noise)) < 4 * se + 1e-9


def test_ols_risk_infinite_near_interpolation_with_noise():
    assert np.isinf(ols_risk(5, 5, 0.1)) and np.isinf(ols_risk(6, 5, 0.1))


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 500), st.integers(1, 50), st.floats(0.0, 2.0), st.floats(0.0, 3.0))
def test_optimal_step_minimises_the_risk(n, d, eta, noise):
    best = gd_optimal_risk(n, d, noise)
    assert gd_one_step_risk(n, d, eta, noise) >= best - 1e-12
    assert gd_one_step_risk(n, d, gd_optimal_step(n, d, noise), noise) == pytest.approx(best, abs=1e-12)
    assert icl.averaging_risk(n, d, noise) == pytest.approx((d + 1 + noise**2) / n)


def test_noiseless_optimum_is_d_plus_one_over_n_plus_d_plus_one():
    assert gd_optimal_risk(20, 5) == pytest.approx(6 / 26)
    assert gd_optimal_step(20, 5) == pytest.approx(20 / 26)
    with pytest.raises(ValueError, match="n must"):
        gd_one_step_risk(0, 5, 0.5)
