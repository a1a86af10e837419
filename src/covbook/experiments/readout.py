r"""Chapter 01, the covariance readout for Gaussian contexts (T1 (a), ``thm-01-gaussian-readout``).

For iid tokens :math:`x_s \sim \mathcal N(\mu, \Sigma)` and a fixed query q, one softmax head's output

.. math:: \mathrm{out}_t(q) \to \Theta_V(\mu + \Sigma a), \qquad a = \Theta_K^\top\Theta_Q q,

with :math:`t\,\mathbb E|\mathrm{out}_t - \mathrm{out}_\infty|^2 \to C = e^{s}(\operatorname{tr}
\Theta_V\Sigma\Theta_V^\top + |\Theta_V\Sigma a|^2)`, :math:`s = a^\top\Sigma a`.  The chapter's three
experiments:

* :func:`single_streams`: one long stream per random configuration, read by
  :func:`covbook.attention.readout_paths`, against the limit and the delta-method envelope √(C/t);
* :func:`rate`: the 1/t rate and the constant C at logit variances s = 0.25, 1, 2;
* :func:`causal`: the query is one of the keys (its self-term is an O(1/t) bias).

Their configurations (Σ, μ, Θ_Q, Θ_K, Θ_V and fixed queries) are drawn by :func:`configurations`,
in the chapter's order, from the one stream ``configs``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import matplotlib.pyplot as plt
import numpy as np
import torch
from scipy.special import chdtri  # χ²_ν(p) = chdtri(ν, 1 − p), chi2.ppf to ~1e-13 (scipy.stats costs ~1.3 s)

from covbook._validate import check_positive_int
from covbook.attention import readout_paths
from covbook.experiments._common import check_length, check_streams, log_checkpoints
from covbook.experiments.result import RandomStreams, Result
from covbook.plotting import loglog_with_fit
from covbook.processes import GaussianIID
from covbook.rules import LEVEL
from covbook.stats import mean_with_se, slope_with_se
from covbook.theory import (
    covariance_readout,
    logit_variance,
    normalised_error_sd,
    reach_allowance,
    readout_error_covariance,
    readout_mse_constant,
    scale_to_logit_variance,
)

__all__ = ["CHAPTER", "Head", "Configurations", "configurations", "SingleStreams", "single_streams",
           "Rate", "rate", "RATE_CLAIMS", "Causal", "causal", "rate_grid"]

CHAPTER = "01"

#: (s, tag, slope claim, constant claim) of the rate experiment; ``tag`` names its bootstrap stream.
RATE_CLAIMS = (
    (0.25, "0p25", "slope_s0p25", "constant_s0p25"),
    (1.0, "1p0", "slope_s1p0", "constant_s1p0"),
    (2.0, "2p0", "slope_s2p0", "constant_s2p0"),
)
#: The largest logit variance over the random queries of the causal experiment.
CAUSAL_S = 1.5


@dataclass
class Head:
    """One random configuration: the context law N(μ, Σ), the head's maps and its fixed queries.

    ``theta_q`` is as drawn; each experiment rescales it to the logit variance it wants.
    """

    cov: torch.Tensor  # (d, d)
    mean: torch.Tensor | None  # (d,), None for a zero mean
    theta_q: torch.Tensor  # (d, d)
    theta_k: torch.Tensor  # (d, d)
    theta_v: torch.Tensor  # (d, d)
    queries: torch.Tensor | None  # (m, d); None where the experiment draws its own


@dataclass
class Configurations:
    """The chapter's configurations: one per single stream, the rate experiment's and the causal one's."""

    single: list[Head]
    rate: Head
    causal: Head


def configurations(d: int, n_configs: int, n_queries: int, *, streams: RandomStreams) -> Configurations:
    r"""Draw the chapter's random configurations from the stream ``configs``, in the chapter's order.

    Each covariance is :math:`\Sigma = AA^\top/d + 0.2 I` with A a standard normal d × d matrix, each
    map a standard normal matrix over √d.  The single-stream configurations alternate a zero and a
    standard normal mean and carry ``n_queries`` standard normal queries; the rate configuration has one
    query and a zero mean; the causal one a standard normal mean and no fixed query (its queries are
    drawn from the context law by :func:`causal`).

    Raises ``ValueError`` unless ``d``, ``n_configs`` and ``n_queries`` are positive integers.
    """
    d = check_positive_int(d, "d")
    n_configs = check_positive_int(n_configs, "n_configs")
    n_queries = check_positive_int(n_queries, "n_queries")
    gen = streams.torch_generator("configs")

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    def random_cov() -> torch.Tensor:
        a = randn(d, d)  # (d, d)
        return a @ a.T / d + 0.2 * torch.eye(d, dtype=torch.float64)

    def maps() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return randn(d, d) / d**0.5, randn(d, d) / d**0.5, randn(d, d) / d**0.5

    single = []
    for c in range(n_configs):
        cov = random_cov()
        mean = None if c % 2 == 0 else randn(d)
        tq, tk, tv = maps()
        single.append(Head(cov, mean, tq, tk, tv, randn(n_queries, d)))
    cov = random_cov()
    tq, tk, tv = maps()
    rate_head = Head(cov, None, tq, tk, tv, randn(1, d))
    cov = random_cov()
    mean = randn(d)
    tq, tk, tv = maps()
    return Configurations(single, rate_head, Head(cov, mean, tq, tk, tv, None))


