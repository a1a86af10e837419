r"""Chapter 05's experiments: one softmax head is one step of population gradient descent.

Serves ``notebooks/05_icl_one_step.md``: {prf:ref}`thm-05-one-step` (the head
:math:`\hat y_N = \sum_i e^{\eta x_q^\top x_i} y_i / \sum_i e^{\eta x_q^\top x_i} \to \eta x_q^\top\Sigma_x w`
at rate :math:`C_{\rm soft}/N`, against linear attention and least squares; the risk of one step
against the number of examples) and {prf:ref}`thm-05-elliptical` (elliptical inputs: the step is
:math:`g(s)\eta`; a non-zero input mean breaks the correspondence).

Random streams (of the chapter's :class:`~covbook.streams.Streams`): ``configs`` (the fixed
:math:`\Sigma_x`, :math:`w` and query directions, drawn in this order by :func:`setting`),
``streaming``, ``bootstrap-softmax``, ``bootstrap-linear``, ``laws`` (replicate (law, point)),
``mean-shift`` (replicate: query) and ``risk`` (replicate: point).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import matplotlib.pyplot as plt
import numpy as np
import torch
from scipy.special import chdtri, fdtri  # chi2.ppf to ~1e-13, f.ppf (scipy.stats: ~1.3 s)

from covbook import icl
from covbook._validate import check_nonnegative_float, check_positive_float, check_positive_int, resolve_device
from covbook.experiments._common import log_checkpoints
from covbook.experiments.regression import RegressionProblem
from covbook.experiments.result import RandomStreams, Result
from covbook.linalg import lstsq
from covbook.plotting import errorbar_with_curve, loglog_with_fit
from covbook.rules import LEVEL
from covbook.stats import mean_with_se, slope_with_se

__all__ = ["CHAPTER", "setting", "Rate", "rate", "Gain", "gain", "MeanShift", "mean_shift", "Risk",
           "risk", "z2_bound", "chi2_band", "RATE_S", "GAIN_ETAS", "GAIN_LAWS", "MEAN_S"]

CHAPTER = "05"
#: Logit variances s = η²x_qᵀΣ_x x_q of the four queries of the rate experiment.
RATE_S = (0.25, 0.5, 1.0, 1.5)
#: Step sizes of the gain experiment (queries η_k u with uᵀΣ_x u = 1, so s = η_k²).
GAIN_ETAS = (0.25, 0.5, 0.75, 1.0, 1.25)
#: Input laws of the gain experiment (``covbook.icl.X_LAWS``); Laplace only where s < 0.5.
GAIN_LAWS = ("gaussian", "two_point", "laplace")
#: Logit variances of the five queries of the mean-shift experiment (linspace(0.2, 1, 5)).
MEAN_S = (0.2, 1.0, 5)
_F64 = torch.float64
_HEADS = (("softmax", "softmax head"), ("linear", "linear attention"))


def z2_bound(k: int, dof: int) -> float:
    r"""Upper ``LEVEL`` quantile of the mean of ``k`` squared t-statistics with ``dof`` degrees of freedom.

    The F approximation: :math:`\bar{z^2} = \frac1k\sum_j z_j^2 \approx F(k, \mathrm{dof})`, bound
    :math:`F^{-1}_{k,\mathrm{dof}}(1 - \mathrm{LEVEL})`.
    """
    k, dof = check_positive_int(k, "k"), check_positive_int(dof, "dof")
    return float(fdtri(k, dof, 1 - LEVEL))


def chi2_band(y: np.ndarray) -> tuple[float, float]:
    r"""Two-sided ``LEVEL`` band for the mean of iid non-negative ``y`` whose predicted mean is 1.

    Satterthwaite: :math:`\bar y \approx \chi^2_\nu/\nu` with :math:`\nu = 2R\bar y^2/s_y^2`, band
    :math:`[\chi^2_\nu(\mathrm{LEVEL}/2)/\nu,\ \chi^2_\nu(1 - \mathrm{LEVEL}/2)/\nu]`.
    """
    y = np.asarray(y, dtype=float)
    if y.ndim != 1 or y.size < 2:
        raise ValueError(f"y must be a 1-d array of at least 2 replicates, got shape {y.shape}")
    nu = 2 * y.size * y.mean() ** 2 / y.var(ddof=1)
    return float(chdtri(nu, 1 - LEVEL / 2) / nu), float(chdtri(nu, LEVEL / 2) / nu)


def setting(d: int, *, eta: float, noise: float, streams: RandomStreams) -> RegressionProblem:
    r"""Draw the fixed problem from stream ``configs``: :math:`\Sigma_x = AA^\top/d + 0.3I`, :math:`w`, queries.

    The draws, in order: :math:`A` (d, d), :math:`w` (d,), the rate directions (4, d) and the
    mean-shift directions (5, d) (``directions["rate"]``, ``directions["mean"]``), all standard normal
    in float64. Glues ``d``, ``eta``, ``noise``.
    """
    d = check_positive_int(d, "d")
    eta, noise = check_positive_float(eta, "eta"), check_nonnegative_float(noise, "noise")
    gen = streams.torch_generator("configs")
    a = torch.randn(d, d, generator=gen, dtype=_F64)  # (d, d)
    cov_x = a @ a.T / d + 0.3 * torch.eye(d, dtype=_F64)  # (d, d)
    w = torch.randn(d, generator=gen, dtype=_F64)  # (d,)
    v_rate = torch.randn(len(RATE_S), d, generator=gen, dtype=_F64)  # (4, d)
    v_mean = torch.randn(MEAN_S[2], d, generator=gen, dtype=_F64)  # (5, d)
    out = RegressionProblem(d, eta, noise, cov_x, w, {"rate": v_rate, "mean": v_mean})
    out.glue("d", d)
    out.glue("eta", eta)
    out.glue("noise", noise)
    return out


def _scaled(v: torch.Tensor, s: torch.Tensor, eta: float, cov_x: torch.Tensor) -> torch.Tensor:
    """Rows of ``v`` scaled so that η²x_qᵀΣ_x x_q = s, shape (m, d)."""
    return v * (s.sqrt() / eta / ((v @ cov_x) * v).sum(-1).sqrt())[:, None]


@dataclass
class Rate(Result):
    """The rate experiment: paths of the head, linear attention and least squares against N."""

    checkpoints: np.ndarray  # (n_t,)
    norm_sq: dict[str, np.ndarray]  # head → (R, n_t, m): squared error to x_qᵀw_1 over C
    sq_truth: dict[str, np.ndarray]  # estimator → (n_t,): mean squared error to x_qᵀw
    bias: float  # mean over queries of (x_qᵀ(w_1 − w))²
    n_max: int

    def plot(self, axes: np.ndarray) -> None:
        """Left: normalised error to one GD step with fitted slopes and 1/N; right: error to the truth."""
        fit = self.checkpoints >= self.n_max / 100
        for i, (k, lab) in enumerate(_HEADS):
            loglog_with_fit(axes[0], self.checkpoints[fit], self.norm_sq[k].mean((0, 2))[fit], label=lab,
                            color=f"C{i}", reference=1.0)
        axes[0].set(xlabel="examples $N$", ylabel=r"$\mathbb{E}(\hat y_N - x_q^\top w_1)^2 / C$",
                    title="Error to one GD step (dashed: $1/N$)")
        axes[0].legend()
        for i, (k, lab) in enumerate((*_HEADS, ("ols", "least squares"))):
            axes[1].loglog(self.checkpoints, self.sq_truth[k], "o-", ms=3, color=f"C{i}", label=lab)
        axes[1].axhline(self.bias, color="k", ls=":", lw=1, label=r"$(x_q^\top(w_1 - w))^2$")
        axes[1].set(xlabel="examples $N$", ylabel=r"$\mathbb{E}(\hat y_N - x_q^\top w)^2$",
                    title="Error to the truth $x_q^\\top w$")
        axes[1].legend()


def rate(problem: RegressionProblem, *, n_streams: int, n_max: int, streams: RandomStreams,
         device: str | torch.device = "cpu") -> Rate:
    r"""The head, linear attention and least squares along ``n_streams`` contexts up to ``n_max`` examples.

    Four queries with :math:`s = \eta^2 x_q^\top\Sigma_x x_q \in` ``RATE_S``; at 16 log-spaced N the
    squared errors to :math:`\mu = x_q^\top w_1` are normalised by :math:`C_{\rm soft} = e^s(\operatorname{Var}y
    + \mu^2)` and :math:`C_{\rm lin} = s\operatorname{Var}y + \mu^2`. Measures the slopes over
    :math:`N \ge N_{\max}/10` (bootstrap SE), the constants :math:`N\,\mathrm{MSE}/C` (:func:`chi2_band`),
    :math:`\min C_{\rm soft}/C_{\rm lin}`, least squares' :math:`(N-d-1)(\hat w-w)^\top\Sigma_x(\hat w-w)/(\sigma^2 d)`
    (χ²_{dR}/(dR) band) and the softmax plateau against the truth.
    """
    n_streams, n_max = check_positive_int(n_streams, "n_streams"), check_positive_int(n_max, "n_max")
    if n_max < 100:
        raise ValueError(f"n_max must be at least 100 (a decade of checkpoints to fit), got {n_max}")
    if n_streams < 2:
        raise ValueError(f"n_streams must be at least 2 (standard errors), got {n_streams}")
    dev = resolve_device(device)
    cov_x, w, eta, noise = problem.cov_x, problem.w, problem.eta, problem.noise
    xq = _scaled(problem.directions["rate"], torch.tensor(RATE_S, dtype=_F64), eta, cov_x)  # (m, d)
    checkpoints = log_checkpoints(n_max, 16, start=10)
    paths = icl.icl_prediction_paths(w, xq, eta, checkpoints, cov_x=cov_x, noise=noise, streams=n_streams,
                                     seed=streams.seed_for("streaming"), device=dev)  # each (R, n_t, m)
    w1 = icl.population_gd(cov_x, w, eta, 1)[1]  # (d,)
    mu = xq @ w1  # (m,) the GD-step predictions
    truth = xq @ w  # (m,) the least-squares answers
    s = eta**2 * ((xq @ cov_x) * xq).sum(-1)  # (m,) logit variances
    var_y = w @ cov_x @ w + noise**2
    c_soft = torch.exp(s) * (var_y + mu**2)  # (m,)
    c_lin = s * var_y + mu**2  # (m,)
    sq = {k: ((v - mu) ** 2).numpy() for k, v in paths.items()}  # (R, n_t, m) squared errors to x_qᵀw_1
    norm_sq = {"softmax": sq["softmax"] / c_soft.numpy(), "linear": sq["linear"] / c_lin.numpy()}
    out = Rate(checkpoints, norm_sq, {k: ((v - truth) ** 2).mean((0, 2)).numpy() for k, v in paths.items()},
               ((mu - truth) ** 2).mean().item(), n_max)
    out.glue("n_max", n_max)
    out.glue("n_streams", n_streams)
    _measure_rate(out, paths, xq, truth, mu, c_soft, c_lin, problem, n_streams, streams)
    return out


def _measure_rate(out: Rate, paths: dict[str, torch.Tensor], xq: torch.Tensor, truth: torch.Tensor,
                  mu: torch.Tensor, c_soft: torch.Tensor, c_lin: torch.Tensor, problem: RegressionProblem,
                  n_streams: int, streams: RandomStreams) -> None:
    """The rate experiment's measurements, in the chapter's order."""
    checkpoints, norm_sq = out.checkpoints, out.norm_sq
    # the last decade, N ≥ N_max/10: over N ≥ N_max/100 (and with few contexts) the softmax slope came
    # out shallower by about 0.08, a finite-N bias of the heavy-tailed squared errors (seen at smoke)
    fit_slope = checkpoints >= out.n_max / 10
    for k, slope_id, const_id, boot in (("softmax", "softmax_slope", "softmax_constant", "bootstrap-softmax"),
                                        ("linear", "linear_slope", "linear_constant", "bootstrap-linear")):
        slope, se = slope_with_se(checkpoints[fit_slope], norm_sq[k].mean(2)[:, fit_slope],
                                  seed=streams.seed_for(boot))
        out.measure(slope_id, slope, prediction=-1.0, se=se, k=k, n_streams=n_streams)
        y = checkpoints[-1] * norm_sq[k][:, -1].mean(-1)  # (R,) N·squared error/C, mean over queries
        lo, hi = chi2_band(y)
        out.measure(const_id, y.mean(), lower=lo, upper=hi, k=k, checkpoints_1=checkpoints[-1],
                    n_streams=n_streams)
    out.glue("const_ratio", (c_soft / c_lin).mean().item())
    out.measure("softmax_costlier", (c_soft / c_lin).min().item())
    # least squares: given X, ŵ − w ~ N(0, σ²(XᵀX)⁻¹), so (N−d−1)(ŵ−w)ᵀΣ_x(ŵ−w)/σ² has mean d exactly and
    # is ≈ χ²_d; recover ŵ − w from the m ≥ d query predictions
    d, cov_x, noise = problem.d, problem.cov_x, problem.noise
    n_last = int(checkpoints[-1])
    dw = lstsq(xq, (paths["ols"][:, -1] - truth).T).T  # (R, d)
    ols_stat = ((n_last - d - 1) * ((dw @ cov_x) * dw).sum(-1) / (noise**2 * d)).numpy()  # (R,) ≈ χ²_d/d
    dof = d * n_streams
    out.measure("ols_error_final", ols_stat.mean(), lower=chdtri(dof, 1 - LEVEL / 2) / dof,
                upper=chdtri(dof, LEVEL / 2) / dof, n_streams=n_streams)
    gap, gap_se = mean_with_se(((paths["softmax"][:, -1] - truth) ** 2).mean(-1).numpy())
    out.measure("softmax_plateau", gap, prediction=((mu - truth) ** 2 + c_soft / checkpoints[-1]).mean().item(),
                se=gap_se, n_streams=n_streams)


@dataclass
class Gain(Result):
    """The gain experiment: per law, the head's ratio to one GD step on the grid s = η_k²."""

    runs: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)  # law → s, mean, se, g (each (k,))

    def plot(self, ax: plt.Axes) -> None:
        """The measured ratio (±2 SE) against s for every law, with g(s) as lines."""
        ss = np.linspace(0, 1.6, 100)
        for j, (law, r) in enumerate(self.runs.items()):
            grid = ss[ss < 0.9] if law == "laplace" else ss
            errorbar_with_curve(ax, r["s"], r["mean"], r["se"], label=f"{law} (measured ±2 SE)", color=f"C{j}",
                                curve=(grid, icl.elliptical_gain(torch.tensor(grid), law).numpy()))
        ax.set(xlabel=r"logit variance $s = \eta^2 x_q^\top\Sigma_x x_q$", ylabel=r"$\hat y_N / x_q^\top w_1$",
               ylim=(0.9, 1.9), title="The head's step, relative to one GD step (lines: $g(s)$)")
        ax.legend()


