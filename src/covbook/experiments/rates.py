"""Chapter 03 (``notebooks/03_heavy_tails_and_rates.md``): rates, large logits and heavy tails.

Three experiments on the rate of the covariance readout (T1 (g), (c) of ``ARCHITECTURE.md``):

* :func:`large_logits`: Gaussian tokens at large logit variance s, where t·MSE reaches its
  constant C only for t ≫ e^{2s} (Remark ``rem-03-reach``, the reach heuristic ρ(s, t));
* :func:`laplace_rates`: Laplace tokens, whose weights have a Pareto tail, so the limit exists but
  the MSE decays like t^{1−α} up to logarithms (Proposition ``thm-03-laplace-rate``);
* :func:`student_t`: Student-t tokens, for which softmax is a hard maximum and the output has no
  limit (Proposition ``thm-03-student``).

Each returns a :class:`~covbook.experiments.Result` with the chapter's measurements, its glued
numbers and a ``plot`` method for its figure.  Random draws come from the chapter's streams under the
names ``gauss-large-s``, ``laplace``, ``bootstrap-laplace-0.25``, ``bootstrap-laplace-1``,
``student-t``, ``student-t-top``, ``gauss-top``, ``bootstrap-t-growth`` and ``bootstrap-angle``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import matplotlib.pyplot as plt
import numpy as np
import torch

from covbook._validate import resolve_device
from covbook.attention import readout_paths
from covbook.experiments._common import check_length, check_streams, log_checkpoints
from covbook.experiments.result import RandomStreams, Result
from covbook.plotting import loglog_with_fit
from covbook.processes import GaussianIID, MultivariateLaplace, StudentT
from covbook.rules import Z
from covbook.stats import bootstrap_se, log_residual_weight, loglog_slope, mean_with_se, slope_with_se
from covbook.theory import (
    delta_method_reach,
    heavy_tail_mse_exponent,
    laplace_rate_fraction,
    laplace_weight_tail_index,
    readout_mse_constant,
    student_t_extreme_angle_sd,
    tilted_mean,
)

__all__ = ["CHAPTER", "LargeLogits", "LaplaceRates", "StudentTReadout", "axis_queries", "large_logits",
           "laplace_rates", "student_t", "length_text"]

CHAPTER = "03"

#: The logit variances of the large-logit experiment and, for s = 3, its fixed stream count (s = 5
#: uses ``n_long`` streams of ``t_long`` tokens; s = 3 needs only a tenth of that length).
S_LARGE = (3.0, 5.0)
STREAMS_S3 = 32
#: Short streams (of t ≈ 1000 tokens) on which the s = 5 deficit is read: the values are heavy-tailed, and the
#: few long streams gave a standard error that understated the mean's spread (SD/SE 1.5 at smoke).
STREAMS_DEFICIT = 256
#: The Laplace logit variances (tail index α = √(2/s): 2.83 and √2) and the Student-t degrees of freedom.
S_LAPLACE = (0.25, 1.0)
NUS = (1, 2, 3)
#: Contexts per length in which the largest softmax weight is measured.
TOP_CONTEXTS = 48

_EYE = torch.eye(2, dtype=torch.float64)


def axis_queries(s: float) -> torch.Tensor:
    r"""The four queries ±√s e_1, ±√s e_2 in R², each with logit variance aᵀΣa = s when Σ = I.

    Returns a tensor of shape (4, 2).

    Examples
    --------
    >>> axis_queries(4.0)[:, 0].tolist()
    [2.0, 0.0, -2.0, -0.0]
    """
    return np.sqrt(s) * torch.cat([_EYE, -_EYE])  # (4, 2)


def length_text(n: int) -> str:
    """A context length in the prose's short scientific form (``100000`` → ``'1e5'``).

    Examples
    --------
    >>> length_text(100_000), length_text(10**12)
    ('1e5', '1e12')
    """
    return f"{n:.0e}".replace("e+0", "e").replace("e+", "e")


def _squared_error(process: object, q: torch.Tensor, checkpoints: np.ndarray, n_streams: int, seed: int,
                   device: torch.device) -> np.ndarray:
    r"""|out_t(q_i) − ∇log M(a_i)|² along ``n_streams`` streams (Θ = I): shape (R, n_t, m)."""
    out = readout_paths(process, q, _EYE, _EYE, _EYE, checkpoints, streams=n_streams, seed=seed,
                        device=device).cpu()  # (R, n_t, m, 2)
    return ((out - tilted_mean(process, q)) ** 2).sum(-1).numpy()  # (R, n_t, m)


# --------------------------------------------------------------------------------------------------
# Large logits


@dataclass
class LargeLogits(Result):
    r"""t·MSE/C per stream for Gaussian tokens at large logit variances (Remark ``rem-03-reach``).

    ``ratio[s]`` has shape (R_s, n_t): t|out_t − Σa|²/C averaged over the four queries of a stream,
    at the context lengths ``checkpoints[s]``.
    """

    ratio: dict[float, np.ndarray] = field(default_factory=dict)
    checkpoints: dict[float, np.ndarray] = field(default_factory=dict)

    def plot(self, ax: plt.Axes) -> None:
        """t·MSE/C (± Z SE across streams) against t, with ρ(s, t) (dashed) and t = e^{2s} (dotted)."""
        for i, (s, r) in enumerate(self.ratio.items()):
            cps = self.checkpoints[s]
            m = r.mean(0)  # (n_t,)
            se = r.std(0, ddof=1) / np.sqrt(r.shape[0])  # (n_t,)
            ax.errorbar(cps, m, Z * se, fmt="o-", color=f"C{i}", ms=4, lw=1, label=f"measured, s = {s:g}")
            ax.plot(cps, delta_method_reach(np.full(len(cps), s), cps).numpy(), "--", color=f"C{i}", lw=1,
                    label=f"heuristic $\\rho(s,t)$, s = {s:g}")
            ax.axvline(np.exp(2 * s), color=f"C{i}", lw=0.6, ls=":")
        ax.axhline(1, color="k", lw=0.8)
        ax.set(xscale="log", yscale="log", xlabel="context length $t$", ylabel=r"$t\cdot\mathrm{MSE}/C$",
               title="Large logits: $t\\cdot$MSE approaches $C$ only slowly (dotted: $t = e^{2s}$)")
        ax.legend(fontsize="x-small")


def large_logits(t_long: int, n_long: int, *, streams: RandomStreams,
                 device: str | torch.device = "cpu") -> LargeLogits:
    r"""Gaussian tokens (d = 2, Σ = I) at s = 3 and s = 5: how far t·MSE is from its constant C.

    For each s, the four queries a = ±√s e_i are read along independent streams (32 of
    ``t_long // 10`` tokens at s = 3, ``n_long`` of ``t_long`` at s = 5), and per stream

    .. math:: r_t = \frac14\sum_{i=1}^4 \frac{t\,|\mathrm{out}_t(a_i) - \Sigma a_i|^2}{C(a_i)},
              \qquad C(a) = e^{s}(\operatorname{tr}\Sigma + |\Sigma a|^2),

    at 15 log-spaced t from 100.  Measures ``gauss_reach_s3`` (r at the longest t, between
    ρ(s, t) and 1) and ``gauss_deficit_s5`` (r at the checkpoint nearest t = 1000 at s = 5, on
    :data:`STREAMS_DEFICIT` streams of that length of their own); glues ``gauss_ratio_s5``
    (r at the longest t at s = 5, no claim: the few streams' values are too heavy-tailed for a
    reliable standard error), ``gauss_rho_s3``, ``gauss_rho_s5``, ``t_long_text`` and ``n_long``.

    Raises ``ValueError`` for ``t_long`` below 1010 or ``n_long`` below 2.
    """
    t_long = check_length(t_long, "t_long", least=1010)
    n_long = check_streams(n_long, "n_long")
    dev = resolve_device(device)
    gauss = GaussianIID(_EYE)
    res = LargeLogits()
    sizes = {S_LARGE[0]: (STREAMS_S3, t_long // 10), S_LARGE[1]: (n_long, t_long)}  # s: (streams, length)
    for i, (s, (n_r, t_end)) in enumerate(sizes.items()):
        cps = log_checkpoints(t_end, 15)
        q = axis_queries(s)  # (4, 2)
        sq = _squared_error(gauss, q, cps, n_r, streams.seed_for("gauss-large-s", replicate=i), dev)  # (R, n_t, 4)
        c = readout_mse_constant(_EYE, _EYE, _EYE, _EYE, q).numpy()  # (4,)
        res.ratio[s] = (cps[None, :, None] * sq / c).mean(-1)  # (R, n_t)
        res.checkpoints[s] = cps
    res.glue("t_long_text", length_text(t_long))
    res.glue("n_long", n_long)
    for s in S_LARGE:
        tag = f"s{s:g}"
        r, cps = res.ratio[s], res.checkpoints[s]
        m, se = mean_with_se(r[:, -1])
        rho = float(delta_method_reach([s], [cps[-1]]))
        res.glue(f"gauss_rho_{tag}", rho)
        fields = dict(prediction=(1 + rho) / 2, se=se, dof=r.shape[0] - 1, allowance=(1 - rho) / 2, s=s,
                      cps_by_s_s_1=cps[-1], rho=rho, n_r=r.shape[0])
        if s == 3.0:
            res.measure("gauss_reach_s3", m, **fields)
        else:  # no claim: n_long heavy-tailed streams give no reliable SE (SD/SE 2.25 over 20 seeds)
            res.glue("gauss_ratio_s5", float(m))
    cps5 = res.checkpoints[5.0]
    t_j = cps5[int(np.argmin(np.abs(cps5 - 1000)))]  # the checkpoint nearest t = 1000
    q = axis_queries(5.0)  # (4, 2)
    sq = _squared_error(gauss, q, np.array([t_j]), STREAMS_DEFICIT, streams.seed_for("gauss-deficit-s5"),
                        dev)  # (R, 1, 4)
    r_j = (t_j * sq[:, 0] / readout_mse_constant(_EYE, _EYE, _EYE, _EYE, q).numpy()).mean(-1)  # (R,)
    m, se = mean_with_se(r_j)
    res.measure("gauss_deficit_s5", m, prediction=0.5, se=se, dof=r_j.shape[0] - 1, cps_by_s_5_0_j=t_j,
                ratio_by_s_5_0_shape_0=r_j.shape[0])
    return res


# --------------------------------------------------------------------------------------------------
# Laplace tokens


@dataclass
class LaplaceRates(Result):
    """Squared errors of the readout over Laplace tokens (Proposition ``thm-03-laplace-rate``).

    ``sq_err[s]`` has shape (R, n_t): |out_t − g(s)Σa|² averaged over the four queries of a stream.
    """

    checkpoints: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=int))
    sq_err: dict[float, np.ndarray] = field(default_factory=dict)

    def plot(self, ax: plt.Axes) -> None:
        """Mean (with its fitted slope) and median squared error against t, and a 1/t reference."""
        cps = self.checkpoints
        for i, (s, e) in enumerate(self.sq_err.items()):
            loglog_with_fit(ax, cps, e.mean(0), label=f"MSE, s = {s:g}", color=f"C{i}")
            ax.loglog(cps, np.median(e, 0), "s", color=f"C{i}", ms=4, mfc="white",
                      label=f"median sq. error, s = {s:g}")
        first = self.sq_err[S_LAPLACE[0]].mean(0)[0]
        ax.loglog(cps, first * cps[0] / cps, "k--", lw=0.8, label="$1/t$")
        ax.set(xlabel="$t$", ylabel="squared error",
               title="Laplace tokens: close to $1/t$ at $s=1/4$, much slower at $s=1$")
        ax.legend(fontsize="x-small")


def laplace_rates(t_max: int, n_streams: int, *, streams: RandomStreams, n_streams_s1: int | None = None,
                  device: str | torch.device = "cpu") -> LaplaceRates:
    r"""The MSE slope of the readout over multivariate Laplace tokens (Σ = I, d = 2) at s = 1/4 and 1.

    ``n_streams`` streams of ``t_max`` tokens at s = 1/4 and ``n_streams_s1`` (default ``n_streams``)
    at s = 1, four queries ±√s e_i each, at 10 log-spaced t from 100.  At s = 1 the squared errors
    are heavy-tailed (a few streams meet one enormous weight), so the bootstrap SE of the slope is
    itself noisy and needs more streams for the same power.  Measures

    * ``laplace_slope_s0p25``: the slope over the last two decades against the pre-asymptotic
      prediction −1 + d log ρ_L / d log t (:func:`covbook.theory.laplace_rate_fraction`), with the
      allowance of moving the cut tM(a) by a factor 2 either way;
    * ``laplace_rate_s1``: the slope over the whole range at s = 1 (α = √2) against the bracket
      between 1 − α and the slope of t^{1−α} log²(tM), M(a) = 1/(1 − s/2) = 2;

    and glues ``laplace_pred_s0p25``, ``laplace_beta``, ``laplace_beta_log``, ``laplace_corrected``
    (the slope of MSE/log²(tM) at s = 1), ``t_max_text``, ``n_streams`` and ``n_streams_s1``.

    Raises ``ValueError`` for ``t_max`` below 101 or ``n_streams`` or ``n_streams_s1`` below 2.
    """
    t_max = check_length(t_max, "t_max")
    n_streams = check_streams(n_streams, "n_streams")
    n_streams_s1 = n_streams if n_streams_s1 is None else check_streams(n_streams_s1, "n_streams_s1")
    dev = resolve_device(device)
    laplace = MultivariateLaplace(_EYE)
    cps = log_checkpoints(t_max, 10)
    res = LaplaceRates(checkpoints=cps)
    for i, s in enumerate(S_LAPLACE):
        n = n_streams_s1 if s == 1.0 else n_streams
        sq = _squared_error(laplace, axis_queries(s), cps, n, streams.seed_for("laplace", replicate=i), dev)
        res.sq_err[s] = sq.mean(-1)  # (R, n_t): mean over queries
    res.glue("t_max_text", length_text(t_max))
    res.glue("n_streams", n_streams)
    res.glue("n_streams_s1", n_streams_s1)
    _laplace_quarter(res, t_max, n_streams, streams)
    _laplace_one(res, n_streams_s1, streams)
    return res


def _laplace_quarter(res: LaplaceRates, t_max: int, n_streams: int, streams: RandomStreams) -> None:
    """``laplace_slope_s0p25``: the last two decades' slope against −1 + the slope of log ρ_L."""
    cps = res.checkpoints
    last = cps >= t_max / 100  # fit the last two decades, as in chapter 1
    alpha4 = float(laplace_weight_tail_index([0.25]))
    frac = {c: laplace_rate_fraction(0.25, cps[last], cut=c)[0].numpy() for c in (0.5, 1.0, 2.0)}  # cut: (n_last,)
    pred = {c: -1.0 + loglog_slope(cps[last], f)[0] for c, f in frac.items()}
    allow = max(abs(pred[c] - pred[1.0]) for c in (0.5, 2.0))
    slope, se = slope_with_se(cps[last], res.sq_err[0.25][:, last], seed=streams.seed_for("bootstrap-laplace-0.25"))
    res.glue("laplace_pred_s0p25", pred[1.0])
    res.measure("laplace_slope_s0p25", slope, prediction=pred[1.0], se=se, allowance=allow, alpha4=alpha4,
                pred_1_0=pred[1.0], n_streams=n_streams)


def _laplace_one(res: LaplaceRates, n_streams: int, streams: RandomStreams) -> None:
    r"""``laplace_rate_s1``: the slope against the bracket [1 − α, 1 − α + slope of log log²(tM)]."""
    cps, e = res.checkpoints, res.sq_err[1.0]
    m_1 = 1.0 / (1.0 - 1.0 / 2.0)  # M(a) = E e^(sW/2) = 1/(1 - s/2) at s = 1
    log2 = np.log(cps * m_1) ** 2  # (n_t,): the (log tM)² factor of the proposition
    slope1, se1 = slope_with_se(cps, e, seed=streams.seed_for("bootstrap-laplace-1"))
    alpha = float(laplace_weight_tail_index([1.0]))
    beta = float(heavy_tail_mse_exponent([alpha]))
    b_log = loglog_slope(cps, log2)[0]  # slope of log (log tM)² over the window
    res.glue("laplace_beta", beta)
    res.glue("laplace_beta_log", beta + b_log)
    res.measure("laplace_rate_s1", slope1, prediction=beta + b_log / 2, se=se1, allowance=b_log / 2, beta=beta,
                beta_b_log=beta + b_log, n_streams=n_streams)
    res.glue("laplace_corrected", loglog_slope(cps, e.mean(0) / log2)[0])


# --------------------------------------------------------------------------------------------------
# Student-t tokens


@dataclass
class StudentTReadout(Result):
    r"""The readout over Student-t tokens, a = e_1 (Proposition ``thm-03-student``).

    For each ν: ``norm[ν]`` and ``angle[ν]``, shape (R, n_t), |out_t| and the angle of out_t to a;
    ``log_gap[ν]``, shape (n_top,), the median over contexts of log(1 − the largest softmax weight)
    at the lengths ``top_lengths`` (``log_gaps[ν]``, shape (n_top, TOP_CONTEXTS), per context), and
    ``top[ν]`` = 1 − exp(log_gap).  ``gauss_top``, shape
    (n_top,), is the median largest weight for Gaussian tokens.
    """

    checkpoints: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=int))
    norm: dict[int, np.ndarray] = field(default_factory=dict)
    angle: dict[int, np.ndarray] = field(default_factory=dict)
    log_gap: dict[int, np.ndarray] = field(default_factory=dict)
    log_gaps: dict[int, np.ndarray] = field(default_factory=dict, repr=False)
    top: dict[int, np.ndarray] = field(default_factory=dict)
    gauss_top: np.ndarray = field(default_factory=lambda: np.zeros(0))

    @property
    def top_lengths(self) -> np.ndarray:
        """The context lengths at which the largest weight is measured: every third checkpoint."""
        return self.checkpoints[::3]

    def plot(self, axes: tuple[plt.Axes, plt.Axes]) -> None:
        """Left: the median |out_t| with its fitted slope; right: the median largest softmax weight."""
        cps, tops = self.checkpoints, self.top_lengths
        for i, nu in enumerate(self.norm):
            loglog_with_fit(axes[0], cps, np.median(self.norm[nu], 0), label=f"ν = {nu} (theory {1 / nu:.2f})",
                            color=f"C{i}")
            axes[1].semilogx(tops, self.top[nu], "o-", color=f"C{i}", label=f"Student-t, ν = {nu}")
        axes[1].semilogx(tops, self.gauss_top, "s--", color="k", label="Gaussian (for contrast)")
        axes[0].set(xlabel="$t$", ylabel=r"median $|\mathrm{out}_t|$",
                    title="No limit: $|\\mathrm{out}_t|$ grows like $t^{1/\\nu}$")
        axes[1].set(xlabel="$t$", ylabel="median largest softmax weight", ylim=(-0.02, 1.05),
                    title="Softmax becomes a hard maximum")
        axes[0].legend()
        axes[1].legend(fontsize="x-small")


