"""covbook.experiments.repetition (chapter 09) at tiny sizes: shapes, determinism, the exact depth-one
reduction, the claim ids of the chapter's rules, plots and bad input."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from covbook.experiments import repetition  # noqa: E402
from covbook.markov import CycleRecord  # noqa: E402
from covbook.rules import load_rules, rules_path  # noqa: E402
from covbook.streams import Streams  # noqa: E402
from covbook.token_laws import flat_dirichlet  # noqa: E402
from helpers import ROOT  # noqa: E402

torch.set_num_threads(1)
MODELS = dict(vocab=4, d_model=4, logit_scale=1.0)
GAP = dict(**MODELS, gap_models=2, gap_seqs=1, t_gap=128)
CYCLES = dict(**MODELS, n_models=2, n_prompts=2, prompt_len=3, t_detect=12, t_greedy=32)
SWEEP = dict(**MODELS, taus=[0.5, 1.0], tau_models=2, tau_prompts=3, prompt_len=3, t_sample=16, attractor_models=3)
RULES = set(load_rules(rules_path(ROOT, "09_repetition_markov")))


def _streams() -> Streams:
    return Streams(0, "09")


def _chapter(s: Streams) -> tuple:
    """The three experiments in the chapter's order, sharing the stream ``draws`` as the chapter does."""
    draws = s.torch_generator("draws")
    return (repetition.markov_gap_rates(**GAP, streams=s, draws=draws),
            repetition.greedy_cycles(**CYCLES, streams=s, draws=draws),
            repetition.temperature_sweep(**SWEEP, streams=s, draws=draws))


@pytest.fixture(scope="module")
def results() -> tuple:
    return _chapter(_streams())


def test_the_measurements_are_the_chapters_claims(results) -> None:
    gap, cycles, sweep = results
    assert set(gap.measurements) == {"gap_L1_max", "shuffle_L1_max", "gap_slope_L2", "shuffle_slope_L2",
                                     "gap_slope_L3", "shuffle_slope_L3"}
    ids = [k for r in results for k in r.measurements]
    assert len(ids) == len(set(ids)) and set(ids) == RULES
    assert {"hold_base_rate", "hold_pred_share", "n_runs", "median_entry", "n_orbits", "attract_z",
            "attract_control"} <= set(cycles.numbers)
    assert {"taus_text", "rep_window", "fp_first", "t_models", "distinct_hi"} <= set(sweep.numbers)


def test_shapes(results) -> None:
    gap, cycles, sweep = results
    n_t = gap.checkpoints.size
    assert gap.gaps[1].shape == (2, n_t) and gap.gaps[2].shape == gap.shuffles[3].shape == (2, n_t)
    assert gap.fit.dtype == bool and gap.checkpoints[gap.fit].min() >= repetition.FIT_FROM
    assert len(cycles.records) == 2 * 2 and cycles.t_total == 3 + 32 and cycles.t_check == 3 + 12
    assert list(sweep.summary) == [0.0, 0.5, 1.0]
    assert sweep.summary[0.5]["H"].shape == (2,) and sweep.summary[0.0]["H"].size == 0
    assert sweep.gen_gaps.shape == sweep.fixed_point.shape == (2 * 3, sweep.gen_pos.size)
    assert sweep.tau_ref == 1.0 and sweep.summary[1.0]["h_pred"].shape == (2,)
    # attractors_low_tau: the sweep's two models, then one more sampled at the lowest and highest τ only
    assert set(sweep.contrast) == {0.5, 1.0} and sweep.contrast[0.5].shape == sweep.contrast[1.0].shape == (3,)
    np.testing.assert_allclose(sweep.contrast[1.0][:2], sweep.summary[1.0]["between"] - sweep.summary[1.0]["within"])
    assert sweep.measurements["attractors_low_tau"]["dof"] == 2


def test_depth_one_is_exact(results) -> None:
    gap = results[0]
    assert gap.measurements["gap_L1_max"]["value"] < 1e-12
    assert gap.measurements["shuffle_L1_max"]["value"] < 1e-12
    assert gap.gaps[2].max() > 1e-6  # beyond depth one the gap is not zero
    assert gap.measurements["gap_slope_L2"]["prediction"] == -0.5 and gap.measurements["gap_slope_L2"]["dof"] == 1


def test_context_laws_are_the_flat_dirichlet_of_token_laws(monkeypatch) -> None:
    """Each gap model's contexts draw their token law by covbook.token_laws.flat_dirichlet from ``draws``."""
    calls = []

    def spy(shape, generator):
        calls.append((shape, generator))
        return flat_dirichlet(shape, generator)

    monkeypatch.setattr(repetition, "flat_dirichlet", spy)
    s = _streams()
    draws = s.torch_generator("draws")
    repetition.markov_gap_rates(**GAP, streams=s, draws=draws)
    assert calls == [(GAP["vocab"], draws)] * (3 * GAP["gap_models"])  # one law per model, at L = 1, 2, 3
    assert not hasattr(repetition, "random_law")


def _runs(r: repetition.GreedyCycles) -> list:
    return [(x.final, x.early, x.observed_break, x.predicted_break) for x in r.records]


def test_deterministic_given_the_streams(results) -> None:
    gap, cycles, sweep = _chapter(_streams())
    assert gap.measurements == results[0].measurements and np.array_equal(gap.shuffles[2], results[0].shuffles[2])
    assert _runs(cycles) == _runs(results[1])
    assert np.array_equal(sweep.fixed_point, results[2].fixed_point)
    assert sweep.measurements.keys() == results[2].measurements.keys()
    for k, m in sweep.measurements.items():
        # to rounding: numpy's SIMD sums may group terms by the arrays' memory alignment, so two calls in one
        # process can differ in the last bit (a fresh process, as a notebook run, repeats the same numbers)
        assert np.isclose(m["value"], results[2].measurements[k]["value"], rtol=1e-12, atol=0, equal_nan=True), k


