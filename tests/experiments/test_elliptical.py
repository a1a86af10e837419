"""covbook.experiments.elliptical (chapter 02) at tiny sizes: shapes, determinism, closed forms, claim ids."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pytest

from covbook.experiments import elliptical
from covbook.processes import DiscreteMixing, ExponentialMixing
from covbook.rules import load_rules
from covbook.streams import Streams
from helpers import ROOT

RULES = set(load_rules(ROOT / "notebooks" / "rules" / "02_elliptical_inputs.yml"))
T, R = 2000, 8


@pytest.fixture(scope="module")
def gains() -> elliptical.Gains:
    return elliptical.gains(R, T, streams=Streams(0, "02"))


@pytest.fixture(scope="module")
def skew() -> elliptical.Skew:
    return elliptical.skew(R, T, streams=Streams(0, "02"))


def test_gain_curve_closed_forms() -> None:
    s = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0])
    two_point = DiscreteMixing([0.5, 1.5], [0.5, 0.5])
    np.testing.assert_allclose(elliptical.gain_curve(s, two_point), 0.5 + 1 / (1 + np.exp(-s / 2)))
    laplace = elliptical.gain_curve(s, ExponentialMixing())
    np.testing.assert_allclose(laplace[:4], 2 / (2 - s[:4]))
    assert np.isnan(laplace[4:]).all()  # no limit from s = 2 on


def test_nig_boundary() -> None:
    r = elliptical.nig_boundary()
    assert set(r.measurements) == {"nig_mgf_at_s2", "nig_tilted_mean_diverges_at_s2"}
    assert r.measurements["nig_mgf_at_s2"]["value"] == pytest.approx(2.0, abs=1e-12)
    assert r.measurements["nig_tilted_mean_diverges_at_s2"]["value"] > 1e5


def test_gains_shapes_and_closed_form(gains) -> None:
    assert list(gains.laws) == ["Gaussian", "two-point", "Laplace", "NIG"]
    for name, r in gains.laws.items():
        m = len(elliptical.S_GRID[name])
        assert r.out.shape == (R, m, 2) and r.g_hat.shape == r.angle.shape == (R, m) and r.g.shape == (m,)
        np.testing.assert_allclose(r.s, elliptical.S_GRID[name])
        for cid in elliptical.LAW_CLAIMS[name][:2]:  # ĝ near g(s) and the angle near 0, within the run's SE
            m = gains.measurements[cid]
            assert abs(m["value"] - m["prediction"]) < 5 * m["se"], (cid, m)
    np.testing.assert_allclose(gains.laws["Gaussian"].g, 1.0)
    np.testing.assert_allclose(gains.laws["Laplace"].g, 2 / (2 - gains.laws["Laplace"].s))
    assert 0 < gains.numbers["angle_a_sigma_a"] < 90 and gains.numbers["t_max_text"] == "2,000"
    assert gains.measurements["gain_Laplace"]["r_s_j"] == 0.2 and gains.measurements["gain_NIG"]["dof"] == R - 1


def test_claims_read_where_the_weights_have_a_third_moment() -> None:
    # Laplace and NIG weights e^{aᵀx} have moments of order k < √(2/s) only: M(3a) < ∞ needs s < 2/9
    import inspect

    assert all(elliptical.S_CLAIM[name] < 2 / 9 for name in ("Laplace", "NIG"))
    assert inspect.signature(elliptical.doubling).parameters["s_to"].default < 2 / 9
    for name, s in elliptical.S_CLAIM.items():
        assert s in elliptical.S_GRID[name] and s <= elliptical.S_FAST[name]
    assert 0.05 in elliptical.S_GRID["Laplace"]


def test_kurtosis_and_doubling(gains) -> None:
    k = elliptical.small_logit_kurtosis(gains)
    assert k.measurements["t1_expansion_kappa_Laplace"]["prediction"] == pytest.approx(3.0)
    assert k.measurements["t1_expansion_kappa_Gaussian"]["allowance"] == pytest.approx(0.0, abs=1e-12)
    d = elliptical.doubling(gains)
    assert d.numbers["doubling_expected"] == pytest.approx(2 * (2 / 1.8) / (2 / 1.95))
    assert abs(d.measurements["doubling_Laplace"]["value"] - d.numbers["doubling_expected"]) < 0.1


def test_skew(skew) -> None:
    assert skew.excess.shape == (R, len(elliptical.SKEW_R), 2)
    pos, neg = skew.measurements["t1_expansion_skew_pos"], skew.measurements["t1_expansion_skew_neg"]
    assert pos["prediction"] == pytest.approx(0.15**2) and neg["prediction"] == pytest.approx(0.15**2)
    assert skew.numbers["skew_bound"] == pytest.approx(0.15**3 / 0.85) == pos["allowance"]


def test_measurements_are_the_rules_ids(gains, skew) -> None:
    parts = [elliptical.nig_boundary(), gains, elliptical.small_logit_kurtosis(gains), skew,
             elliptical.doubling(gains)]
    ids = [cid for p in parts for cid in p.measurements]
    assert len(ids) == len(set(ids)) and set(ids) == RULES


def test_deterministic_for_given_streams(skew) -> None:
    again = elliptical.skew(R, T, streams=Streams(0, "02"))
    assert np.array_equal(again.excess, skew.excess) and again.measurements == skew.measurements
    assert not np.array_equal(elliptical.skew(R, T, streams=Streams(1, "02")).excess, skew.excess)


def test_plots(gains, skew) -> None:
    plt.switch_backend("Agg")
    fig, axes = plt.subplots(1, 2)
    gains.plot(axes)
    assert axes[0].get_legend() is not None and len(axes[1].containers) == 4
    fig2, ax = plt.subplots()
    gains.plot_nonlinear(ax)
    skew.plot(ax)
    assert len(ax.lines) > 8
    plt.close(fig)
    plt.close(fig2)


@pytest.mark.parametrize(("call", "match"), [
    (lambda s: elliptical.gains(1, T, streams=s), "n_streams"),
    (lambda s: elliptical.gains(R, 0, streams=s), "t_max"),
    (lambda s: elliptical.skew(2.5, T, streams=s), "n_streams"),
    (lambda s: elliptical.skew(R, -1, streams=s), "t_max"),
])
def test_bad_input(call, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call(Streams(0, "02"))
