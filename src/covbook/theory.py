"""Closed forms of the covariance-readout theory (Xu & Fang 2026; THEOREMS.md).

Everything here is a formula, evaluated in float64: the long-context limit of
softmax attention (the covariance readout), the logit variance that controls
its finite-context cost, and the delta-method rate constant.

Notation (THEOREMS.md, conventions): a query q gives the tilt vector
a = Θ_Kᵀ Θ_Q q; the logit variance is s = aᵀ Σ a.
"""

from __future__ import annotations

import torch

from covbook._validate import as_covariance, as_tensor, as_vector

__all__ = ["tilt_vector", "logit_variance", "scale_to_logit_variance", "covariance_readout", "readout_mse_constant"]


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
    a = qq @ tq.T @ tk  # (m, d)
    return a[0] if single else a


def logit_variance(theta_q: object, theta_k: object, cov: object, q: object) -> torch.Tensor:
    """s = aᵀ Σ a, the variance of the logit a·X; (m,) for q (m, d), scalar for q (d,)."""
    a = tilt_vector(theta_q, theta_k, q)
    c = as_covariance(cov, size=a.shape[-1])
    return ((a @ c) * a).sum(-1)


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
    if not isinstance(s, (int, float)) or not s > 0 or s != s or s == float("inf"):
        raise ValueError(f"target logit variance s must be a positive finite number, got {s!r}")
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

    exact for X ~ N(μ, Σ) by exponential tilting (THEOREMS.md T1 a).

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
    out = (mu + a @ c) @ tv.T  # (m, d_v)
    return out[0] if single else out


def readout_mse_constant(
    theta_q: object, theta_k: object, theta_v: object, cov: object, q: object
) -> torch.Tensor:
    r"""Delta-method rate constant C of the Gaussian readout: t·E|out_t − out_∞|² → C.

    .. math:: C = e^{s}\,\bigl(\operatorname{tr}\Theta_V\Sigma\Theta_V^\top + |\Theta_V\Sigma a|^2\bigr),
              \qquad s = a^\top\Sigma a

    for iid N(μ, Σ) tokens and a fixed query (THEOREMS.md T1 g); the mean does
    not enter.  Derivation: the ratio estimator's linearisation is the average
    of (Θ_V x − out_∞) e^{a·x}/M(a), whose second moment is an expectation
    under the 2a-tilted Gaussian N(μ + 2Σa, Σ) times M(2a)/M(a)² = e^s.

    Returns
    -------
    tensor, shape (m,) (or scalar for a single query)
    """
    c = as_covariance(cov)
    d = c.shape[0]
    tq, tk, tv = _weights(theta_q, theta_k, theta_v, d)
    qq, single = _queries(q, d)
    a = qq @ tq.T @ tk  # (m, d)
    s = ((a @ c) * a).sum(-1)  # (m,)
    shift = a @ c @ tv.T  # (m, d_v): Θ_V Σ a
    const = torch.exp(s) * (torch.trace(tv @ c @ tv.T) + (shift**2).sum(-1))
    return const[0] if single else const


# ---------------------------------------------------------------------------
# Chapter 2: the general tilted mean, the elliptical gain, dependence
# (THEOREMS.md T1 b, d, e, f).
# ---------------------------------------------------------------------------


def spectral_radius(A: object) -> float:
    """Largest modulus of an eigenvalue of the square matrix A."""
    a = as_tensor(A, "A", ndim=2)
    if a.shape[0] != a.shape[1]:
        raise ValueError(f"A must be a square matrix, got shape {tuple(a.shape)}")
    return float(torch.linalg.eigvals(a).abs().max())


