"""Tests of covbook.prior_work and of the uniform input law of covbook.icl (the prior-work chapter)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from covbook import icl
from covbook import prior_work as pw
from covbook._seeds import derive_seed

COV12 = torch.eye(3, dtype=torch.float64) / 12


# ----------------------------------------------------------------------------- the uniform law


def test_uniform_law_is_the_cube_with_covariance_cov_x():
    t = icl.make_regression_tasks(400, 500, 3, cov_x=COV12, x_law="uniform", seed=1)
    x = t.x.reshape(-1, 3)
    assert x.abs().max() < 0.5 and x.abs().max() > 0.49          # U(−½, ½)^3
    assert torch.allclose(x.T @ x / x.shape[0], COV12, atol=2e-3)
    kurt = (x**4).mean(0) / (x**2).mean(0) ** 2
    assert torch.allclose(kurt, torch.full((3,), 1.8, dtype=torch.float64), atol=0.02)
    assert torch.allclose(t.y, (t.x * t.w[:, None]).sum(-1))
    again = icl.make_regression_tasks(400, 500, 3, cov_x=COV12, x_law="uniform", seed=1)
    assert torch.equal(t.tokens, again.tokens)


def test_uniform_law_general_covariance_and_mean():
    cov = torch.tensor([[1.0, 0.4], [0.4, 0.5]], dtype=torch.float64)
    t = icl.make_regression_tasks(200, 1000, 2, cov_x=cov, x_law="uniform", mean_x=[1.0, -1.0], seed=2)
    x = t.x.reshape(-1, 2)
    assert torch.allclose(x.mean(0), torch.tensor([1.0, -1.0], dtype=torch.float64), atol=0.01)
    assert torch.allclose(torch.cov(x.T), cov, atol=0.01)


def test_uniform_law_in_the_streaming_helpers():
    w = torch.tensor([1.0, -0.5, 0.2], dtype=torch.float64)
    p = icl.RegressionTokens(w, COV12, x_law="uniform")
    z = p.sample(100_000, torch.Generator().manual_seed(0))
    assert z[:, :3].abs().max() < 0.5
    assert torch.allclose(torch.cov(z.T), p.covariance, atol=3e-3)
    out = icl.icl_prediction_paths(w, torch.ones(1, 3, dtype=torch.float64), 1.0, [10, 100], cov_x=COV12,
                                   x_law="uniform", streams=2, seed=0)
    assert out["softmax"].shape == (2, 2, 1) and torch.isfinite(out["softmax"]).all()


def test_elliptical_gain_rejects_the_uniform_law():
    with pytest.raises(ValueError, match="not elliptical"):
        icl.elliptical_gain(0.5, "uniform")
    with pytest.raises(ValueError, match="x_law"):
        icl.make_regression_tasks(2, 3, 2, x_law="cube")


# ----------------------------------------------------------------------------- one-step risk


def test_fourth_moment_ratio_by_monte_carlo():
    for law in ("gaussian", "uniform", "two_point", "laplace"):
        x = icl.make_regression_tasks(2000, 100, 4, x_law=law, seed=3).x.reshape(-1, 4)
        m4 = ((x**2).sum(-1) ** 2).mean().item()
        assert m4 == pytest.approx(pw.fourth_moment_ratio(4, law), rel=0.05), law


def test_one_step_risk_reduces_to_the_gaussian_closed_form():
    for n in (3, 10, 50):
        assert float(pw.one_step_risk(n, 6, 0.7)) == pytest.approx(6 * float(icl.gd_one_step_risk(n, 6, 0.7)))
    eta, risk = pw.one_step_optimum(12, 5)
    assert float(eta) == pytest.approx(float(icl.gd_optimal_step(12, 5)))
    assert float(risk) == pytest.approx(5 * float(icl.gd_optimal_risk(12, 5)))


def test_one_step_risk_uniform_by_monte_carlo_and_von_oswald_value():
    d, n = 10, 10
    cov = torch.eye(d, dtype=torch.float64) / 12
    eta, risk = pw.one_step_optimum(n, d, var_x=1 / 12, x_law="uniform")
    assert float(risk) / 2 == pytest.approx(0.20623, abs=1e-5)
    t = icl.make_regression_tasks(40_000, n, d, cov_x=cov, x_law="uniform", seed=4)
    w1 = icl.empirical_gd(t.x, t.y, float(eta))[-1]  # (B, d)
    per_task = ((w1 - t.w) ** 2).sum(-1) / 12   # E over x_q exactly: Cov x_q = I/12
    se = per_task.std().item() / math.sqrt(len(per_task))
    assert abs(per_task.mean().item() - float(risk)) < 4 * se
    # the optimum: a smaller or larger step is worse
    assert float(pw.one_step_risk(n, d, 0.9 * eta, var_x=1 / 12, x_law="uniform")) > float(risk)
    assert float(pw.one_step_risk(n, d, 1.1 * eta, var_x=1 / 12, x_law="uniform")) > float(risk)


@pytest.mark.parametrize("kwargs, match", [
    (dict(n=0), "n must be"), (dict(var_x=-1.0), "var_x"), (dict(x_law="cauchy"), "x_law"), (dict(d=0), "d"),
])
def test_one_step_risk_bad_input(kwargs, match):
    args = dict(n=5, d=3, eta=1.0)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        pw.one_step_risk(args.pop("n"), args.pop("d"), args.pop("eta"), **args)


# ----------------------------------------------------------------------------- tilted means


def test_langevin_is_the_tilted_mean_of_the_uniform_law():
    u = np.linspace(-1, 1, 200_001)
    for b in (0.003, 0.5, 2.0, -3.0):
        wts = np.exp(b * u)
        assert float(pw.langevin(torch.tensor(b))) == pytest.approx(
            np.trapezoid(u * wts, u) / np.trapezoid(wts, u), rel=1e-6, abs=1e-9)


def test_tilted_mean_laws():
    a = torch.tensor([[0.3, -0.2, 0.1]], dtype=torch.float64)
    cov = torch.tensor([[1.0, 0.2, 0.0], [0.2, 0.7, 0.0], [0.0, 0.0, 0.4]], dtype=torch.float64)
    assert torch.allclose(pw.tilted_mean(a, "gaussian", cov), a @ cov)
    s = (a @ cov * a).sum()
    assert torch.allclose(pw.tilted_mean(a, "two_point", cov), icl.elliptical_gain(s, "two_point") * (a @ cov))
    # uniform: by Monte Carlo with exponential weights, and below the covariance readout in size
    x = icl.make_regression_tasks(1, 400_000, 3, cov_x=cov, x_law="uniform", seed=5).x[0]  # (n, 3)
    big = 3 * a
    wts = torch.exp(x @ big[0])
    mc = (x * wts[:, None]).sum(0) / wts.sum()
    exact = pw.tilted_mean(big, "uniform", cov)[0]
    assert torch.allclose(mc, exact, atol=0.01)
    assert exact.norm() < (big @ cov).norm()
    with pytest.raises(ValueError, match="cov_x"):
        pw.tilted_mean(a, "uniform", torch.eye(2))


# ----------------------------------------------------------------------------- the head


def _gd_head(d: int, eta_a: float, c: float) -> icl.ICLTransformer:
    tq, tk, tv = icl.construct_gd_head(d, abs(eta_a))
    return icl.ICLTransformer(d, [(math.copysign(1.0, eta_a) * tq, tk, -c * tv)])


def test_head_limit_of_the_gd_head_is_one_population_step():
    d = 3
    model = _gd_head(d, 0.8, 1.5)
    t = icl.make_regression_tasks(5, 2, d, seed=6)
    lim = pw.head_limit(model, t.w, t.x_query, x_law="gaussian")
    assert torch.allclose(lim, 1.5 * 0.8 * t.clean_target)
    lim_u = pw.head_limit(model, t.w, t.x_query, x_law="uniform")
    assert not torch.allclose(lim_u, lim)


def test_head_paths_match_the_model_and_converge():
    d = 3
    model = _gd_head(d, -2.0, 0.7)
    t = icl.make_regression_tasks(64, 1, d, cov_x=COV12, x_law="uniform", seed=7)
    paths = pw.head_paths(model, t.w, t.x_query, [5, 20000], x_law="uniform", cov_x=COV12, seed=11, chunk=5)
    ctx = icl.make_regression_tasks(64, 5, d, x_law="uniform", cov_x=COV12, seed=derive_seed(11, 0)).x  # chunk 0
    tokens = torch.cat([ctx, (ctx * t.w[:, None]).sum(-1, keepdim=True)], -1)
    direct = model.predict(icl.RegressionTasks(tokens, t.query, t.y_query, t.w))
    assert torch.allclose(paths[:, 0], direct, atol=1e-10)
    lim = pw.head_limit(model, t.w, t.x_query, x_law="uniform", cov_x=COV12)
    assert ((paths[:, 1] - lim) ** 2).mean() < 0.05 * ((paths[:, 0] - lim) ** 2).mean()
    with pytest.raises(ValueError, match="checkpoints"):
        pw.head_paths(model, t.w, t.x_query, [5, 5])
    with pytest.raises(ValueError, match="one-layer"):
        pw.head_limit(icl.stacked_gd_transformer(d, 0.5, 2), t.w, t.x_query)
    with pytest.raises(ValueError, match="shape"):
        pw.head_limit(model, t.w[:, :2], t.x_query)


# ----------------------------------------------------------------------------- linear self-attention


def test_linear_self_attention_gd_is_linear_attention():
    t = icl.make_regression_tasks(6, 9, 4, seed=8)
    m = pw.LinearSelfAttention.gd(4, 0.3)
    assert torch.allclose(m.predict(t), icl.linear_attention_predict(t, 0.3))
    assert torch.allclose(m.preconditioner(), 0.3 * torch.eye(4, dtype=torch.float64))
    with pytest.raises(ValueError, match="d = 3"):
        m.predict(icl.make_regression_tasks(2, 3, 3, seed=0))


def test_training_linear_self_attention_finds_the_tuned_step():
    d, n = 3, 10
    m = pw.LinearSelfAttention(d, seed=1)
    log = pw.train_on_tasks(m, n_examples=n, steps=300, batch=256, lr=0.02, x_law="uniform", seed=2)
    assert log.loss[-1] < log.loss[0]
    g = m.preconditioner()
    eta, _ = pw.one_step_optimum(n, d, x_law="uniform")
    assert float(torch.trace(g) / d) == pytest.approx(float(eta), rel=0.15)
    with pytest.raises(ValueError, match="predict"):
        pw.train_on_tasks(torch.nn.Linear(2, 2), n_examples=3, steps=1)
    with pytest.raises(ValueError, match="x_law"):
        pw.train_on_tasks(m, n_examples=3, steps=1, x_law="cube")


def test_softmax_head_trains_only_the_logit_form_and_value():
    m = pw.softmax_head(3, seed=1)
    q0 = m.theta_q[0].detach().clone()
    pw.train_on_tasks(m, n_examples=5, steps=20, batch=32, lr=0.05, seed=0)
    assert torch.equal(m.theta_q[0].detach(), q0)
    assert torch.equal(q0, torch.eye(4))