def gain(problem: RegressionProblem, *, n_long: int, n_streams_long: int, streams: RandomStreams,
         device: str | torch.device = "cpu") -> Gain:
    r"""The ratio :math:`\hat y_N / x_q^\top w_1` against :math:`g(s)` for each law of ``GAIN_LAWS``.

    Queries :math:`\eta_k u` (``GAIN_ETAS``, :math:`u \propto w`, :math:`u^\top\Sigma_x u = 1`) with a head
    of step one; ``n_streams_long`` fresh contexts of ``n_long`` examples per point. Measures per law the
    pooled :math:`\bar{z^2} = \frac1k\sum_j(\text{ratio}_j - g(s_j))^2/\mathrm{SE}_j^2` against
    :func:`z2_bound`, and for the two-point law the pooled z² against g = 1.
    """
    n_long, n_streams_long = check_positive_int(n_long, "n_long"), check_positive_int(n_streams_long,
                                                                                       "n_streams_long")
    if n_streams_long < 2:
        raise ValueError(f"n_streams_long must be at least 2 (standard errors), got {n_streams_long}")
    dev = resolve_device(device)
    cov_x, w = problem.cov_x, problem.w
    eta_grid = torch.tensor(GAIN_ETAS, dtype=_F64)  # (5,)
    u = problem.u  # (d,) along the task, uᵀΣ_x u = 1, so s = η²
    s_grid = eta_grid**2
    out = Gain()
    out.glue("n_long", n_long)
    out.glue("n_streams_long", n_streams_long)
    for j, law in enumerate(GAIN_LAWS):
        keep = s_grid < 0.5 if law == "laplace" else torch.ones_like(s_grid, dtype=torch.bool)
        qs = eta_grid[keep, None] * u  # (k, d): queries η_k u, head step 1
        seeds = [streams.seed_for("laws", replicate=(j, i)) for i in range(len(qs))]
        out_k = _long_heads(problem, qs, 1.0, n_long, n_streams_long, seeds, dev, x_law=law)  # (R, k)
        ratio = (out_k / (qs @ cov_x @ w)).numpy()  # (R, k) over one GD step, x_qᵀw_1
        out.runs[law] = dict(s=s_grid[keep].numpy(), mean=ratio.mean(0),
                             se=ratio.std(0, ddof=1) / np.sqrt(ratio.shape[0]),
                             g=icl.elliptical_gain(s_grid[keep], law).numpy())
    ids = {"gaussian": "gain_chi2_gaussian", "two_point": "gain_chi2_two_point", "laplace": "gain_chi2_laplace"}
    for law, r in out.runs.items():
        z2 = np.mean((r["mean"] - r["g"]) ** 2 / r["se"] ** 2)
        out.measure(ids[law], z2, lower=0.0, upper=z2_bound(len(r["s"]), n_streams_long - 1), law=law)
    r = out.runs["two_point"]
    out.measure("two_point_not_gd", np.mean((r["mean"] - 1) ** 2 / r["se"] ** 2),
                lower=z2_bound(len(r["s"]), n_streams_long - 1))
    out.glue("two_point_gain_max", r["mean"][-1])
    out.glue("two_point_gain_theory", r["g"][-1])
    return out


