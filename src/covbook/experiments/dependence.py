"""Chapter 04 (``notebooks/04_dependence_and_counterexamples.md``): dependence, and the laws that break the readout.

Four experiments, one per hypothesis removed (T1 (f) and (e) of ``ARCHITECTURE.md``):

* :func:`var1`: a stationary Gaussian VAR(1) context; the limit is the stationary readout Σa and the
  rate constant the long-run C_A of Theorem ``thm-04-var1``;
* :func:`nonergodic`: a covariance drawn once per stream; each stream reads its own Σ_k a
  (Proposition ``thm-04-nonergodic``);
* :func:`random_walk`: no stationary law; |out_t| grows like √t (Proposition ``thm-04-walk``);
* :func:`bent`: skewed and bimodal laws, whose limit is the tilted mean ∇log M(a), not Σa
  (Proposition ``thm-04-bent``).

Each returns a :class:`~covbook.experiments.Result` with the chapter's measurements, its glued
numbers and a ``plot`` method for its figure.  Random draws come from the chapter's streams under the
names ``var1``, ``bootstrap-var1-positive``, ``bootstrap-var1-negative``, ``nonergodic``, ``walk``,
``bootstrap-walk`` and ``counterexamples``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import matplotlib.pyplot as plt
import numpy as np
import torch
from scipy.special import chdtri  # χ²_ν(p) = chdtri(ν, 1 − p), chi2.ppf to ~1e-13 (scipy.stats costs ~1.3 s)

from covbook._validate import check_positive_int, resolve_device
from covbook.attention import readout_paths
from covbook.experiments._common import check_length, check_streams, log_checkpoints
from covbook.experiments.result import RandomStreams, Result
from covbook.plotting import loglog_with_fit
from covbook.processes import VAR1, BimodalGaussian, NonErgodicGaussian, Process, RandomWalk, SkewedExponential
from covbook.rules import LEVEL, Z
from covbook.stats import bootstrap_se, loglog_slope, mean_with_se, slope_with_se
from covbook.theory import (
    quadratic_error_moments,
    reach_allowance,
    readout_mse_constant,
    spectral_radius,
    tilted_mean,
    var1_error_covariance,
    var1_rate_constant,
)

__all__ = ["CHAPTER", "Var1Readout", "NonErgodicReadout", "WalkReadout", "BentReadout", "var1", "nonergodic",
           "random_walk", "bent", "LEVEL_CHI2_2", "Q", "TRANSITIONS", "S_LEVELS", "N_DIRS"]

CHAPTER = "04"

#: The book's level for a squared standardised distance in two dimensions: the χ²₂ quantile.
LEVEL_CHI2_2 = float(chdtri(2, LEVEL))

_EYE = torch.eye(2, dtype=torch.float64)

#: The VAR(1) innovation covariance and the two transitions (positive and negative dependence).
Q = torch.tensor([[1.0, 0.3], [0.3, 0.5]], dtype=torch.float64)
TRANSITIONS = {
    "positive": torch.tensor([[0.8, 0.2], [-0.1, 0.6]], dtype=torch.float64),
    "negative": -0.6 * _EYE,
}
#: The logit variances measured per transition, and the query directions per level.
S_LEVELS = {"positive": (1.0,), "negative": (0.1, 1.0)}
N_DIRS = 8
#: Claim ids of the VAR(1) experiment: per transition (constant, slope), per (transition, s) the
#: comparison with the iid constant (its tag also names the glued ``{tag}_predicted``, ``{tag}_z_iid``).
_VAR_IDS = {"positive": ("var_constant_positive", "var_slope_positive"),
            "negative": ("var_constant_negative", "var_slope_negative")}
_VS_IID = {("positive", 1.0): "var_positive_vs_iid_s1", ("negative", 0.1): "var_negative_vs_iid_s0p1",
           ("negative", 1.0): "var_negative_vs_iid_s1"}


def _read(process: Process, q: torch.Tensor, checkpoints: object, n_streams: int, seed: int,
          device: torch.device) -> torch.Tensor:
    """Outputs out_t(q_i) of attention with Θ = I along ``n_streams`` streams: shape (R, n_t, m, 2), on the CPU."""
    return readout_paths(process, q, _EYE, _EYE, _EYE, checkpoints, streams=n_streams, seed=seed,
                         device=device).cpu()


# --------------------------------------------------------------------------------------------------
# VAR(1)


@dataclass
class Var1Transition:
    r"""One VAR(1) transition's run: the stationary Σ, the queries' unit directions and the errors.

    ``sq`` has shape (R, n_t, m): |out_t(q_i) − Σ q_i|² for the m = N_DIRS × levels queries;
    ``C_A`` and ``C_iid`` (m,) the VAR(1) and iid rate constants; ``ratio`` (R, n_t) t·|err|²/C_A
    averaged over the queries; ``naive_gap`` the mean |Qa − Σa|²; ``V`` (m, 2, m, 2) the queries'
    joint long-run error covariance (:func:`covbook.theory.var1_error_covariance`).
    """

    A: torch.Tensor
    sigma: torch.Tensor
    unit: torch.Tensor
    sq: np.ndarray
    C_A: np.ndarray
    C_iid: np.ndarray
    ratio: np.ndarray
    naive_gap: float
    V: torch.Tensor | None = None


@dataclass
class Var1Readout(Result):
    """The readout over the two VAR(1) contexts (Theorem ``thm-04-var1``), one entry per transition."""

    checkpoints: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=int))
    fit: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    runs: dict[str, Var1Transition] = field(default_factory=dict)

    def constant_curves(self, s: np.ndarray) -> dict[str, np.ndarray]:
        r"""C_A/C_iid along the first query direction at logit variances ``s``: {transition: (n_s,)}."""
        curves = {}
        for name, v in self.runs.items():
            qs = torch.stack([np.sqrt(x) * v.unit[0] for x in s])  # (n_s, 2)
            c_a = var1_rate_constant(_EYE, _EYE, _EYE, v.A, Q, qs)  # (n_s,)
            curves[name] = (c_a / readout_mse_constant(_EYE, _EYE, _EYE, v.sigma, qs)).numpy()
        return curves

    def plot_constant(self, ax: plt.Axes) -> None:
        """C_A/C_iid against s ∈ [0.01, 2] (first query direction) for both transitions."""
        s_fine = np.linspace(0.01, 2.0, 40)
        for i, (name, curve) in enumerate(self.constant_curves(s_fine).items()):
            ax.plot(s_fine, curve, color=f"C{i}", label=f"{name} A")
        ax.axhline(1, color="k", lw=0.8)
        ax.set(xlabel="logit variance $s$", ylabel=r"$C_A/C_{\rm iid}$", yscale="log",
               title="Dependence and the rate constant, as a function of $s$ (first query direction)")
        ax.legend()

    def plot(self, axes: tuple[plt.Axes, plt.Axes]) -> None:
        """Left: the MSE to Σa against t (dashed C_A/t); right: t·MSE/C_A ± Z SE (dotted: the iid constant)."""
        cps, fit = self.checkpoints, self.fit
        for i, (name, v) in enumerate(self.runs.items()):
            loglog_with_fit(axes[0], cps[fit], v.sq.mean((0, 2))[fit], label=f"{name} A", color=f"C{i}",
                            reference=float(v.C_A.mean()))
            m, se = v.ratio.mean(0), v.ratio.std(0, ddof=1) / np.sqrt(v.ratio.shape[0])  # (n_t,) each
            axes[1].errorbar(cps, m, Z * se, fmt="o-", ms=4, lw=1, color=f"C{i}", label=f"{name} A")
            axes[1].axhline(float((v.C_iid / v.C_A).mean()), color=f"C{i}", ls=":", lw=1)
        axes[0].set(xlabel="$t$", ylabel=r"MSE to $\Sigma a$",
                    title="VAR(1): 1/t to the stationary readout (dashed: $C_A/t$)")
        axes[1].axhline(1, color="k", lw=0.8)
        axes[1].set(xscale="log", xlabel="$t$", ylabel=r"$t\cdot\mathrm{MSE}/C_A$",
                    title="The constant is $C_A$ (dotted: the iid constant)")
        axes[0].legend()
        axes[1].legend()


def _var1_queries(sigma: torch.Tensor, levels: tuple[float, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    r"""N_DIRS unit directions u with uᵀΣu = 1 (shape (N_DIRS, 2)) and the queries √s u per level."""
    angles = torch.arange(N_DIRS, dtype=torch.float64) * torch.pi / N_DIRS
    unit = torch.stack([torch.cos(angles), torch.sin(angles)], -1)  # (N_DIRS, 2)
    unit = unit / torch.sqrt(((unit @ sigma) * unit).sum(-1, keepdim=True))  # directions with s = 1
    return unit, torch.cat([np.sqrt(s) * unit for s in levels])  # (N_DIRS × levels, 2)


def var1(n_streams: int, n_streams_var: int, t_var: int, *, streams: RandomStreams,
         device: str | torch.device = "cpu") -> Var1Readout:
    r"""The readout over stationary Gaussian VAR(1) contexts x_{s+1} = A x_s + ξ_s, ξ ~ N(0, Q).

    For each transition of :data:`TRANSITIONS` (``n_streams`` streams for the positive one,
    ``n_streams_var`` for the negative), N_DIRS query directions at each logit variance of
    :data:`S_LEVELS` are read at 12 log-spaced t up to ``t_var``.  Measures, per transition,

    * ``var_constant_*``: t|out_t − Σa|²/C_A at the longest t (Σ = AΣAᵀ + Q; C_A of
      :func:`covbook.theory.var1_rate_constant`), between ρ and 1 (the reach heuristic), with the run
      interval of :func:`_mean_law` (the SD of one stream's statistic from
      :func:`covbook.theory.var1_error_covariance`) for a rule with window ``run_interval``;
    * ``var_slope_*``: the MSE slope over the last two decades, between −1 and −1 + b;

    and per (transition, s) ``var_positive_vs_iid_s1``, ``var_negative_vs_iid_s0p1``,
    ``var_negative_vs_iid_s1``: t|err|²/C_iid against the formula's C_A/C_iid (its run interval
    likewise, from the SD of one stream's t|err|²/C_iid).  Glues
    ``var_{positive,negative}_rho`` (spectral radii), ``var_{positive,negative}_naive_z`` (the
    error of the readout Qa in root-mean-square errors), and ``{tag}_predicted``, ``{tag}_z_iid``
    for each comparison tag.

    Raises ``ValueError`` for fewer than 2 streams or ``t_var`` below 101.
    """
    sizes = {"positive": check_streams(n_streams, "n_streams"),
             "negative": check_streams(n_streams_var, "n_streams_var")}
    t_var = check_length(t_var, "t_var")
    dev = resolve_device(device)
    cps = log_checkpoints(t_var, 12)
    res = Var1Readout(checkpoints=cps, fit=cps >= t_var / 100)
    for i, (name, A) in enumerate(TRANSITIONS.items()):
        proc = VAR1(A, Q)
        sigma = proc.covariance
        unit, q = _var1_queries(sigma, S_LEVELS[name])
        out = _read(proc, q, cps, sizes[name], streams.seed_for("var1", replicate=i), dev)  # (R, n_t, m, 2)
        sq = ((out - q @ sigma) ** 2).sum(-1).numpy()  # (R, n_t, m)
        c_a = var1_rate_constant(_EYE, _EYE, _EYE, A, Q, q).numpy()  # (m,)
        c_iid = readout_mse_constant(_EYE, _EYE, _EYE, sigma, q).numpy()  # (m,)
        naive_gap = float(((q @ Q - q @ sigma) ** 2).sum(-1).mean())  # |Qa − Σa|², averaged
        res.runs[name] = Var1Transition(A=A, sigma=sigma, unit=unit, sq=sq, C_A=c_a, C_iid=c_iid, naive_gap=naive_gap,
                                        ratio=(cps[None, :, None] * sq / c_a).mean(-1),  # ratio: (R, n_t)
                                        V=var1_error_covariance(_EYE, _EYE, _EYE, A, Q, q))  # V: (m, 2, m, 2)
        res.glue(f"var_{name}_rho", spectral_radius(A))
    for name in TRANSITIONS:
        _var1_claims(res, name, streams)
    return res


def _mean_law(mean: float, sd: float, n_r: int, rho: float) -> dict[str, float]:
    r"""The run interval of the mean of ``n_r`` iid streams' weighted χ² statistic, by its Satterthwaite law.

    One stream's t·|err|²/c (averaged over queries) is asymptotically a Gaussian quadratic form of mean
    ``mean`` and SD ``sd`` (:func:`covbook.theory.quadratic_error_moments`); the mean of ``n_r`` streams is
    taken as mean·χ²_ν/ν with ν = 2 n_r mean²/sd² (the same mean and variance), and its range is widened
    to [ρ·mean, mean] by the pre-asymptotic deficit (the reach heuristic ρ).  Returns ``lower`` = ρ·mean·q_lo,
    ``upper`` = mean·q_hi (q the χ²_ν/ν quantiles at LEVEL/2 and 1 − LEVEL/2) and ``nu``.  The SE read
    from the same streams is not used: it falls with their mean (a skewed, non-negative statistic), so a
    low mean would come with a narrow window.
    """
    nu = 2.0 * n_r * mean**2 / sd**2
    return dict(lower=rho * mean * float(chdtri(nu, 1 - LEVEL / 2)) / nu,
                upper=mean * float(chdtri(nu, LEVEL / 2)) / nu, nu=nu)


def _var1_claims(res: Var1Readout, name: str, streams: RandomStreams) -> None:
    """The constant, the slope and the comparisons with the iid constant for one transition."""
    v, cps, fit = res.runs[name], res.checkpoints, res.fit
    n_r = v.ratio.shape[0]
    constant_id, slope_id = _VAR_IDS[name]
    s_all = [s for s in S_LEVELS[name] for _ in range(N_DIRS)]
    b, rho_end = reach_allowance(s_all, cps[fit])
    m, se = mean_with_se(v.ratio[:, -1])
    _, sd = quadratic_error_moments(v.V, v.C_A)  # one stream's t·|err|²/C_A: mean 1, SD sd
    res.measure(constant_id, m, prediction=(1 + rho_end) / 2, se=se, allowance=(1 - rho_end) / 2, name=name,
                cps_var_1=cps[-1], n_r=n_r, rho_end=rho_end, **_mean_law(1.0, sd, n_r, rho_end))
    slope, sse = slope_with_se(cps[fit], v.sq.mean(-1)[:, fit], seed=streams.seed_for(f"bootstrap-var1-{name}"))
    res.measure(slope_id, slope, prediction=-1.0 + b / 2, se=sse, allowance=b / 2, name=name, n_r=n_r)
    res.glue(f"var_{name}_naive_z", np.sqrt(v.naive_gap / v.sq[:, -1].mean()))
    for j, s in enumerate(S_LEVELS[name]):
        cols = slice(N_DIRS * j, N_DIRS * (j + 1))  # the directions at this s
        per_stream = (cps[-1] * v.sq[:, -1, cols] / v.C_iid[cols]).mean(-1)  # (R,): t·|err|²/C_iid
        m, se = mean_with_se(per_stream)
        predicted, sd_s = quadratic_error_moments(v.V[cols][:, :, cols], v.C_iid[cols])  # mean of C_A/C_iid
        _, rho_s = reach_allowance([s], cps[fit])
        tag = _VS_IID[(name, s)]
        res.glue(f"{tag}_predicted", predicted)
        res.glue(f"{tag}_z_iid", (m - 1.0) / se)  # distance from the iid value, in SE
        res.measure(tag, m, prediction=predicted * (1 + rho_s) / 2, se=se, allowance=predicted * (1 - rho_s) / 2,
                    name=name, s=s, predicted=predicted, n_r=n_r, rho_end=rho_s,
                    below_if_predicted_1_else_above="below" if predicted < 1 else "above",
                    **_mean_law(predicted, sd_s, n_r, rho_s))


# --------------------------------------------------------------------------------------------------
# Non-ergodic


#: The two component covariances and the query of the non-ergodic experiment.
COVS = (torch.diag(torch.tensor([2.0, 0.5], dtype=torch.float64)),
        torch.diag(torch.tensor([0.5, 2.0], dtype=torch.float64)))
A_NONERGODIC = torch.tensor([[0.5, 0.5]], dtype=torch.float64)


@dataclass
class NonErgodicReadout(Result):
    r"""Streams with a covariance Σ_k drawn once each (Proposition ``thm-04-nonergodic``).

    ``paths`` (R, n_t, 2): out_t per stream; ``components`` (R,): k per stream; ``own`` (R, 2): Σ_k a;
    ``pooled`` (2,): Σ̄a.
    """

    paths: np.ndarray = field(default_factory=lambda: np.zeros((0, 0, 2)))
    components: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=int))
    own: np.ndarray = field(default_factory=lambda: np.zeros((0, 2)))
    pooled: np.ndarray = field(default_factory=lambda: np.zeros(2))

    def plot(self, ax: plt.Axes) -> None:
        """A few paths per component, every stream's end point, the own readouts (stars) and Σ̄a (cross)."""
        final = self.paths[:, -1]  # (R, 2)
        for k in range(len(COVS)):
            sel = self.components == k
            for r in np.flatnonzero(sel)[:8]:  # a few paths, t = 100 ... t_max
                ax.plot(self.paths[r, :, 0], self.paths[r, :, 1], "-", lw=0.7, alpha=0.6, color=f"C{k}")
            ax.plot(final[sel, 0], final[sel, 1], "o", ms=3, color=f"C{k}",
                    label=f"streams with $\\Sigma_{k + 1}$ (end points)")
            lim = (COVS[k] @ A_NONERGODIC[0]).numpy()
            ax.plot(lim[0], lim[1], "*", ms=18, mfc="none", mec="k", mew=1.2)
        ax.plot(self.pooled[0], self.pooled[1], "X", ms=12, color="k", label=r"pooled $\bar\Sigma a$")
        ax.plot([], [], "*", ms=12, mfc="none", mec="k", label="own readouts $\\Sigma_k a$")
        ax.set(xlabel="out$_1$", ylabel="out$_2$", aspect="equal",
               title="Non-ergodic: each stream goes to its own readout")
        ax.legend(fontsize="x-small")


