"""Mutants of chapter 09's theory: each key claim of T5 and T5 (repetition) fails under its own rule when the
theory is broken (a claim no mutant can fail is not evidence).

* a next-token law whose distance to the kernel falls like t^(-1/4), and one that depends on the order of the
  past at a level that does not fall: the rate claims ``gap_slope_*`` / ``shuffle_slope_*`` fail;
* a next-token law off the kernel by a fixed bias, whose generation settles where the kernel's fixed-point
  equation does not hold: ``t5_fixed_point_slope`` fails;
* cycles that do not attract more than cycles that cannot persist (an induction-head model returns to any
  cycle in its context, self-consistent or not): ``cycles_attract`` fails;
* a mean field whose margins say nothing about which cycles hold: ``hold_predictions_hold`` fails;
* a model whose next-token law the temperature does not change (all logits near 0): ``mode_collapse`` and
  ``seq_rep_falls_with_tau`` fail; a model whose attractor does not depend on the prompt (one logit vector
  for every context): ``attractors_low_tau`` fails.

Each mutant runs through the chapter's own measurement code and is judged by ``notebooks/rules`` at the sizes
that matter for the window (the slopes' SE is that of the mutant, far below the quick profile's).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from covbook.experiments import repetition
from covbook.markov import (
    CycleRecord,
    cycle_self_consistent,
    fixed_point_residual,
    markov_gap,
    perturbed_returns,
    shuffle_test,
)
from covbook.rules import Measurement, judge, load_rules, rules_path
from covbook.streams import Streams
from covbook.transformer import generate, mean_field_discrete
from helpers import ROOT

torch.set_num_threads(1)
RULES = load_rules(rules_path(ROOT, "09_repetition_markov"))
NB = "09_repetition_markov"


def _judged(cid: str, fields: dict):
    f = dict(fields)
    value = f.pop("value")
    known = {k: f.pop(k) for k in ("prediction", "se", "dof", "lower", "upper", "reason") if k in f}
    return judge(RULES[cid], Measurement(cid, NB, value, extra=f, **known))


class _Mutant(torch.nn.Module):
    """A one-layer model (exact Markov kernel) with a term added to its logits that breaks the theory.

    ``kind="slow"``: + a · t^(-1/4) · u, a next-token law whose distance to the kernel falls like t^(-1/4);
    ``kind="order"``: + a · e(x_1), a law that depends on the first token, so shuffling the past moves it by
    a total variation that does not fall;
    ``kind="bias"``: + b, one vector for every context, a law that is not the kernel's at any length, so
    its own generation settles where the kernel's fixed-point equation does not hold.
    """

    def __init__(self, seed: int, kind: str, vocab: int = 8) -> None:
        super().__init__()
        self.inner = repetition.random_model(1, seed, vocab=vocab, d_model=16)
        g = torch.Generator().manual_seed(seed)
        self.u = torch.randn(vocab, vocab, generator=g, dtype=torch.float64)  # (V, V): a direction per token
        self.b = 2.0 * torch.randn(vocab, generator=g, dtype=torch.float64)  # (V,): a bias the kernel does not have
        self.kind, self.vocab_size = kind, vocab

    def logits_from_hidden(self, h: torch.Tensor) -> torch.Tensor:
        return self.inner.logits_from_hidden(h)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.inner(x)  # (B, T, V)
        if self.kind == "slow":
            t = torch.arange(1, x.shape[1] + 1, dtype=torch.float64)  # (T,)
            return logits + 0.5 * t[:, None] ** -0.25 * self.u[x[:, :1]].squeeze(1)[:, None, :]
        if self.kind == "bias":
            return logits + self.b
        return logits + 0.5 * self.u[x[:, :1]]  # (B, 1, V): the first token's direction at every position


def _mutant_slope(kind: str, measure: str, models: int) -> dict:
    """The band-mean slope of the gap or the shuffle test of ``models`` mutants (two contexts each), as
    markov_gap_rates measures it at the quick profile's context length."""
    s = Streams(0, "09")
    gen = s.torch_generator("mutants")
    t_gap, seqs = 1024, 2
    bands, centres = repetition.fit_bands(t_gap, repetition.GAP_PER_BAND if measure == "gap" else
                                          repetition.SHUFFLE_PER_BAND)
    read = np.unique(np.concatenate(bands))
    rows = []
    for i in range(models):
        m = _Mutant(s.seed_for("mutant", i), kind)
        x = torch.randint(0, 8, (seqs, t_gap), generator=gen)  # (seqs, t_gap)
        if measure == "gap":
            v = markov_gap(m, x, read, mean_field=lambda _, f, m=m: mean_field_discrete(m.inner, f))
        else:
            v = shuffle_test(m, x, read, generator=gen)
        rows.append(repetition._band_means(v.numpy(), read, bands))  # (seqs, n_bands)
    slope, se, dof = repetition.slope_with_group_se(centres, np.concatenate(rows), np.repeat(np.arange(models), seqs))
    return dict(value=slope, prediction=-0.5, se=se, dof=dof, L=2, gap_models=models, gap_seqs=seqs,
                tau_ref=1.0, tau_models=models, tau_prompts=seqs)