def _long_heads(problem: RegressionProblem, qs: torch.Tensor, eta: float, n_long: int, n_streams: int, seeds: list[int],
                dev: torch.device, *, x_law: str = "gaussian", mean_x: torch.Tensor | None = None) -> torch.Tensor:
    """The head at N = ``n_long`` for each query row of ``qs``, fresh contexts (``seeds[i]``) per query: (R, k)."""
    return torch.cat([
        icl.icl_prediction_paths(problem.w, q[None], eta, [n_long], cov_x=problem.cov_x, noise=problem.noise,
                                 x_law=x_law, mean_x=mean_x, streams=n_streams, seed=s,
                                 device=dev)["softmax"][:, 0]  # (R, 1)
        for q, s in zip(qs, seeds, strict=True)], 1)


@dataclass
class MeanShift(Result):
    """The mean-shift experiment: the head at large N against one GD step and the predicted limit."""

    gd_step: np.ndarray  # (5,) η x_qᵀ(Σ_x + μ_xμ_xᵀ)w
    limit: np.ndarray  # (5,) wᵀ(μ_x + ηΣ_x x_q)
    mean: np.ndarray  # (5,) the head's mean over contexts
    se: np.ndarray  # (5,)

    def plot(self, ax: plt.Axes) -> None:
        """Measured (±2 SE) against one GD step, the predicted limit (crosses) and the diagonal."""
        errorbar_with_curve(ax, self.gd_step, self.mean, self.se, label="head (measured ±2 SE)")
        ax.plot(self.gd_step, self.limit, "x", ms=9, label=r"predicted $w^\top(\mu_x + \eta\Sigma_x x_q)$")
        lims = [min(self.gd_step.min(), self.mean.min()) - 0.2, max(self.gd_step.max(), self.mean.max()) + 0.2]
        ax.plot(lims, lims, "k:", lw=1, label="one GD step (diagonal)")
        ax.set(xlabel=r"one population GD step $x_q^\top w_1$", ylabel="head output at large $N$",
               title="Non-zero input mean: the head is off the GD diagonal")
        ax.legend()