def nonergodic(t_max: int, n_streams: int, *, streams: RandomStreams,
               device: str | torch.device = "cpu") -> NonErgodicReadout:
    r"""Each stream draws Σ_k (k = 1, 2, equally likely) once, then iid N(0, Σ_k) tokens; a = (½, ½).

    ``n_streams`` streams read at 12 log-spaced t up to ``t_max``; at t = ``t_max`` measures

    * ``nonergodic_gap_to_pooled``: the mean of |out_t − Σ̄a|² − (|Σ_k a − Σ̄a|² + C_k/t) (prediction 0;
      the alternative, every stream drifting to Σ̄a, gives −|Σ_k a − Σ̄a|²);
    * ``nonergodic_constant``: the mean of t|out_t − Σ_k a|²/C_k (prediction 1);
    * ``nonergodic_ensemble_mean``: the mean of (out_t − Σ̄a) along the unit vector of Σ_1a − Σ_2a
      (prediction 0);

    and glues ``nonergodic_gap2`` (the mean |Σ_k a − Σ̄a|²), ``n_streams`` and ``t_max_text``.

    Raises ``ValueError`` for ``t_max`` below 101 or fewer than 2 streams.
    """
    t_max = check_length(t_max, "t_max")
    n_streams = check_streams(n_streams, "n_streams")
    dev = resolve_device(device)
    covs, a = list(COVS), A_NONERGODIC
    checkpoints = log_checkpoints(t_max, 12)
    mix = NonErgodicGaussian(covs)
    out = _read(mix, a, checkpoints, n_streams, streams.seed_for("nonergodic"), dev)  # (R, n_t, 1, 2)
    # each stream's component (the generator readout_paths's sampler drew them from)
    ks = mix.components(streams.torch_generator("nonergodic", device=dev), n_streams).cpu()  # (R,)
    own = torch.stack([covs[k] @ a[0] for k in ks.tolist()])  # (R, 2)
    pooled = mix.covariance @ a[0]  # (2,)
    final = out[:, -1, 0]  # (R, 2)
    c_own = torch.stack([readout_mse_constant(_EYE, _EYE, _EYE, covs[k], a[0]) for k in ks.tolist()])  # (R,)
    ne_ratio = (checkpoints[-1] * ((final - own) ** 2).sum(-1) / c_own).numpy()  # (R,)
    dist2_pooled = ((final - pooled) ** 2).sum(-1).numpy()  # (R,)
    dist2_predicted = (((own - pooled) ** 2).sum(-1) + c_own / checkpoints[-1]).numpy()  # (R,): gap² + C_k/t
    split = (covs[0] - covs[1]) @ a[0]
    split = split / split.norm()  # the direction Σ_1a − Σ_2a
    res = NonErgodicReadout(paths=out[:, :, 0].numpy(), components=ks.numpy(), own=own.numpy(),
                            pooled=pooled.numpy())
    res.glue("n_streams", n_streams)
    res.glue("t_max_text", f"{t_max:,}")
    m, se = mean_with_se(dist2_pooled - dist2_predicted)
    gap2 = float(((own - pooled) ** 2).sum(-1).mean())
    res.glue("nonergodic_gap2", gap2)
    # alternative: every stream drifts to the pooled readout, so the excess is −gap²
    res.measure("nonergodic_gap_to_pooled", m, prediction=0.0, se=se, drift_to_pooled=-gap2)
    m, se = mean_with_se(ne_ratio)
    res.measure("nonergodic_constant", m, prediction=1.0, se=se)
    m, se = mean_with_se((final - pooled).numpy() @ split.numpy())
    # alternative: the outputs centred on one component's readout, at this offset
    offset = float(np.abs((own - pooled).numpy() @ split.numpy()).mean())
    res.measure("nonergodic_ensemble_mean", m, prediction=0.0, se=se, component=offset)
    return res