def _log_gaps(proc: StudentT, a: torch.Tensor, lengths: np.ndarray, nu: int, streams: RandomStreams,
              dev: torch.device) -> np.ndarray:
    """log(1 − largest softmax weight) in :data:`TOP_CONTEXTS` fresh contexts per length: (n_top, TOP_CONTEXTS)."""
    top = []
    for j, t in enumerate(lengths):
        x = proc.sampler(streams.torch_generator("student-t-top", (nu, j), device=dev), TOP_CONTEXTS)(int(t)).cpu()
        top.append(log_residual_weight((x @ a).numpy()))  # x: (TOP_CONTEXTS, t, 2)
    return np.stack(top)


def _top_growth(log_gaps: np.ndarray, n_boot: int, seeds: tuple[int, int]) -> tuple[float, float]:
    r"""The growth of :math:`L = -\log(1 - \text{top weight})` from the first to the last length, and its SE.

    Returns median log L at the last length − median log L at the first, shape (n_top, n) in
    ``log_gaps``; the SE adds the bootstrap SEs of the two medians (independent contexts).
    """
    first, last = np.log(-log_gaps[0]), np.log(-log_gaps[-1])  # (n,): L > 0 since the top weight is < 1
    se = np.hypot(bootstrap_se(first, np.median, n_boot=n_boot, seed=seeds[0]),
                  bootstrap_se(last, np.median, n_boot=n_boot, seed=seeds[1]))
    return float(np.median(last) - np.median(first)), float(se)