def mean_shift(problem: RegressionProblem, *, n_long: int, n_streams_long: int, streams: RandomStreams,
               device: str | torch.device = "cpu") -> MeanShift:
    r"""Inputs :math:`\mathcal N(\mu_x, \Sigma_x)` with :math:`\mu_x = u`: the head against its limit and one GD step.

    Five queries with :math:`s` from 0.2 to 1; limit :math:`w^\top(\mu_x + \eta\Sigma_x x_q)`, one GD step
    :math:`\eta x_q^\top(\Sigma_x + \mu_x\mu_x^\top)w`. Measures the pooled z² against each (:func:`z2_bound`).
    """
    n_long, n_streams_long = check_positive_int(n_long, "n_long"), check_positive_int(n_streams_long,
                                                                                       "n_streams_long")
    if n_streams_long < 2:
        raise ValueError(f"n_streams_long must be at least 2 (standard errors), got {n_streams_long}")
    dev = resolve_device(device)
    cov_x, w, eta = problem.cov_x, problem.w, problem.eta
    mean_x = 1.0 * problem.u  # (d,) a mean of Mahalanobis length 1
    qs = _scaled(problem.directions["mean"], torch.linspace(*MEAN_S, dtype=_F64), eta, cov_x)  # (5, d)
    seeds = [streams.seed_for("mean-shift", replicate=i) for i in range(len(qs))]
    out = _long_heads(problem, qs, eta, n_long, n_streams_long, seeds, dev, mean_x=mean_x)  # (R, 5)
    limit = w @ mean_x + eta * qs @ cov_x @ w  # (5,)
    gd_step = eta * qs @ (cov_x + torch.outer(mean_x, mean_x)) @ w  # (5,)
    mean_out, se_out = out.mean(0), out.std(0) / np.sqrt(out.shape[0])  # (5,), (5,)
    res = MeanShift(gd_step.numpy(), limit.numpy(), mean_out.numpy(), se_out.numpy())
    bound = z2_bound(len(qs), n_streams_long - 1)
    res.measure("mean_limit_chi2", ((mean_out - limit) ** 2 / se_out**2).mean(), lower=0.0, upper=bound)
    res.measure("mean_not_gd", ((mean_out - gd_step) ** 2 / se_out**2).mean(), lower=bound)
    return res