@pytest.mark.parametrize("cid", ["gap_slope_L2", "gap_slope_L3", "gap_slope_generated"])
def test_a_gap_that_falls_like_t_to_the_minus_quarter_fails_the_rate_claims(cid: str) -> None:
    fields = _mutant_slope("slow", "gap", models=4)  # a smooth mutant: its SE is small with four models
    assert fields["value"] == pytest.approx(-0.25, abs=0.05)
    c = _judged(cid, fields)
    assert not c.passed and "t^(-1/4)" in c.excluded()


@pytest.mark.parametrize("cid", ["shuffle_slope_L2", "shuffle_slope_L3"])
def test_a_shuffle_distance_that_does_not_fall_fails_the_shuffle_claims(cid: str) -> None:
    fields = _mutant_slope("order", "shuffle", models=32)  # the quick profile's models: a noisy mutant
    assert abs(fields["value"]) < 0.1
    c = _judged(cid, fields)
    assert not c.passed and "no decay" in c.excluded()


def test_generation_that_settles_off_the_kernels_fixed_point_fails_t5_fixed_point_slope() -> None:
    """A law off the kernel by a fixed bias: its runs settle where ν K ≠ ν, a residual that does not fall.

    Read as the chapter reads it at the quick profile (runs of 256 tokens after 8-token prompts, the bands of
    :func:`repetition.fit_bands` from twice the prompt, fitted from :func:`repetition.fixed_point_bands`)."""
    s = Streams(0, "09")
    gen, sampling = s.torch_generator("mutants"), s.torch_generator("mutant-sampling")
    prompt_len, t_sample, runs, models = 8, 256, 4, 4  # a smooth mutant: its SE is small with four models
    bands, centres = repetition.fit_bands(prompt_len + t_sample, repetition.GAP_PER_BAND, t_min=2 * prompt_len)
    read = np.unique(np.concatenate(bands))
    fit = repetition.fixed_point_bands(np.array([b[0] for b in bands]))
    rows = []
    for i in range(models):
        m = _Mutant(s.seed_for("mutant", i), "bias")
        x = generate(m, torch.randint(0, 8, (runs, prompt_len), generator=gen), t_sample, generator=sampling)
        fp = fixed_point_residual(m, x, read, start=prompt_len,
                                  mean_field=lambda _, f, m=m: mean_field_discrete(m.inner, f))  # (runs, n_read)
        rows.append(repetition._band_means(fp.numpy(), read, bands)[:, fit])  # (runs, n_fit)
    groups = np.repeat(np.arange(models), runs)  # (models · runs,): the model is the replicate
    slope, se, dof = repetition.slope_with_group_se(centres[fit], np.concatenate(rows), groups)
    assert abs(slope) < 0.15
    c = _judged("t5_fixed_point_slope", dict(value=slope, prediction=-0.5, se=se, dof=dof, tau_ref=1.0,
                                              tau_models=models, tau_prompts=runs, fit_from=int(bands[fit.argmax()][0]),
                                              n_bands=int(fit.sum())))
    assert not c.passed and "no decay" in c.excluded()