def rate_grid(t_max: int) -> tuple[np.ndarray, np.ndarray]:
    """The rate experiments' context lengths (12 log-spaced from 100 to ``t_max``) and the fit window.

    The window is t ≥ t_max/100: the last two decades.  Raises ``ValueError`` unless ``t_max`` is an
    integer above 100.
    """
    t_max = check_length(t_max, "t_max")
    t_rate = log_checkpoints(t_max, 12)  # (n_t,)
    return t_rate, t_rate >= t_max / 100


@dataclass
class SingleStreams(Result):
    """Experiment 1: the error along one long stream per configuration and query.

    ``err[k, c, j]`` is :math:`|\\mathrm{out}_t - \\Theta_V(\\mu + \\Sigma a)|` at ``checkpoints[k]``
    for configuration c and query j; ``C[c, j]`` the delta-method constant.
    """

    checkpoints: np.ndarray  # (n_t,)
    err: torch.Tensor  # (n_t, configs, m)
    C: torch.Tensor  # (configs, m)
    zero_mean: list[bool] = field(default_factory=list)

    def plot(self, ax: plt.Axes) -> None:
        """Each path's error against t (solid), with its envelope √(C/t) (dotted), one colour per configuration."""
        n_configs, n_queries = self.C.shape
        for c in range(n_configs):
            label = f"config {c} ({'zero' if self.zero_mean[c] else 'non-zero'} mean)"
            for j in range(n_queries):
                ax.loglog(self.checkpoints, self.err[:, c, j], color=f"C{c}", lw=1, alpha=0.8,
                          label=label if j == 0 else None)
                ax.loglog(self.checkpoints, np.sqrt(self.C[c, j].item() / self.checkpoints), ":", color=f"C{c}",
                          lw=0.8)
        ax.set(xlabel="context length $t$", ylabel=r"$|\mathrm{out}_t - \Theta_V(\mu+\Sigma a)|$",
               title="Single streams approach the covariance readout (dotted: $\\sqrt{C/t}$)")
        ax.legend()


