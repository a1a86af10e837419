r"""Chapter 02, elliptical contexts: the direction survives, the magnitude does not (T1 general, (b), (d)).

The limit of softmax attention is the tilted mean :math:`\Theta_V\nabla\log M(a)`
(``thm-02-tilted-mean``).  For a Gaussian scale mixture :math:`X = \sqrt W Z` it is
:math:`g(s)\,\Sigma a` with the gain :math:`g(s) = \mathbb E[We^{sW/2}]/\mathbb E[e^{sW/2}]`,
:math:`s = a^\top\Sigma a` (``thm-02-elliptical-gain``), and at small logits
:math:`g(s) = 1 + \kappa s/6 + O(s^2)` with :math:`\kappa = 3\operatorname{Var}W`
(``thm-02-small-logit``); for a skewed law the first correction is :math:`\tfrac12\kappa_3[a, a]`.
The chapter's experiments:

* :func:`nig_boundary`: the normal-inverse-Gaussian law at s = 2 (finite M, divergent tilted mean);
* :func:`gains`: the measured gain and direction for the Gaussian, two-point, Laplace and
  normal-inverse-Gaussian laws on a grid of s, with :func:`small_logit_kurtosis` (κ read from the
  outputs at s = 0.1) and :func:`doubling` (doubling the query does not double a Laplace readout);
* :func:`skew`: the skew term for centred exponential coordinates.
"""

from __future__ import annotations

from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import torch

from covbook._validate import check_positive_int
from covbook.attention import readout_paths
from covbook.experiments._common import check_streams
from covbook.experiments.result import RandomStreams, Result
from covbook.processes import (
    DiscreteMixing,
    GaussianIID,
    InverseGaussianMixing,
    MixingLaw,
    MultivariateLaplace,
    Process,
    ScaleMixture,
    SkewedExponential,
)
from covbook.rules import Z
from covbook.stats import gain_and_angle, mean_with_se
from covbook.theory import (
    elliptical_gain,
    elliptical_kurtosis,
    small_logit_gain,
    small_logit_remainder,
    tilted_mean_expansion,
)

__all__ = ["CHAPTER", "LAW_CLAIMS", "S_GRID", "S_CLAIM", "S_FAST", "SKEW_R", "gain_curve", "nig_boundary", "LawReadout",
           "Gains", "gains", "small_logit_kurtosis", "doubling", "Skew", "skew"]

CHAPTER = "02"

#: law → (gain claim, angle claim, kurtosis claim, glued z of the gain against the Gaussian 1).
LAW_CLAIMS = {
    "Gaussian": ("gain_Gaussian", "angle_Gaussian", "t1_expansion_kappa_Gaussian", "gain_Gaussian_z_gauss"),
    "two-point": ("gain_twopoint", "angle_twopoint", "t1_expansion_kappa_twopoint", "gain_twopoint_z_gauss"),
    "Laplace": ("gain_Laplace", "angle_Laplace", "t1_expansion_kappa_Laplace", "gain_Laplace_z_gauss"),
    "NIG": ("gain_NIG", "angle_NIG", "t1_expansion_kappa_NIG", "gain_NIG_z_gauss"),
}
_S_COMMON = (0.1, 0.2, 0.3, 0.4, 0.75, 1.0, 1.5)
#: The logit variances s read per law (the Laplace and NIG laws have no limit from s = 2 on; the Laplace
#: law also at s = 0.05, the start of :func:`doubling`).
S_GRID = {"Gaussian": (*_S_COMMON, 2.0, 3.0), "two-point": (*_S_COMMON, 2.0, 3.0), "Laplace": (0.05, *_S_COMMON),
          "NIG": _S_COMMON}
#: Where each law's gain and angle claims are read: where the mean over streams is close enough to normal
#: for the Student-t quantile.  The weights e^{aᵀx} of a scale mixture have moments
#: M(ka)/M(a)^k = E e^{k²sW/2}/M(a)^k; the Laplace and NIG laws have them for k < √(2/s) only, so at
#: s = 0.4 (k < 2.24) the third moment is infinite and the t statistic is skewed (its left tail too
#: heavy); s = 0.2 < 2/9 keeps M(3a) finite.  The two-point law has every moment, but its weights'
#: skewness M(3a)/M(2a)^{3/2} is 1.2·10³ at s = 3 (Gaussian: e^{1.5s} = 90) against 124 at s = 2.
S_CLAIM = {"Gaussian": 3.0, "two-point": 2.0, "Laplace": 0.2, "NIG": 0.2}
#: The largest grid s with a 1/t rate (M(2a) < ∞: s < 1/2 for the Laplace and NIG laws), filled in the figure.
S_FAST = {"Gaussian": 3.0, "two-point": 3.0, "Laplace": 0.4, "NIG": 0.4}
#: The query scales r of the skew experiment, a = (r, −r).
SKEW_R = (0.05, 0.1, 0.15)
_GAIN_CLIP = 6.0  # gains above this are not drawn (the curves diverge at s = 2)


