r"""Chapter 09, generation as a reinforced Markov chain (``thm-09-markov``; the paper's Section 6).

In a causal transformer without positional encoding the next-token law is, up to
:math:`O_P(t^{-1/2})`, the mean-field kernel at the running token frequencies,

.. math:: p(\cdot\mid x_{1:t}) \approx K_{\hat\pi_t}(x_t,\cdot)
          = \operatorname{softmax}\bigl(W_{\rm out}F_{\hat\pi_t}(x_t)/\tau\bigr),

exactly at depth one.  Greedy decoding iterates a map on a finite vocabulary and ends in cycles;
low temperatures concentrate the chain on few tokens.  The chapter's three experiments, on random
models (:func:`random_model`):

* :func:`markov_gap_rates`: the Markov gap and the black-box shuffle test against the context
  length at depths 1, 2, 3 (parts 1 and 2 of the theorem);
* :func:`greedy_cycles`: greedy runs end in cycles, and the mean field predicts which hold (part 3);
* :func:`temperature_sweep`: entropy, several attractors, the fixed point
  :math:`\pi^* = \pi^* K_{\pi^*}` and repetition metrics against the temperature.

Prompts, contexts and permutations come from the chapter's one CPU stream ``draws``, passed from
experiment to experiment in the chapter's order (``draws=``); models from ``gap-models`` and
``cycle-models``; sampling from ``sampling`` on the model's device.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from covbook._validate import check_positive_float, check_positive_ints
from covbook.experiments.result import RandomStreams, Result
from covbook.markov import (
    CycleRecord,
    MeanField,
    cached_mean_field,
    cycle_records,
    cycle_self_consistent,
    cycle_summary,
    empirical_frequencies,
    entropy,
    entropy_rate,
    fixed_point_residual,
    greedy_decode,
    greedy_map,
    least_rotation,
    markov_gap,
    markov_kernel,
    next_token_probs,
    perturbed_returns,
    rep_l,
    repetition_metrics,
    running_frequencies,
    shuffle_test,
    within_between_tv,
)
from covbook.rules import quantile
from covbook.stats import mean_with_se, slope_with_group_se
from covbook.token_laws import flat_dirichlet
from covbook.transformer import CausalTransformer, ModelBatch, generate

__all__ = ["CHAPTER", "random_model", "MarkovGapRates", "markov_gap_rates", "GreedyCycles",
           "greedy_cycles", "TemperatureSweep", "temperature_sweep", "SWEEP_KEYS", "measure_above", "counted",
           "fit_bands", "fixed_point_bands", "pooled_contrast", "control_cycle"]

CHAPTER = "09"

#: The shortest context length of the slope fits in :func:`markov_gap_rates`.
FIT_FROM = 32
#: Geometric bands of context lengths in a slope fit (:func:`fit_bands`).
N_BANDS = 8
#: Lengths per band at which the Markov gap is read (one kernel row each; the model's law is one forward pass).
GAP_PER_BAND = 8
#: Lengths per band at which the shuffle test is read (each a forward pass of a shuffled context of that length).
SHUFFLE_PER_BAND = 2
#: Short context lengths read for the figure only (before the asymptotic regime; not fitted).
SHORT = np.array([4, 8, 16])
#: Queries per attention block of the chapter's random models: blocks of 128 keep a T × T attention in cache.
ATTN_CHUNK = 128
#: Random kicks per self-consistent orbit (and per control cycle) in ``cycles_attract``.
KICKS = 4
#: Draws of a control cycle (:func:`control_cycle`) before an orbit is left without one.
CONTROL_TRIES = 32
#: What :func:`temperature_sweep` records per temperature and model (greedy: no H, h_kernel, h_model).
SWEEP_KEYS = ("H", "h_kernel", "h_pred", "h_model", "within", "between", "seq_rep", "rep_l", "distinct")


def random_model(n_layers: int, model_seed: int, *, vocab: int, d_model: int, logit_scale: float = 1.0,
                 device: str | torch.device = "cpu") -> CausalTransformer:
    """A random causal transformer without positional encoding (float64), initialised from ``model_seed``."""
    return CausalTransformer(vocab_size=vocab, d_model=d_model, n_layers=n_layers, logit_scale=logit_scale,
                             seed=model_seed, attn_chunk=ATTN_CHUNK).to(device)


def measure_above(out: Result, cid: str, value: float, *, prediction: float, se: float, dof: int,
                   significance: bool, **extra: object) -> None:
    r"""Measure an effect claimed to lie above ``prediction``: as a significance, or its direction only.

    With ``significance`` (the profiles whose sizes give the test power) the window is
    :math:`[p + k\,\mathrm{SE}, \infty)`, which excludes p: the effect is established at the book's
    level.  Without it (smoke) the window is :math:`[p - k\,\mathrm{SE}, \infty)`: the direction only,
    a window that contains p.  k is the Student-t quantile at ``dof`` (:func:`covbook.rules.quantile`).
    """
    k = quantile(dof)
    lower = prediction + k * se if significance else prediction - k * se
    out.measure(cid, value, prediction=prediction, se=se, dof=dof, lower=lower,
                test="a significance test" if significance else "its direction only", **extra)


def counted(n: float, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun`` in agreement, for the prose: "1 step", "3 steps".

    Examples
    --------
    >>> counted(1, "orbit"), counted(0, "orbit"), counted(2.0, "step"), counted(5, "copy", "copies")
    ('1 orbit', '0 orbits', '2 steps', '5 copies')
    """
    n = int(n) if float(n).is_integer() else n
    return f"{n} {noun if n == 1 else (plural or noun + 's')}"


def _draws(streams: RandomStreams, draws: torch.Generator | None) -> torch.Generator:
    """The chapter's shared CPU stream ``draws`` (a fresh one when the caller passes none)."""
    return streams.torch_generator("draws") if draws is None else draws


# --------------------------------------------------------------------------------------------
# Experiment 1: the Markov gap and the shuffle test


def fit_bands(t_max: int, per_band: int, t_min: int = FIT_FROM) -> tuple[list[np.ndarray], np.ndarray]:
    r"""The context lengths a slope fit reads: :data:`N_BANDS` geometric bands from ``t_min`` to ``t_max``.

    Band j is [e_j, e_{j+1}) with e = geomspace(t_min, t_max + 1, N_BANDS + 1) rounded down; it is read at
    ``per_band`` evenly spaced lengths (fewer where the band holds fewer).  A fit takes the mean of a quantity
    over each band's lengths (and over the contexts) against the band's centre exp(mean log t): for a power
    law :math:`c\,t^{b}` the band means are :math:`c' t_j^{b}`, so the log-log slope is b, read from many
    lengths instead of one per band.  Returns (the lengths of each band, the band centres (n_bands,)).
    """
    edges = np.unique(np.geomspace(t_min, t_max + 1, N_BANDS + 1).astype(int))  # (n_bands + 1,)
    bands = [np.unique(np.linspace(lo, hi - 1, per_band).round().astype(int)) for lo, hi in zip(edges[:-1], edges[1:])]
    return bands, np.array([np.exp(np.log(b).mean()) for b in bands])


