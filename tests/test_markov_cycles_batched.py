"""The batched evaluation of the Markov reduction against one law at a time: the mean field and the kernel
over a batch of laws, and cycle_records against the reference in tests/cycles_reference.py.

Same numbers: every integer, bool and tuple field (cycles, entries, periods, orbits, self-consistency,
observed and predicted breaks) is equal, and every float (margins, gaps) agrees to 1e-12.  Not bit for bit:
a batched matrix product puts the rows of several laws into one product, whose blocking changes the
order of floating-point additions (rounding of about 1e-16 in a probability).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

import cycles_reference as ref
from covbook import markov as mk
from covbook.markov import cycles, reduction
from covbook.transformer import CausalTransformer, mean_field, mean_field_discrete, mean_field_logit_variances

# _one_thread: the (autouse) fixture one_thread
from markov_models import _one_thread  # noqa: F401

FLOATS = ("margin", "gap", "gap_after")
TOL = 1e-12  # rounding of batched matrix products (module docstring)


def _model(seed: int, vocab: int = 6, n_layers: int = 2) -> CausalTransformer:
    return CausalTransformer(vocab_size=vocab, d_model=8, n_layers=n_layers, logit_scale=1.5, seed=seed)


def _runs(model: CausalTransformer, n: int, prompt_len: int, steps: int, seed: int) -> np.ndarray:
    prompts = torch.randint(0, model.vocab_size, (n, prompt_len), generator=torch.Generator().manual_seed(seed))
    return mk.greedy_decode(model, prompts, steps).numpy()  # (n, prompt_len + steps)


def _laws(n: int, vocab: int, seed: int) -> torch.Tensor:
    """n laws, some with zero weights (each pattern of the batch once or more)."""
    g = torch.Generator().manual_seed(seed)
    w = torch.rand(n, vocab, generator=g, dtype=torch.float64)  # (n, V)
    w[::3, 1] = 0.0
    w[1::4, :2] = 0.0
    return w / w.sum(-1, keepdim=True)


def test_mean_field_of_a_batch_of_laws_is_each_laws_mean_field():
    m = _model(0, vocab=5)
    w = _laws(9, 5, seed=1)  # (9, 5)
    tokens = torch.arange(5)
    batch = mean_field(m, tokens, w, tokens)  # (L+1, 9, 5, d)
    one = torch.stack([mean_field(m, tokens, wi, tokens) for wi in w], dim=1)
    assert batch.shape == (3, 9, 5, 8)
    torch.testing.assert_close(batch, one, rtol=0, atol=TOL)
    torch.testing.assert_close(mean_field_discrete(m, w), one[-1], rtol=0, atol=TOL)
    var = mean_field_logit_variances(m, tokens, w, tokens)  # (L, 9, 5)
    torch.testing.assert_close(var, torch.stack([mean_field_logit_variances(m, tokens, wi, tokens) for wi in w], 1),
                               rtol=0, atol=TOL)
    # a zero weight drops its support point: the law equals the mean field on the other points
    kept = torch.tensor([2, 3, 4])
    torch.testing.assert_close(batch[:, 1], mean_field(m, kept, w[1, 2:], tokens), rtol=0, atol=TOL)


def test_mean_field_refuses_a_batch_with_an_empty_law():
    m = _model(0, vocab=3)
    with pytest.raises(ValueError, match="every row"):
        mean_field_discrete(m, torch.tensor([[0.5, 0.5, 0.0], [0.0, 0.0, 0.0]]))
    with pytest.raises(ValueError, match=r"\(B, 3\)"):
        mean_field_discrete(m, torch.ones(2, 2, 3))


def test_markov_kernel_of_a_batch_in_small_calls(monkeypatch):
    m = _model(1)
    w = _laws(11, 6, seed=2)
    one = torch.stack([mk.markov_kernel(m, wi, 0.7) for wi in w])  # (11, V, V)
    calls = []

    def counting(model, freqs):
        calls.append(freqs.shape[0])
        return mean_field_discrete(model, freqs)

    monkeypatch.setattr(reduction, "LAWS_PER_CALL", 4)
    got = mk.markov_kernel(m, w, 0.7, mean_field=counting)
    assert calls == [4, 4, 3]
    torch.testing.assert_close(got, one, rtol=0, atol=TOL)
    rows = mk.kernel_rows(m, w, torch.arange(11) % 6, 0.7)  # (11, V)
    torch.testing.assert_close(rows, one[torch.arange(11), torch.arange(11) % 6], rtol=0, atol=TOL)
    assert torch.equal(mk.greedy_map(m, w), torch.stack([mk.greedy_map(m, wi) for wi in w]))


def test_kernel_rows_bad_input():
    m = _model(1)
    w = _laws(3, 6, seed=2)
    with pytest.raises(ValueError, match="current"):
        mk.kernel_rows(m, w, [[0, 1, 2]])
    with pytest.raises(ValueError, match="freqs"):
        mk.kernel_rows(m, w, [0, 1])
    with pytest.raises(ValueError, match="freqs"):
        mk.markov_kernel(m, w[None])


def test_cached_mean_field_answers_a_batch_from_what_it_has():
    m = _model(2)
    w = _laws(6, 6, seed=3)
    seen = []

    def counting(model, freqs):
        seen.append(freqs.shape[0])
        return mean_field_discrete(model, freqs)

    mf = mk.cached_mean_field(counting)
    first = mf(m, w[:4])
    both = mf(m, torch.cat([w[2:], w[2:3]]))  # two seen, two new, one repeated
    assert seen == [4, 2]
    assert torch.equal(both[:2], first[2:]) and torch.equal(both[4], first[2])
    assert torch.equal(both[2:4], mean_field_discrete(m, w[4:]))


@pytest.mark.parametrize("small", [False, True])
def test_cycle_records_are_the_one_law_reference(monkeypatch, small):
    if small:  # the batches of runs and of laws in small pieces: the same records
        monkeypatch.setattr(cycles, "RUNS_PER_BATCH", 2)
        monkeypatch.setattr(reduction, "LAWS_PER_CALL", 3)
    n_early = n_after = 0
    for seed in range(3):
        m = _model(seed)
        runs = _runs(m, 5, 4, 60, seed)
        got = mk.cycle_records(m, runs, 4, t_detect=24)
        want = ref.cycle_records(m, runs, 4, t_detect=24)
        for a, b in zip(got, want, strict=True):
            da, db = dataclasses.asdict(a), dataclasses.asdict(b)
            for k in FLOATS:
                x, y = da.pop(k), db.pop(k)
                assert (x is None) == (y is None) and (x is None or abs(x - y) <= TOL), k
            assert da == db
        assert mk.cycle_summary(got) == pytest.approx(mk.cycle_summary(want), nan_ok=True)
        # the gap after detection starts from the gap at detection's own value at t_check: with period 1
        # that value is the gap, so the gap after detection is never below it (not even by rounding)
        assert all(r.gap_after >= r.gap for r in got if r.gap_after is not None and r.early[1] == 1)
        n_early += sum(r.early is not None for r in got)
        n_after += sum(r.gap_after is not None for r in got)
    assert n_early >= 5 and n_after >= 2  # the comparison covers early cycles, their margins and gaps


def test_cycle_records_calls_do_not_grow_with_runs_or_steps():
    m = _model(4)

    def calls_for(n_runs: int, steps: int) -> int:
        n = 0

        def counting(model, freqs):
            nonlocal n
            n += 1
            return mean_field_discrete(model, freqs)

        mk.cycle_records(m, _runs(m, n_runs, 4, steps, seed=5), 4, t_detect=steps // 2, mean_field=counting)
        return n

    # per batch of runs: self-consistency, the break-time grid, its bisection, the margins, the detection gap
    assert calls_for(3, 40) <= 5 and calls_for(12, 120) <= 5


def test_perturbed_returns_of_several_cycles_in_one_decoding():
    m = _model(6)
    cyc = [np.array([0, 1]), np.array([3]), np.array([2, 4, 5])]
    kw = dict(context_len=12, kick_len=3, n_steps=24, n_kicks=5)
    one = [mk.perturbed_returns(m, c, generator=g, **kw) for g in [torch.Generator().manual_seed(7)] for c in cyc]
    many = mk.perturbed_returns(m, cyc, generator=torch.Generator().manual_seed(7), **kw)
    assert many.shape == (3, 5) and np.array_equal(many, np.stack(one))
    with pytest.raises(ValueError, match="cycle"):
        mk.perturbed_returns(m, [np.array([0]), np.array([9])], generator=torch.Generator(), **kw)
