"""Tests of covbook.icl.model: stacked GD heads and the (I − A)^K identity."""

from __future__ import annotations

import pytest
import torch

from covbook import icl
from covbook.icl import (
    construct_gd_head,
    head_predict,
    make_regression_tasks,
    population_gd,
    power_identity_predictions,
    stacked_gd_transformer,
)

COV3 = torch.tensor([[1.0, 0.3, 0.0], [0.3, 0.8, 0.1], [0.0, 0.1, 0.5]], dtype=torch.float64)


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
