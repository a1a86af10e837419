"""Tests of covbook.icl: in-context regression, the GD head, stacked heads, GD and risks."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from covbook import icl
from covbook.attention import readout_paths
from covbook.icl import (
    RegressionTokens,
    construct_gd_head,
    elliptical_gain,
    empirical_gd,
    gd_one_step_risk,
    gd_optimal_risk,
    gd_optimal_step,
    head_predict,
    icl_prediction_paths,
    linear_attention_predict,
    make_regression_tasks,
    max_stable_step,
    ols,
    ols_risk,
    population_gd,
    power_identity_predictions,
    stacked_gd_transformer,
)

COV3 = torch.tensor([[1.0, 0.3, 0.0], [0.3, 0.8, 0.1], [0.0, 0.1, 0.5]], dtype=torch.float64)


# ----------------------------------------------------------------------------- tasks


def test_tasks_shapes_noiseless_and_deterministic():
    t = make_regression_tasks(5, 7, 3, cov_x=COV3, seed=3)
    assert t.tokens.shape == (5, 7, 4) and t.query.shape == (5, 4) and t.w.shape == (5, 3)
    assert torch.allclose(t.y, (t.x * t.w[:, None]).sum(-1), atol=1e-12)
    assert torch.allclose(t.y_query, t.clean_target, atol=1e-12)
    assert (t.query[:, 3] == 0).all()
    assert t.sequence().shape == (5, 8, 4)
    t2 = make_regression_tasks(5, 7, 3, cov_x=COV3, seed=3)
    assert torch.equal(t.tokens, t2.tokens)
    assert not torch.equal(t.tokens, make_regression_tasks(5, 7, 3, cov_x=COV3, seed=4).tokens)


def test_tasks_fixed_w_noise_and_mean():
    w = torch.tensor([1.0, -2.0])
    t = make_regression_tasks(4000, 50, 2, w=w, noise=0.5, mean_x=[1.0, 0.0], seed=0)
    assert torch.equal(t.w, w.double().expand(4000, 2))
    resid = t.y - (t.x * w.double()).sum(-1)
    assert abs(resid.std().item() - 0.5) < 0.01
    assert abs(t.x[..., 0].mean().item() - 1.0) < 0.01


@pytest.mark.parametrize("law", ["gaussian", "two_point", "laplace"])
def test_every_law_has_covariance_cov_x(law):
    t = make_regression_tasks(400, 500, 3, cov_x=COV3, x_law=law, seed=1)
    x = t.x.reshape(-1, 3)
    emp = x.T @ x / x.shape[0]
    # 2e5 draws: entries of the sample covariance have SE below 0.01 even for the Laplace mixture
    assert torch.allclose(emp, COV3, atol=0.03)


def test_laplace_law_is_heavier_than_gaussian():
    kurt = {}
    for law in ("gaussian", "two_point", "laplace"):
        x = make_regression_tasks(200, 1000, 1, x_law=law, seed=2).x.reshape(-1)
        kurt[law] = (x**4).mean().item() / (x**2).mean().item() ** 2
    # E W² · 3: gaussian 3, two-point 3·1.25 = 3.75, Laplace 3·2 = 6
    assert abs(kurt["gaussian"] - 3) < 0.1 and abs(kurt["two_point"] - 3.75) < 0.15
    assert abs(kurt["laplace"] - 6) < 0.5


@pytest.mark.parametrize("kwargs, match", [
    (dict(n_tasks=0), "n_tasks"), (dict(x_law="cauchy"), "x_law"), (dict(noise=-1.0), "noise"),
    (dict(cov_x=torch.eye(2)), "cov_x"), (dict(w=torch.ones(2)), "w must have shape"),
    (dict(mean_x=[0.0]), "mean_x"), (dict(cov_x=-torch.eye(3)), "positive semi-definite"),
])
def test_tasks_bad_input(kwargs, match):
    args = dict(n_tasks=2, n_examples=3, d=3)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        make_regression_tasks(args.pop("n_tasks"), args.pop("n_examples"), args.pop("d"), **args)


def test_regression_tokens_process_moments():
    w = torch.tensor([0.5, 1.0, -1.0], dtype=torch.float64)
    p = RegressionTokens(w, COV3, noise=0.3, mean_x=[0.2, 0.0, 0.0])
    z = p.sample(200_000, torch.Generator().manual_seed(0))
    assert torch.allclose(z.mean(0), p.mean, atol=0.02)
    assert torch.allclose(torch.cov(z.T), p.covariance, atol=0.03)


# ----------------------------------------------------------------------------- gain


@settings(max_examples=40, deadline=None)
@given(st.floats(0.0, 20.0))
def test_two_point_gain_matches_its_definition(s):
    # g(s) = E[W e^{sW/2}] / E[e^{sW/2}] with W uniform on {1/2, 3/2}, evaluated stably
    lo, hi = 0.25 * s, 0.75 * s
    r = math.exp(lo - hi)
    direct = (0.5 * r + 1.5) / (r + 1.0)
    assert float(elliptical_gain(s, "two_point")) == pytest.approx(direct, rel=1e-12)


def test_laplace_gain_by_quadrature_and_errors():
    s = 0.8
    w = np.linspace(0, 60, 600_001)
    f = np.exp(-w)
    num = np.trapezoid(w * np.exp(s * w / 2) * f, w)
    den = np.trapezoid(np.exp(s * w / 2) * f, w)
    assert float(elliptical_gain(s, "laplace")) == pytest.approx(num / den, rel=1e-6)
    assert float(elliptical_gain(3.0, "gaussian")) == 1.0
    with pytest.raises(ValueError, match="s < 2"):
        elliptical_gain(2.0, "laplace")
    with pytest.raises(ValueError, match=">= 0"):
        elliptical_gain(-1.0, "two_point")
    with pytest.raises(ValueError, match="x_law"):
        elliptical_gain(1.0, "student")


# ----------------------------------------------------------------------------- construction


def test_construction_bilinear_form_and_preconditioning():
    gamma = torch.tensor([[2.0, 0.5, 0.0], [0.5, 1.0, 0.0], [0.0, 0.0, 0.3]], dtype=torch.float64)
    tq, tk, tv = construct_gd_head(3, 0.7, gamma)
    expect = torch.zeros(4, 4, dtype=torch.float64)
    expect[:3, :3] = 0.7 * gamma
    assert torch.allclose(tk.T @ tq, expect, atol=1e-12)
    assert tv[3, 3] == 1 and tv.abs().sum() == 1
    tq, tk, _ = construct_gd_head(3, 0.7)
    assert torch.allclose(tq, math.sqrt(0.7) * torch.diag(torch.tensor([1.0, 1, 1, 0], dtype=torch.float64)))


@pytest.mark.parametrize("eta", [0.0, -1.0, float("nan"), float("inf"), "x"])
def test_bad_eta(eta):
    with pytest.raises(ValueError, match="eta"):
        construct_gd_head(2, eta)
    with pytest.raises(ValueError, match="eta"):
        population_gd(torch.eye(2), torch.ones(2), eta, 3)


def test_bad_precondition():
    with pytest.raises(ValueError, match="precondition"):
        construct_gd_head(2, 0.5, -torch.eye(2))
    with pytest.raises(ValueError, match="precondition"):
        construct_gd_head(2, 0.5, torch.eye(3))


def test_head_predict_is_the_softmax_average_of_y():
    t = make_regression_tasks(6, 20, 3, cov_x=COV3, seed=5)
    eta = 0.6
    pred = head_predict(t, *construct_gd_head(3, eta))
    logits = eta * (t.x @ t.x_query[..., None])[..., 0]  # (B, N)
    ref = (torch.softmax(logits, -1) * t.y).sum(-1)
    assert torch.allclose(pred, ref, atol=1e-12)
    linear = linear_attention_predict(t, eta)
    ref_lin = eta * ((t.x @ t.x_query[..., None])[..., 0] * t.y).mean(-1)
    assert torch.allclose(linear, ref_lin, atol=1e-12)


def test_paths_match_direct_computation_on_the_same_draws():
    w = torch.tensor([1.0, -0.5, 0.25], dtype=torch.float64)
    q = torch.tensor([[0.5, 0.2, -0.1], [1.0, 0.0, 1.0]], dtype=torch.float64)
    cps, eta, R = [5, 40], 0.8, 3
    out = icl_prediction_paths(w, q, eta, cps, cov_x=COV3, noise=0.2, streams=R, seed=11, chunk=7)
    p = RegressionTokens(w, COV3, noise=0.2)
    draw = p.sampler(torch.Generator().manual_seed(11), R)
    chunks, seen = [], 0
    for t in cps:  # reproduce the chunking of the pass
        while seen < t:
            n = min(7, t - seen)
            chunks.append(draw(n))
            seen += n
    z = torch.cat(chunks, 1)  # (R, 40, 4)
    for j, t in enumerate(cps):
        x, y = z[:, :t, :3], z[:, :t, 3]
        logits = eta * x @ q.T  # (R, t, m)
        soft = (torch.softmax(logits, 1) * y[..., None]).sum(1)
        lin = eta * ((x @ q.T) * y[..., None]).mean(1)
        w_ols = torch.stack([torch.linalg.pinv(x[r]) @ y[r] for r in range(R)])
        assert torch.allclose(out["softmax"][:, j], soft, atol=1e-10)
        assert torch.allclose(out["linear"][:, j], lin, atol=1e-10)
        assert torch.allclose(out["ols"][:, j], w_ols @ q.T, atol=1e-8)


def test_paths_agree_with_covbook_readout_paths():
    w = torch.tensor([0.3, 1.0], dtype=torch.float64)
    q = torch.tensor([[0.4, -0.3]], dtype=torch.float64)
    out = icl_prediction_paths(w, q, 0.5, [64, 128], streams=2, seed=2, chunk=1 << 10)
    tq, tk, tv = construct_gd_head(2, 0.5)
    ref = readout_paths(RegressionTokens(w), torch.cat([q, torch.zeros(1, 1)], 1), tq, tk, tv, [64, 128],
                        streams=2, seed=2, chunk=1 << 10)[..., 2]
    assert torch.allclose(out["softmax"], ref, atol=1e-12)


def test_head_converges_to_one_population_gd_step():
    w = torch.tensor([1.0, -1.0, 0.5], dtype=torch.float64)
    q = torch.tensor([[0.6, 0.3, -0.4]], dtype=torch.float64)
    eta, n, r = 0.7, 20_000, 64
    out = icl_prediction_paths(w, q, eta, [n], cov_x=COV3, streams=r, seed=0)["softmax"][:, 0, 0]
    target = (q @ population_gd(COV3, w, eta, 1)[1]).item()
    s = eta**2 * (q @ COV3 @ q.T).item()
    const = math.exp(s) * ((w @ COV3 @ w).item() + target**2)  # N·MSE → e^s(Var y + μ²)
    assert abs(out.mean().item() - target) < 5 * math.sqrt(const / (n * r))
    assert ((out - target) ** 2).mean().item() * n == pytest.approx(const, rel=0.5)


def test_paths_bad_input():
    w = torch.ones(2)
    with pytest.raises(ValueError, match="queries"):
        icl_prediction_paths(w, torch.ones(1, 3), 0.5, [10])
    with pytest.raises(ValueError, match="checkpoints"):
        icl_prediction_paths(w, torch.ones(1, 2), 0.5, [10, 5])
    with pytest.raises(ValueError, match="eta"):
        icl_prediction_paths(w, torch.ones(1, 2), 0.0, [10])


# ----------------------------------------------------------------------------- stacked heads


@pytest.mark.parametrize("eta, layers, precond", [(0.3, 1, None), (0.8, 5, None), (0.5, 4, "gamma")])
def test_stacked_model_equals_power_identity(eta, layers, precond):
    gamma = torch.diag(torch.tensor([2.0, 1.0, 0.5], dtype=torch.float64)) if precond else None
    t = make_regression_tasks(7, 33, 3, cov_x=COV3, noise=0.1, seed=9)
    model = stacked_gd_transformer(3, eta, layers, gamma)
    by_depth = model.predict_by_depth(t)
    ident = power_identity_predictions(t, eta, layers, gamma)
    assert by_depth.shape == (layers + 1, 7)
    assert torch.allclose(by_depth, ident, rtol=1e-12, atol=1e-12)
    assert torch.allclose(model.predict(t), by_depth[-1], atol=1e-14)
    # the x-part is never written
    h = model(t.sequence())
    assert torch.equal(h[..., :3], t.sequence()[..., :3])


def test_one_stacked_layer_is_the_head_with_the_query_among_keys():
    t = make_regression_tasks(5, 30, 3, seed=4)
    one = stacked_gd_transformer(3, 0.5, 1).predict(t)
    assert torch.allclose(one, head_predict(t, *construct_gd_head(3, 0.5), include_query=True), atol=1e-12)


def test_stacked_model_tracks_population_iterates_at_large_n():
    d, eta, k = 2, 0.6, 3
    w = torch.tensor([1.0, -0.5], dtype=torch.float64)
    t = make_regression_tasks(16, 1000, d, w=w, seed=1)
    pred = stacked_gd_transformer(d, eta, k).predict(t)
    target = t.x_query @ population_gd(torch.eye(d), w, eta, k)[-1]
    # at N = 1000 the tracking error is about 0.05, far below |x_qᵀ w_K| ~ 0.7; predicting 0 would fail
    assert ((pred - target) ** 2).mean().sqrt().item() < 0.15
    assert ((pred - target) ** 2).mean().item() < 0.1 * (target**2).mean().item()


def test_transformer_bad_input():
    with pytest.raises(ValueError, match="layers"):
        stacked_gd_transformer(2, 0.5, 0)
    model = stacked_gd_transformer(2, 0.5, 2)
    with pytest.raises(ValueError, match="shape"):
        model(torch.zeros(1, 4, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match="RegressionTasks"):
        model.predict(torch.zeros(1, 4, 3))
    with pytest.raises(ValueError, match="shape"):
        icl.ICLTransformer(2, [(torch.eye(3), torch.eye(3), torch.eye(2))])


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


# ----------------------------------------------------------------------------- training


def test_training_is_deterministic_and_learns():
    def run():
        model = icl.random_icl_transformer(2, 1, seed=3)
        log = icl.train_icl(model, n_examples=16, steps=150, batch=64, lr=0.03, seed=5)
        return model, log

    m1, log1 = run()
    m2, log2 = run()
    assert np.array_equal(log1.loss, log2.loss)
    assert torch.equal(m1.theta_q[0], m2.theta_q[0])
    # predicting 0 has risk E(x_qᵀw)² = d = 2; training must beat it clearly
    assert log1.loss[-5:].mean() < 0.8 * 2.0


def test_alignment_of_the_construction_is_perfect():
    model = stacked_gd_transformer(3, 0.4, 1)
    form = icl.bilinear_forms(model)[0]
    al = icl.construction_alignment(form["B"], form["V"])
    assert al["cos_identity"] == pytest.approx(1.0)
    assert al["eta_eff"] == pytest.approx(0.4) and al["eta_attn"] == pytest.approx(0.4)
    assert al["y_key_weight"] == 0.0 and al["v_y_other"] == 0.0


def test_training_bad_input():
    model = icl.random_icl_transformer(2, 1)
    with pytest.raises(ValueError, match="steps"):
        icl.train_icl(model, n_examples=8, steps=0)
    with pytest.raises(ValueError, match="lr"):
        icl.train_icl(model, n_examples=8, steps=1, lr=-1.0)
    with pytest.raises(ValueError, match="ICLTransformer"):
        icl.train_icl(torch.nn.Linear(2, 2), n_examples=8, steps=1)


def test_construction_risk_curve_uses_the_best_scale():
    t = make_regression_tasks(500, 20, 3, seed=8)
    risk, c = icl.construction_risk_curve(t, [0.3, 0.6])
    for r, cc, e in zip(risk, c, [0.3, 0.6], strict=True):
        s = head_predict(t, *construct_gd_head(3, e), include_query=True)
        for other in (0.5 * cc, 1.5 * cc, 1.0):
            assert ((other * s - t.clean_target) ** 2).mean().item() / 3 >= r - 1e-12


def test_construction_risk_curve_negative_scale_and_errors():
    t = make_regression_tasks(300, 10, 2, seed=3)
    tq, tk, tv = construct_gd_head(2, 0.5)
    s = head_predict(t, -tq, tk, tv, include_query=True)  # logits −0.5 x_qᵀx_i
    logits = -0.5 * (t.sequence()[..., :2] @ t.x_query[..., None])[..., 0]  # (B, N+1)
    assert torch.allclose(s, (torch.softmax(logits, -1) * t.sequence()[..., 2]).sum(-1), atol=1e-12)
    risk, c = icl.construction_risk_curve(t, [-0.5])
    assert risk[0] == pytest.approx(((c[0] * s - t.clean_target) ** 2).mean().item() / 2)
    with pytest.raises(ValueError, match="non-zero"):
        icl.construction_risk_curve(t, [0.0])