def test_cycles_are_counted_once_per_orbit(results) -> None:
    cycles = results[1]
    orbits = {(j // CYCLES["n_prompts"], r.orbit) for j, r in enumerate(cycles.records) if r.orbit is not None}
    n = cycles.numbers
    assert n["n_orbits"] == len(orbits) <= n["n_cycled"]
    m = cycles.measurements["cycles_attract"]
    assert m["n_orbits"] == n["attract_orbits"] <= n["n_orbits_consistent"] + n["attract_fixed"]
    assert m["kicks"] == repetition.KICKS and (m.get("reason") is not None) == (m["n_models"] < 2)
    if m["n_models"] >= 2:  # the SE is over models, the independent draws, not over their orbits
        assert m["prediction"] == 0.0 and m["dof"] == m["n_models"] - 1 <= m["n_orbits"] - 1


def test_hold_claims(results) -> None:
    cycles = results[1]
    recs = cycles.records
    bound = [r for r in recs if r.early is not None and r.gap_after is not None and r.margin > 2 * r.gap_after]
    m = cycles.measurements["hold_bound_holds"]
    assert m["n_cycles"] == len(bound) == cycles.numbers["n_bound"]
    h = cycles.measurements["hold_predictions_hold"]
    assert h["n_orbits"] == cycles.numbers["hold_pred_orbits"]


def test_hold_base_rate_is_held_out_and_the_model_is_the_replicate() -> None:
    # two models, four early orbits each: the judged orbits hold, the others (the base rate) do not
    recs = []
    for i in range(8):
        judged = i % 4 < 2
        recs.append(CycleRecord(final=None, early=(0, 1), early_orbit=(i,), t_check=4,
                                observed_break=None if judged else 9, margin=0.5 if judged else -0.1,
                                gap=0.1, gap_after=0.1 if judged else None))
    out = repetition.GreedyCycles(recs, {}, 8, 4, 4, 12)
    repetition._measure_hold(out, recs, n_prompts=4, t_detect=4)
    h = out.measurements["hold_predictions_hold"]
    assert h["value"] == 1.0 and h["dof"] == 1 and h["n_models"] == 2 and h["n_base"] == 4
    assert out.numbers["hold_base_rate"] == 0.0 and out.numbers["hold_pred_share"] == 1.0
    assert out.measurements["hold_bound_holds"]["value"] == 1.0


def test_pooled_contrast_is_a_jackknife_over_groups() -> None:
    a = [np.array([1.0, 1.0, 0.0]), np.array([1.0, 0.0]), np.array([1.0, 1.0])]
    b = [np.array([0.0]), np.array([0.0, 1.0]), np.array([0.0, 0.0])]
    d, se, dof = repetition.pooled_contrast(list(zip(a, b, strict=True)))
    assert d == pytest.approx(5 / 7 - 1 / 5) and dof == 2
    loo = [np.concatenate(a[:j] + a[j + 1:]).mean() - np.concatenate(b[:j] + b[j + 1:]).mean() for j in range(3)]
    assert se == pytest.approx(np.sqrt(2 / 3 * ((np.array(loo) - np.mean(loo)) ** 2).sum()))
    assert np.isnan(repetition.pooled_contrast([(a[0], b[0])])[0])  # one group: no SE


def test_fit_bands_read_a_power_law_at_its_exponent() -> None:
    bands, centres = repetition.fit_bands(1024, 8)
    assert len(bands) == repetition.N_BANDS and bands[0][0] == repetition.FIT_FROM and bands[-1][-1] == 1024
    read = np.unique(np.concatenate(bands))
    y = read[None, :] ** -0.5 * np.array([[1.0], [3.0]])  # (2, n_read): two rows of c t^(-1/2)
    means = repetition._band_means(y, read, bands)  # (2, n_bands)
    assert np.polyfit(np.log(centres), np.log(means.mean(0)), 1)[0] == pytest.approx(-0.5, abs=0.01)


def test_plots(results) -> None:
    gap, cycles, sweep = results
    fig, axes = plt.subplots(1, 2)
    gap.plot(axes)
    assert len(axes[0].lines) == 5 and axes[0].get_ylabel() == "total variation"
    for r in (cycles, sweep):
        fig, axes = plt.subplots(2, 2)
        r.plot(axes)
        assert len(fig.axes) == 3
    plt.close("all")


@pytest.mark.parametrize(("call", "match"), [
    (lambda s: repetition.markov_gap_rates(**{**GAP, "t_gap": 40}, streams=s), "t_gap"),
    (lambda s: repetition.markov_gap_rates(**{**GAP, "gap_models": 0}, streams=s), "gap_models"),
    (lambda s: repetition.greedy_cycles(**{**CYCLES, "t_detect": 32}, streams=s), "t_detect"),
    (lambda s: repetition.temperature_sweep(**{**SWEEP, "taus": [1.0]}, streams=s), "taus"),
    (lambda s: repetition.temperature_sweep(**{**SWEEP, "taus": [-1.0, 1.0]}, streams=s), "taus"),
    (lambda s: repetition.temperature_sweep(**{**SWEEP, "tau_prompts": 2}, streams=s), "tau_prompts"),
    (lambda s: repetition.temperature_sweep(**{**SWEEP, "t_sample": 3}, streams=s), "t_sample"),
    (lambda s: repetition.temperature_sweep(**{**SWEEP, "attractor_models": 1}, streams=s), "attractor_models"),
])
def test_bad_input(call, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call(_streams())