def single_streams(heads: list[Head], t_stream: int, *, streams: RandomStreams,
                   device: str | torch.device = "cpu") -> SingleStreams:
    r"""Read one stream of ``t_stream`` tokens per configuration and measure its error at the end.

    Configuration c is read with its Θ_Q scaled to the largest logit variance s = 1, on the stream
    ``paths`` (replicate c), at 25 log-spaced checkpoints from 100 to ``t_stream``.  Claims:

    * ``stream_max_normalised_error``: :math:`\max_{c,j} t|\mathrm{err}|^2/\lambda_{\max}` over the
      :math:`\chi^2_{d}` quantile at level LEVEL/(pairs), λ_max the largest eigenvalue of the pair's
      delta-method error covariance (a Bonferroni bound, at most 1);
    * ``stream_mean_normalised_error``: the mean of :math:`t|\mathrm{err}|^2/C` (prediction 1), with the
      SD of :func:`covbook.theory.normalised_error_sd` combined over the independent configurations.

    Glues ``n_configs``, ``n_queries``, ``t_stream`` and ``rel_final`` (the largest final error over the
    size of its limit).  Raises ``ValueError`` for no configuration or ``t_stream`` not above 100.
    """
    if not heads or any(h.queries is None for h in heads):
        raise ValueError("heads must be a non-empty list of configurations with fixed queries")
    t_stream = check_length(t_stream, "t_stream")
    checkpoints = log_checkpoints(t_stream, 25)  # (n_t,)
    paths, limits, consts, sds, lam_max = [], [], [], [], []
    for c, h in enumerate(heads):
        q = h.queries  # (m, d)
        tq = scale_to_logit_variance(h.theta_q, h.theta_k, h.cov, q, 1.0)
        args = (tq, h.theta_k, h.theta_v, h.cov, q)
        res = readout_paths(GaussianIID(h.cov, h.mean), q, tq, h.theta_k, h.theta_v, checkpoints,
                            seed=streams.seed_for("paths", replicate=c), device=device)
        paths.append(res[0].cpu())  # (n_t, m, d_v)
        limits.append(covariance_readout(*args, h.mean))  # (m, d_v)
        consts.append(readout_mse_constant(*args))  # (m,)
        sds.append(normalised_error_sd(*args))  # sd of the stream's mean of t|err|²/C
        V = readout_error_covariance(*args)  # (m, d_v, m, d_v)
        lam_max.append(torch.stack([torch.linalg.eigvalsh(V[j, :, j, :]).max() for j in range(len(q))]))  # (m,)
    err = torch.stack([(p - lim).norm(dim=-1) for p, lim in zip(paths, limits)], 1)  # (n_t, configs, m)
    C = torch.stack(consts)  # (configs, m)
    out = SingleStreams(checkpoints, err, C, zero_mean=[h.mean is None for h in heads])
    n_configs, n_queries = C.shape
    d_v = heads[0].theta_v.shape[0]
    out.glue("n_configs", n_configs)
    out.glue("n_queries", n_queries)
    out.glue("t_stream", t_stream)
    out.glue("rel_final", (err[-1] / torch.stack(limits).norm(dim=-1)).max().item())
    normalised = (checkpoints[:, None, None] * err.numpy() ** 2) / C.numpy()  # (n_t, configs, m): t|err|²/C
    stat = (checkpoints[-1] * err[-1].numpy() ** 2) / torch.stack(lam_max).numpy()  # (configs, m): t|err|²/λ_max
    n_pairs = n_configs * n_queries
    bound = chdtri(d_v, LEVEL / n_pairs)
    out.measure("stream_max_normalised_error", stat.max() / bound, d=d_v, n_pairs=n_pairs)
    se_mean = float(np.sqrt(np.sum(np.square(sds)))) / n_configs  # configs are independent streams
    out.measure("stream_mean_normalised_error", normalised[-1].mean(), prediction=1.0, se=se_mean,
                n_configs=n_configs, n_queries=n_queries)
    return out


@dataclass
class Rate(Result):
    """Experiment 2: squared errors over streams at each logit variance.

    ``sq[s]`` has shape (R, n_t): the squared error of stream r at ``t_rate[k]``; ``C[s]`` the constant.
    """

    t_rate: np.ndarray  # (n_t,)
    fit_from: np.ndarray  # (n_t,) bool: the fit window
    sq: dict[float, np.ndarray]  # s → (R, n_t)
    C: dict[float, float]

    def plot(self, axes: np.ndarray) -> None:
        """Left: MSE against t with its fitted slope and C/t (dashed); right: t·MSE/C, which tends to 1."""
        t, w = self.t_rate, self.fit_from
        for i, (s, sq) in enumerate(self.sq.items()):
            mse = sq.mean(0)  # (n_t,)
            loglog_with_fit(axes[0], t[w], mse[w], label=f"s = {s}", color=f"C{i}", reference=self.C[s])
            axes[1].semilogx(t, t * mse / self.C[s], "o-", color=f"C{i}", ms=4, label=f"s = {s}")
        axes[0].set(xlabel="$t$", ylabel="MSE", title="MSE against $t$ (dashed: $C/t$)")
        axes[1].axhline(1, color="k", lw=0.8)
        axes[1].set(xlabel="$t$", ylabel=r"$t\cdot\mathrm{MSE}/C$", title="The constant: $t\\cdot$MSE$/C \\to 1$")
        axes[0].legend()
        axes[1].legend()


