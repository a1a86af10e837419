"""Tests of covbook.markov.metrics: seq-rep-n, distinct-n, rep/l and repetition summaries on hand-computed sequences."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from covbook import markov as mk


def test_seq_rep_n_pure_cycle_and_no_repetition():
    cyc = [0, 1, 2] * 10  # T = 30, period 3
    for n in (1, 2, 4):
        assert mk.seq_rep_n(cyc, n) == pytest.approx(1 - 3 / (30 - n + 1))
    assert mk.seq_rep_n(list(range(12)), 4) == 0.0
    assert mk.seq_rep_n([5] * 6, 2) == pytest.approx(1 - 1 / 5)
    # batch: mean of the rows
    assert mk.seq_rep_n([[0, 1, 2, 3], [1, 1, 1, 1]], 2) == pytest.approx((0 + 2 / 3) / 2)


def test_distinct_n_pools_sequences():
    assert mk.distinct_n([0, 1, 2] * 10, 2) == pytest.approx(1 - mk.seq_rep_n([0, 1, 2] * 10, 2))
    # two identical runs: distinct-n halves, per-run seq-rep-n does not move
    run = [0, 1, 2, 3]
    assert mk.distinct_n([run, run], 2) == pytest.approx(0.5)
    assert mk.seq_rep_n([run, run], 2) == 0.0
    assert mk.distinct_n([[0, 1, 2], [4, 5]], 2) == 1.0  # ragged lists are fine


def test_rep_l_hand_computed_and_ties():
    targets = [0, 1, 2, 0, 1, 2]
    preds = [1, 2, 0, 1, 2, 0]  # a perfect cyclic predictor
    # window 1: the prediction never equals the previous token; window 2: it does from
    # 0-based t = 2 on (x̂_2 = 0 ∈ {0, 1}, x̂_3 = 1 ∈ {1, 2}, ...), 4 of 6 positions
    assert mk.rep_l(preds, targets, 1) == 0.0
    assert mk.rep_l(preds, targets, 2) == pytest.approx(4 / 6)
    assert mk.rep_l([1, 1, 1, 1], [0, 1, 2, 3], 3) == pytest.approx(2 / 4)  # t = 2, 3 see token 1
    # scores with a tie: argmax takes the smallest id
    scores = torch.tensor([[0.0, 0.0, 0.0], [0.3, 0.3, 0.1], [0.1, 0.5, 0.5]], dtype=torch.float64)
    assert mk.rep_l(scores, [0, 1, 2], 2) == pytest.approx(2 / 3)  # preds 0, 0, 1
    assert mk.rep_l([[0, 0], [1, 1]], [[0, 0], [0, 1]], 1) == pytest.approx(1 / 4)  # only row 0, t = 1


def test_metric_errors():
    with pytest.raises(ValueError, match="at least n"):
        mk.seq_rep_n([0, 1], 3)
    with pytest.raises(ValueError, match="positive integer"):
        mk.seq_rep_n([0, 1], 0)
    with pytest.raises(ValueError, match="shape"):
        mk.rep_l([0, 1, 2], [0, 1], 2)
    with pytest.raises(ValueError, match="finite"):
        mk.rep_l([[np.nan, 1.0]], [0], 1)
    with pytest.raises(ValueError, match="at least n"):
        mk.distinct_n([[0, 1, 2], [0]], 2)


def test_repetition_metrics():
    m = mk.repetition_metrics([[0, 1, 0, 1], [1, 1, 1, 1]], 2, n=2)
    assert m["seq_rep"] == pytest.approx(mk.seq_rep_n([[0, 1, 0, 1], [1, 1, 1, 1]], 2))
    assert m["distinct"] == pytest.approx(0.5) and m["between"] == pytest.approx(0.5)