# --------------------------------------------------------------------------------------------------
# Random walk


@dataclass
class WalkReadout(Result):
    """|out_t| over random-walk contexts (Proposition ``thm-04-walk``): ``log_norm`` (R, n_t)."""

    checkpoints: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=int))
    log_norm: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))

    def plot(self, ax: plt.Axes) -> None:
        """Five single streams (grey), the median over streams with its slope, and a √t reference."""
        cps, median = self.checkpoints, np.exp(np.median(self.log_norm, 0))  # (n_t,)
        for r in range(min(5, self.log_norm.shape[0])):
            ax.loglog(cps, np.exp(self.log_norm[r]), lw=0.8, alpha=0.6, color="0.5")
        loglog_with_fit(ax, cps, median, label="median over streams", color="C3")
        ax.loglog(cps, np.sqrt(cps) * median[-1] / np.sqrt(cps[-1]), "k--", lw=0.8, label=r"$\propto\sqrt{t}$")
        ax.set(xlabel="$t$", ylabel=r"$|\mathrm{out}_t|$",
               title="Random walk: no limit, growth like $\\sqrt{t}$ (grey: single streams)")
        ax.legend()


def random_walk(t_walk: int, n_streams: int, *, streams: RandomStreams,
                device: str | torch.device = "cpu") -> WalkReadout:
    r"""Random-walk tokens x_s = x_{s−1} + ξ_s (ξ ~ N(0, I)), query a = (½, 0): no limit.

    ``n_streams`` streams read at 13 log-spaced t up to ``t_walk``.  Measures ``walk_growth``: the
    slope of log median |out_t| against log t over the last two decades (prediction ½), with a
    bootstrap SE over streams.

    Raises ``ValueError`` for ``t_walk`` below 101 or fewer than 2 streams.
    """
    t_walk = check_length(t_walk, "t_walk")
    n_streams = check_streams(n_streams, "n_streams")
    dev = resolve_device(device)
    cps = log_checkpoints(t_walk, 13)
    a = torch.tensor([[0.5, 0.0]], dtype=torch.float64)
    out = _read(RandomWalk(_EYE), a, cps, n_streams, streams.seed_for("walk"), dev)[:, :, 0]  # (R, n_t, 2)
    log_norm = np.log(out.norm(dim=-1).numpy())  # (R, n_t)
    late = cps >= t_walk / 100  # fit the last two decades

    def stat(rows: np.ndarray) -> float:
        return loglog_slope(cps[late], np.exp(np.median(rows[:, late], 0)))[0]

    slope = stat(log_norm)
    se = bootstrap_se(log_norm, stat, n_boot=400, seed=streams.seed_for("bootstrap-walk"))
    res = WalkReadout(checkpoints=cps, log_norm=log_norm)
    res.measure("walk_growth", slope, prediction=0.5, se=se, n_streams=n_streams)
    return res


