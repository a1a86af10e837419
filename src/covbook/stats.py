"""Small statistics used to turn runs into claims with honest tolerances.

Log-log slope fits and bootstrap standard errors over independent replicates
(streams, seeds, models): the uncertainty a claim's tolerance is built from
(book chapters 1–4, and the claims of every chapter).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from covbook._validate import as_array, check_positive_int, check_seed

__all__ = ["loglog_slope", "bootstrap_se", "slope_with_se", "mean_loglog_slope", "slope_with_checkpoint_se",
           "slope_with_group_se",
           "mean_with_se", "inverse_t_intercept_weights", "log_residual_weight", "gain_and_angle"]


def loglog_slope(t: object, y: object) -> tuple[float, float]:
    r"""Least-squares fit of log y = c + b log t; returns (b, c).

    Examples
    --------
    >>> b, c = loglog_slope([1, 10, 100], [3.0, 0.3, 0.03])
    >>> round(b, 6), round(float(np.exp(c)), 6)
    (-1.0, 3.0)
    """
    tt, yy = as_array(t, "t"), as_array(y, "y")
    if tt.shape != yy.shape or tt.ndim != 1 or tt.size < 2:
        raise ValueError(f"t and y must be 1-d arrays of equal length >= 2, got {tt.shape} and {yy.shape}")
    if np.any(tt <= 0) or np.any(yy <= 0):
        raise ValueError("a log-log fit needs positive t and y")
    b, c = np.polyfit(np.log(tt), np.log(yy), 1)
    return float(b), float(c)


def bootstrap_se(
    samples: object, statistic: Callable[[np.ndarray], float], n_boot: int = 1000, seed: int = 0
) -> float:
    """Bootstrap standard error of ``statistic`` over the first axis of ``samples``.

    Rows are the independent replicates (streams, seeds); ``statistic`` maps
    an array of rows to a number.
    """
    x = as_array(samples, "samples")
    if x.ndim == 0 or x.shape[0] < 2:
        raise ValueError("bootstrap needs at least two independent replicates")
    if not callable(statistic):
        raise TypeError(f"statistic must be a callable mapping rows to a number, got {type(statistic).__name__}")
    n_boot = check_positive_int(n_boot, "n_boot")
    seed = check_seed(seed)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.shape[0], size=(n_boot, x.shape[0]))
    vals = np.array([statistic(x[i]) for i in idx])
    return float(vals.std(ddof=1))


def mean_with_se(samples: object) -> tuple[float, float]:
    """Mean over replicates and its standard error s/sqrt(n)."""
    x = as_array(samples, "samples").reshape(-1)
    if x.size < 2:
        raise ValueError("need at least two replicates for a standard error")
    return float(x.mean()), float(x.std(ddof=1) / np.sqrt(x.size))


def inverse_t_intercept_weights(t: object) -> np.ndarray:
    r"""Weights w with Σ_j w_j y_j the least-squares intercept c of y_j = c + a/t_j.

    For a quantity with the expansion y(t) = c + a/t + O(t⁻²) this reads the limit c free of
    the 1/t term: Σ_j w_j = 1 and Σ_j w_j / t_j = 0.

    Parameters
    ----------
    t : (n,) at least two distinct positive values

    Examples
    --------
    >>> t = np.array([100.0, 200.0, 400.0])
    >>> w = inverse_t_intercept_weights(t)
    >>> round(float(w @ (3.0 + 5.0 / t)), 12), round(float(w.sum()), 12)
    (3.0, 1.0)
    """
    t = as_array(t, "t").reshape(-1)
    if np.unique(t).size < 2 or np.any(t <= 0):
        raise ValueError(f"t must hold at least two distinct positive values, got {t!r}")
    x = np.stack([np.ones_like(t), 1.0 / t], axis=1)  # (n, 2)
    return np.linalg.pinv(x)[0]  # (n,)


def slope_with_se(t: object, sq_err: object, n_boot: int = 400, seed: int = 0) -> tuple[float, float]:
    """Log-log slope of the mean squared error against t, with a bootstrap SE over replicates.

    Parameters
    ----------
    t : shape (n_t,)
    sq_err : shape (n_replicates, n_t), squared errors of independent replicates.
    """
    tt = as_array(t, "t")
    e = as_array(sq_err, "sq_err")
    if e.ndim != 2 or e.shape[1] != tt.size:
        raise ValueError(f"sq_err must have shape (replicates, {tt.size}), got {e.shape}")
    slope, _ = loglog_slope(tt, e.mean(0))
    se = bootstrap_se(e, lambda rows: loglog_slope(tt, rows.mean(0))[0], n_boot=n_boot, seed=seed)
    return slope, se


def mean_loglog_slope(t: object, y: object) -> tuple[float, float, np.ndarray]:
    r"""Mean over replicates of each replicate's log-log slope, with its Student-t standard error.

    Replicate r (a row of ``y``) has the least-squares slope of :math:`\log y_r(t)` on
    :math:`\log t`,

    .. math:: b_r = \sum_j w_j \log y_{rj}, \qquad
              w_j = \frac{\log t_j - \overline{\log t}}{\sum_k (\log t_k - \overline{\log t})^2},

    and the result is :math:`\bar b = \frac1n \sum_r b_r` (the slope of the mean *log* of ``y``,
    i.e. of its geometric mean over replicates) with :math:`\mathrm{SE} = s_b/\sqrt{n}`, to be
    used with a Student-t quantile of n − 1 degrees of freedom.  Where ``y`` is heavy-tailed
    (a squared gap that rare large attention weights inflate) the slope of the arithmetic mean
    has a skewed sampling law whose bootstrap SE is small exactly when a sample misses the tail;
    the log takes the tail of the level out, and the b_r are close to normal (book chapter 8).

    Parameters
    ----------
    t : shape (n_t,), positive, n_t ≥ 2
    y : shape (n, n_t), positive; rows are independent replicates, n ≥ 2.

    Returns
    -------
    (b̄, SE, b) with b the per-replicate slopes, shape (n,).

    Examples
    --------
    >>> t = np.array([10.0, 100.0, 1000.0])
    >>> b, se, per = mean_loglog_slope(t, np.stack([2 / t, 3 / t, 5 / t]))
    >>> round(b, 12), round(se, 12), per.shape
    (-1.0, 0.0, (3,))
    """
    tt = as_array(t, "t")
    yy = as_array(y, "y")
    if tt.ndim != 1 or tt.size < 2:
        raise ValueError(f"t must be a 1-d array of at least 2 context lengths, got shape {tt.shape}")
    if yy.ndim != 2 or yy.shape[1] != tt.size:
        raise ValueError(f"y must have shape (replicates, {tt.size}), got {yy.shape}")
    if yy.shape[0] < 2:
        raise ValueError(f"y must hold at least two replicates for a standard error, got {yy.shape[0]}")
    if np.any(tt <= 0) or np.any(yy <= 0):
        raise ValueError("a log-log fit needs positive t and y")
    x = np.log(tt) - np.log(tt).mean()  # (n_t,)
    if not np.any(x != 0):
        raise ValueError("t must hold at least two distinct context lengths")
    b = np.log(yy) @ (x / (x**2).sum())  # (n,)
    return float(b.mean()), float(b.std(ddof=1) / np.sqrt(b.size)), b


def slope_with_checkpoint_se(t: object, sq_err: object, n_boot: int = 400,
                             seed: int = 0) -> tuple[float, float, int]:
    r"""Log-log slope with an SE that also treats the checkpoints as replicates (book chapter 8).

    When an effect shared by every replicate changes independently from one checkpoint to the
    next (a random position embedding p_t, say), resampling the replicates misses it; it shows
    as scatter of the points about the fitted line instead.  Returns (b, SE, dof) with

    .. math:: \mathrm{SE}^2 = \mathrm{SE}^2_{\text{bootstrap over replicates}}
              + \mathrm{SE}^2_{\text{least squares, residuals over } n_t \text{ checkpoints}},
              \qquad \text{dof} = n_t - 2 .

    Examples
    --------
    >>> t = np.array([10.0, 20, 40, 80, 160])
    >>> b, se, dof = slope_with_checkpoint_se(t, np.tile(1 / t, (4, 1)))
    >>> round(b, 6), round(se, 6), dof
    (-1.0, 0.0, 3)
    """
    tt = as_array(t, "t")
    if tt.size < 3:
        raise ValueError(f"t must hold at least 3 checkpoints for a residual SE, got {tt.size}")
    slope, se_boot = slope_with_se(tt, sq_err, n_boot=n_boot, seed=seed)
    mean = as_array(sq_err, "sq_err").mean(0)  # (n_t,)
    _, intercept = loglog_slope(tt, mean)
    x = np.log(tt)
    resid = np.log(mean) - (slope * x + intercept)  # (n_t,) about the fitted line
    se_ols = np.sqrt((resid**2).sum() / (tt.size - 2) / ((x - x.mean()) ** 2).sum())
    return slope, float(np.hypot(se_boot, se_ols)), int(tt.size - 2)


def slope_with_group_se(t: object, y: object, groups: object) -> tuple[float, float, int]:
    r"""Log-log slope of the mean of ``y`` against t, with a jackknife SE over independent groups.

    Rows of ``y`` that share a group (e.g. contexts or runs of one model, which share its
    weights) are not independent replicates: resampling rows would understate the spread
    between independent groups.  The slope :math:`\hat b` of :math:`\log \bar y(t)` on
    :math:`\log t` (``y`` averaged over all rows) gets the delete-one-group jackknife SE

    .. math:: \mathrm{SE}^2 = \frac{G-1}{G}\sum_{g=1}^{G} \bigl(\hat b_{(-g)} - \bar b_{(\cdot)}\bigr)^2,

    with :math:`\hat b_{(-g)}` the slope without group g's rows.  With few groups use it with
    a Student-t quantile of ``dof = G - 1`` degrees of freedom (``claims.within_se(...,
    dof=dof)``), as for the SE of a mean over G replicates.

    Parameters
    ----------
    t : shape (n_t,), positive
    y : shape (n_rows, n_t), positive row means
    groups : shape (n_rows,), a label per row (at least two distinct labels)

    Returns
    -------
    (slope, se, dof) with dof = G - 1.

    Examples
    --------
    >>> t = np.array([10.0, 100.0, 1000.0])
    >>> y = np.array([t**-0.5, 2 * t**-0.5, 3 * t**-0.5, 4 * t**-0.5])  # every row slope −1/2
    >>> b, se, dof = slope_with_group_se(t, y, [0, 0, 1, 1])
    >>> round(b, 6), round(se, 6), dof
    (-0.5, 0.0, 1)
    """
    tt, e = as_array(t, "t"), as_array(y, "y")
    if e.ndim != 2 or e.shape[1] != tt.size:
        raise ValueError(f"y must have shape (rows, {tt.size}), got {e.shape}")
    g = np.asarray(groups)
    if g.shape != (e.shape[0],):
        raise ValueError(f"groups must have one label per row, shape ({e.shape[0]},), got {g.shape}")
    labels = np.unique(g)
    if labels.size < 2:
        raise ValueError(f"a jackknife over groups needs at least two distinct groups, got {labels.size}")
    slope, _ = loglog_slope(tt, e.mean(0))
    loo = np.array([loglog_slope(tt, e[g != lab].mean(0))[0] for lab in labels])  # (G,)
    n = labels.size
    se = float(np.sqrt((n - 1) / n * ((loo - loo.mean()) ** 2).sum()))
    return slope, se, int(n - 1)


def log_residual_weight(logits: object) -> np.ndarray:
    r"""log(1 − largest softmax weight) along the last axis, computed without cancellation.

    .. math:: \log\Bigl(1 - \max_j \frac{e^{l_j}}{\sum_k e^{l_k}}\Bigr)
              = \operatorname{logsumexp}_{j \ne j^*} l_j - \operatorname{logsumexp}_k l_k

    finite even when the top weight rounds to 1 in floating point (book chapter 3:
    softmax over heavy-tailed logits becomes a hard maximum).

    Examples
    --------
    >>> float(np.round(log_residual_weight([0.0, 0.0]), 6))   # weights ½, ½
    -0.693147
    >>> bool(log_residual_weight([0.0, 800.0]) < -799)          # 1 − top weight = e^-800
    True
    """
    x = as_array(logits, "logits")
    if x.ndim == 0 or x.shape[-1] < 2:
        raise ValueError("logits must have at least two entries along the last axis")
    from scipy.special import logsumexp

    top = np.max(x, axis=-1)  # (...,)
    others = x.copy()
    np.put_along_axis(others, np.argmax(x, axis=-1)[..., None], -np.inf, axis=-1)
    rest = logsumexp(others, axis=-1)  # log Σ_{j≠j*} e^{l_j}
    return rest - np.logaddexp(rest, top)


def gain_and_angle(out: object, target: object) -> tuple[np.ndarray, np.ndarray]:
    r"""Gain and signed angle of planar outputs against their targets (book chapter 2).

    .. math:: \hat g = \frac{\langle \mathrm{out}, v\rangle}{|v|^2}, \qquad
              \theta = \operatorname{atan2}(\mathrm{out} \times v,\ \langle\mathrm{out}, v\rangle)

    in degrees, with v the target (e.g. Σa).  ``out`` has shape (..., m, 2),
    ``target`` (m, 2) (broadcast); both results have shape (..., m).

    Examples
    --------
    >>> g, th = gain_and_angle([[2.0, 0.0]], [[1.0, 0.0]])
    >>> float(g[0]), float(th[0])
    (2.0, 0.0)
    >>> float(np.round(gain_and_angle([[0.0, 1.0]], [[1.0, 0.0]])[1][0], 6))
    -90.0
    """
    o, v = as_array(out, "out"), as_array(target, "target")
    if o.shape[-1] != 2 or v.shape[-1] != 2:
        raise ValueError(f"out and target must be planar (last dim 2), got {o.shape} and {v.shape}")
    norm2 = (v**2).sum(-1)
    if np.any(norm2 == 0):
        raise ValueError("target must be non-zero (the gain divides by |target|²)")
    dot = (o * v).sum(-1)
    cross = o[..., 0] * v[..., 1] - o[..., 1] * v[..., 0]
    return dot / norm2, np.degrees(np.arctan2(cross, dot))
