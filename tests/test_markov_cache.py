"""covbook.markov.cached_mean_field: one mean-field computation per frequency vector, same results."""

from __future__ import annotations

import torch

from covbook import markov as mk
from covbook.transformer import CausalTransformer


def test_cache_gives_identical_results_and_computes_each_law_once():
    model = CausalTransformer(vocab_size=4, d_model=8, n_layers=2, seed=1)
    x = torch.randint(0, 4, (2, 40), generator=torch.Generator().manual_seed(0))
    pos = [5, 10, 20, 40]
    calls = []

    def counting(m, freqs):
        calls.append(freqs.clone())
        return mk.reduction._default_mean_field(m, freqs)

    mf = mk.cached_mean_field(counting)
    gap = mk.markov_gap(model, x, pos, mean_field=mf)
    fp = mk.fixed_point_residual(model, x, pos, start=3, mean_field=mf)
    assert len(calls) == 2 * len(pos)  # the fixed-point residual reuses every kernel of the gap
    assert torch.equal(gap, mk.markov_gap(model, x, pos))
    assert torch.equal(fp, mk.fixed_point_residual(model, x, pos, start=3))