def gain_curve(s: object, law: MixingLaw) -> np.ndarray:
    r"""The gain :math:`g(s) = \mathbb E[We^{sW/2}]/\mathbb E[e^{sW/2}]` on a grid, NaN where there is no limit.

    The limit does not exist for s ≥ 2 × the abscissa of the mixing law (E[W e^{sW/2}] = ∞).

    Examples
    --------
    >>> from covbook.processes import ExponentialMixing
    >>> gain_curve([0.0, 1.0, 2.5], ExponentialMixing())   # Laplace: 2/(2 - s)
    array([ 1.,  2., nan])
    """
    ss = np.asarray(s, dtype=float)
    out = np.full(ss.shape, np.nan)
    ok = ss < 2 * law.abscissa - 1e-9
    out[ok] = elliptical_gain(torch.tensor(ss[ok]), law).numpy()
    return out


def nig_boundary() -> Result:
    r"""The normal-inverse-Gaussian law (λ = 2) at s = 2, i.e. u = s/2 = 1 (no randomness).

    Claims ``nig_mgf_at_s2``: :math:`\log\mathbb E e^{uW} = \lambda(1 - \sqrt{1 - 2u/\lambda})` at u = 1,
    which is λ = 2; ``nig_tilted_mean_diverges_at_s2``: the tilted mean of W just below u = 1, which
    diverges like :math:`(1 - 2u/\lambda)^{-1/2}`.
    """
    nig = InverseGaussianMixing(2.0)
    res = Result()
    res.measure("nig_mgf_at_s2", nig.log_mgf(torch.tensor(1.0)), prediction=2.0)
    res.measure("nig_tilted_mean_diverges_at_s2", nig.tilted_mean(torch.tensor(1.0 - 1e-12, dtype=torch.float64)))
    return res


@dataclass
class LawReadout:
    """One law's outputs at t_max: ``out[r, i]`` for stream r and query a_i = r_i u with s_i = a_iᵀΣa_i."""

    law: MixingLaw  # the law of W (W ≡ 1 for the Gaussian)
    s: np.ndarray  # (m,)
    a: torch.Tensor  # (m, 2)
    out: torch.Tensor  # (R, m, 2)
    g_hat: np.ndarray  # (R, m): ⟨out, Σa⟩/|Σa|²
    angle: np.ndarray  # (R, m): signed angle(out, Σa) in degrees
    g: np.ndarray  # (m,): the closed-form gain g(s)

    def at(self, s: float) -> int:
        """The index of the grid's logit variance nearest to ``s``."""
        return int(np.argmin(np.abs(self.s - s)))


def _laws(cov: torch.Tensor) -> dict[str, tuple[Process, MixingLaw]]:
    """name → (process, mixing law of W); the Gaussian is the degenerate law W = 1."""
    mixtures = {
        "two-point": ScaleMixture(cov, DiscreteMixing([0.5, 1.5], [0.5, 0.5])),
        "Laplace": MultivariateLaplace(cov),
        "NIG": ScaleMixture(cov, InverseGaussianMixing(2.0)),
    }
    laws = {"Gaussian": (GaussianIID(cov), DiscreteMixing([1.0], [1.0]))}
    laws.update({name: (proc, proc.scale) for name, proc in mixtures.items()})
    return laws