def _band_means(values: np.ndarray, read: np.ndarray, bands: list[np.ndarray]) -> np.ndarray:
    """Means (rows, n_bands) over each band's lengths of ``values`` (rows, n_read) read at the lengths ``read``."""
    at = {int(t): j for j, t in enumerate(read)}
    return np.stack([values[:, [at[int(t)] for t in b]].mean(1) for b in bands], 1)


@dataclass
class MarkovGapRates(Result):
    """The Markov gap and the shuffle test along iid contexts, per depth L = 1, 2, 3.

    ``gaps[L]`` and ``shuffles[L]`` have shape (models · contexts per model, n_t): total variations at the
    short lengths :data:`SHORT` and, where ``fit`` is true, their means over the bands of :func:`fit_bands`
    (``checkpoints``: the lengths, or the bands' centres).
    """

    checkpoints: np.ndarray  # (n_t,)
    fit: np.ndarray  # (n_t,) bool
    gaps: dict[int, np.ndarray] = field(repr=False)
    shuffles: dict[int, np.ndarray] = field(repr=False)

    def plot(self, axes: object) -> None:
        """Left: the Markov gap, right: the shuffle test, at L = 2, 3 with fitted lines and t^{-1/2}."""
        axes = np.ravel(axes)
        t, fit = self.checkpoints, self.fit
        for ax, data, title in ((axes[0], self.gaps, "Markov gap"), (axes[1], self.shuffles, "shuffle test")):
            for L in (2, 3):
                m = data[L].mean(0)  # (n_t,)
                b, c = np.polyfit(np.log(t[fit]), np.log(m[fit]), 1)
                ax.loglog(t, m, "o", ms=4, color=f"C{L}", label=f"L = {L} (slope {b:.2f})")
                ax.loglog(t[fit], np.exp(c) * t[fit] ** b, "-", color=f"C{L}", lw=1)
            ax.loglog(t, 0.3 * t**-0.5, "k--", lw=0.8, label=r"$\propto t^{-1/2}$")
            ax.set(xlabel="context length $t$", title=f"{title} (L = 1: max {data[1].max():.1e})")
            ax.legend()
        axes[0].set_ylabel("total variation")


def markov_gap_rates(*, vocab: int, d_model: int, logit_scale: float, gap_models: int, gap_seqs: int,
                     t_gap: int, streams: RandomStreams, device: str | torch.device = "cpu",
                     draws: torch.Generator | None = None) -> MarkovGapRates:
    r"""Markov gap :math:`\mathrm{TV}(p(\cdot\mid x_{1:t}), K_{\hat\pi_t}(x_t,\cdot))` and shuffle test at L = 1, 2, 3.

    Per depth, ``gap_models`` random models (three at L = 1, where the reduction is exact), each
    read along ``gap_seqs`` contexts of ``t_gap`` iid tokens from a flat-Dirichlet law.  The gap is read
    at :data:`GAP_PER_BAND` lengths and the shuffle test at :data:`SHUFFLE_PER_BAND` lengths of each band
    of :func:`fit_bands` (t ≥ :data:`FIT_FROM`; one forward pass gives the model's law at every length, a
    shuffled context costs a pass of its own), and both at the short lengths :data:`SHORT` for the
    figure.  Measures ``gap_L1_max`` and ``shuffle_L1_max`` (zero to rounding) and the log-log slopes
    ``{gap,shuffle}_slope_L{2,3}`` (predicted −1/2) of the band means, with a jackknife SE over models
    (the contexts of one model share its weights).

    Raises ``ValueError`` unless the sizes are positive integers and ``t_gap`` ≥ 4 · FIT_FROM (the bands
    must span a factor of four).
    """
    check_positive_ints(vocab=vocab, d_model=d_model, gap_models=gap_models, gap_seqs=gap_seqs, t_gap=t_gap)
    if t_gap < 4 * FIT_FROM:
        raise ValueError(f"t_gap must be at least {4 * FIT_FROM} (bands of context lengths from {FIT_FROM} "
                         f"spanning a factor of four), got {t_gap}")
    if gap_models < 2:
        raise ValueError(f"gap_models must be at least 2 (the SE is over models), got {gap_models}")
    gap_bands, centres = fit_bands(t_gap, GAP_PER_BAND)
    shuffle_bands, shuffle_centres = fit_bands(t_gap, SHUFFLE_PER_BAND)
    read_gap = np.unique(np.concatenate([SHORT, *gap_bands]))  # (n_read,)
    read_shuffle = np.unique(np.concatenate([SHORT, *shuffle_bands]))
    gen = _draws(streams, draws)
    gaps, shuffles, raw_max = {}, {}, {}
    for L in (1, 2, 3):
        g_rows, s_rows = [], []
        # depth one is exact (an identity to rounding): three models check it
        for i in range(gap_models if L > 1 else min(gap_models, 3)):
            model = random_model(L, streams.seed_for("gap-models", (L, i)), vocab=vocab, d_model=d_model,
                                 logit_scale=logit_scale, device=device)
            x = torch.multinomial(flat_dirichlet(vocab, gen).expand(gap_seqs, vocab), t_gap, replacement=True,
                                  generator=gen)  # (gap_seqs, t_gap)
            probs = next_token_probs(model, x)  # (gap_seqs, t_gap, V): one pass serves the gap and the shuffle test
            g_rows.append(markov_gap(model, x, read_gap, probs=probs).numpy())  # (gap_seqs, n_read)
            s_rows.append(shuffle_test(model, x, read_shuffle, generator=gen,
                                       probs=probs).numpy())  # (gap_seqs, n_read')
        g, sh = np.concatenate(g_rows), np.concatenate(s_rows)
        raw_max[L] = (g.max(), sh.max())
        gaps[L] = np.concatenate([g[:, :len(SHORT)], _band_means(g, read_gap, gap_bands)], 1)  # (rows, n_t)
        shuffles[L] = np.concatenate([sh[:, :len(SHORT)], _band_means(sh, read_shuffle, shuffle_bands)], 1)
    checkpoints = np.concatenate([SHORT, centres]).astype(float)  # (n_t,)
    fit = np.arange(checkpoints.size) >= len(SHORT)
    out = MarkovGapRates(checkpoints, fit, gaps, shuffles)
    for name, value in dict(vocab=vocab, d_model=d_model, gap_models=gap_models, gap_seqs=gap_seqs,
                            t_gap=t_gap, n_bands=len(gap_bands), gap_per_band=GAP_PER_BAND,
                            shuffle_per_band=SHUFFLE_PER_BAND, fit_from=FIT_FROM).items():
        out.glue(name, value)
    out.measure("gap_L1_max", raw_max[1][0])
    out.measure("shuffle_L1_max", raw_max[1][1])
    groups = np.repeat(np.arange(gap_models), gap_seqs)  # (gap_models * gap_seqs,)
    for L in (2, 3):
        for name, data, t in (("gap", gaps, centres), ("shuffle", shuffles, shuffle_centres)):
            slope, se, dof = slope_with_group_se(t, data[L][:, fit], groups)
            out.measure(f"{name}_slope_L{L}", slope, prediction=-0.5, se=se, dof=dof, L=L,
                        gap_models=gap_models, gap_seqs=gap_seqs)
    return out


