"""Tests of covbook.markov.frequencies: empirical and running frequencies, TV, entropy, attractor contrasts."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from covbook import markov as mk


def test_frequencies_hand_computed():
    assert mk.empirical_frequencies([0, 0, 1, 3], 4).tolist() == [0.5, 0.25, 0.0, 0.25]
    run = mk.running_frequencies([[2, 0, 2]], 3)
    assert run.shape == (1, 3, 3)
    assert torch.allclose(run[0, -1], torch.tensor([1 / 3, 0, 2 / 3], dtype=torch.float64))
    assert torch.equal(run[0, 0], torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64))


def test_tv_and_entropy_closed_forms():
    assert float(mk.tv_distance([1, 0, 0], [0, 0, 1])) == 1.0
    assert float(mk.tv_distance([0.2, 0.8], [0.2, 0.8])) == 0.0
    assert math.isclose(float(mk.entropy(torch.full((7,), 1 / 7, dtype=torch.float64))), math.log(7))
    assert float(mk.entropy([0.0, 1.0, 0.0])) == 0.0


def test_frequency_errors():
    with pytest.raises(ValueError, match="0..2"):
        mk.empirical_frequencies([0, 3], 3)
    with pytest.raises(ValueError, match="sum to 1"):
        mk.tv_distance([0.5, 0.4], [0.5, 0.5])
    with pytest.raises(ValueError, match="same number"):
        mk.tv_distance([0.5, 0.5], [1.0, 0.0, 0.0])


def test_within_between_tv_detects_two_attractors():
    a = [0, 1] * 50
    b = [2, 3] * 50
    within, between = mk.within_between_tv([a, a, b], 4)
    assert within.tolist() == [0.0, 0.0, 0.0]
    assert between.tolist() == [0.0, 1.0, 1.0]
    with pytest.raises(ValueError, match="R >= 2"):
        mk.within_between_tv([a], 4)


def test_attractor_contrast():
    d, se = mk.attractor_contrast([[0, 0, 0, 0], [1, 1, 1, 1], [2, 2, 2, 2]], 3)
    assert d == 1.0 and se == 0.0
    # one ergodic-looking pattern repeated: no contrast
    d, se = mk.attractor_contrast([[0, 1, 0, 1]] * 4, 2)
    assert d == 0.0 and se == 0.0
    with pytest.raises(ValueError, match="at least 3 runs"):
        mk.attractor_contrast([[0, 1], [1, 0]], 2)


def test_size_guards_refuse_with_the_size_needed():
    with pytest.raises(ValueError, match="GiB"):
        mk.running_frequencies([0, 1, 2], 10**9)
    with pytest.raises(ValueError, match="GiB"):
        mk.empirical_frequencies(np.zeros((10**3, 2), dtype=int), 10**9)