def stationary_covariance(A: object, noise_cov: object) -> torch.Tensor:
    r"""Stationary covariance of the VAR(1) x_{s+1} = A x_s + ξ_s, ξ_s ~ N(0, Q).

    Solves the discrete Lyapunov equation

    .. math:: \Sigma = A\Sigma A^\top + Q \iff (I - A\otimes A)\,\mathrm{vec}\,\Sigma = \mathrm{vec}\,Q,

    which has a unique solution, Σ = Σ_{h≥0} A^h Q (A^h)ᵀ, iff the spectral
    radius of A is < 1 (``ValueError`` otherwise).

    Examples
    --------
    >>> stationary_covariance([[0.5]], [[0.75]])
    tensor([[1.]], dtype=torch.float64)
    """
    a = as_tensor(A, "A", ndim=2)
    if a.shape[0] != a.shape[1]:
        raise ValueError(f"A must be a square matrix, got shape {tuple(a.shape)}")
    d = a.shape[0]
    q = as_covariance(noise_cov, "noise_cov", size=d)
    rho = spectral_radius(a)
    if rho >= 1.0 - 1e-9:
        raise ValueError(f"A must be stable (spectral radius < 1) for a stationary VAR(1), got {rho:.6g}")
    lhs = torch.eye(d * d, dtype=torch.float64) - torch.kron(a, a)  # (d², d²)
    sigma = torch.linalg.solve(lhs, q.reshape(-1)).reshape(d, d)  # row-major vec is consistent with kron(A, A)
    return 0.5 * (sigma + sigma.T)


def _mixing(scale: object):
    from covbook.processes import MixingLaw

    if not isinstance(scale, MixingLaw):
        raise ValueError(f"scale must be a covbook.processes.MixingLaw, got {type(scale).__name__}")
    return scale


def elliptical_gain(s: object, scale: object) -> torch.Tensor:
    r"""Gain g(s) of the readout of a Gaussian scale mixture X = √W Z (E W = 1).

    .. math:: g(s) = \frac{E[W e^{sW/2}]}{E[e^{sW/2}]}, \qquad
              \mathrm{out}_\infty = g(s)\,\Theta_V\Sigma a,\quad s = a^\top\Sigma a

    (THEOREMS.md T1 b).  g(0) = 1, g is increasing, g ≡ 1 iff W ≡ 1 (Gaussian).
    Where E e^{sW/2} = ∞ (s ≥ 2 × the mixing law's abscissa) there is no limit
    and the value is ``inf``.

    Parameters
    ----------
    s : array-like of non-negative numbers
        Logit variances.
    scale : MixingLaw

    Returns
    -------
    tensor of the shape of ``s``, float64

    Examples
    --------
    >>> from covbook.processes import ExponentialMixing
    >>> elliptical_gain([0.0, 1.0, 2.0], ExponentialMixing())   # Laplace: 2/(2 - s)
    tensor([1., 2., inf], dtype=torch.float64)
    """
    law = _mixing(scale)
    ss = as_tensor(s, "s")
    if bool((ss < 0).any()):
        raise ValueError("s = aᵀΣa must be non-negative")
    return law.tilted_mean(ss / 2.0)


def elliptical_kurtosis(scale: object) -> float:
    r"""Excess kurtosis κ of every projection aᵀX of a scale mixture (E W = 1): κ = 3 Var W.

    From E(aᵀX)^4 = 3 E[W²] s² and Var aᵀX = s.
    """
    return 3.0 * float(_mixing(scale).variance)


def small_logit_gain(s: object, scale: object) -> torch.Tensor:
    r"""First-order (high-temperature) expansion of the elliptical gain: g(s) ≈ 1 + κ s / 6.

    From log E e^{uW} = u + ½ Var(W) u² + O(u³): g(s) = 1 + Var(W) s/2 + O(s²)
    = 1 + κ s/6 + O(s²) with κ = 3 Var W (THEOREMS.md T1 d).

    Examples
    --------
    >>> from covbook.processes import DiscreteMixing
    >>> small_logit_gain([0.0, 8.0], DiscreteMixing([0.5, 1.5], [0.5, 0.5]))
    tensor([1., 2.], dtype=torch.float64)
    """
    ss = as_tensor(s, "s")
    return 1.0 + elliptical_kurtosis(scale) * ss / 6.0