# --------------------------------------------------------------------------------------------
# Experiment 2: greedy decoding ends in cycles


@dataclass
class GreedyCycles(Result):
    """The cycles of greedy runs (:class:`covbook.markov.CycleRecord` per run) and their summary."""

    records: list[CycleRecord] = field(repr=False)
    summary: dict[str, float]
    vocab: int
    t_detect: int
    t_check: int  # prompt_len + t_detect: the detection index
    t_total: int  # prompt_len + t_greedy: the run length

    def plot(self, axes: object) -> None:
        """Entry times, periods (dashed: V) and observed against predicted break times (dashed: equality).

        ``axes``: three axes, or a 2 × 2 grid whose fourth panel is removed.
        """
        axes = np.ravel(axes)
        for ax in axes[3:]:
            ax.remove()
        cycled = [r for r in self.records if r.final is not None]
        early = [r for r in self.records if r.early is not None]
        axes[0].hist([r.entry for r in cycled], bins=20, color="C0")
        axes[0].set(xlabel="entry time (steps after the prompt)", ylabel="runs", title="Cycle entry")
        periods = np.array([r.period for r in cycled] or [1])
        axes[1].hist(periods, bins=np.arange(0.5, max(periods.max(), self.vocab) + 1.5), color="C1")
        axes[1].axvline(self.vocab + 0.5, color="k", ls="--", lw=0.8)
        axes[1].set(xlabel="period", title=f"Cycle period (dashed: V = {self.vocab})")
        pb = [r.predicted_break or self.t_total for r in early]
        ob = [r.observed_break or self.t_total for r in early]
        axes[2].plot(pb, ob, "o", ms=5, alpha=0.7)
        axes[2].plot([self.t_check, self.t_total], [self.t_check, self.t_total], "k--", lw=0.8)
        axes[2].set(xlabel="predicted break (mean field)", ylabel="observed break",
                    title=f"Cycles at step {self.t_detect}: break or hold ({self.t_total} = never)")


def greedy_cycles(*, vocab: int, d_model: int, logit_scale: float, n_models: int, n_prompts: int,
                  prompt_len: int, t_detect: int, t_greedy: int, streams: RandomStreams,
                  device: str | torch.device = "cpu", draws: torch.Generator | None = None,
                  significance: bool = True) -> GreedyCycles:
    r"""Greedy runs of random two-layer models: the cycles they end in, their attraction, the hold predictions.

    ``n_prompts`` random prompts (``prompt_len`` tokens) per model, ``t_greedy`` greedy steps, every
    model's runs decoded in one batch (:class:`covbook.transformer.ModelBatch`).  A cycle is counted
    once per orbit (one model, one cycle up to rotation: runs that end in it share its verdicts).  Measures

    * ``cycles_attract``: each self-consistent final orbit and a matched cycle that does not reproduce
      itself get the same kicks (:func:`_measure_attraction`); generation returns to the orbits more often;
    * ``hold_bound_holds``: every early cycle whose kernel margin m beats twice the largest Markov
      gap measured along its own run after detection holds (the total-variation bound, exact);
    * ``hold_predictions_hold``: the orbits predicted to hold at detection (m > 2δ, δ the gap at
      detection) hold more often than the early orbits the prediction does not judge (:func:`_measure_hold`).

    Both contrasts are significances over models (:func:`pooled_contrast`).  ``significance`` is kept for
    the notebook's parameters; every profile tests them as significances.

    Raises ``ValueError`` unless the sizes are positive integers and ``t_detect`` < ``t_greedy``.
    """
    check_positive_ints(vocab=vocab, d_model=d_model, n_models=n_models, n_prompts=n_prompts,
                        prompt_len=prompt_len, t_detect=t_detect, t_greedy=t_greedy)
    if t_detect >= t_greedy:
        raise ValueError(f"t_detect must be shorter than t_greedy={t_greedy}, got {t_detect}")
    gen = _draws(streams, draws)
    models = [random_model(2, streams.seed_for("cycle-models", i), vocab=vocab, d_model=d_model,
                           logit_scale=logit_scale, device=device) for i in range(n_models)]
    prompts = torch.randint(0, vocab, (n_models * n_prompts, prompt_len), generator=gen)  # (models · prompts, len)
    batch = ModelBatch(models, np.repeat(np.arange(n_models), n_prompts))
    runs = greedy_decode(batch, prompts.to(device), t_greedy).cpu()  # (models · prompts, prompt_len + t_greedy)
    records: list[CycleRecord] = []
    for i, model in enumerate(models):
        records += cycle_records(model, runs[i * n_prompts:(i + 1) * n_prompts], prompt_len, t_detect=t_detect)
    cyc = cycle_summary(records)
    out = GreedyCycles(records, cyc, vocab, t_detect, prompt_len + t_detect, prompt_len + t_greedy)
    for name, value in dict(n_models=n_models, n_prompts=n_prompts, t_detect=t_detect, t_greedy=t_greedy,
                            **cyc).items():
        out.glue(name, value)
    for name, noun in (("n_early", "cycle"), ("n_undecided", "cycle"), ("n_broke", "cycle"), ("n_at_check", "cycle"),
                       ("n_bound", "cycle")):
        out.glue(f"{name}_text", counted(cyc[name], noun))
    med = cyc["median_entry"]
    out.glue("median_entry_text", counted(med, "step") if med == med else "undefined (no run cycled)")
    _measure_orbits(out, records, n_prompts=n_prompts)
    _measure_attraction(out, records, models, n_prompts=n_prompts, t_detect=t_detect, t_greedy=t_greedy,
                        vocab=vocab, streams=streams)
    _measure_hold(out, records, n_prompts=n_prompts, t_detect=t_detect)
    return out


