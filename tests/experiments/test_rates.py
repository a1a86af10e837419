"""covbook.experiments.rates (chapter 03) at tiny sizes: shapes, determinism, closed forms, claim ids, plots."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from covbook.experiments import Result, rates  # noqa: E402
from covbook.rules import load_rules, rules_path  # noqa: E402
from covbook.streams import Streams  # noqa: E402
from covbook.theory import delta_method_reach, student_t_extreme_angle_sd  # noqa: E402
from helpers import ROOT  # noqa: E402

IDS = {
    "large_logits": {"gauss_reach_s3", "gauss_deficit_s5"},
    "laplace_rates": {"laplace_slope_s0p25", "laplace_rate_s1"},
    "student_t": {"t_growth_nu1", "t_angle_nu1", "t_growth_nu2", "t_angle_nu2", "t_growth_nu3", "t_angle_nu3",
                  "t_top_weight"},
}


@pytest.fixture(scope="module")
def large() -> rates.LargeLogits:
    return rates.large_logits(2000, 3, streams=Streams(0, "03"))


@pytest.fixture(scope="module")
def laplace() -> rates.LaplaceRates:
    return rates.laplace_rates(2000, 32, streams=Streams(0, "03"))


@pytest.fixture(scope="module")
def student() -> rates.StudentTReadout:
    return rates.student_t(1000, 8, streams=Streams(0, "03"))


def test_the_rules_file_is_served_exactly() -> None:
    rules = load_rules(rules_path(ROOT, "03_heavy_tails_and_rates"))
    assert set().union(*IDS.values()) == set(rules)
    assert rates.CHAPTER == "03"


def test_large_logits(large: rates.LargeLogits) -> None:
    assert isinstance(large, Result) and set(large.measurements) == IDS["large_logits"]
    assert large.ratio[3.0].shape == (rates.STREAMS_S3, large.checkpoints[3.0].size)
    assert large.ratio[5.0].shape == (3, large.checkpoints[5.0].size) and large.checkpoints[5.0][-1] == 2000
    assert set(large.numbers) == {"t_long_text", "n_long", "gauss_rho_s3", "gauss_rho_s5", "gauss_ratio_s5"}
    assert large.numbers["t_long_text"] == "2e3" and large.numbers["n_long"] == 3
    rho = float(delta_method_reach([5.0], [2000]))
    assert large.numbers["gauss_rho_s5"] == pytest.approx(rho)
    assert large.numbers["gauss_ratio_s5"] == pytest.approx(large.ratio[5.0][:, -1].mean())
    assert large.measurements["gauss_reach_s3"]["dof"] == rates.STREAMS_S3 - 1
    deficit = large.measurements["gauss_deficit_s5"]  # on streams of its own, of the length it is read at
    assert deficit["dof"] == rates.STREAMS_DEFICIT - 1 and deficit["ratio_by_s_5_0_shape_0"] == rates.STREAMS_DEFICIT
    cps5 = large.checkpoints[5.0]
    assert deficit["cps_by_s_5_0_j"] == cps5[np.argmin(np.abs(cps5 - 1000))] and 0 < deficit["value"] < 1


def test_laplace_rates(laplace: rates.LaplaceRates) -> None:
    assert set(laplace.measurements) == IDS["laplace_rates"]
    assert laplace.sq_err[0.25].shape == laplace.sq_err[1.0].shape == (32, laplace.checkpoints.size)
    # finite variance at s = 1/4: close to the 1/t rate even at this size; s = 1 decays much more slowly
    q, one = laplace.measurements["laplace_slope_s0p25"], laplace.measurements["laplace_rate_s1"]
    assert abs(q["value"] - (-1.0)) < 0.3
    assert one["beta"] == pytest.approx(1 - np.sqrt(2)) and one["value"] > q["value"]
    assert {"laplace_pred_s0p25", "laplace_beta", "laplace_beta_log", "laplace_corrected"} <= set(laplace.numbers)


def test_student_t(student: rates.StudentTReadout) -> None:
    assert set(student.measurements) == IDS["student_t"]
    n_t = student.checkpoints.size
    for nu in rates.NUS:
        assert student.norm[nu].shape == student.angle[nu].shape == (8, n_t)
        assert student.log_gap[nu].shape == student.top[nu].shape == (student.top_lengths.size,)
        assert student.log_gaps[nu].shape == (student.top_lengths.size, rates.TOP_CONTEXTS)
        assert np.all(student.log_gaps[nu] < 0)
        assert student.measurements[f"t_growth_nu{nu}"]["prediction"] == pytest.approx(1 / nu)
    # the angle's limit law (one ν: the quadrature takes a while)
    assert student.measurements["t_angle_nu1"]["prediction"] == pytest.approx(student_t_extreme_angle_sd(1))
    # the hard maximum: Student-t top weights near 1, Gaussian ones small
    assert min(student.top[1]) > 0.5 and student.gauss_top[-1] < 0.1
    top = student.measurements["t_top_weight"]
    assert top["prediction"] == 0.0 and top["se"] > 0 and top["nu"] in rates.NUS and top["n_top"] == rates.TOP_CONTEXTS
    assert top["value"] > 0  # L = −log(1 − top weight) grows with t
    assert 0 < student.numbers["t_top_shrink"] < 1
    assert abs(student.measurements["t_growth_nu1"]["value"] - 1.0) < 0.5


def test_determinism(large: rates.LargeLogits, laplace: rates.LaplaceRates) -> None:
    again = rates.large_logits(2000, 3, streams=Streams(0, "03"))
    assert again.measurements == large.measurements and again.numbers == large.numbers
    assert all(np.array_equal(again.ratio[s], large.ratio[s]) for s in rates.S_LARGE)
    again = rates.laplace_rates(2000, 32, streams=Streams(0, "03"))
    assert again.measurements == laplace.measurements
    other = rates.laplace_rates(2000, 32, streams=Streams(1, "03"))
    assert not np.array_equal(other.sq_err[1.0], laplace.sq_err[1.0])


def test_plots(large: rates.LargeLogits, laplace: rates.LaplaceRates, student: rates.StudentTReadout) -> None:
    fig, ax = plt.subplots()
    large.plot(ax)
    laplace.plot(ax)
    assert len(ax.get_lines()) > 0
    fig2, axes = plt.subplots(1, 2)
    student.plot(axes)
    assert axes[1].get_ylim() == (-0.02, 1.05)
    plt.close(fig)
    plt.close(fig2)


def test_helpers() -> None:
    q = rates.axis_queries(3.0)
    assert q.shape == (4, 2) and np.allclose((q**2).sum(-1).numpy(), 3.0)
    assert rates.length_text(10_000_000) == "1e7"


@pytest.mark.parametrize(("call", "match"), [
    (lambda s: rates.large_logits(500, 4, streams=s), "t_long"),
    (lambda s: rates.large_logits(2000, 1, streams=s), "n_long"),
    (lambda s: rates.laplace_rates(50, 4, streams=s), "t_max"),
    (lambda s: rates.laplace_rates(1000, 1, streams=s), "n_streams"),
    (lambda s: rates.laplace_rates(1000, 4, n_streams_s1=1, streams=s), "n_streams_s1"),
    (lambda s: rates.student_t(1000, 0, streams=s), "n_streams_t"),
    (lambda s: rates.student_t(2.5, 4, streams=s), "t_max"),
])
def test_bad_input(call, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call(Streams(0, "03"))
