"""Closed forms of the covariance-readout theory (Xu & Fang 2026, Sec. 3; book chapters 1–4).

Everything here is a formula, evaluated in float64: the long-context limit of
softmax attention (the covariance readout, and the tilted mean for other
laws), the logit variance that controls its finite-context cost, the
delta-method rate constants, the elliptical gain and the small-logit
(cumulant) expansion, and the heavy-tail exponents.

Notation (book chapter 1): a query q gives the tilt vector a = Θ_Kᵀ Θ_Q q;
the logit variance is s = aᵀ Σ a.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from covbook._validate import (
    as_covariance,
    as_tensor,
    as_vector,
    check_positive_float,
    check_positive_int,
    finite_result,
)
from covbook.linalg import spectral_radius, stationary_covariance
from covbook.processes import MixingLaw, Process, mixing_law

__all__ = [
    "tilt_vector", "logit_variance", "scale_to_logit_variance", "covariance_readout", "readout_mse_constant",
    "readout_error_covariance", "normalised_error_sd", "spectral_radius", "stationary_covariance", "elliptical_gain",
    "elliptical_kurtosis", "small_logit_gain", "small_logit_remainder", "tilted_mean", "tilted_mean_expansion",
    "var1_rate_constant", "var1_error_covariance", "quadratic_error_moments",
    "student_t_extreme_angle_sd", "laplace_weight_tail_index", "heavy_tail_mse_exponent",
    "laplace_rate_fraction", "delta_method_reach", "reach_allowance", "MAX_LOGIT_VARIANCE",
]

MAX_LOGIT_VARIANCE = 700.0
"""Largest logit variance s for which e^s (and the rate constants) fit in float64."""


def _check_exp_range(s: torch.Tensor, what: str) -> None:
    top = float(s.max()) if s.numel() else 0.0
    if top > MAX_LOGIT_VARIANCE:
        raise ValueError(f"q gives logit variance s = {top:.4g}: {what} = e^s·(...) overflows float64 "
                         f"(needs s <= {MAX_LOGIT_VARIANCE:g}); use a smaller query or Θ_Q")


def _weights(theta_q: object, theta_k: object, theta_v: object, d: int):
    tq = as_tensor(theta_q, "theta_q", ndim=2)
    tk = as_tensor(theta_k, "theta_k", ndim=2)
    tv = as_tensor(theta_v, "theta_v", ndim=2)
    for name, th in (("theta_q", tq), ("theta_k", tk), ("theta_v", tv)):
        if th.shape[1] != d:
            raise ValueError(f"{name} must have shape (*, {d}), got {tuple(th.shape)}")
    if tq.shape[0] != tk.shape[0]:
        raise ValueError(f"theta_q and theta_k must have the same number of rows, got {tq.shape[0]} and {tk.shape[0]}")
    return tq, tk, tv


def _queries(q: object, d: int) -> tuple[torch.Tensor, bool]:
    qq = as_tensor(q, "q", ndim=(1, 2))
    if qq.shape[-1] != d:
        raise ValueError(f"q must have last dim {d}, got shape {tuple(qq.shape)}")
    return (qq[None], True) if qq.ndim == 1 else (qq, False)


def _mean(mean: object | None, d: int) -> torch.Tensor:
    return as_vector(mean, "mean", d)


def tilt_vector(theta_q: object, theta_k: object, q: object) -> torch.Tensor:
    """a = Θ_Kᵀ Θ_Q q for each query; q (m, d) -> (m, d), q (d,) -> (d,)."""
    tq = as_tensor(theta_q, "theta_q", ndim=2)
    tk = as_tensor(theta_k, "theta_k", ndim=2)
    if tq.shape != tk.shape:
        raise ValueError(f"theta_q and theta_k must have the same shape, got {tuple(tq.shape)} and {tuple(tk.shape)}")
    qq, single = _queries(q, tq.shape[1])
    a = finite_result(qq @ tq.T @ tk, "the tilt vector a")  # (m, d)
    return a[0] if single else a


def logit_variance(theta_q: object, theta_k: object, cov: object, q: object) -> torch.Tensor:
    """s = aᵀ Σ a, the variance of the logit a·X; (m,) for q (m, d), scalar for q (d,)."""
    a = tilt_vector(theta_q, theta_k, q)
    c = as_covariance(cov, size=a.shape[-1])
    return finite_result(((a @ c) * a).sum(-1), "the logit variance s")


def scale_to_logit_variance(
    theta_q: object, theta_k: object, cov: object, q: object, s: float
) -> torch.Tensor:
    """Rescale Θ_Q so that the largest logit variance over the queries equals ``s``.

    The logit variance s(q) = aᵀΣa is quadratic in Θ_Q, so Θ_Q ← Θ_Q·sqrt(s / max_q s(q)).

    Examples
    --------
    >>> import torch
    >>> I = torch.eye(2, dtype=torch.float64)
    >>> tq = scale_to_logit_variance(I, I, I, torch.tensor([[3.0, 4.0]]), 1.0)
    >>> round(float(logit_variance(tq, I, I, torch.tensor([3.0, 4.0]))), 12)
    1.0
    """
    s = check_positive_float(s, "target logit variance s")
    current = logit_variance(theta_q, theta_k, cov, q)
    top = float(current.max())
    if top <= 0:
        raise ValueError("every query has zero logit variance; Θ_Q cannot be rescaled")
    return as_tensor(theta_q, "theta_q", ndim=2) * (s / top) ** 0.5


def covariance_readout(
    theta_q: object, theta_k: object, theta_v: object, cov: object, q: object, mean: object | None = None
) -> torch.Tensor:
    r"""The long-context limit of softmax attention for Gaussian tokens.

    .. math:: \mathrm{out}_\infty(q) = \Theta_V\,(\mu + \Sigma\,\Theta_K^\top\Theta_Q\, q)

    exact for X ~ N(μ, Σ) by exponential tilting (paper Sec. 3; book chapter 1).

    Parameters
    ----------
    theta_q, theta_k : array-like, shape (d_k, d)
    theta_v : array-like, shape (d_v, d)
    cov : array-like, shape (d, d), symmetric PSD
    q : array-like, shape (m, d) or (d,)
    mean : array-like, shape (d,), optional

    Returns
    -------
    tensor, shape (m, d_v) (or (d_v,) for a single query)

    Examples
    --------
    >>> import torch
    >>> I = torch.eye(2, dtype=torch.float64)
    >>> covariance_readout(I, I, I, 2 * I, torch.tensor([1.0, 0.0]))
    tensor([2., 0.], dtype=torch.float64)
    """
    c = as_covariance(cov)
    d = c.shape[0]
    tq, tk, tv = _weights(theta_q, theta_k, theta_v, d)
    qq, single = _queries(q, d)
    mu = _mean(mean, d)
    a = qq @ tq.T @ tk  # (m, d)
    out = finite_result((mu + a @ c) @ tv.T, "the covariance readout")  # (m, d_v)
    return out[0] if single else out


def readout_mse_constant(
    theta_q: object, theta_k: object, theta_v: object, cov: object, q: object
) -> torch.Tensor:
    r"""Delta-method rate constant C of the Gaussian readout: t·E|out_t − out_∞|² → C.

    .. math:: C = e^{s}\,\bigl(\operatorname{tr}\Theta_V\Sigma\Theta_V^\top + |\Theta_V\Sigma a|^2\bigr),
              \qquad s = a^\top\Sigma a

    for iid N(μ, Σ) tokens and a fixed query (book chapter 1); the mean does
    not enter.  Derivation: the ratio estimator's linearisation is the average
    of (Θ_V x − out_∞) e^{a·x}/M(a), whose second moment is an expectation
    under the 2a-tilted Gaussian N(μ + 2Σa, Σ) times M(2a)/M(a)² = e^s.

    Returns
    -------
    tensor, shape (m,) (or scalar for a single query)

    Raises
    ------
    ValueError
        If s > ``MAX_LOGIT_VARIANCE``, where e^s overflows float64.
    """
    c = as_covariance(cov)
    d = c.shape[0]
    tq, tk, tv = _weights(theta_q, theta_k, theta_v, d)
    qq, single = _queries(q, d)
    a = qq @ tq.T @ tk  # (m, d)
    s = ((a @ c) * a).sum(-1)  # (m,)
    _check_exp_range(s, "the rate constant C")
    shift = a @ c @ tv.T  # (m, d_v): Θ_V Σ a
    const = finite_result(torch.exp(s) * (torch.trace(tv @ c @ tv.T) + (shift**2).sum(-1)), "the rate constant C")
    return const[0] if single else const


def readout_error_covariance(
    theta_q: object, theta_k: object, theta_v: object, cov: object, q: object
) -> torch.Tensor:
    r"""Joint asymptotic covariance of √t (out_t(q_j) − out_∞(q_j)) over the queries of one stream.

    For iid N(μ, Σ) tokens the delta-method errors of the queries q_1, …, q_m
    read from the same context are jointly Gaussian in the limit, with blocks

    .. math:: V_{jk} = e^{a_j^\top\Sigma a_k}\bigl(\Theta_V\Sigma\Theta_V^\top
              + \Theta_V\Sigma a_k\,a_j^\top\Sigma\Theta_V^\top\bigr)

    (the pair of weights e^{(a_j + a_k)ᵀx} tilts N(μ, Σ) to N(μ + Σ(a_j + a_k), Σ);
    book chapter 1).  tr V_jj is :func:`readout_mse_constant`.  So
    t|out_t(q_j) − out_∞(q_j)|² tends in law to a weighted sum of χ²₁ variables
    with the eigenvalues of V_jj as weights.

    Returns
    -------
    tensor, shape (m, d_v, m, d_v)

    Examples
    --------
    >>> I = torch.eye(2, dtype=torch.float64)
    >>> V = readout_error_covariance(I, I, I, I, [[0.0, 0.0]])
    >>> V[0, :, 0, :]
    tensor([[1., 0.],
            [0., 1.]], dtype=torch.float64)
    """
    c = as_covariance(cov)
    d = c.shape[0]
    tq, tk, tv = _weights(theta_q, theta_k, theta_v, d)
    qq, _ = _queries(q, d)
    a = qq @ tq.T @ tk  # (m, d)
    cross = a @ c @ a.T  # (m, m): a_jᵀ Σ a_k
    _check_exp_range(cross, "the error covariance")
    b = a @ c @ tv.T  # (m, d_v): Θ_V Σ a_j
    base = tv @ c @ tv.T  # (d_v, d_v)
    outer = torch.einsum("ki,jl->jikl", b, b)  # (m, d_v, m, d_v): (Θ_VΣa_k)_i (Θ_VΣa_j)_l
    return finite_result(torch.exp(cross)[:, None, :, None] * (base[None, :, None, :] + outer),
                         "the error covariance")


def _mixing(scale: object) -> MixingLaw:
    if isinstance(scale, str):
        return mixing_law(scale)
    if not isinstance(scale, MixingLaw):
        raise ValueError(f"scale must be a covbook.processes.MixingLaw or a law name, got {type(scale).__name__}")
    return scale


def _logit_variances(s: object) -> torch.Tensor:
    ss = as_tensor(s, "s")
    if bool((ss < 0).any()):
        raise ValueError("s = aᵀΣa must be non-negative")
    return ss


def normalised_error_sd(
    theta_q: object, theta_k: object, theta_v: object, cov: object, q: object
) -> float:
    r"""Asymptotic standard deviation of the mean over queries of t|out_t(q_j) − out_∞(q_j)|²/C_j, one stream.

    With the joint error covariance V of :func:`readout_error_covariance` and
    D = diag(1/C_j) (each block times the identity), the statistic
    Q = (1/m) Σ_j t|err_j|²/C_j tends in law to a Gaussian quadratic form with
    mean 1 and variance

    .. math:: \operatorname{Var} Q = \frac{2}{m^2}\operatorname{tr}\bigl((DV)^2\bigr)

    (book chapter 1).

    Examples
    --------
    >>> I = torch.eye(2, dtype=torch.float64)
    >>> round(normalised_error_sd(I, I, I, I, [[0.0, 0.0]]), 6)   # (χ²₂)/2: sd 1
    1.0
    """
    V = readout_error_covariance(theta_q, theta_k, theta_v, cov, q)  # (m, d_v, m, d_v)
    C = torch.stack([torch.trace(V[j, :, j, :]) for j in range(V.shape[0])])  # (m,) tr V_jj
    return quadratic_error_moments(V, C)[1]


def elliptical_gain(s: object, scale: object) -> torch.Tensor:
    r"""Gain g(s) of the readout of a Gaussian scale mixture X = √W Z (E W = 1).

    .. math:: g(s) = \frac{E[W e^{sW/2}]}{E[e^{sW/2}]}, \qquad
              \mathrm{out}_\infty = g(s)\,\Theta_V\Sigma a,\quad s = a^\top\Sigma a

    (paper Sec. 3; book chapter 2).  g(0) = 1, g is increasing, g ≡ 1 iff W ≡ 1
    (Gaussian).  Where E[W e^{sW/2}] = ∞ (s ≥ 2 × the mixing law's abscissa)
    there is no limit, and a ``ValueError`` says so.

    Parameters
    ----------
    s : array-like of non-negative numbers
        Logit variances.
    scale : MixingLaw or str
        The law of W, or its name (``gaussian``, ``two_point``, ``laplace``,
        ``nig``; see :func:`covbook.processes.mixing_law`).

    Returns
    -------
    tensor of the shape of ``s``, float64

    Examples
    --------
    >>> from covbook.processes import ExponentialMixing
    >>> elliptical_gain([0.0, 1.0, 1.5], ExponentialMixing())   # Laplace: 2/(2 - s)
    tensor([1., 2., 4.], dtype=torch.float64)
    >>> float(elliptical_gain(0.0, "two_point"))
    1.0
    """
    law = _mixing(scale)
    ss = _logit_variances(s)
    g = law.tilted_mean(ss / 2.0)
    if not bool(torch.isfinite(g).all()):
        raise ValueError(f"s must be below {2 * law.abscissa:g} for this mixing law: at larger s, "
                         "E[W e^(sW/2)] = ∞ and the readout has no limit")
    return g


def elliptical_kurtosis(scale: object) -> float:
    r"""Excess kurtosis κ of every projection aᵀX of a scale mixture (E W = 1): κ = 3 Var W.

    From E(aᵀX)^4 = 3 E[W²] s² and Var aᵀX = s.
    """
    return 3.0 * float(_mixing(scale).variance)


def small_logit_gain(s: object, scale: object) -> torch.Tensor:
    r"""First-order (high-temperature) expansion of the elliptical gain: g(s) ≈ 1 + κ s / 6.

    From log E e^{uW} = u + ½ Var(W) u² + O(u³): g(s) = 1 + Var(W) s/2 + O(s²)
    = 1 + κ s/6 + O(s²) with κ = 3 Var W (paper Sec. 3; book chapter 2).

    Examples
    --------
    >>> from covbook.processes import DiscreteMixing
    >>> small_logit_gain([0.0, 8.0], DiscreteMixing([0.5, 1.5], [0.5, 0.5]))
    tensor([1., 2.], dtype=torch.float64)
    """
    ss = _logit_variances(s)
    return finite_result(1.0 + elliptical_kurtosis(scale) * ss / 6.0, "the small-logit gain")


def small_logit_remainder(s: object, scale: object) -> torch.Tensor:
    r"""The remainder of the small-logit expansion, r(s) = g(s) − 1 − κs/6 = O(s²), from the exact gain.

    The second-order term is (κ₃(W)/8) s², κ₃(W) the third cumulant of W.

    Examples
    --------
    >>> round(float(small_logit_remainder(0.2, "laplace")), 6)   # 2/(2 - s) - 1 - s/2 = s²/(2(2 - s))
    0.011111
    """
    return elliptical_gain(s, scale) - small_logit_gain(s, scale)


def tilted_mean(process: object, a: object) -> torch.Tensor:
    r"""The long-context limit E[X e^{aᵀX}] / E[e^{aᵀX}] = ∇ log M(a) for a process's law.

    With Θ_V = I this is the almost-sure limit of softmax attention with tilt
    vector a = Θ_Kᵀ Θ_Q q over a stationary ergodic context (paper Sec. 3; book chapter 2).
    Closed forms:

    * Gaussian N(μ, Σ) and the Gaussian VAR(1) (stationary Σ): μ + Σa;
    * scale mixtures (E W = 1): g(s) Σa, s = aᵀΣa (:func:`elliptical_gain`);
    * centred exponential coordinates: a_i / (1 − a_i) (needs every a_i < 1);
    * ½N(m, I) + ½N(−m, I): a + m tanh(mᵀa).

    A ``ValueError`` is raised where no limit exists (Student-t, random walk,
    a scale mixture beyond its MGF's domain) or where each stream has its own
    limit (:class:`~covbook.processes.NonErgodicGaussian`: use
    ``tilted_mean(process.component(k), a)``).

    Parameters
    ----------
    process : Process
    a : array-like, shape (d,) or (m, d)

    Returns
    -------
    tensor, shape of ``a``

    Examples
    --------
    >>> from covbook.processes import BimodalGaussian
    >>> tilted_mean(BimodalGaussian([1.0, 0.0]), [0.0, 0.5])
    tensor([0.0000, 0.5000], dtype=torch.float64)
    """
    if not isinstance(process, Process):
        raise ValueError(f"process must be a covbook.processes.Process, got {type(process).__name__}")
    return process.tilted_mean(a)


def tilted_mean_expansion(process: object, a: object) -> torch.Tensor:
    r"""The small-logit (cumulant) expansion of the readout to second order in a.

    .. math:: \nabla\log M(a) = \mu + \Sigma a + \tfrac12\,\kappa_3[a, a] + O(|a|^3),
              \qquad \kappa_3[a,a]_i = \sum_{jk}\kappa_{3,ijk}\,a_j a_k

    from log M(a) = aᵀμ + ½aᵀΣa + ⅙κ₃[a,a,a] + …, κ₃ the third cumulant tensor
    (paper Sec. 3; book chapter 2).  The quadratic (skew) term is even in a:
    it moves the readout the same way for a and −a.

    Parameters
    ----------
    process : Process
        A law with finite ``mean``, ``covariance`` and ``third_cumulant``.
    a : array-like, shape (d,) or (m, d)

    Examples
    --------
    >>> from covbook.processes import SkewedExponential
    >>> tilted_mean_expansion(SkewedExponential(2), [0.1, -0.1])   # a_i + a_i² (κ₃ = 2)
    tensor([ 0.1100, -0.0900], dtype=torch.float64)
    """
    if not isinstance(process, Process):
        raise ValueError(f"process must be a covbook.processes.Process, got {type(process).__name__}")
    mu, cov, k3 = process.mean, process.covariance, process.third_cumulant
    if mu is None or cov is None or k3 is None:
        raise ValueError(f"{type(process).__name__} has no finite mean, covariance and third cumulant to expand")
    aa = as_tensor(a, "a", ndim=(1, 2))
    if aa.shape[-1] != process.dim:
        raise ValueError(f"a must have last dim {process.dim}, got shape {tuple(aa.shape)}")
    return finite_result(mu + aa @ cov + 0.5 * torch.einsum("ijk,...j,...k->...i", k3, aa, aa),
                         "the expansion")


def var1_rate_constant(
    theta_q: object, theta_k: object, theta_v: object, A: object, noise_cov: object, q: object
) -> torch.Tensor:
    r"""Delta-method rate constant of the readout over a stationary Gaussian VAR(1) context.

    With Γ_h = Cov(x_{s+h}, x_s) = A^h Σ (Σ the stationary covariance), the
    linearised error is the average of φ(x_s) = (Θ_V x_s − Θ_VΣa) e^{aᵀx_s}/M(a),
    and t·MSE → the long-run variance Σ_h E φ(x_0)ᵀφ(x_h):

    .. math:: C = c_0 + 2\sum_{h\ge1} c_h, \qquad
              c_h = e^{a^\top\Gamma_h a}\bigl(\operatorname{tr}\Theta_V\Gamma_h\Theta_V^\top
              + (\Theta_V\Gamma_h^\top a)^\top(\Theta_V\Gamma_h a)\bigr),

    each c_h an expectation under the pair (x_0, x_h) tilted by (a, a) (book
    chapter 4).  c_0 is the iid constant of :func:`readout_mse_constant`; for
    A = 0, C = c_0.  The series is summed until ‖A^h‖ < 1e-18.

    Returns
    -------
    tensor, shape (m,) (or scalar for a single query)

    Examples
    --------
    >>> I = torch.eye(1, dtype=torch.float64)
    >>> float(var1_rate_constant(I, I, I, [[0.0]], [[1.0]], [0.0]))   # iid N(0, 1), a = 0: tr Σ
    1.0
    """
    a_mat = as_tensor(A, "A", ndim=2)
    sigma = stationary_covariance(a_mat, noise_cov)  # (d, d)
    d = sigma.shape[0]
    tq, tk, tv = _weights(theta_q, theta_k, theta_v, d)
    qq, single = _queries(q, d)
    a = qq @ tq.T @ tk  # (m, d)
    _check_exp_range(((a @ sigma) * a).sum(-1), "the rate constant C_A")
    total = torch.zeros(a.shape[0], dtype=torch.float64)
    power = torch.eye(d, dtype=torch.float64)  # A^h
    for h in range(100_000):
        gam = power @ sigma  # (d, d): Γ_h
        quad = ((a @ gam.T) * a).sum(-1)  # (m,): aᵀΓ_h a
        cross = ((a @ gam @ tv.T) * (a @ gam.T @ tv.T)).sum(-1)  # (m,): (Θ_VΓ_hᵀa)ᵀ(Θ_VΓ_h a)
        c_h = torch.exp(quad) * (torch.trace(tv @ gam @ tv.T) + cross)  # (m,)
        total = total + (c_h if h == 0 else 2.0 * c_h)
        power = power @ a_mat
        if float(power.abs().max()) < 1e-18:
            break
    finite_result(total, "the rate constant C_A")
    return total[0] if single else total


def var1_error_covariance(
    theta_q: object, theta_k: object, theta_v: object, A: object, noise_cov: object, q: object
) -> torch.Tensor:
    r"""Joint long-run covariance of √t (out_t(q_j) − Θ_VΣa_j) over the queries of one VAR(1) stream.

    The delta-method error of query j is the average of φ_j(x_s) = (Θ_V x_s − Θ_VΣa_j)
    e^{a_jᵀx_s}/M(a_j); for the mixing stationary Gaussian VAR(1) the errors of the m queries read
    from one stream are jointly Gaussian in the limit, with the long-run covariance

    .. math:: V_{jk} = B_0(j, k) + \sum_{h\ge1}\bigl(B_h(j, k) + B_h(k, j)^\top\bigr), \qquad
              B_h(j, k) = \mathbb E\,\varphi_j(x_0)\varphi_k(x_h)^\top
              = e^{a_j^\top\Gamma_h^\top a_k}\,\Theta_V\bigl(\Gamma_h^\top
              + \Gamma_h^\top a_k\,a_j^\top\Gamma_h^\top\bigr)\Theta_V^\top,

    Γ_h = Cov(x_{s+h}, x_s) = A^hΣ (the pair (x_0, x_h) tilted by (a_j, a_k); book chapter 4).
    tr V_jj is :func:`var1_rate_constant`; for A = 0 it is :func:`readout_error_covariance`.
    The series is summed until ‖A^h‖ < 1e-18.

    Returns
    -------
    tensor, shape (m, d_v, m, d_v)

    Examples
    --------
    >>> I = torch.eye(2, dtype=torch.float64)
    >>> V = var1_error_covariance(I, I, I, torch.zeros(2, 2), I, [[0.5, 0.0], [0.0, 0.5]])
    >>> bool(torch.allclose(V, readout_error_covariance(I, I, I, I, [[0.5, 0.0], [0.0, 0.5]])))
    True
    """
    a_mat = as_tensor(A, "A", ndim=2)
    sigma = stationary_covariance(a_mat, noise_cov)  # (d, d)
    d = sigma.shape[0]
    tq, tk, tv = _weights(theta_q, theta_k, theta_v, d)
    qq, _ = _queries(q, d)
    a = qq @ tq.T @ tk  # (m, d)
    _check_exp_range(((a @ sigma) * a).sum(-1), "the error covariance")
    total = None
    power = torch.eye(d, dtype=torch.float64)  # A^h
    for h in range(100_000):
        gt = (power @ sigma).T  # (d, d): Γ_hᵀ = Cov(x_0, x_h)
        tilt = torch.exp(a @ gt @ a.T)  # (m, m): e^{a_jᵀΓ_hᵀa_k}
        u = a @ gt.T @ tv.T  # (m, d_v): rows (Θ_VΓ_hᵀa_k)ᵀ = a_kᵀΓ_hΘ_Vᵀ
        w = a @ gt @ tv.T  # (m, d_v): rows (Θ_VΓ_h a_j)ᵀ = a_jᵀΓ_hᵀΘ_Vᵀ
        base = tv @ gt @ tv.T  # (d_v, d_v): Θ_VΓ_hᵀΘ_Vᵀ
        # B_h(j, k)_{il} = tilt_jk (base_il + (Θ_VΓ_hᵀa_k)_i (Θ_VΓ_h a_j)_l)
        b_h = tilt[:, None, :, None] * (base[None, :, None, :] + torch.einsum("ki,jl->jikl", u, w))
        if h == 0:
            total = b_h
        else:
            total = total + b_h + b_h.permute(2, 3, 0, 1)  # B_h(j, k) + B_h(k, j)ᵀ
        power = power @ a_mat
        if float(power.abs().max()) < 1e-18:
            break
    return finite_result(total, "the error covariance")


def quadratic_error_moments(V: object, c: object) -> tuple[float, float]:
    r"""Mean and standard deviation of Q = (1/m) Σ_j t|err_j|²/c_j when √t (err_1, …, err_m) ~ N(0, V).

    With D = diag(1/c_j) (each block times the identity), Q is a Gaussian quadratic form with
    mean (1/m) Σ_j tr V_jj/c_j and variance (2/m²) tr((DV)²) (book chapters 1 and 4).

    Parameters
    ----------
    V : shape (m, d_v, m, d_v), a joint error covariance (:func:`readout_error_covariance`,
        :func:`var1_error_covariance`)
    c : shape (m,), positive normalising constants

    Examples
    --------
    >>> I = torch.eye(2, dtype=torch.float64)
    >>> quadratic_error_moments(readout_error_covariance(I, I, I, I, [[0.0, 0.0]]), [2.0])   # χ²₂/2
    (1.0, 1.0)
    """
    v = as_tensor(V, "V", ndim=4)
    m, dv = v.shape[0], v.shape[1]
    if v.shape != (m, dv, m, dv):
        raise ValueError(f"V must have shape (m, d_v, m, d_v), got {tuple(v.shape)}")
    cc = as_tensor(c, "c", ndim=1)
    if cc.shape != (m,) or bool((cc <= 0).any()):
        raise ValueError(f"c must hold {m} positive constants, got {tuple(cc.shape)}")
    dv_mat = (v / cc[:, None, None, None]).reshape(m * dv, m * dv)
    mean = float(torch.stack([torch.trace(v[j, :, j, :]) for j in range(m)]).div(cc).mean())
    return mean, float(torch.sqrt(2.0 * torch.trace(dv_mat @ dv_mat)) / m)


def student_t_extreme_angle_sd(nu: int, grid: int = 2001) -> float:
    r"""Spread of the direction of softmax attention's output over Student-t tokens, t → ∞.

    For iid isotropic Student-t tokens in R² (scale I, ν degrees of freedom) the
    softmax becomes a hard max: the output is the token maximising aᵀx.  Writing
    X = Z/√(V/ν), a large aᵀX comes from a small V, and conditionally on aᵀX → ∞
    the Gaussian coordinate along a has the size-biased density ∝ z^ν φ(z) on
    z > 0 (the tail P(aᵀX > x | Z_a = z) ∝ z^ν x^{-ν}), while the orthogonal
    coordinate stays N(0, 1).  The angle θ between the output and a therefore
    tends in law to atan2(Z_⊥, Z_a), a non-degenerate law; this returns its
    standard deviation

    .. math:: \operatorname{sd}\theta = \Bigl(\frac{\int_0^\infty\!\int \arctan(y/z)^2\,
              z^\nu\varphi(z)\varphi(y)\,dy\,dz}{\int_0^\infty z^\nu\varphi(z)\,dz}\Bigr)^{1/2}

    (radians; θ has mean 0 by symmetry), by the trapezoidal rule on a grid.

    Examples
    --------
    >>> round(student_t_extreme_angle_sd(1), 3)   # Cauchy tokens: about 39 degrees
    0.684
    """
    nu = check_positive_int(nu, "nu")
    grid = check_positive_int(grid, "grid")
    if grid < 11:
        raise ValueError(f"grid must have at least 11 points for the trapezoidal rule, got {grid}")
    z = np.linspace(1e-9, 12.0, grid)
    y = np.linspace(-12.0, 12.0, grid)
    wz = z**nu * np.exp(-(z**2) / 2)  # (n,)
    wy = np.exp(-(y**2) / 2)  # (n,)
    theta2 = np.arctan2(y[None, :], z[:, None]) ** 2  # (n, n)
    num = np.trapezoid(wz * np.trapezoid(theta2 * wy[None, :], y, axis=1), z)
    den = np.trapezoid(wz, z) * np.trapezoid(wy, y)
    return float(np.sqrt(num / den))


def laplace_weight_tail_index(s: object) -> torch.Tensor:
    r"""Tail index α of the softmax weights e^{aᵀX} for multivariate Laplace tokens: α = √(2/s).

    aᵀX is a Laplace variable with variance s = aᵀΣa, i.e. scale b = √(s/2), so
    P(e^{aᵀX} > w) = ½ w^{-1/b}: the weights have a Pareto tail of index 1/b.
    They have a finite mean iff α > 1 (s < 2: the limit exists) and a finite
    variance iff α > 2 (s < 1/2: the 1/t rate).

    Examples
    --------
    >>> laplace_weight_tail_index([0.5, 2.0])
    tensor([2., 1.], dtype=torch.float64)
    """
    ss = as_tensor(s, "s")
    if bool((ss <= 0).any()):
        raise ValueError("s = aᵀΣa must be positive")
    return torch.sqrt(2.0 / ss)


def heavy_tail_mse_exponent(alpha: object) -> torch.Tensor:
    r"""Predicted exponent β of the readout's MSE ∝ t^β (up to log factors) for Pareto(α) weights.

    With weights of tail index α ∈ (1, 2) the error is dominated by single
    tokens whose weight is comparable to the whole denominator t·M(a): such a
    token appears with probability ≈ t·(tM)^{-α} and then moves the output by
    O(log t) (the token's value |x| grows like the logarithm of its weight), so
    MSE ≍ t^{1-α}(log t)² (book chapter 3).  For α ≥ 2 the delta method applies: β = −1.  Hence
    β = max(−1, 1 − α); the median squared error instead scales like
    t^{2/α − 2}, the square of the stable-law fluctuation t^{1/α − 1}.

    Examples
    --------
    >>> heavy_tail_mse_exponent([3.0, 1.5])
    tensor([-1.0000, -0.5000], dtype=torch.float64)
    """
    al = as_tensor(alpha, "alpha")
    if bool((al <= 1).any()):
        raise ValueError("alpha must exceed 1 (a finite mean of the weights); for alpha <= 1 there is no limit")
    return torch.clamp(1.0 - al, min=-1.0)


def laplace_rate_fraction(s: object, t: object, dim: int = 2, cut: float = 1.0) -> tuple[torch.Tensor, float]:
    r"""Pre-asymptotic fraction of the rate constant realised at context length t, Laplace tokens.

    For isotropic multivariate Laplace tokens (Σ = I in R^dim, Θ_V = I) and
    s = |a|² < 1/2, the delta-method constant is C = E[|X − g a|² e^{2aᵀX}]/M(a)².
    A token whose weight exceeds the whole denominator, e^{aᵀx} > cut·t·M(a),
    moves the output by O(|x|) instead of its weight times |x| (the ratio
    self-normalises), so at length t only the part of C carried by smaller
    weights is realised:

    .. math:: \rho_L(s, t) = \frac{E\bigl[|X - g a|^2 e^{2a^\top X}\,
              \mathbf 1\{a^\top X \le \log(\mathrm{cut}\; t M(a))\}\bigr]}
              {E\bigl[|X - g a|^2 e^{2a^\top X}\bigr]},

    computed exactly given W (a truncated Gaussian second moment) and by
    quadrature over W ~ Exp(1) (book chapter 3).  1 − ρ_L decays like
    t^{(2−α)} up to logs, α = √(2/s).  A heuristic (the cut is defined up to a
    constant factor, hence ``cut``), not a theorem.

    Returns
    -------
    (tensor of the shape of ``t``, float): ρ_L(s, t) and the constant C.

    Examples
    --------
    >>> rho, C = laplace_rate_fraction(0.25, [1e3, 1e6])
    >>> round(C, 3), bool(rho[0] < rho[1] < 1)
    (15.375, True)
    """
    from scipy import integrate

    def cdf(z: float) -> float:
        return 0.5 * math.erfc(-z / math.sqrt(2.0))

    def pdf(z: float) -> float:
        return math.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)

    s = check_positive_float(s, "s")
    if s >= 0.5:
        raise ValueError(f"s must be below 1/2 (a finite second moment of the weights), got {s}")
    dim = check_positive_int(dim, "dim")
    cut = check_positive_float(cut, "cut")
    tt = as_tensor(t, "t")
    if bool((tt < 1).any()):
        raise ValueError("t must be >= 1")
    g = m = 1.0 / (1.0 - s / 2.0)  # gain and M(a) = E e^{sW/2} coincide for W ~ Exp(1)

    def integrand(w: float, level: float | None) -> float:
        mean, var = 2.0 * w * s, w * s  # aᵀX | W=w under the e^{2aᵀx} tilt: N(2ws, ws)
        sd, c = math.sqrt(var), 2.0 * w - g  # (Y/s − g) has mean c under the tilt
        if level is None:
            p, e1, e2 = 1.0, 0.0, var
        else:
            z = (level - mean) / sd
            p, e1, e2 = cdf(z), -sd * pdf(z), var * (cdf(z) - z * pdf(z))
        along = s * (e2 / s**2 + 2.0 * c * e1 / s + c * c * p)  # |Σa|² E[(Y/s − g)²; Y ≤ level]
        across = (dim - 1) * w * p  # the coordinates orthogonal to a
        return math.exp(2.0 * w * s - w) * (along + across)

    upper = 60.0 / (1.0 - 2.0 * s)
    total = integrate.quad(integrand, 0.0, upper, args=(None,), limit=400)[0]
    kept = [integrate.quad(integrand, 0.0, upper, args=(math.log(cut * float(x) * m),), limit=400)[0]
            for x in tt.reshape(-1).tolist()]
    rho = torch.tensor(kept, dtype=torch.float64).reshape(tt.shape) / total
    return rho, total / m**2


def delta_method_reach(s: object, t: object) -> torch.Tensor:
    r"""Heuristic fraction of the Gaussian rate constant C that is realised at context length t.

    C = e^s(...) is a second moment of the weights, E e^{2aᵀX}: an expectation
    under the law tilted by e^{2aᵀx}, which moves the logit Y = aᵀX ~ N(0, s)
    to N(2s, s).  A context of t tokens only samples logits up to about its
    maximum √s z_t, z_t = Φ̄^{-1}(1/t), so only the part of the tilted law
    below that level has been seen:

    .. math:: \rho(s, t) = \Phi\bigl(z_t - 2\sqrt s\bigr).

    t·MSE/C ≈ ρ while ρ ≪ 1, and the delta-method regime needs
    t ≫ 1/P(Y > 2s) ≈ e^{2s}, not merely t ≫ e^{s}.  A heuristic (not a
    theorem): it captures the order of magnitude of the pre-asymptotic deficit.

    Examples
    --------
    >>> r = delta_method_reach([1.0, 6.0], [1e8, 1e8])
    >>> bool(r[0] > 0.999), bool(r[1] < 0.99)
    (True, True)
    """
    from scipy.special import ndtr, ndtri

    ss, tt = as_tensor(s, "s"), as_tensor(t, "t")
    if bool((ss < 0).any()) or bool((tt < 1).any()):
        raise ValueError("need s >= 0 and t >= 1")
    z_t = ndtri(1.0 - 1.0 / (tt.numpy() + 1.0))  # upper 1/(t+1) quantile: the typical maximum
    return torch.as_tensor(ndtr(z_t - 2.0 * torch.sqrt(ss).numpy()), dtype=torch.float64)


def reach_allowance(s: object, t: object) -> tuple[float, float]:
    r"""The pre-asymptotic allowance of a Gaussian rate claim over a window of context lengths.

    With ρ(s, t) of :func:`delta_method_reach` averaged over the logit
    variances ``s`` (one per stream or query), returns

    * b, the least-squares slope of log ρ against log t over ``t``: the
      measured MSE slope lies between −1 and −1 + b;
    * ρ at the last t: the measured t·MSE/C lies between ρ and 1

    (book chapters 1 and 3).

    Examples
    --------
    >>> b, rho = reach_allowance([0.0], [100, 1000, 10000])
    >>> abs(b) < 0.01, rho > 0.99
    (True, True)
    """
    from covbook.stats import loglog_slope

    ss = as_tensor(s, "s", ndim=(0, 1)).reshape(-1)
    tt = as_tensor(t, "t", ndim=1)
    if tt.numel() < 2:
        raise ValueError(f"t must hold at least two context lengths, got {tt.numel()}")
    rho = delta_method_reach(ss[:, None].expand(-1, tt.numel()), tt.expand(ss.numel(), -1)).mean(0)  # (n_t,)
    b, _ = loglog_slope(tt.numpy(), rho.numpy())
    return b, float(rho[-1])