def pooled_contrast(groups: list[tuple[np.ndarray, np.ndarray]]) -> tuple[float, float, int]:
    r"""Difference of two pooled shares, with a jackknife SE over independent groups (models).

    Each group g (a model) contributes outcomes :math:`a_g` (e.g. the kicks of its self-consistent
    orbits: returned or not) and :math:`b_g` (the same kicks of its control cycles).  The contrast is

    .. math:: D = \frac{\sum_g \sum a_g}{\sum_g |a_g|} - \frac{\sum_g \sum b_g}{\sum_g |b_g|},

    and its SE the delete-one-group jackknife, :math:`\mathrm{SE}^2 = \frac{G-1}{G}\sum_g (D_{(-g)} -
    \bar D_{(\cdot)})^2`, with G − 1 degrees of freedom: the outcomes of one model share its weights, so
    the model, not the outcome, is the replicate.  Groups with no outcome on either side count for the
    side they have.  Returns (D, SE, G − 1); (nan, nan, 0) when fewer than two groups have outcomes
    or a side has none.

    Examples
    --------
    >>> d, se, dof = pooled_contrast([(np.array([1, 1]), np.array([0, 0])), (np.array([1, 0]), np.array([0]))])
    >>> round(d, 4), dof
    (0.75, 1)
    """
    groups = [(np.asarray(a, float), np.asarray(b, float)) for a, b in groups if len(a) + len(b) > 0]

    def contrast(gs: list[tuple[np.ndarray, np.ndarray]]) -> float:
        a = np.concatenate([x for x, _ in gs])
        b = np.concatenate([y for _, y in gs])
        return float(a.mean() - b.mean()) if a.size and b.size else float("nan")

    d = contrast(groups)
    if len(groups) < 2 or d != d:
        return float("nan"), float("nan"), 0
    loo = np.array([contrast(groups[:j] + groups[j + 1:]) for j in range(len(groups))])  # (G,)
    if np.isnan(loo).any():
        return float("nan"), float("nan"), 0
    n = len(groups)
    return d, float(np.sqrt((n - 1) / n * ((loo - loo.mean()) ** 2).sum())), n - 1