def rate(head: Head, t_max: int, n_streams: int, *, streams: RandomStreams,
         device: str | torch.device = "cpu") -> Rate:
    r"""The 1/t rate and the constant C: ``n_streams`` streams per logit variance s of :data:`RATE_CLAIMS`.

    Θ_Q is rescaled to each s; the streams of s number i come from the stream ``rate`` (replicate i).
    Claims per s: the log-log slope of the MSE over the last two decades (``slope_s*``, bootstrap SE on
    the stream ``bootstrap-rate-<tag>``) and :math:`t\cdot\mathrm{MSE}/C` at ``t_max`` (``constant_s*``).
    Both carry the pre-asymptotic allowance of :func:`covbook.theory.reach_allowance`: the slope lies
    between −1 and −1 + b, the constant between ρ and 1, and each prediction is the window's middle.
    A constant also carries the run interval [ρ q_lo, q_hi] of the mean of ``n_streams`` iid weighted χ²
    terms (q the χ²_ν/ν quantiles at LEVEL, ν = 2 n_streams/sd², sd the larger of
    :func:`covbook.theory.normalised_error_sd`, the t → ∞ SD of one stream, and the streams' own SD),
    for a rule with window ``run_interval``.
    Glues ``t_max`` and ``n_streams``.
    """
    if head.queries is None:
        raise ValueError("head must carry its fixed query (queries of shape (1, d))")
    n_streams = check_streams(n_streams)
    t_rate, fit_from = rate_grid(t_max)
    cov, tk, tv, q = head.cov, head.theta_k, head.theta_v, head.queries
    sq, C, s_of, tq_of = {}, {}, {}, {}
    for i, (s_target, _, _, _) in enumerate(RATE_CLAIMS):
        tq = scale_to_logit_variance(head.theta_q, tk, cov, q, s_target)
        out = readout_paths(GaussianIID(cov), q, tq, tk, tv, t_rate, streams=n_streams,
                            seed=streams.seed_for("rate", replicate=i), device=device)[:, :, 0].cpu()  # (R, n_t, d_v)
        sq[s_target] = ((out - covariance_readout(tq, tk, tv, cov, q)) ** 2).sum(-1).numpy()  # (R, n_t)
        C[s_target] = readout_mse_constant(tq, tk, tv, cov, q).item()
        s_of[s_target] = logit_variance(tq, tk, cov, q).item()
        tq_of[s_target] = tq
    res = Rate(t_rate, fit_from, sq, C)
    res.glue("t_max", t_max)
    res.glue("n_streams", n_streams)
    for s_target, tag, slope_id, constant_id in RATE_CLAIMS:
        b, rho_end = reach_allowance(s_of[s_target], t_rate[fit_from])  # slope of log ρ, ρ at the last t
        slope, se = slope_with_se(t_rate[fit_from], sq[s_target][:, fit_from],
                                  seed=streams.seed_for(f"bootstrap-rate-{tag}"))
        res.measure(slope_id, slope, prediction=-1.0 + b / 2, se=se, allowance=b / 2, s_target=s_target,
                    n_streams=n_streams)
        y = t_rate[-1] * sq[s_target][:, -1] / C[s_target]  # (R,) one stream's t|err|²/C
        sd_delta = normalised_error_sd(tq_of[s_target], tk, tv, cov, q)
        res.measure(constant_id, float(np.mean(y)), **_constant_law(y, sd_delta, rho_end), t_rate_1=t_rate[-1],
                    s_target=s_target, n_streams=n_streams)
    return res


def _constant_law(y: np.ndarray, sd_delta: float, rho_end: float) -> dict[str, float]:
    r"""The window of the mean of R independent t|err|²/C terms (mean in [ρ, 1]) by its Satterthwaite law.

    χ²_ν/ν with ν = 2R/sd², sd the delta-method SD of one term (``sd_delta``, its t → ∞ value; the RMS over
    streams when each has its own query), raised to the terms' own SD when that is larger, times the range
    [ρ, 1].  An SE read from the same streams alone falls with their mean (a skewed, non-negative statistic)
    and understates a low mean's spread; one stream's SD exceeds the delta-method SD by 1.1-1.4× at s = 1-2
    and t = 2·10⁴ (1,500 streams per setting, development seeds).  Returns the measurement's fields.
    """
    n = len(y)
    se = mean_with_se(y)[1]  # the streams' own SE, s/√R
    sd = max(sd_delta, se * float(np.sqrt(n)))
    nu = 2.0 * n / sd**2
    return dict(prediction=(1.0 + rho_end) / 2, se=se,
                allowance=(1.0 - rho_end) / 2, lower=rho_end * float(chdtri(nu, 1 - LEVEL / 2)) / nu,
                upper=float(chdtri(nu, LEVEL / 2)) / nu, nu=nu, rho_end=rho_end, sd_delta=sd_delta,
                sd=sd)