# --------------------------------------------------------------------------------------------------
# Skewed and bimodal


#: The queries along a ray, a = c·(direction), c = ¼, ½, ¾, 1, for the two laws of Proposition thm-04-bent.
RAY = torch.tensor([0.25, 0.5, 0.75, 1.0], dtype=torch.float64)[:, None]  # (4, 1)


def _bent_cases() -> dict[str, tuple[Process, torch.Tensor]]:
    """{law: (process, queries (4, 2))}: centred exponentials, and ½N(m, I) + ½N(−m, I) with m = (2, 0)."""
    return {
        "skewed": (SkewedExponential(2), RAY * torch.tensor([0.2, -0.6], dtype=torch.float64)),
        "bimodal": (BimodalGaussian([2.0, 0.0]), RAY * torch.tensor([0.8, 0.3], dtype=torch.float64)),
    }


@dataclass
class BentCase:
    """One law's run: ``out`` (R, 4, 2) at t = t_max, the queries ``a`` (4, 2), ∇log M(a) and Σa (4, 2)."""

    process: Process
    a: torch.Tensor
    out: torch.Tensor
    limit: torch.Tensor
    sigma_a: torch.Tensor


@dataclass
class BentReadout(Result):
    """The readout over skewed and bimodal laws (Proposition ``thm-04-bent``), one case per law."""

    cases: dict[str, BentCase] = field(default_factory=dict)

    def plot(self, axes: tuple[plt.Axes, plt.Axes]) -> None:
        """Per law: the tilted mean (solid) and Σa (dashed) along the ray, and the mean outputs (dots)."""
        for ax, (name, b) in zip(axes, self.cases.items()):
            fine = torch.linspace(0, 1, 101, dtype=torch.float64)[:, None] * b.a[-1]  # (101, 2)
            lim_curve, sig_curve = tilted_mean(b.process, fine), fine @ b.process.covariance
            ax.plot(lim_curve[:, 0], lim_curve[:, 1], "-", color="C0", label=r"tilted mean $\nabla\log M(a)$")
            ax.plot(sig_curve[:, 0], sig_curve[:, 1], "--", color="C3", label=r"covariance readout $\Sigma a$")
            m = b.out.mean(0)  # (4, 2)
            ax.plot(m[:, 0], m[:, 1], "o", color="k", ms=6, label="measured (mean over streams)")
            ax.set(xlabel="out$_1$", ylabel="out$_2$", title=f"{name}: queries along a ray")
            ax.legend(fontsize="x-small")


