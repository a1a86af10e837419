"""covbook.experiments.one_step (chapter 05) at tiny sizes: shapes, determinism, closed forms, claim ids."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
import yaml

from covbook.experiments import one_step
from covbook.experiments.regression import RegressionProblem
from covbook.plotting import errorbar_with_curve
from covbook.streams import Streams
from helpers import ROOT

RULES = set(yaml.safe_load((ROOT / "notebooks" / "rules" / "05_icl_one_step.yml").read_text(encoding="utf-8")))


def _problem(seed: int = 0) -> RegressionProblem:
    return one_step.setting(3, eta=0.5, noise=0.5, streams=Streams(seed, "05"))


@pytest.fixture(scope="module")
def results() -> dict[str, object]:
    st = Streams(0, "05")
    p = one_step.setting(3, eta=0.5, noise=0.5, streams=st)
    return {"setting": p,
            "rate": one_step.rate(p, n_streams=8, n_max=200, streams=st),
            "gain": one_step.gain(p, n_long=2000, n_streams_long=8, streams=st),
            "mean_shift": one_step.mean_shift(p, n_long=2000, n_streams_long=8, streams=st),
            "risk": one_step.risk(10, 20, streams=st)}


def test_setting_draws_a_fixed_problem() -> None:
    p, q = _problem(), _problem()
    assert p.cov_x.shape == (3, 3) and p.w.shape == (3,)
    assert p.directions["rate"].shape == (4, 3) and p.directions["mean"].shape == (5, 3)
    assert torch.equal(p.cov_x, q.cov_x) and torch.equal(p.directions["mean"], q.directions["mean"])
    assert not torch.equal(p.w, _problem(1).w)
    assert torch.linalg.eigvalsh(p.cov_x).min() >= 0.3 - 1e-12  # AAᵀ/d + 0.3 I
    assert float(p.u @ p.cov_x @ p.u) == pytest.approx(1.0)
    assert p.numbers == {"d": 3, "eta": 0.5, "noise": 0.5} and p.measurements == {}


def test_measurements_carry_exactly_the_rules_ids(results) -> None:
    ids = [k for r in results.values() for k in r.measurements]
    assert len(ids) == len(set(ids)) and set(ids) == RULES


def test_rate_shapes_and_determinism(results) -> None:
    r = results["rate"]
    n_t = len(r.checkpoints)
    assert r.checkpoints[-1] == 200 and np.all(np.diff(r.checkpoints) > 0)
    assert r.norm_sq["softmax"].shape == (8, n_t, 4) and r.sq_truth["ols"].shape == (n_t,)
    again = one_step.rate(_problem(), n_streams=8, n_max=200, streams=Streams(0, "05"))
    assert again.measurements == r.measurements and again.numbers == r.numbers
    assert r.numbers["n_max"] == 200 and r.numbers["const_ratio"] > 1
    assert r.measurements["softmax_costlier"]["value"] > 1  # e^s(Var y + μ²) ≥ (1 + s)Var y + μ²


def test_gain_and_mean_shift_follow_their_limits(results) -> None:
    g = results["gain"]
    assert list(g.runs) == list(one_step.GAIN_LAWS) and len(g.runs["laplace"]["s"]) == 2  # s < 0.5
    gauss = g.runs["gaussian"]
    assert np.all(gauss["g"] == 1.0) and np.all(np.abs(gauss["mean"] - 1) < 5 * gauss["se"])
    two = g.runs["two_point"]
    np.testing.assert_allclose(two["g"], 0.5 + 1 / (1 + np.exp(-two["s"] / 2)))  # the closed form
    m = results["mean_shift"]
    assert m.mean.shape == (5,) and np.all(np.abs(m.mean - m.limit) < 5 * m.se)


def test_risk_closed_forms(results) -> None:
    r, d = results["risk"], 10
    assert r.ns[0] == 1 and r.ns[-1] == 20 * d and r.meas["ols"].shape == (len(r.ns), 2)
    assert r.measurements["ols_below_gd_noiseless"]["value"] == pytest.approx(-2 / (d * (d + 2)))
    n = 20 * d
    assert r.measurements["gd_below_averaging"]["value"] == pytest.approx((d + 1) ** 2 / (n * (n + d + 1)))
    np.testing.assert_allclose(r.meas["ols"][r.ns >= d, 0], 0.0, atol=1e-8)  # exact from n = d on
    mid = r.measurements["ols_minus_gd_mid"]
    assert mid["ns_i_mid"] == 5 and abs(mid["value"] - mid["prediction"]) < 5 * mid["se"]


def test_plots(results) -> None:
    fig, axes = plt.subplots(1, 2)
    results["rate"].plot(axes)
    assert len(axes[1].get_lines()) == 4
    plt.close(fig)
    for key in ("gain", "mean_shift", "risk"):
        fig, ax = plt.subplots()
        results[key].plot(ax)
        assert ax.get_legend() is not None
        plt.close(fig)


def test_statistics_helpers() -> None:
    assert one_step.z2_bound(5, 31) > one_step.z2_bound(5, 10_000) > 1
    lo, hi = one_step.chi2_band(np.random.default_rng(0).exponential(size=200))
    assert lo < 1 < hi


@pytest.mark.parametrize(("call", "match"), [
    (lambda p, st: one_step.setting(0, eta=0.5, noise=0.5, streams=st), "d"),
    (lambda p, st: one_step.setting(3, eta=-1.0, noise=0.5, streams=st), "eta"),
    (lambda p, st: one_step.rate(p, n_streams=8, n_max=50, streams=st), "n_max"),
    (lambda p, st: one_step.rate(p, n_streams=1, n_max=200, streams=st), "n_streams"),
    (lambda p, st: one_step.gain(p, n_long=100, n_streams_long=1, streams=st), "n_streams_long"),
    (lambda p, st: one_step.mean_shift(p, n_long=0, n_streams_long=4, streams=st), "n_long"),
    (lambda p, st: one_step.risk(10, 1, streams=st), "n_tasks_risk"),
    (lambda p, st: one_step.z2_bound(0, 3), "k"),
    (lambda p, st: one_step.chi2_band(np.ones(1)), "y"),
    (lambda p, st: errorbar_with_curve(plt.gca(), [1, 2], [1.0], [0.1, 0.1], label="x"), "same length"),
])
def test_bad_input(call, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call(_problem(), Streams(0, "05"))
    plt.close("all")