def _gauss_top(a: torch.Tensor, lengths: np.ndarray, streams: RandomStreams, dev: torch.device) -> np.ndarray:
    """Median over :data:`TOP_CONTEXTS` contexts of the largest softmax weight for Gaussian tokens: (n_top,)."""
    gtop = []
    for j, t in enumerate(lengths):
        x = GaussianIID(_EYE).sampler(streams.torch_generator("gauss-top", j, device=dev), TOP_CONTEXTS)(int(t)).cpu()
        gtop.append(torch.softmax(x @ a, dim=-1).amax(-1).median().item())  # x: (TOP_CONTEXTS, t, 2)
    return np.array(gtop)


def student_t(t_max: int, n_streams_t: int, *, streams: RandomStreams,
              device: str | torch.device = "cpu") -> StudentTReadout:
    r"""Student-t tokens (ν = 1, 2, 3; Σ = I, d = 2; a = e_1): growth, top weight and direction.

    ``n_streams_t`` streams of ``t_max`` tokens, read at 10 log-spaced t from 100, and
    :data:`TOP_CONTEXTS` fresh contexts at every third of those lengths for the largest weight.  Measures, per ν,

    * ``t_growth_nu1`` … : the slope of log median |out_t| against log t over the last two decades
      (prediction 1/ν), with a bootstrap SE over streams;
    * ``t_angle_nu1`` … : the root-mean-square angle of out_t to a at the longest t against the limit
      law's (:func:`covbook.theory.student_t_extreme_angle_sd`);

    and ``t_top_weight``: per ν the growth of the median log L, L = −log(1 − top weight), from t = 100
    to the longest length (:func:`_top_growth`, bootstrap SEs over the contexts on the stream
    ``bootstrap-top``), recorded for the ν whose lower window end (growth − Z SE) is lowest, against
    0 (no concentration); glues ``t_top_shrink`` (the largest over ν of (1 − top weight at the longest
    length) / (1 − top weight at t = 100), medians), ``t_top_min``, ``gauss_top`` and ``n_streams_t``.

    Raises ``ValueError`` for ``t_max`` below 101 or ``n_streams_t`` below 2.
    """
    t_max = check_length(t_max, "t_max")
    n_streams_t = check_streams(n_streams_t, "n_streams_t")
    dev = resolve_device(device)
    a = torch.tensor([[1.0, 0.0]], dtype=torch.float64)  # (1, 2)
    res = StudentTReadout(checkpoints=log_checkpoints(t_max, 10))
    cps, tops = res.checkpoints, res.top_lengths
    for nu in NUS:
        proc = StudentT(_EYE, nu)
        out = readout_paths(proc, a, _EYE, _EYE, _EYE, cps, streams=n_streams_t,
                            seed=streams.seed_for("student-t", replicate=nu), device=dev)[:, :, 0].cpu().numpy()
        res.norm[nu] = np.linalg.norm(out, axis=-1)  # out: (R, n_t, 2) → (R, n_t)
        res.angle[nu] = np.arctan2(out[..., 1], out[..., 0])  # (R, n_t)
        res.log_gaps[nu] = _log_gaps(proc, a[0], tops, nu, streams, dev)  # (n_top, TOP_CONTEXTS)
        res.log_gap[nu] = np.median(res.log_gaps[nu], 1)
        res.top[nu] = 1.0 - np.exp(res.log_gap[nu])
    res.gauss_top = _gauss_top(a[0], tops, streams, dev)
    res.glue("n_streams_t", n_streams_t)
    for nu in NUS:
        _student_claims(res, nu, t_max, n_streams_t, streams)
    growth = {nu: _top_growth(res.log_gaps[nu], 400, (streams.seed_for("bootstrap-top", (nu, 0)),
                                                      streams.seed_for("bootstrap-top", (nu, 1))))
              for nu in NUS}
    weakest = min(NUS, key=lambda nu: growth[nu][0] - Z * growth[nu][1])
    res.measure("t_top_weight", growth[weakest][0], prediction=0.0, se=growth[weakest][1], nu=weakest,
                n_top=TOP_CONTEXTS, cps_t_0=cps[0], cps_t_3_1=tops[-1])
    res.glue("t_top_shrink", max(np.exp(g[-1] - g[0]) for g in res.log_gap.values()))
    res.glue("t_top_min", min(h[-1] for h in res.top.values()))
    res.glue("gauss_top", res.gauss_top[-1])
    return res