class _Induction(torch.nn.Module):
    """An induction head: the next token is the one that followed the last earlier occurrence of the current token.

    Kicked off any cycle in its context it tends to return to that cycle, whether or not the cycle reproduces
    itself under a mean field: every cycle attracts alike, the mutant of ``cycles_attract``.
    """

    def __init__(self, vocab: int = 8) -> None:
        super().__init__()
        self.vocab_size = vocab
        self.dummy = torch.nn.Parameter(torch.zeros(1, dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        T = x.shape[1]
        same = (x[:, :, None] == x[:, None, :]) & torch.ones(T, T, dtype=torch.bool).tril(-1)  # (B, T, T): s < t
        last = (same * torch.arange(1, T + 1)).amax(-1)  # (B, T): 1 + the last earlier occurrence, 0 for none
        nxt = torch.gather(x, 1, last.clamp(max=T - 1))  # (B, T): the token after it
        nxt = torch.where(last > 0, nxt, torch.zeros_like(nxt))
        return 10.0 * torch.nn.functional.one_hot(nxt, self.vocab_size).to(torch.float64)  # (B, T, V)


def _attraction(returns_of, n_steps: int = 256) -> dict:
    """cycles_attract of the chapter's random models' self-consistent short cycles and their controls."""
    s = Streams(0, "09")
    gen, gen_ctrl = s.torch_generator("kicks"), s.torch_generator("controls")
    groups = []
    kw = dict(context_len=128, kick_len=32, n_steps=n_steps, n_kicks=repetition.KICKS)  # the quick profile's
    for i in range(12):  # the quick profile's models
        model = repetition.random_model(2, s.seed_for("cycle-models", i), vocab=8, d_model=16)
        orbits = [np.array([a]) for a in range(8) if cycle_self_consistent(model, [a])][:2]
        pairs = [(o, repetition.control_cycle(model, len(o), {tuple(o)}, gen_ctrl)) for o in orbits]
        pairs = [(o, c) for o, c in pairs if c is not None]
        if not pairs:
            continue
        state = gen.get_state()
        back = perturbed_returns(returns_of(model), [o for o, _ in pairs], generator=gen, **kw)
        same = torch.Generator().set_state(state)
        ctrl = perturbed_returns(returns_of(model), [c for _, c in pairs], generator=same, **kw)
        groups.append((back.ravel(), ctrl.ravel()))
    d, se, dof = repetition.pooled_contrast(groups)
    return dict(value=d, prediction=0.0, se=se, dof=dof, n_orbits=sum(len(a) for a, _ in groups) // 4,
                n_models=len(groups), kicks=repetition.KICKS)


def test_cycles_that_attract_no_more_than_cycles_that_cannot_persist_fail_cycles_attract() -> None:
    real = _judged("cycles_attract", _attraction(lambda m: m))
    # the mutant reruns its whole forward pass each step: a shorter continuation keeps the test fast
    mutant = _judged("cycles_attract", _attraction(lambda m: _Induction(), n_steps=64))
    assert real.passed and real.kind == "evidence"  # the same procedure on the theory's models passes
    assert not mutant.passed


def test_margins_that_say_nothing_fail_hold_predictions_hold() -> None:
    rng = np.random.default_rng(0)
    recs = []
    for _ in range(12):  # 12 models, 4 early orbits each; holding is independent of the margin
        for j in range(4):
            held, judged = rng.random() < 0.5, j < 2
            recs.append(CycleRecord(final=None, early=(0, 1), early_orbit=(j,), t_check=4,
                                    observed_break=None if held else 9, margin=0.5 if judged else -0.1, gap=0.1,
                                    gap_after=None))
    out = repetition.GreedyCycles(recs, {}, 8, 4, 4, 12)
    repetition._measure_hold(out, recs, n_prompts=4, t_detect=4)
    c = _judged("hold_predictions_hold", out.measurements["hold_predictions_hold"])
    assert not c.passed


def _flat(kind: str):
    """Random models made temperature-blind (all logits near 0) or prompt-blind (one logit vector for every context)."""
    original = repetition.random_model

    def make(n_layers, seed, **kw):
        m = original(n_layers, seed, **kw)
        with torch.no_grad():
            if kind == "uniform":  # logits of 1e-6: uniform at every τ in the sweep, a gap still > 0 for the fits
                m.w_out.mul_(1e-6)
            else:  # every token embeds alike: every context gives one state, one logit vector
                m.embed.weight.copy_(m.embed.weight[:1].expand_as(m.embed.weight))
        return m
    return make


def test_temperature_blind_models_fail_the_sweeps_collapse_claims(monkeypatch) -> None:
    monkeypatch.setattr(repetition, "random_model", _flat("uniform"))
    s = Streams(0, "09")
    sweep = repetition.temperature_sweep(vocab=8, d_model=16, logit_scale=1.0, taus=[0.1, 2.0], tau_models=8,
                                         tau_prompts=3, prompt_len=8, t_sample=64, streams=s)
    for cid in ("mode_collapse", "seq_rep_falls_with_tau"):
        assert not _judged(cid, sweep.measurements[cid]).passed, cid


def test_prompt_blind_models_fail_attractors_low_tau_at_the_quick_profiles_sizes(monkeypatch) -> None:
    """The quick profile's 64 models of the contrast, 4 prompts and 256 tokens each (a few sweep models, the rest
    sampled at the two temperatures the contrast compares, as the chapter samples them)."""
    def judged():
        sweep = repetition.temperature_sweep(vocab=8, d_model=16, logit_scale=1.0, taus=[0.1, 2.0], tau_models=4,
                                             tau_prompts=4, prompt_len=8, t_sample=256, attractor_models=64,
                                             streams=Streams(0, "09"))
        fields = sweep.measurements["attractors_low_tau"]
        assert fields["attractor_models"] == 64 and fields["dof"] == 63
        return _judged("attractors_low_tau", fields)

    real = judged()
    monkeypatch.setattr(repetition, "random_model", _flat("prompt_blind"))
    mutant = judged()
    assert real.passed and real.kind == "evidence"  # the same procedure on the theory's models passes
    assert not mutant.passed and mutant.kind == "evidence"  # a significance window, which excludes no effect
