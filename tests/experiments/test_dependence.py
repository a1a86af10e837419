"""covbook.experiments.dependence (chapter 04) at tiny sizes: shapes, determinism, closed forms, claim ids, plots."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from covbook.experiments import Result, dependence  # noqa: E402
from covbook.rules import load_rules, rules_path  # noqa: E402
from covbook.streams import Streams  # noqa: E402
from covbook.theory import quadratic_error_moments, readout_mse_constant, var1_rate_constant  # noqa: E402
from helpers import ROOT  # noqa: E402

IDS = {
    "var1": {"var_constant_positive", "var_slope_positive", "var_positive_vs_iid_s1", "var_constant_negative",
             "var_slope_negative", "var_negative_vs_iid_s0p1", "var_negative_vs_iid_s1"},
    "nonergodic": {"nonergodic_gap_to_pooled", "nonergodic_constant", "nonergodic_ensemble_mean"},
    "random_walk": {"walk_growth"},
    "bent": {"skewed_limit", "skewed_gap", "bimodal_limit", "bimodal_gap"},
}
EYE = torch.eye(2, dtype=torch.float64)


def _within(m: dict, k: float = 5.0) -> bool:
    """The measurement within k SE (plus its allowance) of its prediction."""
    return abs(m["value"] - m["prediction"]) <= k * m["se"] + m.get("allowance", 0.0)


@pytest.fixture(scope="module")
def var() -> dependence.Var1Readout:
    return dependence.var1(8, 16, 2000, streams=Streams(0, "04"))


@pytest.fixture(scope="module")
def mix() -> dependence.NonErgodicReadout:
    return dependence.nonergodic(2000, 16, streams=Streams(0, "04"))


@pytest.fixture(scope="module")
def walk() -> dependence.WalkReadout:
    return dependence.random_walk(5000, 8, streams=Streams(0, "04"))


@pytest.fixture(scope="module")
def bent() -> dependence.BentReadout:
    return dependence.bent(2000, 16, streams=Streams(0, "04"))


def test_the_rules_file_is_served_exactly() -> None:
    rules = load_rules(rules_path(ROOT, "04_dependence_and_counterexamples"))
    assert set().union(*IDS.values()) == set(rules)
    assert dependence.CHAPTER == "04"


def test_var1(var: dependence.Var1Readout) -> None:
    assert isinstance(var, Result) and set(var.measurements) == IDS["var1"]
    n_t = var.checkpoints.size
    for name, n_r in (("positive", 8), ("negative", 16)):
        v = var.runs[name]
        m = dependence.N_DIRS * len(dependence.S_LEVELS[name])
        assert v.sq.shape == (n_r, n_t, m) and v.ratio.shape == (n_r, n_t) and v.C_A.shape == (m,)
        # the stationary covariance solves Σ = AΣAᵀ + Q; the unit directions have uᵀΣu = 1
        assert torch.allclose(v.sigma, v.A @ v.sigma @ v.A.T + dependence.Q)
        assert torch.allclose(((v.unit @ v.sigma) * v.unit).sum(-1), torch.ones(dependence.N_DIRS, dtype=torch.float64))
        q = np.sqrt(dependence.S_LEVELS[name][-1]) * v.unit
        assert np.allclose(v.C_A[-dependence.N_DIRS:], var1_rate_constant(EYE, EYE, EYE, v.A, dependence.Q, q).numpy())
    assert var.measurements["var_positive_vs_iid_s1"]["predicted"] > 1
    # the constants' run intervals: the Satterthwaite law of the mean, from the long-run error covariance
    for cid in ("var_constant_positive", "var_constant_negative", "var_positive_vs_iid_s1",
                "var_negative_vs_iid_s0p1", "var_negative_vs_iid_s1"):
        m = var.measurements[cid]
        limit = m.get("predicted", 1.0)
        assert 0 < m["lower"] < m["rho_end"] * limit < limit < m["upper"]
    for name, cid in (("positive", "var_constant_positive"), ("negative", "var_constant_negative")):
        v = var.runs[name]
        mean, sd = quadratic_error_moments(v.V, v.C_A)
        assert mean == pytest.approx(1.0)
        assert var.measurements[cid]["nu"] == pytest.approx(2 * v.ratio.shape[0] / sd**2)
    assert var.measurements["var_negative_vs_iid_s0p1"]["predicted"] < 1
    assert _within(var.measurements["var_constant_positive"]) and _within(var.measurements["var_slope_negative"])
    assert {"var_positive_rho", "var_negative_rho", "var_negative_vs_iid_s1_z_iid"} <= set(var.numbers)
    assert var.numbers["var_negative_rho"] == pytest.approx(0.6)
    curves = var.constant_curves(np.array([0.01, 2.0]))
    assert curves["negative"][0] < 1 < curves["negative"][1]  # the crossing lies inside (0.01, 2)


def test_nonergodic(mix: dependence.NonErgodicReadout) -> None:
    assert set(mix.measurements) == IDS["nonergodic"]
    assert mix.paths.shape == (16, 12, 2) and mix.components.shape == (16,) and mix.own.shape == (16, 2)
    a = dependence.A_NONERGODIC[0]
    assert np.allclose(mix.pooled, [0.625, 0.625])  # Σ̄a with Σ̄ = 1.25 I
    assert np.allclose(mix.own, torch.stack([dependence.COVS[k] @ a for k in mix.components]).numpy())
    assert all(_within(m) for m in mix.measurements.values())
    assert mix.numbers["t_max_text"] == "2,000" and mix.numbers["n_streams"] == 16
    c = readout_mse_constant(EYE, EYE, EYE, dependence.COVS[0], a)
    assert float(c) > 0


def test_random_walk(walk: dependence.WalkReadout) -> None:
    assert set(walk.measurements) == IDS["random_walk"]
    assert walk.log_norm.shape == (8, walk.checkpoints.size) and walk.checkpoints[-1] >= 4999
    assert abs(walk.measurements["walk_growth"]["value"] - 0.5) < 0.35


def test_bent(bent: dependence.BentReadout) -> None:
    assert set(bent.measurements) == IDS["bent"]
    skewed, bimodal = bent.cases["skewed"], bent.cases["bimodal"]
    assert skewed.out.shape == bimodal.out.shape == (16, 4, 2)
    # the closed forms of the proposition: a_i/(1 − a_i), and a + m tanh(mᵀa)
    assert torch.allclose(skewed.limit, skewed.a / (1 - skewed.a))
    m = torch.tensor([2.0, 0.0], dtype=torch.float64)
    assert torch.allclose(bimodal.limit, bimodal.a + m * torch.tanh(bimodal.a @ m)[:, None])
    for name in ("skewed", "bimodal"):
        lim = bent.measurements[f"{name}_limit"]
        assert lim["lower"] == 0.0 and lim["upper"] == pytest.approx(dependence.LEVEL_CHI2_2)
        assert _within(bent.measurements[f"{name}_gap"])


def test_determinism(mix: dependence.NonErgodicReadout, bent: dependence.BentReadout) -> None:
    again = dependence.nonergodic(2000, 16, streams=Streams(0, "04"))
    assert again.measurements == mix.measurements and np.array_equal(again.paths, mix.paths)
    assert dependence.bent(2000, 16, streams=Streams(0, "04")).measurements == bent.measurements
    other = dependence.bent(2000, 16, streams=Streams(1, "04"))
    assert other.measurements["skewed_gap"]["value"] != bent.measurements["skewed_gap"]["value"]


def test_plots(var, mix, walk, bent) -> None:
    fig, ax = plt.subplots()
    var.plot_constant(ax)
    mix.plot(ax)
    walk.plot(ax)
    fig2, axes = plt.subplots(1, 2)
    var.plot(axes)
    bent.plot(axes)
    assert len(axes[0].get_lines()) > 0 and len(ax.get_lines()) > 0
    plt.close(fig)
    plt.close(fig2)


@pytest.mark.parametrize(("call", "match"), [
    (lambda s: dependence.var1(1, 8, 2000, streams=s), "n_streams"),
    (lambda s: dependence.var1(8, 1, 2000, streams=s), "n_streams_var"),
    (lambda s: dependence.var1(8, 8, 100, streams=s), "t_var"),
    (lambda s: dependence.nonergodic(50, 8, streams=s), "t_max"),
    (lambda s: dependence.random_walk(5000, 1, streams=s), "n_streams"),
    (lambda s: dependence.random_walk(-3, 8, streams=s), "t_walk"),
    (lambda s: dependence.bent(0, 8, streams=s), "t_max"),
])
def test_bad_input(call, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call(Streams(0, "04"))