@dataclass
class Gains(Result):
    """Experiment 1: each law's readouts along the ray a = r u (``laws``), with Σ = ``cov``."""

    cov: torch.Tensor  # (2, 2)
    u: torch.Tensor  # (2,): the unit direction of the queries
    laws: dict[str, LawReadout]

    def plot(self, axes: np.ndarray) -> None:
        """Left: ĝ (±Z SE) against s with g(s) and 1 + κs/6 (dotted); right: the angle between out and Σa."""
        s_fine = np.linspace(0, 3.2, 321)
        for i, (name, r) in enumerate(self.laws.items()):
            col = f"C{i}"
            g_curve = gain_curve(s_fine, r.law)
            axes[0].plot(s_fine, np.where(g_curve < _GAIN_CLIP, g_curve, np.nan), "-", color=col, lw=1.2)
            axes[0].plot(s_fine, small_logit_gain(torch.tensor(s_fine), r.law).numpy(), ":", color=col, lw=1)
            n = r.g_hat.shape[0]
            m, se = r.g_hat.mean(0), r.g_hat.std(0, ddof=1) / np.sqrt(n)  # (m,)
            fast = r.s <= S_FAST[name]
            axes[0].errorbar(r.s[fast], m[fast], Z * se[fast], fmt="o", color=col, ms=4, label=name)
            axes[0].errorbar(r.s[~fast], m[~fast], Z * se[~fast], fmt="o", mfc="white", color=col, ms=4)
            ma, sea = r.angle.mean(0), r.angle.std(0, ddof=1) / np.sqrt(n)  # (m,)
            axes[1].errorbar(r.s * (1 + 0.02 * i), ma, Z * sea, fmt="o", color=col, ms=4, label=name)
        axes[0].set(xlabel="logit variance $s = a^\\top\\Sigma a$", ylabel="gain $g(s)$", ylim=(0.9, 4.2),
                    title="Gain against $g(s)$")
        axes[0].legend(title="filled: 1/t regime", loc="upper left")
        axes[1].axhline(0, color="k", lw=0.8)
        axes[1].set(xscale="log", xlabel="$s$", ylabel="angle(out, $\\Sigma a$) [degrees]",
                    title=f"Angle to $\\Sigma a$ ($a$ itself: {self.angle_a_sigma_a:.0f}°)")
        axes[1].legend()

    @property
    def angle_a_sigma_a(self) -> float:
        """The angle between the queries' direction u and Σu, in degrees."""
        u, cov = self.u, self.cov
        return float(np.degrees(np.arccos(float(u @ cov @ u / (cov @ u).norm()))))

    def plot_nonlinear(self, ax: plt.Axes) -> None:
        r"""Output norm against query norm: :math:`g(r^2u^\top\Sigma u)\,r\,|\Sigma u|` (lines) and measured means."""
        u, cov = self.u, self.cov
        r_fine = np.linspace(0, np.sqrt(3.2 / float(u @ cov @ u)), 300)
        s_of_r = r_fine**2 * float(u @ cov @ u)
        ax.plot(r_fine, r_fine * float((cov @ u).norm()), "k--", lw=1, label="covariance readout $|\\Sigma a|$")
        for i, (name, r) in enumerate(self.laws.items()):
            g_curve = gain_curve(s_of_r, r.law)
            ax.plot(r_fine, np.where(g_curve < _GAIN_CLIP, g_curve, np.nan) * r_fine * float((cov @ u).norm()),
                    color=f"C{i}", lw=1)
            norms = r.out.norm(dim=-1).numpy()  # (R, m)
            ax.plot(r.a.norm(dim=-1).numpy(), norms.mean(0), "o", color=f"C{i}", ms=4, label=name)
        ax.set(xlabel="query norm $|q| = |a|$", ylabel="output norm $|\\mathrm{out}_t|$", ylim=(0, None),
               title="The limit is not linear in the query for non-Gaussian elliptical inputs")
        ax.legend()


