"""Tests of covbook.transformer.quadrature: the polar rule against Gauss-Hermite on smooth integrands."""

from __future__ import annotations

import pytest
import torch

from covbook.transformer import CausalTransformer, gauss_hermite_rule, gaussian_polar_rule, mean_field


def test_polar_rule_matches_gauss_hermite_on_smooth_integrands():
    cov = torch.tensor([[1.0, 0.3], [0.3, 0.5]], dtype=torch.float64)
    m = CausalTransformer(d_in=2, d_model=4, n_layers=2, mlp=True, logit_scale=0.5, seed=3)
    xq = torch.tensor([[0.5, -1.0], [1.2, 0.1]], dtype=torch.float64)
    a = mean_field(m, *gauss_hermite_rule(cov, 40), xq)
    b = mean_field(m, *gaussian_polar_rule(cov, 60, 64), xq)
    torch.testing.assert_close(a, b, rtol=1e-7, atol=1e-7)
    with pytest.raises(ValueError, match="2x2"):
        gaussian_polar_rule(torch.eye(3), 4, 4)