def _orbits(records: list[CycleRecord], n_prompts: int, attr: str = "orbit") -> dict[tuple, list[CycleRecord]]:
    """The runs grouped by (model, orbit): ``records`` holds ``n_prompts`` consecutive runs per model."""
    groups: dict[tuple, list[CycleRecord]] = {}
    for j, r in enumerate(records):
        key = getattr(r, attr)
        if key is not None:
            groups.setdefault((j // n_prompts, key), []).append(r)
    return groups


def _measure_orbits(out: GreedyCycles, records: list[CycleRecord], *, n_prompts: int) -> None:
    """Glue the counts of distinct final orbits: all, of period 3 or more, simple, self-consistent."""
    orbits = _orbits(records, n_prompts)
    firsts = [rs[0] for rs in orbits.values()]  # one run per orbit: its verdicts are the orbit's
    for name, value in dict(
        n_orbits=len(orbits), n_models_cycled=len({m for m, _ in orbits}),
        n_orbits_long=sum(r.period >= 3 for r in firsts), n_orbits_simple=sum(bool(r.simple) for r in firsts),
        n_orbits_consistent=sum(bool(r.self_consistent) for r in firsts),
        frac_orbits_consistent=float(np.mean([bool(r.self_consistent) for r in firsts])) if firsts else float("nan"),
    ).items():
        out.glue(name, value)
    out.glue("n_orbits_text", counted(len(orbits), "orbit"))


def control_cycle(model: CausalTransformer, period: int, exclude: set, generator: torch.Generator) -> np.ndarray | None:
    r"""A cycle of ``period`` distinct tokens that does not reproduce itself: the control of an orbit.

    Draws p distinct tokens in random order (``generator``) until the cycle is not self-consistent
    (:func:`covbook.markov.cycle_self_consistent`: the mean-field greedy map at its own statistics does
    not follow it) and its orbit is not in ``exclude``; ``None`` after :data:`CONTROL_TRIES` draws.
    """
    v = model.vocab_size
    for _ in range(CONTROL_TRIES):
        c = torch.randperm(v, generator=generator)[:period].numpy()
        if least_rotation(c) not in exclude and not cycle_self_consistent(model, c):
            return c
    return None


def _measure_attraction(out: GreedyCycles, records: list[CycleRecord], models: list[CausalTransformer], *,
                        n_prompts: int, t_detect: int, t_greedy: int, vocab: int, streams: RandomStreams,
                        kick_len: int | None = None) -> None:
    r"""``cycles_attract``: kicked off a self-consistent orbit, greedy decoding returns; kicked off a control, not.

    For each distinct self-consistent final orbit o of model m (one cycle up to rotation), and each
    self-consistent cycle of period one of m (a token a with :math:`g_{\delta_a}(a) = a`), a control
    cycle of the same period that does not reproduce itself (:func:`control_cycle`, stream
    ``controls``).  Both get the same :data:`KICKS` kicks: contexts of ``t_detect`` tokens on the cycle,
    then ``kick_len`` (default ``t_detect // 4``) uniform random tokens (stream ``kicks``, one draw
    replayed for the control), continued greedily for ``t_greedy - t_detect`` steps
    (:func:`covbook.markov.perturbed_returns`).  The measurement is the share of kicks that return to
    the orbits minus the share that return to the controls, pooled over the models, with the jackknife
    SE over models (:func:`pooled_contrast`; window ``above``: a significance that excludes no effect).
    """
    orbits = _orbits(records, n_prompts)
    kick_len = max(1, t_detect // 4) if kick_len is None else kick_len
    gen, gen_ctrl = streams.torch_generator("kicks"), streams.torch_generator("controls")
    by_model: dict[int, list[tuple]] = {}  # model: its self-consistent orbits, in the order of ``orbits``
    for (i, key), runs in orbits.items():
        if runs[0].self_consistent:
            by_model.setdefault(i, []).append(key)
    # and the self-consistent cycles of period one: the tokens a that the greedy map at δ_a fixes
    n_fixed = 0
    for i, model in enumerate(models):
        g = greedy_map(model, torch.eye(vocab, dtype=torch.float64)).numpy()  # (V, V): g_{δ_a} for each a
        for a in range(vocab):
            if g[a, a] == a and (a,) not in by_model.get(i, []):
                by_model.setdefault(i, []).append((a,))
                n_fixed += 1
    by_model = dict(sorted(by_model.items()))
    paired, n_missing = {}, 0  # model: its (orbit, control) pairs
    for i, keys in by_model.items():
        own = {k for (j, k) in orbits if j == i}
        pairs = [(np.array(k), control_cycle(models[i], len(k), own, gen_ctrl)) for k in keys]
        n_missing += sum(c is None for _, c in pairs)
        if pairs := [(o, c) for o, c in pairs if c is not None]:
            paired[i] = pairs
    groups, n_orbits = [], sum(len(p) for p in paired.values())
    if paired:  # every model's orbits kicked in one batched decoding, kicks drawn model by model, cycle by cycle
        kw = dict(context_len=t_detect, kick_len=kick_len, n_steps=t_greedy - t_detect, n_kicks=KICKS)
        owner = [i for i, pairs in paired.items() for _ in pairs]  # (n_orbits,): the model of each pair
        batch = ModelBatch([models[i] for i in paired], np.repeat(np.unique(owner, return_inverse=True)[1], KICKS))
        state = gen.get_state()
        back = perturbed_returns(batch, [o for p in paired.values() for o, _ in p], generator=gen, **kw)
        same = torch.Generator().set_state(state)  # the same kicks for the controls
        ctrl = perturbed_returns(batch, [c for p in paired.values() for _, c in p], generator=same, **kw)
        rows = np.array(owner)  # (n_orbits,): back and ctrl are (n_orbits, KICKS)
        groups = [(back[rows == i].ravel(), ctrl[rows == i].ravel()) for i in paired]
    d, se, dof = pooled_contrast(groups)
    ret = np.concatenate([a for a, _ in groups]) if groups else np.zeros(0)
    ctl = np.concatenate([b for _, b in groups]) if groups else np.zeros(0)
    for name, value in dict(attract_return=float(ret.mean()) if ret.size else float("nan"),
                            attract_control=float(ctl.mean()) if ctl.size else float("nan"),
                            attract_orbits=n_orbits, attract_models=len(groups), attract_kicks=KICKS,
                            attract_kick_len=kick_len, attract_no_control=n_missing, attract_fixed=n_fixed,
                            attract_z=d / se if se == se and se > 0 else float("nan"),
                            attract_orbits_text=counted(n_orbits, "orbit"),
                            attract_models_text=counted(len(groups), "model")).items():
        out.glue(name, value)
    if dof < 1:
        out.measure("cycles_attract", float("nan"), n_orbits=n_orbits, n_models=len(groups), kicks=KICKS,
                    reason=f"self-consistent orbits with controls in {len(groups)} model(s): the SE over models "
                           f"needs two")
        return
    out.measure("cycles_attract", d, prediction=0.0, se=se, dof=dof, n_orbits=n_orbits, n_models=len(groups),
                kicks=KICKS)


def _measure_hold(out: GreedyCycles, records: list[CycleRecord], *, n_prompts: int, t_detect: int) -> None:
    r"""``hold_bound_holds`` (runs) and ``hold_predictions_hold`` (distinct early orbits, a contrast over models).

    An early orbit (model, early cycle up to rotation) *holds* when every run in it holds to the end; it is
    *judged* (predicted to hold) when a run in it has m > 2δ.  The base rate is the share that hold among
    the early orbits the prediction does not judge (held out: never the judged ones), and the measurement
    is the share of judged orbits that hold minus that base rate, pooled over models with the jackknife SE
    over models (:func:`pooled_contrast`; window ``above``).
    """
    bound = [r for r in records if r.early is not None and r.gap_after is not None and r.margin > 2 * r.gap_after]
    share = float(np.mean([r.observed_break is None for r in bound])) if bound else float("nan")
    out.measure("hold_bound_holds", share,
                reason=None if bound else "no early cycle had a margin above twice the gap along its run",
                n_cycles=len(bound), t_detect=t_detect)
    early = _orbits(records, n_prompts, "early_orbit")
    held = {k: all(r.observed_break is None for r in rs) for k, rs in early.items()}
    judged = {k: any(r.margin > 2 * r.gap for r in rs) for k, rs in early.items()}
    models = sorted({m for m, _ in early})
    groups = [(np.array([held[k] for k in early if k[0] == m and judged[k]]),
               np.array([held[k] for k in early if k[0] == m and not judged[k]])) for m in models]
    d, se, dof = pooled_contrast(groups)
    n_pred = sum(judged.values())
    base_pool = [held[k] for k in early if not judged[k]]
    pred_pool = [held[k] for k in early if judged[k]]
    for name, value in dict(hold_base_rate=float(np.mean(base_pool)) if base_pool else float("nan"),
                            hold_pred_share=float(np.mean(pred_pool)) if pred_pool else float("nan"),
                            hold_orbits=len(early), hold_pred_orbits=n_pred, hold_base_orbits=len(base_pool),
                            hold_pred_held=int(sum(pred_pool)), hold_models=dof + 1 if dof else 0,
                            hold_pred_orbits_text=counted(n_pred, "orbit"),
                            hold_base_orbits_text=counted(len(base_pool), "orbit"),
                            hold_z=d / se if se == se and se > 0 else float("nan")).items():
        out.glue(name, value)
    if dof < 1:
        out.measure("hold_predictions_hold", float("nan"), n_orbits=n_pred, n_base=len(base_pool),
                    reason="the contrast needs judged and held-out orbits in two or more models")
        return
    out.measure("hold_predictions_hold", d, prediction=0.0, se=se, dof=dof, n_orbits=n_pred,
                n_base=len(base_pool), n_models=dof + 1)


# --------------------------------------------------------------------------------------------
# Experiment 3: temperature, mode collapse and several attractors


@dataclass
class TemperatureSweep(Result):
    r"""Sampled (and greedy, τ = 0) runs of random two-layer models, summarised per temperature.

    ``summary[tau][key]`` has one entry per model for each key of :data:`SWEEP_KEYS` (greedy has
    no ``H``, ``h_kernel``, ``h_model``; only τ = ``tau_ref`` has ``h_pred``); ``gen_gaps`` and
    ``fixed_point`` have shape (runs, n_pos): the Markov gap and the fixed-point residual
    :math:`\mathrm{TV}(\nu_t K_{\hat\pi_t}, \nu_t)` at the context lengths ``gen_pos`` at τ = ``tau_ref``.
    """

    taus: list[float]
    summary: dict[float, dict[str, np.ndarray]] = field(repr=False)
    gen_pos: np.ndarray  # (n_pos,): the centres of the bands of context lengths the runs are read in
    gen_gaps: np.ndarray = field(repr=False)  # (runs, n_pos)
    fixed_point: np.ndarray = field(repr=False)  # (runs, n_pos)
    tau_ref: float
    rep_window: int
    vocab: int
    #: between-prompt minus within-run TV per model (``attractor_models`` of them) at the lowest and highest τ
    contrast: dict[float, np.ndarray] = field(default_factory=dict, repr=False)
    #: (n_pos,) the shortest context length of each band (default: the band centres)
    gen_start: np.ndarray | None = field(default=None, repr=False)

    def fixed_point_fit(self) -> np.ndarray:
        """(n_pos,) bool: the bands ``t5_fixed_point_slope`` is fitted on (:func:`fixed_point_bands`)."""
        return fixed_point_bands(self.gen_pos if self.gen_start is None else self.gen_start)

    def _mean(self, key: str, taus: list[float]) -> list[float]:
        return [self.summary[t][key].mean() for t in taus]

    def plot(self, axes: object) -> None:
        """Entropies (left), within-run and between-prompt TV (middle), repetition metrics (right).

        ``axes``: three axes, or a 2 × 2 grid whose fourth panel is removed.
        """
        axes = np.ravel(axes)
        for ax in axes[3:]:
            ax.remove()
        T = np.array(self.taus)
        for key, label, c in (("H", r"$H(\hat\pi)$ token frequencies", "C0"),
                              ("h_kernel", r"entropy rate of $K_{\hat\pi}$", "C1"),
                              ("h_model", "model's next-token entropy", "C2")):
            axes[0].plot(T, self._mean(key, self.taus), "o-", color=c, label=label)
        axes[0].axhline(np.log(self.vocab), color="k", ls=":", lw=0.8)
        axes[0].set(xscale="log", xlabel=r"temperature $\tau$", ylabel="nats", title="Mode collapse")
        axes[0].legend()
        axes[1].plot(T, self._mean("within", self.taus), "o-", label="within run")
        axes[1].plot(T, self._mean("between", self.taus), "s-", label="between prompts")
        axes[1].set(xscale="log", xlabel=r"$\tau$", ylabel="TV of token frequencies",
                    title="Several attractors at low $\\tau$")
        axes[1].legend()
        Tg = np.array([0.05, *self.taus])
        for key, label in (("seq_rep", "seq-rep-4"), ("rep_l", f"rep/{self.rep_window}"),
                           ("distinct", "distinct-4")):
            axes[2].plot(Tg, self._mean(key, list(self.summary)), "o-", label=label)
        axes[2].set(xscale="log", xlabel=r"$\tau$ (greedy plotted at 0.05)", title="Repetition metrics")
        axes[2].legend()


def fixed_point_bands(start: np.ndarray) -> np.ndarray:
    """The bands, by their shortest lengths ``start`` (n_bands,), that the fixed-point slope is fitted on (bool).

    Those from t ≥ :data:`FIT_FROM`, as Experiment 1's fits: in shorter contexts the chapter's prompt is more
    than a quarter of the context and the occupation ν_t averages few generated tokens, and the residual falls
    faster than its asymptotic rate.  Every band where fewer than three start there (runs too short for it).

    >>> fixed_point_bands(np.array([16, 22, 32, 45, 65])).tolist()
    [False, False, True, True, True]
    """
    fit = np.asarray(start) >= FIT_FROM
    return fit if fit.sum() >= 3 else np.ones_like(fit)


def _sweep_metrics(model: CausalTransformer, runs: torch.Tensor, probs: torch.Tensor, tau: float, r: dict[str, list],
                   *, vocab: int, prompt_len: int, t_sample: int, rep_window: int, mean_field: MeanField) -> None:
    """Append the metrics of one model's runs (B, T) at ``tau`` (0: greedy), with the laws ``probs``
    (B, t_sample, V) that drew its new tokens (row j: the law after the first prompt_len + j tokens)."""
    half = t_sample // 2
    cont, late = runs[:, prompt_len:], runs[:, prompt_len + half:]
    preds = probs.argmax(-1)  # (B, t_sample): predictions of cont (greedy: the tokens themselves)
    met = repetition_metrics(late, vocab, n=4)
    for k in ("seq_rep", "distinct", "within", "between"):
        r[k].append(met[k])
    r["rep_l"].append(rep_l(preds, cont, rep_window))
    if tau != 0:
        pi = empirical_frequencies(late, vocab)  # (B, V)
        r["H"].append(met["entropy"])
        r["h_model"].append(entropy(probs[:, half:]).mean().item())
        kernels = markov_kernel(model, pi, tau, mean_field=mean_field)  # (B, V, V): one batch of laws
        r["h_kernel"].append(np.mean([entropy_rate(k, stationary=p).item() for k, p in zip(kernels, pi, strict=True)]))


def _reduction_along(model: CausalTransformer, runs: torch.Tensor, tau: float, read: np.ndarray,
                     r: dict[str, list], *, vocab: int, prompt_len: int, half: int,
                     mean_field: MeanField) -> tuple[np.ndarray, np.ndarray]:
    """The Markov gap, the fixed-point residual (each (B, n_read)) and the held-out entropy rate of runs."""
    mf = mean_field  # both need the kernel at the same frequencies
    gaps = markov_gap(model, runs, read, temperature=tau, mean_field=mf).numpy()  # (B, n_read)
    fp = fixed_point_residual(model, runs, read, temperature=tau, start=prompt_len,
                              mean_field=mf).numpy()  # (B, n_read)
    first = empirical_frequencies(runs[:, : prompt_len + half], vocab)  # (B, V): held out
    r["h_pred"].append(np.mean([entropy_rate(k).item() for k in markov_kernel(model, first, tau, mean_field=mf)]))
    return gaps, fp


def temperature_sweep(*, vocab: int, d_model: int, logit_scale: float, taus: list[float], tau_models: int,
                      tau_prompts: int, prompt_len: int, t_sample: int, streams: RandomStreams,
                      device: str | torch.device = "cpu", draws: torch.Generator | None = None,
                      significance: bool = True, attractor_models: int | None = None) -> TemperatureSweep:
    r"""Sample random two-layer models at each temperature in ``taus`` (and greedily) and test the reduction.

    Per model (the models of :func:`greedy_cycles`), ``tau_prompts`` random prompts, ``t_sample``
    tokens at each τ, every model's runs decoded in one batch (:class:`covbook.transformer.ModelBatch`).
    On the second half of each run: the entropy :math:`H(\hat\pi)`, the kernel's
    entropy rate, the model's mean next-token entropy, within-run and between-prompt TV, seq-rep-4,
    rep/ℓ (ℓ = V // 2) and distinct-4.  At τ_ref (1 if in ``taus``) also the Markov gap, the
    fixed-point residual (read at :data:`GAP_PER_BAND` lengths in each band of :func:`fit_bands` from
    2 · ``prompt_len``) and the entropy rate of the kernel at the first half's frequencies.
    Measures ``mode_collapse`` and ``seq_rep_falls_with_tau`` (significances over models),
    ``entropy_rate_match`` (predicted 0), ``gap_slope_generated`` and ``t5_fixed_point_slope``
    (predicted −1/2, jackknife SE over models) and ``attractors_low_tau`` (a significance over models)
    between the lowest and highest τ.  ``significance`` (false at smoke, whose few models give
    ``attractors_low_tau`` no power) makes that claim's window its direction only (:func:`measure_above`).
    ``attractors_low_tau`` is measured over ``attractor_models`` models (default ``tau_models``): the
    sweep's and, beyond them, models sampled at the lowest and highest τ only (:func:`_extra_contrasts`),
    the replicates its significance needs at a fraction of a full sweep's cost.

    Raises ``ValueError`` unless the sizes are positive integers, ``tau_models`` ≥ 2,
    ``tau_prompts`` ≥ 3, ``attractor_models`` ≥ ``tau_models``, ``t_sample`` ≥ 4 · ``prompt_len`` and
    ``taus`` holds at least two positive temperatures.
    """
    check_positive_ints(vocab=vocab, d_model=d_model, tau_models=tau_models, tau_prompts=tau_prompts,
                        prompt_len=prompt_len, t_sample=t_sample)
    taus = list(taus)
    for t in taus:
        check_positive_float(t, "taus")
    if len(taus) < 2:
        raise ValueError(f"taus must hold at least two temperatures, got {taus}")
    if t_sample < 4 * prompt_len:
        raise ValueError(f"t_sample must be at least 4 · prompt_len = {4 * prompt_len} (the slopes fit context "
                         f"lengths from 2 · prompt_len to prompt_len + t_sample), got {t_sample}")
    if tau_models < 2 or tau_prompts < 3:
        raise ValueError(f"tau_models must be at least 2 and tau_prompts at least 3, got {tau_models} "
                         f"and {tau_prompts}")
    attractor_models = tau_models if attractor_models is None else attractor_models
    check_positive_ints(attractor_models=attractor_models)
    if attractor_models < tau_models:
        raise ValueError(f"attractor_models must be at least tau_models={tau_models} (the sweep's models and "
                         f"more), got {attractor_models}")
    gen = _draws(streams, draws)
    gen_dev = streams.torch_generator("sampling", device=device)  # sampling on the model's device
    half = t_sample // 2
    # ℓ of rep/ℓ: a window shorter than the vocabulary, or every token repeats
    rep_window = max(1, vocab // 2)
    tau_ref = 1.0 if 1.0 in taus else taus[len(taus) // 2]
    bands, centres = fit_bands(prompt_len + t_sample, GAP_PER_BAND, t_min=2 * prompt_len)
    read = np.unique(np.concatenate(bands))  # (n_read,) context lengths read along the runs
    models, prompts, batch = _sweep_models(range(tau_models), vocab=vocab, d_model=d_model, logit_scale=logit_scale,
                                           tau_prompts=tau_prompts, prompt_len=prompt_len, streams=streams,
                                           device=device, draws=gen)
    gen_gaps, fp_res = [], []
    sweep: dict[float, dict[str, list]] = {tau: {k: [] for k in SWEEP_KEYS} for tau in [0.0, *taus]}
    runs_at, probs_at = {}, {}
    for tau in sweep:
        # the laws that drew each new token come with the decoding (one-hot for greedy): no second pass
        runs, probs = generate(batch, prompts, t_sample, temperature=tau, generator=gen_dev if tau > 0 else None,
                               return_probs=True)  # (models · prompts, T), (models · prompts, t_sample, V)
        runs_at[tau], probs_at[tau] = runs.cpu(), probs.cpu()
    for i, model in enumerate(models):
        rows = slice(i * tau_prompts, (i + 1) * tau_prompts)
        # every law this model's kernels are read at, over all temperatures, in one mean-field call
        mf = cached_mean_field()
        ref = runs_at[tau_ref][rows]  # (B, T)
        laws = [empirical_frequencies(runs_at[t][rows][:, prompt_len + half:], vocab) for t in taus]
        laws += [empirical_frequencies(ref[:, : prompt_len + half], vocab),
                 running_frequencies(ref, vocab)[:, torch.as_tensor(read) - 1].reshape(-1, vocab)]
        mf(model, torch.cat(laws).to(device=model.device, dtype=model.dtype))
        for tau, r in sweep.items():
            _sweep_metrics(model, runs_at[tau][rows], probs_at[tau][rows], tau, r, vocab=vocab,
                           prompt_len=prompt_len, t_sample=t_sample, rep_window=rep_window, mean_field=mf)
        g, fp = _reduction_along(model, ref, tau_ref, read, sweep[tau_ref], vocab=vocab, prompt_len=prompt_len,
                                 half=half, mean_field=mf)  # the reduction, on the runs at τ_ref
        gen_gaps.append(_band_means(g, read, bands))
        fp_res.append(_band_means(fp, read, bands))
    summary = {tau: {k: np.array(v) for k, v in r.items()} for tau, r in sweep.items()}
    lo, hi = min(taus), max(taus)
    contrast = {t: summary[t]["between"] - summary[t]["within"] for t in (lo, hi)}  # (tau_models,) each
    if attractor_models > tau_models:  # more models at the two temperatures the contrast compares, after the rest
        extra = _extra_contrasts(range(tau_models, attractor_models), (lo, hi), vocab=vocab, d_model=d_model,
                                    logit_scale=logit_scale, tau_prompts=tau_prompts, prompt_len=prompt_len,
                                    t_sample=t_sample, streams=streams, device=device, draws=gen, sampling=gen_dev)
        contrast = {t: np.concatenate([contrast[t], extra[t]]) for t in (lo, hi)}
    out = TemperatureSweep(taus, summary, centres, np.concatenate(gen_gaps), np.concatenate(fp_res), tau_ref,
                           rep_window, vocab, contrast, np.array([b[0] for b in bands]))
    for name, value in dict(tau_models=tau_models, tau_prompts=tau_prompts, t_sample=t_sample,
                            attractor_models=attractor_models,
                            taus_text=f"{min(taus)} to {max(taus)}", rep_window=rep_window).items():
        out.glue(name, value)
    _measure_sweep(out, prompt_len=prompt_len, tau_models=tau_models, tau_prompts=tau_prompts,
                   significance=significance)
    return out


def _sweep_models(indices: range, *, vocab: int, d_model: int, logit_scale: float, tau_prompts: int,
                  prompt_len: int, streams: RandomStreams, device: str | torch.device,
                  draws: torch.Generator) -> tuple[list, torch.Tensor, ModelBatch]:
    """The sweep's models ``indices`` (stream ``cycle-models``), ``tau_prompts`` prompts each from ``draws``
    (shape (models · prompts, prompt_len)), and the batch that decodes them together."""
    models = [random_model(2, streams.seed_for("cycle-models", i), vocab=vocab, d_model=d_model,
                           logit_scale=logit_scale, device=device) for i in indices]
    prompts = torch.randint(0, vocab, (len(models) * tau_prompts, prompt_len), generator=draws).to(device)
    return models, prompts, ModelBatch(models, np.repeat(np.arange(len(models)), tau_prompts))


def _extra_contrasts(indices: range, taus: tuple[float, ...], *, vocab: int, d_model: int, logit_scale: float,
                        tau_prompts: int, prompt_len: int, t_sample: int, streams: RandomStreams,
                        device: str | torch.device, draws: torch.Generator,
                        sampling: torch.Generator) -> dict[float, np.ndarray]:
    r"""Between-prompt minus within-run TV of the models ``indices`` (stream ``cycle-models``) at each τ of ``taus``.

    As :func:`temperature_sweep` measures it on its own models: ``tau_prompts`` prompts (from ``draws``) per
    model, ``t_sample`` tokens sampled at τ (from ``sampling``), all models decoded in one batch; per model the
    mean between-prompt TV of the runs' second halves minus their mean within-run TV
    (:func:`covbook.markov.within_between_tv`; :func:`covbook.markov.attractor_contrast`'s Δ without its
    jackknife, which the contrast over models does not use).  Returns {τ: (len(indices),)}.
    """
    models, prompts, batch = _sweep_models(indices, vocab=vocab, d_model=d_model, logit_scale=logit_scale,
                                           tau_prompts=tau_prompts, prompt_len=prompt_len, streams=streams,
                                           device=device, draws=draws)
    out = {}
    for tau in taus:
        runs = generate(batch, prompts, t_sample, temperature=tau, generator=sampling).cpu()  # (models · prompts, T)
        late = runs[:, prompt_len + t_sample // 2:].reshape(len(models), tau_prompts, -1)  # the second halves
        tv = [within_between_tv(r, vocab) for r in late]  # per model: (prompts,), (pairs,)
        out[tau] = np.array([b.mean().item() - w.mean().item() for w, b in tv])  # (models,)
    return out


def _measure_sweep(out: TemperatureSweep, *, prompt_len: int, tau_models: int, tau_prompts: int,
                   significance: bool = True) -> None:
    """The sweep's claims and glued numbers, in the chapter's order."""
    summary, tau_ref, gen_pos = out.summary, out.tau_ref, out.gen_pos
    lo, hi = min(out.taus), max(out.taus)
    out.glue("taus_lo", lo)
    out.glue("taus_hi", hi)
    d_mean, d_se = mean_with_se(summary[hi]["H"] - summary[lo]["H"])
    out.glue("collapse_z", d_mean / d_se if d_se > 0 else float("nan"))
    out.measure("mode_collapse", d_mean, prediction=0.0, se=d_se, dof=tau_models - 1, hi=hi, lo=lo,
                tau_models=tau_models)
    dh_mean, dh_se = mean_with_se(summary[tau_ref]["h_model"] - summary[tau_ref]["h_pred"])
    out.measure("entropy_rate_match", dh_mean, prediction=0.0, se=dh_se, dof=tau_models - 1, tau_ref=tau_ref,
                tau_models=tau_models)
    out.glue("dh_lo", (summary[lo]["h_model"] - summary[lo]["h_kernel"]).mean())
    # the runs of one model share its weights: the model is the independent replicate
    run_groups = np.repeat(np.arange(tau_models), tau_prompts)  # (runs,)
    # the gap from the first band on; the residual from t = FIT_FROM, where the prompt is at most a quarter of the
    # context and the occupation ν_t averages enough generated tokens (earlier, its log-log slope is steeper)
    everything, fp_fit = np.ones(gen_pos.size, bool), out.fixed_point_fit()
    for cid, data, fit in (("gap_slope_generated", out.gen_gaps, everything),
                           ("t5_fixed_point_slope", out.fixed_point, fp_fit)):
        slope, se, dof = slope_with_group_se(gen_pos[fit], data[:, fit], run_groups)
        start = out.gen_start[fit][0] if out.gen_start is not None else gen_pos[fit][0]
        out.measure(cid, slope, prediction=-0.5, se=se, dof=dof, tau_ref=tau_ref, tau_models=tau_models,
                    tau_prompts=tau_prompts, fit_from=int(start), n_bands=int(fit.sum()))
    fp_all = out.fixed_point  # (runs, n_bands)
    out.glue("fp_last", fp_all[:, -1].mean())
    out.glue("fp_first", fp_all[:, 0].mean())
    out.glue("fit_gen_from", round(float(gen_pos[0])))  # the centres of the first and last bands
    out.glue("t_gen_last", round(float(gen_pos[-1])))
    out.glue("fp_fit_from", int(out.gen_start[fp_fit][0]) if out.gen_start is not None else round(float(gen_pos[0])))
    out.glue("fp_fit_bands", int(fp_fit.sum()))
    out.glue("tau_ref", tau_ref)
    contrast = out.contrast  # (attractor_models,) at lo and at hi
    n_att = contrast[lo].size
    lr_mean, lr_se = mean_with_se(contrast[lo] - contrast[hi])
    out.glue("attractors_z", lr_mean / lr_se if lr_se > 0 else float("nan"))
    out.glue("t_models", quantile(n_att - 1))
    measure_above(out, "attractors_low_tau", lr_mean, prediction=0.0, se=lr_se, dof=n_att - 1,
                  significance=significance, lo=lo, hi=hi, tau_models=tau_models, attractor_models=n_att,
                  tau_prompts=tau_prompts)
    sr_mean, sr_se = mean_with_se(summary[lo]["seq_rep"] - summary[hi]["seq_rep"])
    out.glue("seq_rep_z", sr_mean / sr_se if sr_se > 0 else float("nan"))
    out.measure("seq_rep_falls_with_tau", sr_mean, prediction=0.0, se=sr_se, dof=tau_models - 1, lo=lo, hi=hi,
                tau_models=tau_models)

    def m(t: float, k: str) -> float:
        return summary[t][k].mean()

    for name, value in dict(
        H_lo=m(lo, "H"), H_hi=m(hi, "H"),
        ratio_lo=m(lo, "between") / m(lo, "within"), ratio_hi=m(hi, "between") / m(hi, "within"),
        rep_l_greedy=m(0.0, "rep_l"), rep_l_hi=m(hi, "rep_l"),
        seq_rep_greedy=m(0.0, "seq_rep"), seq_rep_hi=m(hi, "seq_rep"),
        distinct_greedy=m(0.0, "distinct"), distinct_hi=m(hi, "distinct"),
    ).items():
        out.glue(name, value)
