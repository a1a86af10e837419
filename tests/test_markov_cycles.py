"""Tests of covbook.markov.cycles: cycle detection on constructed orbits, the greedy map's self-consistent cycles,
break times of cycles held by leftover statistics, and the per-run bookkeeping."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from covbook import markov as mk

# _one_layer, _two_layer, _one_thread: the fixtures one_layer, two_layer and (autouse) one_thread
from markov_models import (  # noqa: F401
    LookupModel,
    _one_layer,
    _one_thread,
    _two_layer,
    iid_tokens,
    lookup_mean_field,
    tiny_mean_field,
)


def test_find_cycle_hand_cases():
    assert mk.find_cycle([3, 3, 3, 3]) == (0, 1)
    assert mk.find_cycle([0, 1, 0, 1, 0, 1]) == (0, 2)
    assert mk.find_cycle([4, 2, 0, 1, 0, 1, 0]) == (2, 2)  # ends mid-period
    assert mk.find_cycle([0, 1, 2, 3, 4]) is None
    assert mk.find_cycle([1, 2, 1]) is None  # one period and a bit is not evidence
    assert mk.find_cycle([1, 2, 1], min_repeats=2) is None
    assert mk.find_cycle([7, 1, 2, 1, 2, 1, 2], min_repeats=3) == (1, 2)
    assert mk.find_cycle([7, 1, 2, 1, 2], min_repeats=3) is None
    # smallest period wins: period 2 also explains a constant tail, period 1 is returned
    assert mk.find_cycle([0, 1, 5, 5, 5, 5]) == (2, 1)


def _orbit(f: list[int], x0: int, n: int) -> list[int]:
    out = [x0]
    for _ in range(n - 1):
        out.append(f[out[-1]])
    return out


def _rho(f: list[int], x0: int) -> tuple[int, int]:
    seen: dict[int, int] = {}
    x, i = x0, 0
    while x not in seen:
        seen[x] = i
        x, i = f[x], i + 1
    return seen[x], i - seen[x]


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 12).flatmap(lambda n: st.tuples(st.lists(st.integers(0, n - 1), min_size=n, max_size=n),
                                                     st.integers(0, n - 1))))
def test_find_cycle_recovers_orbits_of_maps(case):
    f, x0 = case
    mu, lam = _rho(f, x0)
    orbit = _orbit(f, x0, mu + 3 * lam)
    assert mk.find_cycle(orbit) == (mu, lam)
    assert mk.find_cycle(orbit, min_repeats=3) == (mu, lam)


def test_find_cycle_errors():
    with pytest.raises(ValueError, match="min_repeats"):
        mk.find_cycle([0, 0, 0], min_repeats=1)
    with pytest.raises(ValueError, match="integer token"):
        mk.find_cycle([0.5, 1.0])
    with pytest.raises(ValueError, match="1 dims"):
        mk.find_cycle([[0, 1]])
    with pytest.raises(ValueError, match="non-negative"):
        mk.find_cycle([0, -1, 0])


def test_token_ids_must_be_finite():
    # inf equals its rounding, and cast to int64 it became a large negative id (with a RuntimeWarning)
    with pytest.raises(ValueError, match="integer token ids"):
        mk.find_cycle([1.0, float("inf")])


def test_find_cycle_min_length():
    seq = [0, 1, 2, 3, 4, 5, 5]
    assert mk.find_cycle(seq) == (5, 1)
    assert mk.find_cycle(seq, min_length=3) is None
    assert mk.find_cycle([9] + [1, 2] * 4, min_length=8) == (1, 2)
    with pytest.raises(ValueError, match="min_length"):
        mk.find_cycle(seq, min_length=0)


def test_cycle_self_consistency_on_a_designed_map():
    f = [1, 2, 0, 0]  # the bare map: 0→1→2→0, 3→0
    m = LookupModel(f, c=1.5)
    assert mk.cycle_self_consistent(m, [0, 1, 2], mean_field=lookup_mean_field)
    assert mk.cycle_self_consistent(m, [1, 2, 0], mean_field=lookup_mean_field)
    # the fixed point 3 holds itself by its own statistics although f(3) = 0
    assert mk.cycle_self_consistent(m, [3], mean_field=lookup_mean_field)
    # 0→1→0 is not an orbit of g at its statistics (1 goes to 2): it would break
    assert not mk.cycle_self_consistent(m, [0, 1], mean_field=lookup_mean_field)
    assert mk.greedy_map(m, mk.empirical_frequencies([0, 1], 4), mean_field=lookup_mean_field).tolist() == [1, 2, 0, 0]
    # with c = 2 row 1 ties between 0, 1, 2 and the tie goes to the smallest id: 1→0 closes the 2-cycle
    tie = LookupModel(f, c=2.0)
    assert mk.greedy_map(tie, mk.empirical_frequencies([0, 1], 4), mean_field=lookup_mean_field)[1] == 0
    assert mk.cycle_self_consistent(tie, [0, 1], mean_field=lookup_mean_field)


def test_cycle_self_consistent_rejects_an_empty_cycle(one_layer):
    with pytest.raises(ValueError, match="cycle"):
        mk.cycle_self_consistent(one_layer, [], mean_field=tiny_mean_field)


def test_cycle_break_time_of_a_cycle_held_by_leftover_statistics():
    # F_π(x) = e_1 + 2 π(2) e_0: token 0 repeats while the prefix's token 2 keeps 2π(2) >= 1
    # (a tie goes to 0); after k = 10 copies of token 2 and n copies of 0, π(2) = 10/(10+n):
    # it holds up to n = 10 and breaks at n = 11, i.e. at context length 21
    a = torch.zeros(3, 3, dtype=torch.float64)
    a[0, 2] = 1.0
    m = LookupModel([1, 1, 1], c=2.0, a=a)
    prefix = [2] * 10
    assert mk.cycle_break_time(m, prefix, [0], 100, mean_field=lookup_mean_field) == 21
    assert mk.cycle_break_time(m, prefix, [0], 100, t_min=15, mean_field=lookup_mean_field) == 21
    assert mk.cycle_break_time(m, prefix, [0], 20, mean_field=lookup_mean_field) is None
    assert mk.cycle_break_time(m, prefix, [0], 100, t_min=30, mean_field=lookup_mean_field) == 30
    assert not mk.cycle_self_consistent(m, [0], mean_field=lookup_mean_field)
    # a self-consistent cycle never breaks
    m2 = LookupModel([1, 2, 0], c=1.5)
    assert mk.cycle_break_time(m2, [2, 2], [0, 1, 2], 10_000, mean_field=lookup_mean_field) is None
    with pytest.raises(ValueError, match="ids in"):
        mk.cycle_break_time(m, [5], [0], 100, mean_field=lookup_mean_field)
    with pytest.raises(ValueError, match="at least one"):
        mk.cycle_break_time(m, [2], [], 100, mean_field=lookup_mean_field)


def test_cycle_break_time_rejects_t_min_above_t_max(two_layer):
    with pytest.raises(ValueError, match="t_min"):
        mk.cycle_break_time(two_layer, [0], [1, 2], 10, t_min=20)


def test_cycle_records_on_constructed_runs(one_layer):
    prompt = [0, 1]
    runs = np.array([prompt + [2, 3] * 10, prompt + [0, 1, 2, 3, 0, 2, 1, 3, 0, 3, 2, 1, 1, 2, 0, 3, 3, 0, 2, 1]])
    recs = mk.cycle_records(None, runs, 2, self_consistency=False)
    assert recs[0].final == (2, 2) and recs[0].entry == 0 and recs[0].period == 2 and recs[0].simple
    assert recs[0].orbit == (2, 3) and recs[1].orbit is None and recs[0].early_orbit is None
    assert recs[1].final is None
    summ = mk.cycle_summary(recs)
    assert summ["n_runs"] == 2 and summ["n_cycled"] == 1 and summ["frac_cycled"] == 0.5
    assert math.isnan(summ["frac_consistent"])
    with pytest.raises(ValueError, match="model is needed"):
        mk.cycle_records(None, runs, 2)
    with pytest.raises(ValueError, match="t_detect"):
        mk.cycle_records(one_layer, runs, 2, t_detect=100)


def test_cycle_records_detects_breaks(two_layer):
    g = torch.Generator().manual_seed(0)
    prompts = torch.randint(0, two_layer.vocab_size, (4, 6), generator=g)
    runs = mk.greedy_decode(two_layer, prompts, 60)
    recs = mk.cycle_records(two_layer, runs, 6, t_detect=30, mean_field=tiny_mean_field)
    for r, s in zip(recs, runs.numpy(), strict=True):
        assert r.t_check == 36
        if r.early is not None and r.observed_break is not None:
            e, p = r.early
            assert s[r.observed_break] != s[r.observed_break - p]
            assert np.all(s[e + p:r.observed_break] == s[e:r.observed_break - p])
        if r.early is not None:
            assert r.early_orbit == mk.least_rotation(s[r.early[0]:r.early[0] + r.early[1]])
        # the total-variation bound: a margin above twice the gap measured along the run keeps the cycle
        if r.gap_after is not None and r.margin > 2 * r.gap_after:
            assert r.observed_break is None


def test_cycle_margin_closed_forms():
    # F_π(x) = e_{f(x)} + 1.5 π with f the 3-cycle 0→1→2→0: after one whole period π̂ is uniform and the
    # kernel's choice f(x) leads the two others by (e - 1)/(e + 2)
    m3 = LookupModel([1, 2, 0], c=1.5)
    e = math.e
    uniform = mk.cycle_margin(m3, [], [0, 1, 2], 4, t_min=3, mean_field=lookup_mean_field)
    assert uniform == pytest.approx((e - 1) / (e + 2))
    # held by leftover statistics: every row has logits (2π(2), 1, 0); ten 2s then 0s, so at context
    # length t the next 0 leads by m_t = (e^{20/t} - e)/(e^{20/t} + e + 1), falling in t
    a = torch.zeros(3, 3, dtype=torch.float64)
    a[0, 2] = 1.0
    m = LookupModel([1, 1, 1], c=2.0, a=a)
    prefix = [2] * 10

    def m_t(t: int) -> float:
        return (math.exp(20 / t) - e) / (math.exp(20 / t) + e + 1)

    assert mk.cycle_margin(m, prefix, [0], 15, mean_field=lookup_mean_field) == pytest.approx(m_t(14))
    assert mk.cycle_margin(m, prefix, [0], 21, mean_field=lookup_mean_field) == pytest.approx(0.0, abs=1e-12)  # tie
    assert mk.cycle_margin(m, prefix, [0], 101, t_min=50, mean_field=lookup_mean_field) == pytest.approx(m_t(100))
    # t_min = 10: the context is ten 2s and the next token is the cycle's first 0
    assert mk.cycle_margin(m, prefix, [0], 11, t_min=10, mean_field=lookup_mean_field) == pytest.approx(m_t(10))
    # positive margin up to length 20 exactly where the grid of cycle_break_time finds no break
    assert mk.cycle_break_time(m, prefix, [0], 20, mean_field=lookup_mean_field) is None
    assert mk.cycle_margin(m, prefix, [0], 20, mean_field=lookup_mean_field) > 0
    # a self-consistent cycle keeps a positive margin however long it runs
    assert mk.cycle_margin(m3, [2, 2], [0, 1, 2], 400, mean_field=lookup_mean_field) > 0


def test_cycle_margin_rejects_bad_input():
    m = LookupModel([1, 2, 0], c=1.5)
    with pytest.raises(ValueError, match="t_min"):
        mk.cycle_margin(m, [0], [1, 2], 10, t_min=10, mean_field=lookup_mean_field)
    with pytest.raises(ValueError, match="t_max"):
        mk.cycle_margin(m, [0], [1, 2], 0, mean_field=lookup_mean_field)
    with pytest.raises(ValueError, match="cycle"):
        mk.cycle_margin(m, [0], [], 10, mean_field=lookup_mean_field)
    with pytest.raises(ValueError, match="ids in"):
        mk.cycle_margin(m, [0], [1, 7], 10, mean_field=lookup_mean_field)


def test_detection_gap_is_the_last_period_of_the_markov_gap(one_layer, two_layer):
    x = iid_tokens(1, 40, seed=3)[0]
    # depth one: the reduction is exact, so the model is at the kernel
    assert mk.detection_gap(one_layer, x, 4, mean_field=tiny_mean_field) < 1e-12
    gaps = mk.markov_gap(two_layer, x, mean_field=tiny_mean_field)  # (40,)
    assert mk.detection_gap(two_layer, x, 3, mean_field=tiny_mean_field) == pytest.approx(float(gaps[-3:].max()))
    assert mk.detection_gap(two_layer, x, 40, mean_field=tiny_mean_field) == pytest.approx(float(gaps.max()))
    # only the prefix is read: tokens after it do not change the gap
    assert mk.detection_gap(two_layer, x[:25], 2, mean_field=tiny_mean_field) == pytest.approx(float(gaps[23:25].max()))


def test_detection_gap_rejects_bad_input(two_layer):
    with pytest.raises(ValueError, match="period"):
        mk.detection_gap(two_layer, [0, 1, 2], 4, mean_field=tiny_mean_field)
    with pytest.raises(ValueError, match="period"):
        mk.detection_gap(two_layer, [0, 1, 2], 0, mean_field=tiny_mean_field)
    with pytest.raises(ValueError, match="at least one"):
        mk.detection_gap(two_layer, [], 1, mean_field=tiny_mean_field)


def test_cycle_summary_splits_predictions_by_margin_and_gap():
    def rec(margin: float, gap: float, broke: int | None, gap_after: float | None = None) -> mk.CycleRecord:
        return mk.CycleRecord(final=None, t_check=10, early=(0, 1), observed_break=broke, margin=margin, gap=gap,
                              gap_after=gap_after)

    recs = [rec(0.5, 0.1, None, 0.05), rec(0.3, 0.1, None, 0.2), rec(0.15, 0.1, 12), rec(0.2, 0.1, None),
            rec(-0.1, 0.1, 14), rec(0.4, 0.0, None, 0.0), rec(0.5, 0.2, None, 0.22)]
    s = mk.cycle_summary(recs)
    # margin > 2 gap: 0.5, 0.3, 0.4 (gap 0: any positive margin); the tie 0.2 = 2 x 0.1 is undecided
    assert s["n_pred_hold"] == 4 and s["hold_precision"] == 1.0
    assert s["n_undecided"] == 2 and s["n_undecided_held"] == 1
    # the gap grew after detection in two predictions; in one of them (0.3 vs 2 x 0.2) it reached half the margin
    assert s["n_gap_grew"] == 2 and s["n_gap_reached_margin"] == 1
    # the bound with the gap measured along the run: 0.5 > 2 x 0.05, 0.4 > 0 and 0.5 > 2 x 0.22 (0.3 < 2 x 0.2 is not)
    assert s["n_bound"] == 3 and s["n_bound_held"] == 3
    broken = mk.cycle_summary([rec(0.5, 0.1, 11)])
    assert broken["n_pred_hold"] == 1 and broken["hold_precision"] == 0.0
    nothing = mk.cycle_summary([rec(0.1, 0.1, None)])
    assert nothing["n_pred_hold"] == 0 and math.isnan(nothing["hold_precision"])
    with pytest.raises(ValueError, match="records"):
        mk.cycle_summary([mk.CycleRecord(final=None, t_check=10, early=(0, 1))])


def test_cycle_records_one_layer_margin_predictions_are_exact(one_layer):
    # depth one: greedy decoding iterates the kernel's greedy map exactly (gap 0), so every early cycle with
    # a positive margin over the rest of the run holds to the end, and one with a negative margin breaks
    g = torch.Generator().manual_seed(1)
    prompts = torch.randint(0, one_layer.vocab_size, (12, 5), generator=g)
    runs = mk.greedy_decode(one_layer, prompts, 60)
    recs = mk.cycle_records(one_layer, runs, 5, t_detect=24, mean_field=tiny_mean_field)
    early = [r for r in recs if r.early is not None]
    assert early
    for r in early:
        assert r.gap < 1e-12
        if r.margin > 1e-9:
            assert r.observed_break is None and r.gap_after < 1e-12
        elif r.margin < -1e-9:
            assert r.observed_break is not None


def test_cycle_records_margin_and_gap_match_their_functions(two_layer):
    g = torch.Generator().manual_seed(0)
    prompts = torch.randint(0, two_layer.vocab_size, (4, 6), generator=g)
    runs = mk.greedy_decode(two_layer, prompts, 60).numpy()
    recs = mk.cycle_records(two_layer, runs, 6, t_detect=30, mean_field=tiny_mean_field)
    for r, s in zip(recs, runs, strict=True):
        if r.early is None:
            continue
        e, p = r.early
        assert r.margin == pytest.approx(mk.cycle_margin(two_layer, s[:e], s[e:e + p], s.size, t_min=36,
                                                         mean_field=tiny_mean_field))
        assert r.gap == pytest.approx(mk.detection_gap(two_layer, s[:36], p, mean_field=tiny_mean_field))
        assert (r.gap_after is None) == (r.margin <= 0)


class MapModel(torch.nn.Module):
    """A stand-in whose greedy next token is f(x_t) whatever the context: greedy decoding iterates f."""

    def __init__(self, f: list[int]) -> None:
        super().__init__()
        self.vocab_size, self.f = len(f), torch.tensor(f)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.one_hot(self.f[x], self.vocab_size).double()  # (B, T, V)


def test_least_rotation():
    assert mk.least_rotation([3, 1, 2]) == mk.least_rotation([2, 3, 1]) == (1, 2, 3)
    assert mk.least_rotation([2, 1, 3]) == (1, 3, 2)  # the other orientation is another orbit
    assert mk.least_rotation(np.array([5])) == (5,)
    with pytest.raises(ValueError, match="cycle"):
        mk.least_rotation([])


def test_perturbed_returns_to_the_only_cycle_of_a_map():
    # f = x + 1 mod 5 has one cycle, which every start reaches: every kick returns
    m, g = MapModel([1, 2, 3, 4, 0]), torch.Generator().manual_seed(0)
    got = mk.perturbed_returns(m, [2, 3, 4, 0, 1], context_len=10, kick_len=3, n_steps=40, n_kicks=6, generator=g)
    assert got.shape == (6,) and got.all()


def test_perturbed_returns_only_from_its_basin():
    # f(x) = x: every token is its own fixed point, so a kick returns exactly when its last token is the cycle's
    m, g = MapModel([0, 1, 2, 3]), torch.Generator().manual_seed(1)
    got = mk.perturbed_returns(m, [2], context_len=8, kick_len=2, n_steps=16, n_kicks=64, generator=g)
    last = torch.randint(0, 4, (64, 2), generator=torch.Generator().manual_seed(1))[:, -1].numpy()
    assert np.array_equal(got, last == 2) and 0 < got.sum() < 64


@pytest.mark.parametrize(("kw", "match"), [
    (dict(context_len=1), "context_len"), (dict(kick_len=0), "kick_len"), (dict(n_steps=3), "n_steps"),
    (dict(n_kicks=0), "n_kicks"), (dict(cycle=[7]), "cycle"), (dict(cycle=[]), "cycle"),
])
def test_perturbed_returns_bad_input(kw, match):
    args = dict(cycle=[0, 1], context_len=4, kick_len=2, n_steps=8, n_kicks=2, generator=torch.Generator())
    args.update(kw)
    cycle = args.pop("cycle")
    with pytest.raises(ValueError, match=match):
        mk.perturbed_returns(MapModel([1, 0, 2]), cycle, **args)
