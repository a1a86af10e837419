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


def test_training_bad_input():
    model = icl.random_icl_transformer(2, 1)
    with pytest.raises(ValueError, match="steps"):
        icl.train_icl(model, n_examples=8, steps=0)
    with pytest.raises(ValueError, match="lr"):
        icl.train_icl(model, n_examples=8, steps=1, lr=-1.0)
    with pytest.raises(ValueError, match="ICLTransformer"):
        icl.train_icl(torch.nn.Linear(2, 2), n_examples=8, steps=1)