def gains(n_streams: int, t_max: int, *, streams: RandomStreams, device: str | torch.device = "cpu") -> Gains:
    r"""Measure the gain and the direction of the readout for four elliptical laws.

    d = 2, Σ = [[1, 0.6], [0.6, 0.8]], Θ_Q = Θ_K = Θ_V = I (so a = q), queries a = r u along
    u ∝ (1, −0.4) with r set by the grid :data:`S_GRID` of s.  Law number i is read on ``n_streams``
    streams of ``t_max`` tokens from the stream ``gain`` (replicate i).  Per stream and query the gain
    :math:`\hat g = \langle\mathrm{out}, \Sigma a\rangle/|\Sigma a|^2` and the signed angle to Σa.

    Claims per law at s = :data:`S_CLAIM`: the mean gain against g(s) and the mean angle against 0
    (SEs across streams, Student-t with n_streams − 1 dof).  Glues ``n_streams``, ``t_max_text``,
    ``angle_a_sigma_a`` and, per law, how many SEs its gain lies above 1.
    """
    n_streams = check_streams(n_streams)
    t_max = check_positive_int(t_max, "t_max")
    cov = torch.tensor([[1.0, 0.6], [0.6, 0.8]], dtype=torch.float64)
    eye = torch.eye(2, dtype=torch.float64)
    u = torch.tensor([1.0, -0.4], dtype=torch.float64)
    u = u / u.norm()
    readouts = {}
    for i, (name, (proc, law)) in enumerate(_laws(cov).items()):
        s = torch.tensor(S_GRID[name], dtype=torch.float64)  # (m,)
        a = torch.sqrt(s / (u @ cov @ u))[:, None] * u  # (m, d)
        out = readout_paths(proc, a, eye, eye, eye, [t_max], streams=n_streams,
                            seed=streams.seed_for("gain", replicate=i), device=device)[:, -1].cpu()  # (R, m, d)
        g_hat, angle = gain_and_angle(out.numpy(), (a @ cov).numpy())  # (R, m): gain, degrees
        readouts[name] = LawReadout(law, s.numpy(), a, out, g_hat, angle, elliptical_gain(s, law).numpy())
    res = Gains(cov, u, readouts)
    res.glue("n_streams", n_streams)
    res.glue("t_max_text", f"{t_max:,}")
    res.glue("angle_a_sigma_a", res.angle_a_sigma_a)
    dof = n_streams - 1  # the SE is estimated from n_streams replicates: Student-t quantile
    for name, r in readouts.items():
        gain_id, angle_id, _, z_name = LAW_CLAIMS[name]
        j = r.at(S_CLAIM[name])
        g_m, g_se = mean_with_se(r.g_hat[:, j])
        res.measure(gain_id, g_m, prediction=float(r.g[j]), se=g_se, dof=dof, name=name, r_s_j=r.s[j], r_g_j=r.g[j])
        res.glue(z_name, (g_m - 1.0) / g_se)
        a_m, a_se = mean_with_se(r.angle[:, j])
        res.measure(angle_id, a_m, prediction=0.0, se=a_se, dof=dof, name=name, r_s_j=r.s[j])
    return res


def small_logit_kurtosis(readouts: Gains, s_small: float = 0.1) -> Result:
    r"""κ read from the attention outputs: :math:`\hat\kappa = 6(\hat g - 1)/s` at the grid's s nearest ``s_small``.

    Claims ``t1_expansion_kappa_*`` per law: the mean over streams against κ = 3 Var W, with the
    expansion's remainder :math:`6|g(s) - 1 - \kappa s/6|/s` (from the exact gain) as the allowance.
    """
    res = Result()
    for name, r in readouts.laws.items():
        j = r.at(s_small)
        s_j = float(r.s[j])
        k_hat = 6.0 * (r.g_hat[:, j] - 1.0) / s_j  # (R,): κ read from attention
        k_m, k_se = mean_with_se(k_hat)
        remainder = 6.0 * abs(float(small_logit_remainder(s_j, r.law))) / s_j
        res.measure(LAW_CLAIMS[name][2], k_m, prediction=elliptical_kurtosis(r.law), se=k_se, dof=len(k_hat) - 1,
                    allowance=remainder, name=name, s_j=s_j, elliptical_kurtosis_r_law=elliptical_kurtosis(r.law),
                    n_streams=len(k_hat))
    return res


def doubling(readouts: Gains, s_from: float = 0.05, s_to: float = 0.2) -> Result:
    r"""Doubling a Laplace query (s from 0.05 to 0.2) multiplies the output norm by 2g(4s)/g(s), not 2.

    Claim ``doubling_Laplace``: the mean per-stream ratio :math:`|\mathrm{out}(2a)|/|\mathrm{out}(a)|`
    against 2g(s_to)/g(s_from) (glued as ``doubling_expected``), SE across streams (Student-t).  Both ends
    stay below s = 2/9, where the weights' third moment M(3a) is finite (see :data:`S_CLAIM`): from 0.1 to
    0.4 the ratio's t statistic was skewed (mean −0.6, 4 of 300 development seeds beyond the t quantile).
    """
    r = readouts.laws["Laplace"]
    i1, i4 = r.at(s_from), r.at(s_to)
    ratio = np.linalg.norm(r.out[:, i4].numpy(), axis=-1) / np.linalg.norm(r.out[:, i1].numpy(), axis=-1)  # (R,)
    expected = 2 * r.g[i4] / r.g[i1]
    res = Result()
    res.glue("doubling_expected", expected)
    m, se = mean_with_se(ratio)
    res.measure("doubling_Laplace", m, prediction=expected, se=se, dof=len(ratio) - 1)
    return res


