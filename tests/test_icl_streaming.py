"""Tests of covbook.icl.streaming: the head, linear attention and least squares along long contexts."""

from __future__ import annotations

import math

import pytest
import torch

from covbook.attention import readout_paths
from covbook.icl import (
    RegressionTokens,
    construct_gd_head,
    icl_prediction_paths,
    population_gd,
)

COV3 = torch.tensor([[1.0, 0.3, 0.0], [0.3, 0.8, 0.1], [0.0, 0.1, 0.5]], dtype=torch.float64)


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
