"""One law at a time: the slow reference of covbook.markov.cycles' batched evaluation (tests only).

The cycle analysis of :func:`covbook.markov.cycle_records` written as a loop over runs and over
context lengths, one :func:`covbook.markov.markov_kernel` call per law, as the definitions read:
the self-consistency of the final cycle, the break time on a geometric grid with bisection, the
margin at every context length, the gap at detection and the gap along the run afterwards.  The
library evaluates the same laws in batched calls; tests/test_markov_cycles_batched.py compares the
two.  ``benchmarks/bench_repetition.py`` times one against the other.
"""

from __future__ import annotations

import numpy as np
import torch

from covbook import markov as mk
from covbook.markov.cycles import _continued, _follows, _observed_break


def greedy_map(model, freqs, mean_field=None) -> np.ndarray:
    return torch.argmax(mk.markov_kernel(model, freqs, 1.0, mean_field=mean_field), dim=-1).cpu().numpy()


def self_consistent(model, cycle, mean_field=None) -> bool:
    c = np.asarray(cycle)
    return _follows(greedy_map(model, mk.empirical_frequencies(c, model.vocab_size), mean_field), c)


def break_time(model, prefix, cycle, t_max, *, t_min=None, n_grid=48, mean_field=None) -> int | None:
    v = model.vocab_size
    pre, c = np.asarray(prefix, dtype=np.int64), np.asarray(cycle, dtype=np.int64)
    counts_pre = np.bincount(pre, minlength=v).astype(np.float64)  # (V,)
    counts_c = np.bincount(c, minlength=v).astype(np.float64)  # (V,)

    def follows(n: int) -> bool:
        freqs = torch.as_tensor((counts_pre + n * counts_c) / (pre.size + n * c.size))  # (V,)
        return _follows(greedy_map(model, freqs, mean_field), c)

    n_max = (t_max - pre.size) // c.size
    n_min = 1 if t_min is None else max(1, -(-(t_min - pre.size) // c.size))
    if n_max < n_min:
        return None
    grid = np.unique(np.geomspace(n_min, n_max, n_grid).astype(int))
    if not follows(int(grid[0])):
        return int(pre.size + grid[0] * c.size)
    prev = int(grid[0])
    for n in grid:
        if not follows(int(n)):
            lo, hi = prev, int(n)
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if follows(mid) else (lo, mid)
            return int(pre.size + hi * c.size)
        prev = int(n)
    return None


def margin(model, prefix, cycle, t_max, *, t_min=None, mean_field=None) -> float:
    v = model.vocab_size
    pre, c = np.asarray(prefix, dtype=np.int64), np.asarray(cycle, dtype=np.int64)
    t_min = pre.size + c.size if t_min is None else t_min
    x = _continued(pre, c, t_max)  # (t_max,)
    freqs = mk.running_frequencies(torch.as_tensor(x), v)  # (t_max, V)
    worst = np.inf
    for t in range(t_min, t_max):  # context x_1..x_t, next token x_{t+1} = x[t]
        row = mk.markov_kernel(model, freqs[t - 1], 1.0, mean_field=mean_field)[int(x[t - 1])]  # (V,)
        row = row.cpu().double().numpy().copy()
        lead = row[x[t]]
        row[x[t]] = -np.inf
        worst = min(worst, float(lead - row.max()))
    return worst


def gap_along(model, tokens, positions, mean_field=None) -> float:
    """The largest Markov gap along ``tokens`` at ``positions``, one kernel call per position."""
    x = torch.as_tensor(np.asarray(tokens))
    probs = mk.next_token_probs(model, x).cpu()  # (T, V)
    freqs = mk.running_frequencies(x, model.vocab_size)  # (T, V)
    return max(float(mk.tv_distance(probs[t - 1], mk.markov_kernel(model, freqs[t - 1], 1.0,
                                                                    mean_field=mean_field).cpu()[int(x[t - 1])]))
               for t in positions)


def cycle_records(model, runs, prompt_len: int, *, t_detect: int | None = None, self_consistency: bool = True,
                  mean_field=None) -> list[mk.CycleRecord]:
    """:func:`covbook.markov.cycle_records`, run by run and law by law."""
    arr = np.asarray(runs, dtype=np.int64)
    n_cont = arr.shape[1] - prompt_len
    if t_detect is not None:  # the margin and the gap after detection read the kernel at the same laws
        mean_field = mk.cached_mean_field(mean_field)
    out = []
    for s in arr:
        final = mk.find_cycle(s, min_repeats=3, min_length=max(1, n_cont // 4))
        rec = mk.CycleRecord(final=final)
        if final is not None:
            e, p = final
            cyc = s[e:e + p]
            rec.entry, rec.period = max(0, e - prompt_len), p
            rec.simple = len(set(cyc.tolist())) == p
            rec.orbit = mk.least_rotation(cyc)
            if self_consistency:
                rec.self_consistent = self_consistent(model, cyc, mean_field)
        if t_detect is not None:
            t_check = prompt_len + t_detect
            rec.t_check = t_check
            rec.early = mk.find_cycle(s[:t_check], min_repeats=3, min_length=max(1, t_detect // 4))
            if rec.early is not None:
                e, p = rec.early
                rec.early_simple = len(set(s[e:e + p].tolist())) == p
                rec.early_orbit = mk.least_rotation(s[e:e + p])
                rec.observed_break = _observed_break(s, e, p)
                rec.predicted_break = break_time(model, s[:e], s[e:e + p], s.size, t_min=t_check,
                                                 mean_field=mean_field)
                rec.margin = margin(model, s[:e], s[e:e + p], s.size, t_min=t_check, mean_field=mean_field)
                rec.gap = gap_along(model, s[:t_check], range(t_check - p + 1, t_check + 1), mean_field)
                if rec.margin > 0:  # at t_check, the gap at detection itself (one value)
                    last = s.size - 1 if rec.observed_break is None else rec.observed_break
                    at_check = gap_along(model, s[:t_check], [t_check], mean_field)
                    after = range(t_check + 1, last + 1)
                    rec.gap_after = max(at_check, gap_along(model, s[:last], after, mean_field)) if after else at_check
        out.append(rec)
    return out
