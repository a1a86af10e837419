"""Tests of covbook.icl.tasks: in-context regression tasks, the token process and the gain adapter."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from covbook import icl
from covbook.icl import (
    RegressionTokens,
    elliptical_gain,
    make_regression_tasks,
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


# ----------------------------------------------------------------------------- subsets, casts, queries


def test_getitem_slices_every_field_alike():
    t = make_regression_tasks(6, 4, 2, noise=0.3, seed=3)
    for idx in (slice(1, 4), torch.tensor([0, 5, 2]), torch.tensor([True, False] * 3)):
        sub = t[idx]
        for name in ("tokens", "query", "y_query", "w"):
            assert torch.equal(getattr(sub, name), getattr(t, name)[idx])
    assert len(t[2]) == 1 and torch.equal(t[-1].w, t.w[-1:])
    with pytest.raises(TypeError, match="idx"):
        t["a"]


def test_to_casts_every_field():
    t = make_regression_tasks(3, 4, 2, seed=0).to(torch.float32)
    assert {x.dtype for x in (t.tokens, t.query, t.y_query, t.w)} == {torch.float32}


def test_with_query_replaces_the_query_and_the_target():
    t = make_regression_tasks(4, 5, 2, seed=1)
    q = t.with_query([0.5, -1.0])
    assert torch.equal(q.tokens, t.tokens)
    assert torch.allclose(q.x_query, torch.tensor([0.5, -1.0], dtype=torch.float64).expand(4, 2))
    assert torch.allclose(q.y_query, q.clean_target) and torch.all(q.query[:, -1] == 0)
    with pytest.raises(ValueError, match="x_query"):
        t.with_query([1.0, 2.0, 3.0])


@pytest.mark.parametrize("law", ["gaussian", "two_point", "laplace"])
def test_gain_adapter_is_covbook_theory_gain(law):
    from covbook.theory import elliptical_gain as theory_gain

    s = torch.tensor([0.0, 0.3, 1.5], dtype=torch.float64)
    assert torch.allclose(elliptical_gain(s, law), theory_gain(s, icl.mixing_law(law)))
    assert icl.mixing_law(law).tilted_mean(torch.tensor(0.0)).item() == pytest.approx(1.0)