@dataclass
class Skew(Result):
    """The skew experiment: ``excess[r, k, i]`` = out_i − (Σa)_i for stream r at a = (r_k, −r_k)."""

    r: np.ndarray  # (m,)
    excess: np.ndarray  # (R, m, 2)

    def plot(self, ax: plt.Axes) -> None:
        """The measured excess (±Z SE) against r, with the second-order term r² and the exact limits."""
        rr = np.linspace(0, 0.2, 50)
        ax.plot(rr, rr**2, "k-", lw=1, label=r"second order $\kappa_3[a,a]_i/2 = a_i^2$")
        ax.plot(rr, rr / (1 - rr) - rr, "C0--", lw=1, label=r"exact, $a_i = +r$")
        ax.plot(rr, -rr / (1 + rr) + rr, "C1--", lw=1, label=r"exact, $a_i = -r$")
        n = self.excess.shape[0]
        for i, lab in enumerate(["$a_1 = +r$", "$a_2 = -r$"]):
            m, se = self.excess[..., i].mean(0), self.excess[..., i].std(0, ddof=1) / np.sqrt(n)  # (m,)
            ax.errorbar(self.r, m, Z * se, fmt="o", color=f"C{i}", ms=4, label=f"measured, {lab}")
        ax.axhline(0, color="0.5", lw=0.8, ls=":")
        ax.set(xlabel="$r$", ylabel=r"$\mathrm{out}_i - (\Sigma a)_i$",
               title=r"Skewed inputs: the second-order (skew) term, the same sign for $\pm a$")
        ax.legend(fontsize="x-small")


def skew(n_streams: int, t_max: int, *, streams: RandomStreams, device: str | torch.device = "cpu") -> Skew:
    r"""The skew term: centred exponential coordinates (μ = 0, Σ = I, κ₃,iii = 2) read with a = (r, −r).

    The limit :math:`a_i/(1 - a_i)` expands as :math:`a_i + \tfrac12\kappa_3[a, a]_i + O(a^3)`, with
    :math:`\tfrac12\kappa_3[a,a]_i = a_i^2`.  ``n_streams`` streams of ``t_max`` tokens from the stream
    ``skew``.  Claims at the largest r of :data:`SKEW_R`, one per coordinate (``t1_expansion_skew_pos``,
    ``t1_expansion_skew_neg``): the mean of out_i − a_i against a_i², with the third-order remainder
    bound :math:`|a_i|^3/(1 - |a_i|)` as the allowance.  Glues ``skew_r`` and ``skew_bound``.
    """
    n_streams = check_streams(n_streams)
    t_max = check_positive_int(t_max, "t_max")
    proc = SkewedExponential(2)
    eye = torch.eye(2, dtype=torch.float64)
    r_skew = torch.tensor(SKEW_R, dtype=torch.float64)  # (m,)
    a_skew = r_skew[:, None] * torch.tensor([1.0, -1.0], dtype=torch.float64)  # (m, 2)
    out_skew = readout_paths(proc, a_skew, eye, eye, eye, [t_max], streams=n_streams,
                             seed=streams.seed_for("skew"), device=device)[:, -1].cpu()  # (R, m, 2)
    excess = (out_skew - a_skew).numpy()  # out − Σa: (R, m, 2)
    second = (tilted_mean_expansion(proc, a_skew) - a_skew).numpy()  # (m, 2): ½κ₃[a, a] = a_i²
    res = Skew(r_skew.numpy(), excess)
    j = len(r_skew) - 1  # the largest r
    r_j = float(r_skew[j])
    bound = r_j**3 / (1 - r_j)
    for i, side_id in enumerate(("t1_expansion_skew_pos", "t1_expansion_skew_neg")):
        m, se = mean_with_se(excess[:, j, i])
        res.measure(side_id, m, prediction=float(second[j, i]), se=se, dof=n_streams - 1, allowance=bound, i_1=i + 1,
                    if_i_0_else="+" if i == 0 else "−", r_j=r_j, second_j_i=second[j, i])
    res.glue("skew_r", r_j)
    res.glue("skew_bound", bound)
    return res