_RISK_LABELS = {"ols": "least squares", "averaging": r"averaging ($\eta = 1$)", "gd_opt": r"one GD step, $\eta^*$"}
_RISK_IDS = {"ols": "risk_chi2_ols", "averaging": "risk_chi2_averaging", "gd_opt": "risk_chi2_gd_opt"}


def _risk_closed_forms(n: np.ndarray, d: int) -> dict[str, np.ndarray]:
    """Risk/d of least squares ((d−n)⁺/d), averaging ((d+1)/n) and the best step ((d+1)/(n+d+1))."""
    return {"ols": icl.ols_risk(n, d), "averaging": icl.averaging_risk(n, d), "gd_opt": icl.gd_optimal_risk(n, d)}


@dataclass
class Risk(Result):
    """The risk experiment: measured risk/d (mean, SE) of three estimators against n, with closed forms."""

    ns: np.ndarray  # (n_points,)
    meas: dict[str, np.ndarray]  # estimator → (n_points, 2): mean, se
    d_risk: int

    def plot(self, ax: plt.Axes) -> None:
        """Measured points (±2 SE) and closed-form lines against n on a log axis."""
        nn_ = np.geomspace(1, self.ns.max(), 300)
        curves = _risk_closed_forms(nn_, self.d_risk)
        curves["ols"] = icl.ols_risk(np.floor(nn_), self.d_risk)
        for j, k in enumerate(self.meas):
            errorbar_with_curve(ax, self.ns, self.meas[k][:, 0], self.meas[k][:, 1], label=_RISK_LABELS[k],
                                color=f"C{j}", curve=(nn_, curves[k]), ms=4)
        ax.axhline(1, color="k", lw=0.6, ls=":")
        ax.set(xscale="log", ylim=(-0.05, 2.0), xlabel="examples $n$", ylabel=r"risk $/\,d$",
               title=f"d = {self.d_risk}: measured (points) and closed forms (lines)")
        ax.legend()


