"""Chapter 11's memory is bounded: the Garg et al. estimators run on chunks of tasks, with the same numbers."""

from __future__ import annotations

import torch

from covbook import icl
from covbook.experiments import reproductions as rp
from covbook.streams import Streams


def test_chunked_estimates_equal_one_call():
    t = icl.make_regression_tasks(37, 10, rp.GARG_D, seed=3)
    whole = rp._garg_estimates(t.x, t.y, 0.6, chunk=10**6)
    for chunk in (1, 5, 36):
        parts = rp._garg_estimates(t.x, t.y, 0.6, chunk=chunk)
        for name in rp.GARG_LABELS:
            assert parts[name].shape == (37, rp.GARG_D)
            torch.testing.assert_close(parts[name], whole[name], rtol=1e-12, atol=1e-12)


def test_garg_curves_never_hands_an_estimator_more_than_a_chunk(monkeypatch):
    before = rp.garg_curves(garg_tasks=3, garg_tasks_key=40, streams=Streams(0, "11")).measurements
    seen = []
    ols, gd = icl.ols, icl.empirical_gd
    monkeypatch.setattr(rp, "GARG_CHUNK", 16)
    monkeypatch.setattr(rp.icl, "ols", lambda x, y: seen.append(x.shape[0]) or ols(x, y))
    monkeypatch.setattr(rp.icl, "empirical_gd", lambda x, y, eta: seen.append(x.shape[0]) or gd(x, y, eta))
    after = rp.garg_curves(garg_tasks=3, garg_tasks_key=40, streams=Streams(0, "11")).measurements
    assert max(seen) == 16 and 8 in seen  # the key k: 40 tasks as 16 + 16 + 8
    assert after.keys() == before.keys()
    for cid in before:
        assert abs(after[cid]["value"] - before[cid]["value"]) <= 1e-12 * max(1.0, abs(before[cid]["value"]))
