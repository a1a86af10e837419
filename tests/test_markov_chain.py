"""Tests of covbook.markov.chain: stationary law, entropy rate, asymptotic covariance and sampling of a finite chain."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from covbook import markov as mk


def test_stationary_of_two_state_chain():
    a, b = 0.3, 0.1
    k = torch.tensor([[1 - a, a], [b, 1 - b]], dtype=torch.float64)
    pi = mk.stationary_distribution(k)
    assert torch.allclose(pi, torch.tensor([b / (a + b), a / (a + b)], dtype=torch.float64), atol=1e-12)
    # entropy rate of the two-state chain: Σ π_i H(row_i)
    h = pi[0] * mk.entropy(k[0]) + pi[1] * mk.entropy(k[1])
    assert torch.isclose(mk.entropy_rate(k), h, atol=1e-12)


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 6), st.integers(0, 10_000))
def test_stationary_is_fixed_point_and_entropy_rate_bounded(v, seed):
    g = torch.Generator().manual_seed(seed)
    k = torch.softmax(2 * torch.randn(v, v, generator=g, dtype=torch.float64), dim=-1)
    pi = mk.stationary_distribution(k)
    assert torch.allclose(pi @ k, pi, atol=1e-10)
    h = float(mk.entropy_rate(k))
    assert 0.0 <= h <= math.log(v) + 1e-12


def test_entropy_rate_deterministic_cycle_and_uniform():
    perm = torch.eye(4, dtype=torch.float64)[[1, 2, 3, 0]]  # the cycle 0→1→2→3→0
    assert float(mk.entropy_rate(perm)) == pytest.approx(0.0, abs=1e-12)
    assert torch.allclose(mk.stationary_distribution(perm), torch.full((4,), 0.25, dtype=torch.float64))
    assert float(mk.entropy_rate(torch.full((3, 3), 1 / 3))) == pytest.approx(math.log(3))


def test_stationary_rejects_reducible_and_bad_kernels():
    with pytest.raises(ValueError, match="several stationary"):
        mk.stationary_distribution(torch.eye(3, dtype=torch.float64))
    with pytest.raises(ValueError, match="sum to 1"):
        mk.stationary_distribution([[0.5, 0.4], [0.5, 0.5]])
    with pytest.raises(ValueError, match="square"):
        mk.stationary_distribution([[0.5, 0.5]])
    with pytest.raises(ValueError, match="non-negative"):
        mk.entropy_rate([[1.5, -0.5], [0.5, 0.5]])
    with pytest.raises(ValueError, match="shape"):
        mk.entropy_rate([[0.5, 0.5], [0.5, 0.5]], stationary=[1.0])


def test_asymptotic_covariance_closed_forms():
    pi = torch.tensor([0.2, 0.3, 0.5], dtype=torch.float64)
    iid = torch.outer(torch.ones(3, dtype=torch.float64), pi)
    d = torch.diag(pi) - torch.outer(pi, pi)
    torch.testing.assert_close(mk.asymptotic_covariance(iid), d)
    rho = 0.6
    sticky = rho * torch.eye(3, dtype=torch.float64) + (1 - rho) * iid
    torch.testing.assert_close(mk.asymptotic_covariance(sticky), (1 + rho) / (1 - rho) * d)


def test_asymptotic_covariance_matches_simulation():
    g = torch.Generator().manual_seed(0)
    k = torch.tensor([[0.8, 0.2, 0.0], [0.1, 0.7, 0.2], [0.3, 0.0, 0.7]], dtype=torch.float64)
    x = mk.sample_markov_chain(k, 400, 2000, generator=g)  # (400, 2000)
    pi = mk.stationary_distribution(k)
    dev = (mk.empirical_frequencies(x, 3) - pi) * math.sqrt(2000)  # (400, 3)
    emp = dev.T @ dev / 400
    sigma = mk.asymptotic_covariance(k)
    assert float((emp - sigma).abs().max()) < 0.25 * float(sigma.abs().max())


def test_sample_markov_chain_is_stationary_and_seeded():
    k = torch.tensor([[0.5, 0.5], [0.1, 0.9]], dtype=torch.float64)
    a = mk.sample_markov_chain(k, 3, 50, generator=torch.Generator().manual_seed(1))
    b = mk.sample_markov_chain(k, 3, 50, generator=torch.Generator().manual_seed(1))
    assert torch.equal(a, b) and a.shape == (3, 50) and a.dtype == torch.long
    x = mk.sample_markov_chain(k, 2000, 2, generator=torch.Generator().manual_seed(2))
    assert abs(float((x[:, 0] == 1).double().mean()) - 5 / 6) < 0.05
    with pytest.raises(ValueError, match="kernel"):
        mk.sample_markov_chain([[0.5, 0.6], [0.5, 0.5]], 1, 3)
    with pytest.raises(ValueError, match="length"):
        mk.sample_markov_chain(k, 1, 0)


def test_asymptotic_covariance_of_periodic_and_reducible_chains():
    # an alternating chain's frequencies are within 1/t of (1/2, 1/2): no fluctuation at scale t^(-1/2)
    torch.testing.assert_close(mk.asymptotic_covariance([[0.0, 1.0], [1.0, 0.0]]),
                               torch.zeros(2, 2, dtype=torch.float64), atol=1e-12, rtol=0)
    with pytest.raises(ValueError, match="several stationary laws"):
        mk.asymptotic_covariance([[1.0, 0.0], [0.0, 1.0]])
