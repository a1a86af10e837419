"""Tests of covbook.icl.construction: the one-step GD head and its tuned risk curve."""

from __future__ import annotations

import math

import pytest
import torch

from covbook import icl
from covbook.icl import (
    construct_gd_head,
    head_predict,
    linear_attention_predict,
    make_regression_tasks,
    population_gd,
)

COV3 = torch.tensor([[1.0, 0.3, 0.0], [0.3, 0.8, 0.1], [0.0, 0.1, 0.5]], dtype=torch.float64)


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


def test_construction_predict_is_the_scaled_head_and_rejects_zero_scale():
    t = make_regression_tasks(5, 30, 2, seed=4)
    tq, tk, tv = construct_gd_head(2, 0.7)
    ref = head_predict(t, -tq, tk, tv, include_query=True)
    assert torch.allclose(icl.construction_predict(t, -0.7, 2.5), 2.5 * ref)
    for bad in (0.0, float("nan")):
        with pytest.raises(ValueError, match="eta_a"):
            icl.construction_predict(t, bad)
    with pytest.raises(ValueError, match="c must be a finite number"):
        icl.construction_predict(t, 0.5, float("inf"))
    with pytest.raises(ValueError, match="eta_a"):
        icl.construction_predict(t, True)  # a bool is not a logit scale
    with pytest.raises(ValueError, match="too large"):
        icl.construction_predict(t, 1.0, 1.65e308)  # finite c whose product overflows (a fuzz case)