def risk(d_risk: int, n_tasks_risk: int, *, streams: RandomStreams, device: str | torch.device = "cpu") -> Risk:
    r"""Risk :math:`\mathbb E\|\hat w - w\|^2/d` of least squares, averaging and one best GD step against n.

    Noise-free tasks :math:`x, w \sim \mathcal N(0, I_d)`, ``n_tasks_risk`` per point, n from 1 to 20d.
    Measures the pooled z² against the closed forms (:func:`z2_bound`, tasks as replicates), the two
    closed-form orderings over n ≤ 20d, and the paired margin least squares − GD at n ≈ d/2.
    """
    d_risk, n_tasks = check_positive_int(d_risk, "d_risk"), check_positive_int(n_tasks_risk, "n_tasks_risk")
    if n_tasks < 2:
        raise ValueError(f"n_tasks_risk must be at least 2 (standard errors), got {n_tasks}")
    dev = resolve_device(device)
    ns = np.unique(np.r_[1:6, np.geomspace(6, 20 * d_risk, 14).astype(int)])
    i_mid = int(np.argmin(np.abs(ns - d_risk // 2)))  # n ≈ d/2, where the gap is largest
    meas: dict[str, list[tuple[float, float]]] = {k: [] for k in _RISK_LABELS}
    for i, n in enumerate(ns):
        t = icl.make_regression_tasks(n_tasks, int(n), d_risk, seed=streams.seed_for("risk", replicate=i),
                                      device=dev)
        eta_star = float(icl.gd_optimal_step(n, d_risk))
        est = {"ols": icl.ols(t.x, t.y), "averaging": icl.empirical_gd(t.x, t.y, 1.0)[-1],
               "gd_opt": icl.empirical_gd(t.x, t.y, eta_star)[-1]}  # each (tasks, d)
        for k, v in est.items():
            per_task = ((v - t.w) ** 2).sum(-1).cpu().numpy() / d_risk  # (tasks,): E over x_q done exactly
            meas[k].append(mean_with_se(per_task))
        if i == i_mid:
            diff = ((((est["ols"] - t.w) ** 2).sum(-1) - ((est["gd_opt"] - t.w) ** 2).sum(-1))
                    / d_risk).cpu().numpy()  # (tasks,) paired on the same tasks
    out = Risk(ns, {k: np.array(v) for k, v in meas.items()}, d_risk)
    out.glue("d_risk", d_risk)
    out.glue("n_tasks_risk", n_tasks)
    theory = _risk_closed_forms(ns, d_risk)
    for k, m in out.meas.items():
        se = np.maximum(m[:, 1], 1e-12)
        out.measure(_RISK_IDS[k], np.mean((m[:, 0] - theory[k]) ** 2 / se**2), lower=0.0,
                    upper=z2_bound(len(ns), n_tasks - 1), labels_k_replace=_RISK_LABELS[k].replace("$", ""))
    n_all = np.arange(1, 20 * d_risk + 1)
    every = _risk_closed_forms(n_all, d_risk)
    out.measure("ols_below_gd_noiseless", float(np.max(every["ols"] - every["gd_opt"])))
    out.measure("gd_below_averaging", float(np.min(every["averaging"] - every["gd_opt"])))
    gap_mid, gap_mid_se = mean_with_se(diff)
    n_mid = ns[i_mid]
    out.measure("ols_minus_gd_mid", gap_mid,
                prediction=float(icl.ols_risk(n_mid, d_risk) - icl.gd_optimal_risk(n_mid, d_risk)),
                se=gap_mid_se, ns_i_mid=n_mid, d_risk=d_risk, n_tasks_risk=n_tasks)
    out.glue("n_mid", int(n_mid))
    return out