@dataclass
class Causal(Result):
    """Experiment 3: the query is one of the keys.

    ``sq_self[r, k]`` is :math:`|\\mathrm{out}^{\\rm self}_t - \\mathrm{out}_\\infty|^2/C` of stream r at
    ``t_rate[k]``; ``shift[r, k]`` the norm of the output's change by the query's attention to itself.
    """

    t_rate: np.ndarray  # (n_t,)
    sq_self: np.ndarray  # (R, n_t)
    shift: np.ndarray  # (R, n_t)

    def plot(self, ax: plt.Axes) -> None:
        """The normalised MSE and the squared self-term shift against t, each with its fitted slope."""
        loglog_with_fit(ax, self.t_rate, self.sq_self.mean(0), color="C0",
                        label=r"$\mathbb{E}\,|{\rm out}^{\rm self}_t-{\rm out}_\infty|^2/C$")
        loglog_with_fit(ax, self.t_rate, (self.shift**2).mean(0), label=r"self-term shift$^2$", color="C3",
                        marker="s")
        ax.set(xlabel="$t$", title="Causal head: the self-term is an $O(1/t)$ bias; the MSE slope stays $-1$")
        ax.legend()


def causal(head: Head, t_max: int, n_streams: int, *, streams: RandomStreams,
           device: str | torch.device = "cpu") -> Causal:
    r"""The causal head: each stream's query x_t is drawn from the context law and is also a key.

    The queries come from the stream ``causal-queries``, Θ_Q is scaled so that the largest s over them is
    :data:`CAUSAL_S`, and the contexts from the stream ``causal``: at each t the output with the query
    among the keys, and the same t − 1 context tokens without it (the exact self-term).  Claims:
    ``causal_slope`` (as in :func:`rate`, the allowance from each stream's s), ``causal_constant`` (the
    mean over streams of t|err|²/C at the longest t, with the delta-method SD of that mean: each
    stream's term tends to a weighted χ² of SD :func:`covbook.theory.normalised_error_sd`) and
    ``self_term_bias_slope``, the log-log slope of the mean squared shift, −1 (an O(1/t) bias; bootstrap
    SEs on the streams ``bootstrap-causal`` and ``bootstrap-self-term``).
    """
    n_streams = check_streams(n_streams)
    t_rate, fit_from = rate_grid(t_max)
    cov, mean, tk, tv = head.cov, head.mean, head.theta_k, head.theta_v
    process = GaussianIID(cov, mean)
    qs = process.sampler(streams.torch_generator("causal-queries"), n_streams)(1)  # (R, 1, d)
    tq = scale_to_logit_variance(head.theta_q, tk, cov, qs[:, 0], CAUSAL_S)
    lim = torch.stack([covariance_readout(tq, tk, tv, cov, qq, mean) for qq in qs])  # (R, 1, d_v)
    C_r = torch.stack([readout_mse_constant(tq, tk, tv, cov, qq) for qq in qs])[:, 0]  # (R,)
    kw = dict(streams=n_streams, seed=streams.seed_for("causal"), device=device)
    with_self = readout_paths(process, qs, tq, tk, tv, t_rate, query_is_key=True, **kw).cpu()  # (R, n_t, 1, d_v)
    without = readout_paths(process, qs, tq, tk, tv, t_rate - 1, query_is_key=False, **kw).cpu()  # (R, n_t, 1, d_v)
    sq_self = ((with_self - lim[:, None]) ** 2).sum(-1)[:, :, 0].numpy() / C_r[:, None].numpy()  # (R, n_t)
    shift = (with_self - without).norm(dim=-1)[:, :, 0].numpy()  # (R, n_t)
    res = Causal(t_rate, sq_self, shift)
    s_r = torch.stack([logit_variance(tq, tk, cov, qq[0]) for qq in qs]).numpy()  # (R,): each stream's s
    b, rho_end = reach_allowance(s_r, t_rate[fit_from])
    slope, se = slope_with_se(t_rate[fit_from], sq_self[:, fit_from], seed=streams.seed_for("bootstrap-causal"))
    res.measure("causal_slope", slope, prediction=-1.0 + b / 2, se=se, allowance=b / 2, n_streams=n_streams)
    y = t_rate[-1] * sq_self[:, -1]  # (R,) one stream's t|err|²/C
    sd_r = np.array([normalised_error_sd(tq, tk, tv, cov, qq) for qq in qs])  # (R,): each stream's own query
    res.measure("causal_constant", float(np.mean(y)), **_constant_law(y, float(np.sqrt(np.mean(sd_r**2))), rho_end),
                n_streams=n_streams)
    b_slope, b_se = slope_with_se(t_rate[fit_from], shift[:, fit_from], seed=streams.seed_for("bootstrap-self-term"))
    res.measure("self_term_bias_slope", b_slope, prediction=-1.0, se=b_se, n_streams=n_streams)
    return res
