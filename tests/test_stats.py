"""Slope fits and bootstrap errors against exact answers."""

import numpy as np
import pytest

from covbook.stats import (
    bootstrap_se,
    loglog_slope,
    mean_loglog_slope,
    mean_with_se,
    slope_with_checkpoint_se,
    slope_with_group_se,
    slope_with_se,
)


def test_loglog_slope_exact_power_law():
    t = np.array([10.0, 100.0, 1000.0, 1e4])
    b, c = loglog_slope(t, 5.0 * t**-0.5)
    assert b == pytest.approx(-0.5) and np.exp(c) == pytest.approx(5.0)


def test_bootstrap_se_of_the_mean_matches_the_formula():
    x = np.random.default_rng(0).normal(size=400)
    se = bootstrap_se(x, np.mean, n_boot=4000, seed=1)
    assert se == pytest.approx(x.std() / np.sqrt(x.size), rel=0.08)


def test_mean_with_se():
    m, se = mean_with_se([1.0, 2.0, 3.0, 4.0])
    assert m == 2.5 and se == pytest.approx(np.std([1, 2, 3, 4], ddof=1) / 2)


def test_slope_with_se_recovers_minus_one():
    rng = np.random.default_rng(3)
    t = np.logspace(2, 5, 10)
    sq = rng.chisquare(1, size=(500, t.size)) / t  # E = 1/t exactly
    slope, se = slope_with_se(t, sq)
    assert abs(slope + 1) < 4 * se and 0 < se < 0.1


def test_mean_loglog_slope_is_the_mean_of_the_rows_fits():
    rng = np.random.default_rng(7)
    t = np.logspace(1, 3, 7)
    y = rng.lognormal(size=(9, t.size)) * t**-0.7  # (n, n_t)
    b, se, per = mean_loglog_slope(t, y)
    rows = np.array([loglog_slope(t, row)[0] for row in y])  # the reference: one polyfit per row
    assert per == pytest.approx(rows, abs=1e-12)
    assert b == pytest.approx(rows.mean(), abs=1e-12)
    assert se == pytest.approx(rows.std(ddof=1) / 3, abs=1e-12)
    # the slope of the geometric mean over rows is the mean slope (the identity the chapter plots)
    assert loglog_slope(t, np.exp(np.log(y).mean(0)))[0] == pytest.approx(b, abs=1e-12)


def test_mean_loglog_slope_t_statistic_is_calibrated_for_heavy_tailed_levels():
    # rows t^-1 times a heavy-tailed level (Pareto, no variance) and lognormal noise: the slope of the
    # arithmetic mean has a skewed law; the mean of the log slopes stays a t statistic with n-1 dof
    rng = np.random.default_rng(11)
    t = np.logspace(2, 3, 6)
    z = []
    for _ in range(2000):
        y = (rng.pareto(1.5, size=(16, 1)) + 0.1) * np.exp(0.5 * rng.standard_normal((16, t.size))) / t
        b, se, _ = mean_loglog_slope(t, y)
        z.append((b + 1) / se)
    z = np.array(z)
    assert abs(z.mean()) < 0.1 and 0.95 < z.std() < 1.2  # t with 15 dof: SD 1.07


def test_slope_with_group_se_resamples_groups_not_rows():
    # rows within a group share a group-specific slope: the spread between groups is what counts
    rng = np.random.default_rng(5)
    t = np.logspace(1, 3, 6)
    n_groups, per = 12, 4
    slopes = -0.5 + 0.2 * rng.standard_normal(n_groups)  # (G,)
    rows = np.repeat(slopes, per)[:, None]  # (G·per, 1)
    y = t ** rows * np.exp(0.01 * rng.standard_normal((n_groups * per, t.size)))
    groups = np.repeat(np.arange(n_groups), per)
    b, se, dof = slope_with_group_se(t, y, groups)
    assert dof == n_groups - 1
    assert abs(b + 0.5) < 4 * se
    # close to the SE of a mean over the groups' slopes; rows resampled as if independent understate it
    assert se == pytest.approx(slopes.std(ddof=1) / np.sqrt(n_groups), rel=0.5)
    assert slope_with_se(t, y)[1] < 0.75 * se


