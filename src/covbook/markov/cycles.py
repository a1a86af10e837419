"""Greedy orbits and repetition cycles: detection, the mean-field greedy map, break times.

Xu & Fang (2026), Section 6 (book chapter 09, also used in chapter 10).  Greedy
decoding with a context whose statistics have settled at π iterates the mean-field
greedy map g_π(x) = argmax_y K_π(x, y) on the finite vocabulary, so its cycles are
the attracting orbits behind repetition.  This module finds a periodic tail in a
sequence (:func:`find_cycle`), checks whether a cycle reproduces itself under its own
statistics (:func:`cycle_self_consistent`), predicts when the orbit of the greedy map
at the prompt's statistics breaks (:func:`cycle_break_time`), measures by how much the
kernel's greedy choice leads along a continued cycle (:func:`cycle_margin`) and how far
the model is from the kernel when the cycle is detected (:func:`detection_gap`), and keeps
the per-run bookkeeping (:class:`CycleRecord`, :func:`cycle_records`, :func:`cycle_summary`).
An orbit is one cycle up to rotation (:func:`least_rotation`); :func:`perturbed_returns` kicks
a context that sits on an orbit with random tokens and asks whether greedy decoding returns.

The kernel is read at many laws (every context length of a margin, the grid of a break time);
they are evaluated in batches of laws (:func:`covbook.markov.kernel_rows`, :func:`greedy_map` of
(n, V) laws), so the number of mean-field calls does not grow with the runs or their length.

A greedy prediction from the kernel is trusted only where its margin beats the model's
distance from the kernel: if TV(p, k) <= δ then |(p_y - p_z) - (k_y - k_z)| <= ||p - k||_1 <= 2δ
for any two tokens y, z, so the kernel's argmax is the model's wherever it leads every
other token by more than 2δ.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from covbook._validate import check_nonnegative_int, check_positive_int
from covbook.markov._checks import MeanField, _model_device_dtype, _tokens_np, _vocab_size
from covbook.markov.decoding import greedy_decode
from covbook.markov.frequencies import empirical_frequencies, running_frequencies, tv_distance
from covbook.markov.reduction import _kernel_chunks, kernel_rows, markov_gap, markov_kernel, next_token_probs

__all__ = [
    "find_cycle",
    "least_rotation",
    "perturbed_returns",
    "greedy_map",
    "cycle_self_consistent",
    "cycle_break_time",
    "cycle_margin",
    "detection_gap",
    "CycleRecord",
    "cycle_records",
    "cycle_summary",
]


def find_cycle(tokens: object, min_repeats: int = 2, min_length: int = 1) -> tuple[int, int] | None:
    r"""Detect the cycle a finite sequence ends in: ``(entry, period)`` or ``None``.

    The period p is the *smallest* p >= 1 such that the tail of the sequence is
    p-periodic over at least ``min_repeats`` full periods; the entry is the
    earliest index e (0-based) from which it is:

    .. math:: x_{i+p} = x_i \ \ \forall\, i \in [e, T-p), \qquad
              T - e \ge \max(\text{min\_repeats}\cdot p,\ \text{min\_length}) .

    For an orbit x_{k+1} = f(x_k) of a map on a finite set this returns exactly
    the orbit's tail length μ and cycle length λ once the sequence covers
    μ + min_repeats·λ terms.  A finite sequence can only *suggest* a cycle:
    ``min_repeats`` is how much evidence is required.

    Parameters
    ----------
    tokens : int array, shape (T,)
    min_repeats : int
        Full periods the periodic tail must span (>= 2).
    min_length : int
        Tokens the periodic tail must span at least (e.g. the last quarter of
        a run, so that two equal tokens at the end are not taken for a cycle).

    Returns
    -------
    (entry, period) or None when no period fits.

    Examples
    --------
    >>> find_cycle([5, 1, 2, 3, 1, 2, 3, 1, 2, 3])
    (1, 3)
    >>> find_cycle([0, 1, 2, 3]) is None
    True
    >>> find_cycle([0, 1, 2, 3, 3], min_length=3) is None
    True
    """
    arr = _tokens_np(tokens)
    reps = check_positive_int(min_repeats, "min_repeats")
    if reps < 2:
        raise ValueError(f"min_repeats must be >= 2 (one period is no evidence of a cycle), got {reps}")
    need = check_positive_int(min_length, "min_length")
    n = arr.size
    for p in range(1, n // reps + 1):
        bad = np.flatnonzero(arr[p:] != arr[:-p])  # i with x_{i+p} != x_i
        entry = int(bad[-1]) + 1 if bad.size else 0
        if n - entry >= max(reps * p, need):
            return entry, p
    return None


def least_rotation(cycle: object) -> tuple[int, ...]:
    r"""The orbit of a cycle: its lexicographically least rotation, a key shared by every rotation.

    Two runs that end in one orbit show it from different starting tokens; they are one orbit.

    Examples
    --------
    >>> least_rotation([3, 1, 2]), least_rotation([1, 2, 3]), least_rotation([2, 1])
    ((1, 2, 3), (1, 2, 3), (1, 2))
    """
    c = [int(v) for v in _tokens_np(cycle, "cycle")]
    if not c:
        raise ValueError("cycle must contain at least one token")
    return min(tuple(c[i:] + c[:i]) for i in range(len(c)))


def perturbed_returns(model: torch.nn.Module, cycle: object, *, context_len: int, kick_len: int, n_steps: int,
                      n_kicks: int, generator: torch.Generator) -> np.ndarray:
    r"""Kick a context that sits on an orbit and ask whether greedy decoding returns to it.

    The context is one period c of the cycle repeated to ``context_len`` tokens (the orbit's own
    statistics π_c and a current token on it), followed by ``kick_len`` tokens drawn uniformly
    from the vocabulary (``generator``, on the CPU): the kick moves the current token off the
    orbit and the token frequencies by up to kick_len / (context_len + kick_len) in total
    variation.  Greedy decoding then continues ``n_steps`` tokens; the kick *returns* when the
    continuation ends in the same orbit (:func:`find_cycle` with three periods covering the last
    quarter, the same rule as :func:`cycle_records`, compared by :func:`least_rotation`).

    Several cycles of one model (a list of periods) are kicked in one batched greedy decoding,
    their kicks drawn in the order of the list: the same draws as one call per cycle.

    Parameters
    ----------
    cycle : int array (p,), one period; or a list of n_cycles such periods
    context_len : int >= p, tokens of the cycle before the kick
    kick_len, n_steps, n_kicks : int >= 1

    Returns
    -------
    bool array (n_kicks,), or (n_cycles, n_kicks) for a list of cycles: which kicks returned
    """
    many = isinstance(cycle, (list, tuple)) and len(cycle) > 0 and not np.isscalar(cycle[0])
    cycles = [_tokens_np(c, "cycle") for c in (cycle if many else [cycle])]
    v = _vocab_size(model)
    context_len = check_positive_int(context_len, "context_len")
    for c in cycles:
        if c.size == 0:
            raise ValueError("cycle must contain at least one token")
        if c.max() >= v:
            raise ValueError(f"cycle must be ids in 0..{v - 1}")
        if context_len < c.size:
            raise ValueError(f"context_len must hold one period ({c.size} tokens), got {context_len}")
    kick_len = check_positive_int(kick_len, "kick_len")
    n_steps = check_positive_int(n_steps, "n_steps")
    n_kicks = check_positive_int(n_kicks, "n_kicks")
    if n_steps < 4:
        raise ValueError(f"n_steps must be at least 4 (a cycle covers the last quarter), got {n_steps}")
    prompts = []
    for c in cycles:
        base = torch.as_tensor(_continued(np.empty(0, np.int64), c, context_len))  # (context_len,)
        kicks = torch.randint(0, v, (n_kicks, kick_len), generator=generator)  # (n_kicks, kick_len)
        prompts.append(torch.cat([base.expand(n_kicks, -1), kicks], 1))  # (n_kicks, context_len + kick_len)
    x = torch.cat(prompts)  # (n_cycles n_kicks, context_len + kick_len)
    device = _model_device_dtype(model)[0]
    runs = greedy_decode(model, x.to(device), n_steps).cpu().numpy()[:, x.shape[1]:]  # (n_cycles n_kicks, n_steps)
    out = np.zeros((len(cycles), n_kicks), dtype=bool)
    for i, c in enumerate(cycles):
        key = least_rotation(c)
        for j, run in enumerate(runs[i * n_kicks:(i + 1) * n_kicks]):
            found = find_cycle(run, min_repeats=3, min_length=max(1, n_steps // 4))
            out[i, j] = found is not None and least_rotation(run[found[0]:found[0] + found[1]]) == key
    return out if many else out[0]


def greedy_map(model: torch.nn.Module, freqs: object, *, mean_field: MeanField | None = None) -> torch.Tensor:
    r"""The mean-field greedy map g_π(x) = argmax_y K_π(x, y) (ties: smallest id), shape (V,).

    Greedy decoding with a context whose statistics have settled at π is the
    iteration of this map on the finite vocabulary; its cycles are the
    attracting orbits behind repetition.  Independent of the temperature.
    ``freqs`` of shape (n, V) gives the n maps, shape (n, V), from batched kernel
    calls of :data:`covbook.markov.reduction.LAWS_PER_CALL` laws.
    """
    pi = torch.as_tensor(freqs)
    if pi.ndim < 2:
        return torch.argmax(markov_kernel(model, pi, 1.0, mean_field=mean_field), dim=-1)
    out = torch.empty(pi.shape, dtype=torch.long)  # (n, V)
    for chunk, k in _kernel_chunks(model, pi, 1.0, mean_field=mean_field):  # k: (c, V, V)
        out[chunk] = torch.argmax(k, dim=-1).cpu()
    return out


def cycle_self_consistent(
    model: torch.nn.Module, cycle: object, *, mean_field: MeanField | None = None
) -> bool:
    r"""Does a cycle reproduce itself under its own statistics?

    With π_c the token frequencies of one period c_0..c_{p-1}, the cycle is
    self-consistent when the mean-field greedy map at π_c follows it:
    g_{π_c}(c_i) = c_{i+1 mod p} for every i.  Such a cycle is a fixed point of
    greedy generation (an attracting orbit: once the context is dominated by it,
    it continues); a cycle that fails this is held only by the leftover
    statistics of the prompt and transient, and breaks as they wash out.

    Parameters
    ----------
    cycle : int array, shape (p,), one period of the cycle
    """
    c = _tokens_np(cycle, "cycle")
    if c.size == 0:
        raise ValueError("cycle must contain at least one token")
    return _self_consistent(model, [c], mean_field)[0]


def _self_consistent(model: torch.nn.Module, cycles: list[np.ndarray], mean_field: MeanField | None) -> list[bool]:
    """:func:`cycle_self_consistent` of checked cycles, their greedy maps from one batch of laws."""
    v = _vocab_size(model)
    laws = torch.stack([empirical_frequencies(c, v) for c in cycles])  # (n, V)
    g = greedy_map(model, laws, mean_field=mean_field).numpy()  # (n, V)
    return [_follows(gi, c) for gi, c in zip(g, cycles, strict=True)]


def _follows(g: np.ndarray, cycle: np.ndarray) -> bool:
    return bool(np.all(g[cycle] == np.roll(cycle, -1)))


def cycle_break_time(
    model: torch.nn.Module,
    prefix: object,
    cycle: object,
    t_max: int,
    *,
    t_min: int | None = None,
    n_grid: int = 48,
    mean_field: MeanField | None = None,
) -> int | None:
    r"""Mean-field prediction of when greedy decoding leaves a cycle held by leftover statistics.

    A context made of ``prefix`` (prompt and transient) followed by n copies of
    one period c of a cycle has token frequencies

    .. math:: \pi(n) = \frac{T_0\,\hat\pi_{\text{prefix}} + n\,p\,\hat\pi_c}{T_0 + n p}
              \;\to\; \hat\pi_c \quad (n \to \infty).

    The cycle continues while the mean-field greedy map g_{π(n)} follows it
    (:func:`greedy_map`).  This returns the first context length
    t = T_0 + n p in [``t_min``, ``t_max``] at which it does not (to within one
    period, by bisection between points of a geometric grid of ``n_grid``
    lengths), or ``None`` when it follows the cycle at every grid point.  The
    limit n = ∞ is :func:`cycle_self_consistent`.  Start at ``t_min`` = the
    length up to which the cycle has been seen to hold: the mean field is least
    accurate at short contexts.  The grid is evaluated in one batch of laws, and
    the bisection reads every length between the two grid points that bracket
    the first failure from a second batch.

    Parameters
    ----------
    prefix : int array (T_0,), T_0 >= 0: the tokens before the first full period
    cycle : int array (p,), one period
    t_max : int, longest context considered
    t_min : int, optional, shortest context considered (default T_0 + p)

    Returns
    -------
    int or None
    """
    v = _vocab_size(model)
    pre, c = _tokens_np(prefix, "prefix"), _tokens_np(cycle, "cycle")
    if c.size == 0:
        raise ValueError("cycle must contain at least one token")
    t_max = check_positive_int(t_max, "t_max")
    n_grid = check_positive_int(n_grid, "n_grid")
    if (pre.size and pre.max() >= v) or c.max() >= v:
        raise ValueError(f"prefix and cycle must be ids in 0..{v - 1}")
    if t_min is not None:
        t_min = check_positive_int(t_min, "t_min")
        if t_min > t_max:
            raise ValueError(f"t_min={t_min} must not exceed t_max={t_max}")
    return _break_times(model, [(pre, c, t_max, t_min)], n_grid, mean_field)[0]


def _follow_flags(model: torch.nn.Module, problems: list[tuple], pairs: list[tuple[int, int]],
                  mean_field: MeanField | None) -> list[bool]:
    """Does g_{π_i(n)} follow cycle i, for each (problem i, copies n) of ``pairs``?  One batch of laws."""
    if not pairs:
        return []
    v = _vocab_size(model)
    counts = [(np.bincount(pre, minlength=v).astype(np.float64), np.bincount(c, minlength=v).astype(np.float64))
              for pre, c, *_ in problems]  # (V,), (V,) per problem
    laws = np.stack([(counts[i][0] + n * counts[i][1]) / (problems[i][0].size + n * problems[i][1].size)
                     for i, n in pairs])  # (n_pairs, V): π_i(n)
    g = greedy_map(model, torch.as_tensor(laws), mean_field=mean_field).numpy()  # (n_pairs, V)
    return [_follows(gj, problems[i][1]) for gj, (i, _) in zip(g, pairs, strict=True)]


def _break_times(model: torch.nn.Module, problems: list[tuple], n_grid: int,
                 mean_field: MeanField | None) -> list[int | None]:
    """:func:`cycle_break_time` of checked problems (prefix, cycle, t_max, t_min): two batches of laws in all."""
    grids: dict[int, np.ndarray] = {}
    for i, (pre, c, t_max, t_min) in enumerate(problems):
        n_max = (t_max - pre.size) // c.size
        n_min = 1 if t_min is None else max(1, -(-(t_min - pre.size) // c.size))
        if n_max >= n_min:
            grids[i] = np.unique(np.geomspace(n_min, n_max, n_grid).astype(int))
    pairs = [(i, int(n)) for i, grid in grids.items() for n in grid]
    on_grid = dict(zip(pairs, _follow_flags(model, problems, pairs, mean_field), strict=True))
    out: list[int | None] = [None] * len(problems)
    brackets: dict[int, tuple[int, int]] = {}  # problem: (lo, hi), follows at lo, fails at hi
    for i, grid in grids.items():
        fails = [int(n) for n in grid if not on_grid[i, int(n)]]
        if fails and fails[0] == grid[0]:
            out[i] = int(problems[i][0].size + grid[0] * problems[i][1].size)
        elif fails:
            brackets[i] = (int(grid[grid < fails[0]][-1]), fails[0])
    pairs = [(i, n) for i, (lo, hi) in brackets.items() for n in range(lo + 1, hi)]
    between = dict(zip(pairs, _follow_flags(model, problems, pairs, mean_field), strict=True))
    for i, (lo, hi) in brackets.items():
        while hi - lo > 1:  # the bisection, read from the batch
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if between[i, mid] else (lo, mid)
        out[i] = int(problems[i][0].size + hi * problems[i][1].size)
    return out


def _continued(prefix: np.ndarray, cycle: np.ndarray, length: int) -> np.ndarray:
    """``prefix`` followed by ``cycle`` repeated, ``length`` tokens in all, shape (length,)."""
    reps = -(-max(length - prefix.size, 0) // cycle.size)
    return np.concatenate([prefix, np.tile(cycle, reps)])[:length]


def cycle_margin(
    model: torch.nn.Module,
    prefix: object,
    cycle: object,
    t_max: int,
    *,
    t_min: int | None = None,
    mean_field: MeanField | None = None,
) -> float:
    r"""Smallest lead of the kernel's greedy choice along a cycle continued up to ``t_max`` tokens.

    Let x be ``prefix`` followed by copies of one period c of the cycle, x_1..x_{t_max},
    and π̂_t its running frequencies.  At every context length t in
    [``t_min``, ``t_max`` - 1] the run keeps the cycle if its next token is x_{t+1};
    the mean-field kernel (:func:`markov_kernel`, temperature 1) chooses it with the margin

    .. math:: m_t = K_{\hat\pi_t}(x_t, x_{t+1}) - \max_{y \ne x_{t+1}} K_{\hat\pi_t}(x_t, y),
              \qquad m = \min_{t_{\min} \le t < t_{\max}} m_t .

    m > 0 says the greedy map g_{π̂_t} follows the cycle at every one of these lengths
    (m = 0: a tie somewhere).  Unlike :func:`cycle_break_time` this evaluates every
    context length, each at its own statistics, not a grid of whole periods (in batched
    kernel calls, :func:`covbook.markov.reduction.kernel_rows`).  If the
    model's next-token law is within total variation δ_t of the kernel row at each t
    (the Markov gap, :func:`markov_gap`) and m_t > 2 δ_t, greedy decoding keeps the cycle.

    Parameters
    ----------
    prefix : int array (T_0,), T_0 >= 0: the tokens before the first full period
    cycle : int array (p,), one period, p >= 1
    t_max : int, length of the continued run, > ``t_min``
    t_min : int, optional, first context length considered (default T_0 + p)
    mean_field : callable (model, freqs) -> (V, d_model), optional

    Returns
    -------
    float in [-1, 1]

    Raises
    ------
    ValueError
        On an empty cycle, ids outside the vocabulary, or t_min >= t_max.
    """
    v = _vocab_size(model)
    pre, c = _tokens_np(prefix, "prefix"), _tokens_np(cycle, "cycle")
    if c.size == 0:
        raise ValueError("cycle must contain at least one token")
    if (pre.size and pre.max() >= v) or c.max() >= v:
        raise ValueError(f"prefix and cycle must be ids in 0..{v - 1}")
    t_max = check_positive_int(t_max, "t_max")
    t_min = pre.size + c.size if t_min is None else check_positive_int(t_min, "t_min")
    if t_min >= t_max:
        raise ValueError(f"t_min={t_min} must be below t_max={t_max} (at least one next token to predict)")
    x, rows = _continued_rows(model, [(pre, c, t_max, t_min)], mean_field)[0]
    return _margin(rows, x[t_min:t_max])


def _continued_rows(model: torch.nn.Module, problems: list[tuple],
                    mean_field: MeanField | None) -> list[tuple[np.ndarray, torch.Tensor]]:
    """Per checked problem (prefix, cycle, t_max, t_min): the continued run x (t_max,) and its kernel rows.

    Row j is K_{π̂_t}(x_t, ·) at t = t_min + j, for t_min <= t < t_max, all problems in one batch of laws.
    """
    v = _vocab_size(model)
    runs = [_continued(pre, c, t_max) for pre, c, t_max, _ in problems]  # (t_max,) each
    spans = [(t_min, t_max) for _, _, t_max, t_min in problems]
    laws = torch.cat([running_frequencies(torch.as_tensor(x[:hi - 1]), v)[lo - 1:]
                      for x, (lo, hi) in zip(runs, spans, strict=True)])  # (Σ (t_max - t_min), V)
    current = np.concatenate([x[lo - 1:hi - 1] for x, (lo, hi) in zip(runs, spans, strict=True)])
    rows = kernel_rows(model, laws, current, 1.0, mean_field=mean_field).split([hi - lo for lo, hi in spans])
    return list(zip(runs, rows, strict=True))


def _margin(rows: torch.Tensor, nxt: np.ndarray) -> float:
    """min_t of K_t(x_{t+1}) − max_{y ≠ x_{t+1}} K_t(y), for kernel rows (n, V) and next tokens (n,)."""
    r = rows.double().numpy().copy()  # (n, V)
    at = np.arange(r.shape[0])
    lead = r[at, nxt]  # (n,)
    r[at, nxt] = -np.inf
    return float((lead - r.max(-1)).min())


def detection_gap(
    model: torch.nn.Module, tokens: object, period: int, *, mean_field: MeanField | None = None
) -> float:
    r"""The Markov gap over the last period of a run's prefix: how far the model is from the kernel at detection.

    With ``tokens`` = x_1..x_T the run *up to* the detection step (nothing later is
    read) and p = ``period``,

    .. math:: \delta = \max_{T - p < t \le T}
              \mathrm{TV}\bigl(p(\cdot \mid x_{1:t}),\ K_{\hat\pi_t}(x_t, \cdot)\bigr),

    the largest :func:`markov_gap` over the last p context lengths, one at each token of
    the cycle the run is in.  It is 0 for a one-layer model (the reduction is exact).

    Parameters
    ----------
    tokens : int array (T,), the run's prefix
    period : int, 1 <= period <= T
    mean_field : callable (model, freqs) -> (V, d_model), optional

    Returns
    -------
    float in [0, 1]
    """
    x = _tokens_np(tokens, "tokens")
    p = check_positive_int(period, "period")
    if x.size == 0:
        raise ValueError("tokens must contain at least one token")
    if p > x.size:
        raise ValueError(f"period={p} must not exceed the number of tokens ({x.size})")
    pos = list(range(x.size - p + 1, x.size + 1))
    return float(markov_gap(model, torch.as_tensor(x), pos, mean_field=mean_field).max())


@dataclass
class CycleRecord:
    """What :func:`cycle_records` found in one greedy run (times are 0-based indices of the run).

    ``final`` is (entry, period) of the cycle the run ends in (:func:`find_cycle` with
    three periods covering the last quarter of the continuation), else None; ``entry`` is
    that entry counted in steps after the prompt.  ``simple``: the final cycle visits
    distinct tokens.  ``self_consistent``: :func:`cycle_self_consistent` of the final
    cycle (None when not computed).  ``early``: the cycle present at index ``t_check``
    (same rule on the prefix), ``observed_break``: the first index at which the run
    leaves that cycle (None: it holds to the end), ``predicted_break``:
    :func:`cycle_break_time` of it from t_check on (None: no break on its grid).
    ``margin``: :func:`cycle_margin` of the early cycle continued from t_check to the end
    of the run; ``gap``: :func:`detection_gap` of the run up to t_check (the bound the
    margin must beat twice over, read from the prefix only); ``gap_after``: the largest
    :func:`markov_gap` along the run itself from t_check up to its break or its end (a
    check of that bound after the fact, computed when margin > 0; never used to predict; at
    t_check itself it is the value that enters ``gap``, so gap_after > gap says the gap grew
    after detection, never a rounding difference between two evaluations of one gap).
    ``orbit`` and ``early_orbit``: :func:`least_rotation` of the final and of the early cycle
    (runs that end in one orbit share the key).
    """

    final: tuple[int, int] | None
    entry: int | None = None
    period: int | None = None
    simple: bool | None = None
    self_consistent: bool | None = None
    t_check: int | None = None
    early: tuple[int, int] | None = None
    early_simple: bool | None = None
    observed_break: int | None = None
    predicted_break: int | None = None
    margin: float | None = None
    gap: float | None = None
    gap_after: float | None = None
    orbit: tuple[int, ...] | None = None
    early_orbit: tuple[int, ...] | None = None


def _observed_break(seq: np.ndarray, entry: int, period: int) -> int | None:
    """First index i >= entry + period with seq[i] != seq[i - period], or None."""
    bad = np.flatnonzero(seq[entry + period:] != seq[entry:seq.size - period])
    return int(entry + period + bad[0]) if bad.size else None


#: Runs per batch of :func:`cycle_records`: the laws of one batch (its margins' context lengths, its
#: break times' grids) are held at once, about ``RUNS_PER_BATCH`` · T · V floats for runs of T tokens.
RUNS_PER_BATCH = 64


def cycle_records(model: torch.nn.Module | None, runs: object, prompt_len: int, *, t_detect: int | None = None,
                  self_consistency: bool = True, mean_field: MeanField | None = None) -> list[CycleRecord]:
    r"""Find the cycles greedy runs end in and, optionally, test the mean field's predictions on them.

    For each run (prompt of ``prompt_len`` tokens, then the continuation of length n):
    the final cycle is :func:`find_cycle` with 3 periods covering at least n/4 tokens.
    With a ``model`` and ``self_consistency``, :func:`cycle_self_consistent` is evaluated
    on it.  With ``t_detect``, the cycle already present at t_check = prompt_len +
    t_detect (3 periods covering t_detect/4) is followed to the end of the run and
    compared with :func:`cycle_break_time`, with its :func:`cycle_margin` from t_check on,
    the :func:`detection_gap` at t_check and the gap observed along the run afterwards.

    The runs are taken :data:`RUNS_PER_BATCH` at a time, and each quantity of a batch comes
    from a few batched calls (one batch of laws per quantity, one forward pass per prefix
    length), not one call per run and context length.

    Parameters
    ----------
    model : the model that generated the runs (needed for self-consistency and breaks), or None
    runs : int array (R, T)
    prompt_len : int >= 0
    t_detect : int, optional, 1 <= t_detect < T - prompt_len

    Returns
    -------
    list of :class:`CycleRecord`, one per run
    """
    arr = _tokens_np(runs, "runs", ndim=(2,))
    prompt_len = check_nonnegative_int(prompt_len, "prompt_len")
    n_cont = arr.shape[1] - int(prompt_len)
    if n_cont < 4:
        raise ValueError(f"runs must continue their prompt by at least 4 tokens, got shape {arr.shape} "
                         f"with prompt_len={prompt_len}")
    if t_detect is not None:
        t_detect = check_positive_int(t_detect, "t_detect")
        if t_detect >= n_cont:
            raise ValueError(f"t_detect={t_detect} must be shorter than the continuation ({n_cont} tokens)")
    if model is None and (self_consistency or t_detect is not None):
        raise ValueError("model is needed for self_consistency or t_detect")
    if model is not None and arr.size and arr.max() >= _vocab_size(model):
        raise ValueError(f"runs must be ids in 0..{_vocab_size(model) - 1}, got {arr.max()}")
    out = []
    for i in range(0, arr.shape[0], RUNS_PER_BATCH):
        batch = arr[i:i + RUNS_PER_BATCH]  # (b, T)
        recs = [_final_cycle(s, int(prompt_len), n_cont) for s in batch]
        if self_consistency:
            cyc = [(r, s[r.final[0]:r.final[0] + r.final[1]]) for r, s in zip(recs, batch, strict=True) if r.final]
            for (r, _), ok in zip(cyc, _self_consistent(model, [c for _, c in cyc], mean_field) if cyc else [],
                                  strict=True):
                r.self_consistent = ok
        if t_detect is not None:
            _early_cycles(model, batch, recs, int(prompt_len) + t_detect, t_detect, mean_field)
        out += recs
    return out


def _final_cycle(s: np.ndarray, prompt_len: int, n_cont: int) -> CycleRecord:
    """The record of run ``s`` with its final cycle (no model needed)."""
    rec = CycleRecord(final=find_cycle(s, min_repeats=3, min_length=max(1, n_cont // 4)))
    if rec.final is not None:
        e, p = rec.final
        cyc = s[e:e + p]
        rec.entry, rec.period = max(0, e - prompt_len), p
        rec.simple = len(set(cyc.tolist())) == p
        rec.orbit = least_rotation(cyc)
    return rec


def _early_cycles(model: torch.nn.Module, runs: np.ndarray, recs: list[CycleRecord], t_check: int, t_detect: int,
                  mean_field: MeanField | None) -> None:
    """Fill the early-cycle fields of ``recs`` for ``runs`` (b, T): batched over the runs and context lengths."""
    T = runs.shape[1]
    early = []
    for r, s in zip(recs, runs, strict=True):
        r.t_check = t_check
        r.early = find_cycle(s[:t_check], min_repeats=3, min_length=max(1, t_detect // 4))
        if r.early is not None:
            e, p = r.early
            r.early_simple = len(set(s[e:e + p].tolist())) == p
            r.early_orbit = least_rotation(s[e:e + p])
            r.observed_break = _observed_break(s, e, p)
            early.append((r, s))
    if not early:
        return
    problems = [(s[:r.early[0]], s[r.early[0]:r.early[0] + r.early[1]], T, t_check) for r, s in early]
    for (r, _), t in zip(early, _break_times(model, problems, 48, mean_field), strict=True):
        r.predicted_break = t
    # one kernel row per context length t_check <= t < T of each continued cycle: the margins, and the
    # gap after detection (where the run has not left the cycle it is the continued cycle)
    cont = _continued_rows(model, problems, mean_field)
    for (r, _), (x, rows) in zip(early, cont, strict=True):
        r.margin = _margin(rows, x[t_check:T])
    # the gap at detection: the last period before t_check, from one forward pass of the prefixes
    p_max = max(r.early[1] for r, _ in early)
    gaps = markov_gap(model, torch.as_tensor(np.stack([s[:t_check] for _, s in early])),
                      list(range(t_check - p_max + 1, t_check + 1)), mean_field=mean_field)  # (n, p_max)
    for (r, _), g in zip(early, gaps, strict=True):
        r.gap = float(g[p_max - r.early[1]:].max())
    # the gap along the run after detection, where the margin is positive: at t_check it is the value of the
    # gap at detection (one number, computed once); after t_check, from one forward pass per run length
    lasts: dict[int, list[int]] = {}
    for j, (r, _) in enumerate(early):
        if r.margin > 0:
            r.gap_after = float(gaps[j, -1])
            lasts.setdefault(T - 1 if r.observed_break is None else r.observed_break, []).append(j)
    for last, js in lasts.items():
        if last == t_check:
            continue
        probs = next_token_probs(model, torch.as_tensor(np.stack([early[j][1][:last] for j in js]))).cpu()
        for j, p in zip(js, probs, strict=True):  # p (last, V); kernel rows of t = t_check + 1..last
            after = tv_distance(p[t_check:last], cont[j][1][1:last - t_check + 1])  # (last - t_check,)
            early[j][0].gap_after = max(early[j][0].gap_after, float(after.max()))


def cycle_summary(records: Sequence[CycleRecord]) -> dict[str, float]:
    r"""Counts and shares over :func:`cycle_records` (NaN where a share has no cases).

    Keys: n_runs, n_cycled, frac_cycled, frac_simple_all, frac_consistent, median_entry; with
    early detection also n_early, n_held (held to the end), frac_simple_held, n_pred_hold
    (predicted to hold: margin > 2 gap, the kernel's greedy choice beats the model's
    distance from the kernel at detection), hold_precision (share of those that held),
    n_undecided (0 < margin <= 2 gap: the greedy map follows the cycle, by too little to
    tell), n_undecided_held (of those, held), n_gap_grew (predicted to hold, and the gap
    along the run after detection exceeded the gap at detection), n_gap_reached_margin (of
    those, the gap after detection reached half the margin), n_bound (margin > 2 gap_after:
    the gap measured along the run itself covers the margin) and n_bound_held (of those,
    held; by the total-variation bound every one of them holds), n_broke, n_later
    (broke, predicted break after t_check), n_not_early (of those, broke no earlier than
    predicted), n_at_check (predicted break at t_check) and n_at_check_held.

    .. math:: \text{predicted to hold} \iff m > 2\delta, \qquad
              \text{undecided} \iff 0 < m \le 2\delta,

    m = :func:`cycle_margin`, δ = :func:`detection_gap` (records from :func:`cycle_records`
    with ``t_detect``).
    """
    recs = list(records)
    if not recs or not all(isinstance(r, CycleRecord) for r in recs):
        raise ValueError("records must be a non-empty list of CycleRecord")

    def share(xs: list[bool]) -> float:
        return float(np.mean(xs)) if xs else float("nan")

    cycled = [r for r in recs if r.final is not None]
    early = [r for r in recs if r.early is not None]
    held = [r for r in early if r.observed_break is None]
    if any(r.margin is None or r.gap is None for r in early):
        raise ValueError("records must come from cycle_records with t_detect (an early cycle lacks its margin or gap)")
    pred_hold = [r for r in early if r.margin > 2 * r.gap]
    undecided = [r for r in early if 0 < r.margin <= 2 * r.gap]
    grew = [r for r in pred_hold if r.gap_after is not None and r.gap_after > r.gap]
    reached = [r for r in grew if 2 * r.gap_after >= r.margin]
    bound = [r for r in early if r.gap_after is not None and r.margin > 2 * r.gap_after]
    broke = [r for r in early if r.observed_break is not None]
    later = [r for r in broke if r.predicted_break is not None and r.predicted_break > r.t_check]
    at_check = [r for r in early if r.predicted_break == r.t_check]
    return {
        "n_runs": len(recs), "n_cycled": len(cycled), "frac_cycled": len(cycled) / len(recs),
        "frac_simple_all": share([bool(r.simple) for r in cycled]),
        "frac_consistent": share([bool(r.self_consistent) for r in cycled if r.self_consistent is not None]),
        "median_entry": float(np.median([r.entry for r in cycled])) if cycled else float("nan"),
        "n_early": len(early), "n_held": len(held),
        "frac_simple_held": share([bool(r.early_simple) for r in held]),
        "n_pred_hold": len(pred_hold), "hold_precision": share([r.observed_break is None for r in pred_hold]),
        "n_undecided": len(undecided), "n_undecided_held": sum(r.observed_break is None for r in undecided),
        "n_gap_grew": len(grew), "n_gap_reached_margin": len(reached),
        "n_bound": len(bound), "n_bound_held": sum(r.observed_break is None for r in bound),
        "n_broke": len(broke), "n_later": len(later),
        "n_not_early": sum(r.observed_break >= r.predicted_break for r in later),
        "n_at_check": len(at_check), "n_at_check_held": sum(r.observed_break is None for r in at_check),
    }