def bent(t_max: int, n_streams: int, *, streams: RandomStreams, device: str | torch.device = "cpu") -> BentReadout:
    r"""Skewed and bimodal laws: the limit is the tilted mean ∇log M(a), bent away from Σa.

    ``n_streams`` streams of ``t_max`` tokens per law, four queries along a ray.  At the largest
    query measures

    * ``skewed_limit``, ``bimodal_limit``: the squared standardised distance
      Σ_i ((mean_i − ∇log M(a)_i)/SE_i)² of the mean output, within [0, χ²₂ quantile at the level];
    * ``skewed_gap``, ``bimodal_gap``: the mean |out_t − Σa| against |∇log M(a) − Σa|.

    Raises ``ValueError`` for a ``t_max`` that is not a positive int or fewer than 2 streams.
    """
    t_max = check_positive_int(t_max, "t_max")
    n_streams = check_streams(n_streams, "n_streams")
    dev = resolve_device(device)
    res = BentReadout()
    for i, (name, (proc, a)) in enumerate(_bent_cases().items()):
        out = _read(proc, a, [t_max], n_streams, streams.seed_for("counterexamples", replicate=i), dev)[:, -1]
        res.cases[name] = BentCase(process=proc, a=a, out=out, limit=tilted_mean(proc, a),
                                   sigma_a=a @ proc.covariance)  # out: (R, 4, 2)
    for name, b in res.cases.items():
        _bent_claims(res, name, b, n_streams)
    return res