def _rms(x: np.ndarray) -> float:
    """Root mean square of an array of angles."""
    return float(np.sqrt((x**2).mean()))


def _student_claims(res: StudentTReadout, nu: int, t_max: int, n_streams_t: int, streams: RandomStreams) -> None:
    """``t_growth_nu{ν}`` and ``t_angle_nu{ν}``, each with a bootstrap SE over streams."""
    cps = res.checkpoints
    logn = np.log(res.norm[nu])  # (R, n_t)
    late = cps >= t_max / 100  # the hard-maximum regime

    def stat(rows: np.ndarray) -> float:
        return loglog_slope(cps[late], np.exp(np.median(rows[:, late], 0)))[0]

    slope = stat(logn)
    se = bootstrap_se(logn, stat, n_boot=400, seed=streams.seed_for("bootstrap-t-growth", nu))
    ang = res.angle[nu][:, -1]  # (R,)
    sd = _rms(ang)
    sd_se = bootstrap_se(ang, _rms, n_boot=400, seed=streams.seed_for("bootstrap-angle", nu))
    limit = student_t_extreme_angle_sd(nu)
    growth = dict(prediction=1.0 / nu, se=se, nu=nu, n_streams_t=n_streams_t)
    angle = dict(prediction=limit, se=sd_se, nu=nu, cps_t_1=cps[-1], student_t_extreme_angle_sd_nu=limit,
                 n_streams_t=n_streams_t)
    if nu == 1:
        res.measure("t_growth_nu1", slope, **growth)
        res.measure("t_angle_nu1", sd, **angle)
    elif nu == 2:
        res.measure("t_growth_nu2", slope, **growth)
        res.measure("t_angle_nu2", sd, **angle)
    else:
        res.measure("t_growth_nu3", slope, **growth)
        res.measure("t_angle_nu3", sd, **angle)
