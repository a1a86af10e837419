"""Tests of covbook.icl.training: training stacked heads (the alignment with the construction: test_icl_alignment)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from covbook import icl

COV3 = torch.tensor([[1.0, 0.3, 0.0], [0.3, 0.8, 0.1], [0.0, 0.1, 0.5]], dtype=torch.float64)


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


def test_restarts_keep_the_lowest_training_loss_and_match_a_plain_run():
    seeds = [3, 4, 5]
    models = [icl.random_icl_transformer(2, 1, seed=s) for s in seeds]
    res = icl.train_icl_restarts(models, seeds, n_examples=12, steps=60, select_steps=20, batch=32, lr=0.03)
    assert res.chosen == int(np.argmin(res.select_loss)) and res.select_loss.shape == (3,)
    # the kept run is exactly a plain run of train_icl with its seed (same schedule over `steps`)
    plain = icl.random_icl_transformer(2, 1, seed=seeds[res.chosen])
    log = icl.train_icl(plain, n_examples=12, steps=60, batch=32, lr=0.03, seed=seeds[res.chosen])
    assert np.array_equal(res.log.loss, log.loss) and np.array_equal(res.log.steps, log.steps)
    assert torch.equal(res.model.theta_v[0], plain.theta_v[0])
    assert res.model is models[res.chosen]
    # the runs not kept stop at the selection step
    for r, g in enumerate(res.logs):
        assert (g.steps.max() == 59) if r == res.chosen else (g.steps.max() < 20)


def test_restart_selection_uses_the_window_mean_of_training_losses():
    # one run with a poisoned start (huge weights: large loss) is never kept
    good = icl.random_icl_transformer(2, 1, seed=1)
    bad = icl.random_icl_transformer(2, 1, init_scale=20.0, seed=2)
    res = icl.train_icl_restarts([bad, good], [2, 1], n_examples=8, steps=10, select_steps=4, batch=16)
    assert res.chosen == 1 and res.select_loss[0] > res.select_loss[1]


def test_restarts_bad_input():
    ms = [icl.random_icl_transformer(2, 1, seed=s) for s in (1, 2)]
    kw = dict(n_examples=8, steps=10, select_steps=4, batch=8)
    with pytest.raises(ValueError, match="models"):
        icl.train_icl_restarts([], [], **kw)
    with pytest.raises(ValueError, match="seeds"):
        icl.train_icl_restarts(ms, [1], **kw)
    with pytest.raises(ValueError, match="distinct"):
        icl.train_icl_restarts([ms[0], ms[0]], [1, 2], **kw)
    with pytest.raises(ValueError, match="select_steps"):
        icl.train_icl_restarts(ms, [1, 2], **{**kw, "select_steps": 11})
    with pytest.raises(ValueError, match="select_steps"):
        icl.train_icl_restarts(ms, [1, 2], **{**kw, "select_steps": 1})


def test_training_bad_input():
    model = icl.random_icl_transformer(2, 1)
    with pytest.raises(ValueError, match="steps"):
        icl.train_icl(model, n_examples=8, steps=0)
    with pytest.raises(ValueError, match="lr"):
        icl.train_icl(model, n_examples=8, steps=1, lr=-1.0)
    with pytest.raises(ValueError, match="ICLTransformer"):
        icl.train_icl(torch.nn.Linear(2, 2), n_examples=8, steps=1)