def _bent_claims(res: BentReadout, name: str, b: BentCase, n_streams: int) -> None:
    """``{law}_limit`` (squared standardised distance to ∇log M(a)) and ``{law}_gap`` (distance to Σa)."""
    final = b.out[:, -1].numpy()  # (R, 2): the largest query
    mean = final.mean(0)  # (2,)
    se = final.std(0, ddof=1) / np.sqrt(n_streams)  # (2,)
    lim, sig = b.limit[-1].numpy(), b.sigma_a[-1].numpy()  # (2,) each
    z2 = float((((mean - lim) / se) ** 2).sum())  # squared standardised distance
    limit_fields = dict(lower=0.0, upper=LEVEL_CHI2_2, name=name, lim_0=lim[0], lim_1=lim[1],
                        LEVEL_CHI2_2=LEVEL_CHI2_2, n_streams=n_streams)
    gaps = np.linalg.norm(final - sig, axis=-1)  # (R,)
    g_m, g_se = mean_with_se(gaps)
    gap_fields = dict(prediction=float(np.linalg.norm(lim - sig)), se=g_se, name=name,
                      np_linalg_norm_lim_sig=np.linalg.norm(lim - sig), n_streams=n_streams)
    if name == "skewed":
        res.measure("skewed_limit", z2, **limit_fields)
        res.measure("skewed_gap", g_m, **gap_fields)
    else:
        res.measure("bimodal_limit", z2, **limit_fields)
        res.measure("bimodal_gap", g_m, **gap_fields)