def _tilts(a: object, d: int) -> tuple[torch.Tensor, bool]:
    aa = as_tensor(a, "a", ndim=(1, 2))
    if aa.shape[-1] != d:
        raise ValueError(f"a must have last dim {d}, got shape {tuple(aa.shape)}")
    return (aa[None], True) if aa.ndim == 1 else (aa, False)


def tilted_mean(process: object, a: object) -> torch.Tensor:
    r"""The long-context limit E[X e^{aᵀX}] / E[e^{aᵀX}] = ∇ log M(a) for a process's law.

    With Θ_V = I this is the almost-sure limit of softmax attention with tilt
    vector a = Θ_Kᵀ Θ_Q q over a stationary ergodic context (THEOREMS.md T1).
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
    from covbook import processes as P

    if not isinstance(process, P.Process):
        raise ValueError(f"process must be a covbook.processes.Process, got {type(process).__name__}")
    aa, single = _tilts(a, process.dim)
    out = _tilted_mean(P, process, aa)  # (m, d)
    return out[0] if single else out


def _tilted_mean(P, process, a: torch.Tensor) -> torch.Tensor:
    name = type(process).__name__
    if isinstance(process, (P.GaussianIID, P.VAR1)):
        return process.mean + a @ process.covariance  # (m, d)
    if isinstance(process, P.ScaleMixture):
        c = process.covariance
        s = ((a @ c) * a).sum(-1)  # (m,)
        g = elliptical_gain(s, process.scale)  # (m,)
        if not bool(torch.isfinite(g).all()):
            raise ValueError(f"{name}: E e^(aᵀX) = ∞ for s = aᵀΣa >= {2 * process.scale.abscissa:g}: no limit exists")
        return g[:, None] * (a @ c)  # (m, d)
    if isinstance(process, P.SkewedExponential):
        if bool((a >= 1).any()):
            raise ValueError("SkewedExponential: E e^(aᵀX) = ∞ unless every a_i < 1: no limit exists")
        return a / (1.0 - a)
    if isinstance(process, P.BimodalGaussian):
        return a + torch.tanh(a @ process.m)[:, None] * process.m  # (m, d)
    if isinstance(process, P.NonErgodicGaussian):
        raise ValueError("NonErgodicGaussian: each stream has its own limit; use tilted_mean(process.component(k), a)")
    if isinstance(process, (P.StudentT, P.RandomWalk)):
        raise ValueError(f"{name}: no moment generating function / no stationary law, so no limit exists")
    raise ValueError(f"no closed-form tilted mean is known for {name}")


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

    each c_h an expectation under the pair (x_0, x_h) tilted by (a, a).  c_0 is
    the iid constant of :func:`readout_mse_constant`; for A = 0, C = c_0.  The
    series is summed until ‖A^h‖ < 1e-18.

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
    return total[0] if single else total


__all__ += [
    "spectral_radius", "stationary_covariance", "elliptical_gain", "elliptical_kurtosis", "small_logit_gain",
    "tilted_mean", "var1_rate_constant",
]


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
    if isinstance(nu, bool) or not isinstance(nu, int) or nu <= 0:
        raise ValueError(f"nu must be a positive integer, got {nu!r}")
    import numpy as np

    z = np.linspace(1e-9, 12.0, grid)
    y = np.linspace(-12.0, 12.0, grid)
    wz = z**nu * np.exp(-(z**2) / 2)  # (n,)
    wy = np.exp(-(y**2) / 2)  # (n,)
    theta2 = np.arctan2(y[None, :], z[:, None]) ** 2  # (n, n)
    num = np.trapezoid(wz * np.trapezoid(theta2 * wy[None, :], y, axis=1), z)
    den = np.trapezoid(wz, z) * np.trapezoid(wy, y)
    return float(np.sqrt(num / den))


__all__ += ["student_t_extreme_angle_sd"]


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
    O(1), so MSE ≍ t^{1-α} (times (log t)² from the size of the value that rides
    on a large weight).  For α ≥ 2 the delta method applies: β = −1.  Hence
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


__all__ += ["laplace_weight_tail_index", "heavy_tail_mse_exponent"]


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


__all__ += ["delta_method_reach"]