def test_slope_with_group_se_one_row_per_group_is_the_row_jackknife():
    t = np.array([1.0, 10.0, 100.0])
    y = np.array([[1.0, 0.3, 0.1], [2.0, 0.5, 0.2], [1.5, 0.6, 0.1]])
    b, se, dof = slope_with_group_se(t, y, ["a", "b", "c"])
    loo = [loglog_slope(t, y[np.arange(3) != i].mean(0))[0] for i in range(3)]
    assert b == loglog_slope(t, y.mean(0))[0] and dof == 2
    assert se == pytest.approx(np.sqrt(2 / 3 * np.sum((np.array(loo) - np.mean(loo)) ** 2)))


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: loglog_slope([1, 2], [1, -1]), "positive"),
        (lambda: loglog_slope([1], [1]), "length"),
        (lambda: loglog_slope([1, np.nan], [1, 2]), "finite"),
        (lambda: bootstrap_se([1.0], np.mean), "two"),
        (lambda: slope_with_se([1, 2], np.ones((3, 3))), "shape"),
        (lambda: mean_with_se([1.0]), "two"),
        (lambda: slope_with_group_se([1, 2], np.ones((3, 3)), [0, 1, 2]), "shape"),
        (lambda: slope_with_group_se([1, 2], np.ones((3, 2)), [0, 1]), "groups"),
        (lambda: slope_with_group_se([1, 2], np.ones((3, 2)), [0, 0, 0]), "two distinct groups"),
    ],
)
def test_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_log_residual_weight_is_stable_and_exact():
    from covbook.stats import log_residual_weight

    logits = np.array([[0.0, 1.0, 2.0], [0.0, 0.0, 900.0]])
    w = np.exp(logits[0] - logits[0].max())
    w /= w.sum()
    got = log_residual_weight(logits)
    assert got[0] == pytest.approx(np.log(1 - w.max()))
    assert got[1] == pytest.approx(np.log(2.0) - 900.0)
    with pytest.raises(ValueError, match="at least two"):
        log_residual_weight([1.0])


def test_gain_and_angle():
    from covbook.stats import gain_and_angle

    target = np.array([[1.0, 1.0], [0.0, 2.0]])
    rot = np.radians(10.0)
    R = np.array([[np.cos(rot), -np.sin(rot)], [np.sin(rot), np.cos(rot)]])
    out = 1.5 * target @ R.T  # 1.5 × target rotated by +10°
    g, th = gain_and_angle(out[None], target)
    np.testing.assert_allclose(g[0], 1.5 * np.cos(rot))
    np.testing.assert_allclose(th[0], [-10.0, -10.0])  # out × v < 0 for a counter-clockwise turn of out
    with pytest.raises(ValueError, match="planar"):
        gain_and_angle(np.ones((2, 3)), np.ones((2, 3)))
    with pytest.raises(ValueError, match="non-zero"):
        gain_and_angle(np.ones((1, 2)), np.zeros((1, 2)))


def test_checkpoint_se_counts_a_shared_per_checkpoint_effect():
    """A factor shared by all replicates but independent across checkpoints: the bootstrap over
    replicates misses it, the residual part of the checkpoint SE sees it (least-squares SE)."""
    rng = np.random.default_rng(0)
    t = np.logspace(1, 3, 15)
    shared = np.exp(0.3 * rng.standard_normal(t.size))  # (n_t,)
    sq = shared / t * np.exp(0.01 * rng.standard_normal((40, t.size)))  # (R, n_t)
    b, se, dof = slope_with_checkpoint_se(t, sq)
    _, se_boot = slope_with_se(t, sq)
    ols = np.polyfit(np.log(t), np.log(sq.mean(0)), 1, cov=True)[1][0, 0] ** 0.5
    assert dof == 13 and se_boot < 0.2 * se
    assert se == pytest.approx(np.hypot(se_boot, ols), rel=1e-9)
    with pytest.raises(ValueError, match="at least 3"):
        slope_with_checkpoint_se([1.0, 2.0], np.ones((3, 2)))


def test_inverse_t_intercept_weights_read_the_limit():
    from covbook.stats import inverse_t_intercept_weights
    t = np.array([64.0, 100.0, 250.0, 512.0])
    w = inverse_t_intercept_weights(t)
    assert w.sum() == pytest.approx(1.0, abs=1e-12)
    assert (w / t).sum() == pytest.approx(0.0, abs=1e-14)
    assert float(w @ (2.5 - 7.0 / t)) == pytest.approx(2.5, abs=1e-12)
    with pytest.raises(ValueError, match="two distinct positive"):
        inverse_t_intercept_weights([10.0, 10.0])
    with pytest.raises(ValueError, match="two distinct positive"):
        inverse_t_intercept_weights([0.0, 10.0])
