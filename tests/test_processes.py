"""GaussianIID and Replay: exact moments, sampling, error paths."""

import pytest
import torch

from covbook.processes import GaussianIID, Replay

f64 = torch.float64


def test_gaussian_moments_match_samples():
    cov = torch.tensor([[2.0, 0.5, 0.0], [0.5, 1.0, 0.2], [0.0, 0.2, 0.5]], dtype=f64)
    mean = torch.tensor([1.0, -2.0, 0.5], dtype=f64)
    p = GaussianIID(cov, mean)
    x = p.sample(400_000, torch.Generator().manual_seed(0))
    assert torch.allclose(x.mean(0), mean, atol=0.01)
    assert torch.allclose(torch.cov(x.T), cov, atol=0.02)
    assert torch.equal(p.mean, mean) and torch.equal(p.covariance, cov)


def test_gaussian_singular_covariance_is_allowed():
    cov = torch.tensor([[1.0, 1.0], [1.0, 1.0]], dtype=f64)
    x = GaussianIID(cov).sample(1000, torch.Generator().manual_seed(1))
    assert torch.allclose(x[:, 0], x[:, 1], atol=1e-6)


def test_sampler_continues_streams_and_is_seeded():
    p = GaussianIID(torch.eye(2, dtype=f64))
    a = p.sampler(torch.Generator().manual_seed(3), 4)
    b = p.sampler(torch.Generator().manual_seed(3), 4)
    x1, x2 = a(5), a(7)
    assert x1.shape == (4, 5, 2) and x2.shape == (4, 7, 2)
    assert torch.equal(x1, b(5)) and not torch.equal(x1[:, :5], x2[:, :5])


@pytest.mark.parametrize(
    "cov, mean, match",
    [
        ([[1.0, 2.0], [0.0, 1.0]], None, "symmetric"),
        ([[1.0, 0.0], [0.0, -1.0]], None, "positive semi-definite"),
        ([[1.0, 0.0, 0.0]], None, "square"),
        ([[float("nan"), 0.0], [0.0, 1.0]], None, "finite"),
        ([[1.0, 0.0], [0.0, 1.0]], [1.0, 2.0, 3.0], "mean must have shape"),
        ("abc", None, "array-like|real numbers"),
    ],
)
def test_gaussian_rejects_bad_parameters(cov, mean, match):
    with pytest.raises(ValueError, match=match):
        GaussianIID(cov, mean)


def test_replay_returns_the_tokens_and_refuses_to_overrun():
    x = torch.arange(12, dtype=f64).reshape(6, 2)
    draw = Replay(x).sampler(torch.Generator(), 1)
    assert torch.equal(torch.cat([draw(2), draw(4)], 1)[0], x)
    with pytest.raises(ValueError, match="6 tokens"):
        draw(1)
    with pytest.raises(ValueError, match="stream"):
        Replay(x).sampler(torch.Generator(), 2)
