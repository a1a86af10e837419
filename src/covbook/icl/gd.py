r"""Gradient descent on linear regression, least squares and their risks (Xu & Fang 2026, Sec. 4; chapters 5–6).

Population GD w_{k+1} = w_k + ηΓΣ_x(w − w_k), empirical GD on ½·(1/N)Σ(y_i − vᵀx_i)²,
(ridge) least squares, and the closed-form risks in the isotropic Gaussian setting
x ~ N(0, I_d), w ~ N(0, I_d), y = wᵀx + σε, R = E(x_qᵀ(ŵ − w))²/d.
"""

from __future__ import annotations

import numpy as np
import torch

from covbook._validate import (
    as_array,
    as_covariance,
    as_tensor,
    check_nonnegative_float,
    check_nonnegative_int,
    check_positive_int,
)
from covbook.icl._common import _check_eta, _check_noise, _precondition
from covbook.icl.tasks import make_regression_tasks

__all__ = ["max_stable_step", "population_gd", "empirical_gd", "ols", "gd_one_step_risk", "gd_optimal_step",
           "gd_optimal_risk", "averaging_risk", "ols_risk", "empirical_gd_risk_mc"]


def max_stable_step(cov_x: object, precondition: object | None = None) -> float:
    """2/λ_max(ΓΣ_x): population GD from any start converges iff 0 < η < this value.

    Examples
    --------
    >>> max_stable_step(torch.diag(torch.tensor([1.0, 4.0])))
    0.5
    """
    if as_tensor(cov_x, "cov_x", ndim=2).numel() == 0:
        raise ValueError("cov_x must be at least 1x1, got an empty matrix")
    c = as_covariance(cov_x, "cov_x")
    g = _precondition(precondition, c.shape[0])
    lam = torch.linalg.eigvals(g @ c).real.max().item()
    if lam <= 0:
        raise ValueError("cov_x (times the preconditioner) must have a positive eigenvalue")
    return 2.0 / lam


def population_gd(cov_x: object, w: object, eta: float, steps: int, *, precondition: object | None = None,
                  check_stable: bool = False) -> torch.Tensor:
    r"""Population GD iterates on L(v) = ½E(y − vᵀx)² from w_0 = 0.

    .. math:: w_{k+1} = w_k + \eta\,\Gamma\Sigma_x (w - w_k),\qquad
              w_k = (I - (I - \eta\Gamma\Sigma_x)^k)\, w

    Parameters
    ----------
    cov_x : (d, d) symmetric PSD
    w : (d,) or (B, d)
    eta : float > 0
    steps : int >= 0
    check_stable : bool
        Raise ``ValueError`` unless 0 < η < 2/λ_max(ΓΣ_x) (convergence to w is claimed).

    Returns
    -------
    tensor (steps+1, d) or (steps+1, B, d): w_0, …, w_K.

    Examples
    --------
    >>> population_gd(torch.eye(1), torch.tensor([1.0]), 0.5, 2)[:, 0].tolist()
    [0.0, 0.5, 0.75]
    """
    c = as_covariance(cov_x, "cov_x")
    d = c.shape[0]
    e = _check_eta(eta)
    steps = check_nonnegative_int(steps, "steps")
    ww = as_tensor(w, "w", ndim=(1, 2))
    if ww.shape[-1] != d:
        raise ValueError(f"w must have last dim {d}, got shape {tuple(ww.shape)}")
    g = _precondition(precondition, d)
    if check_stable and not e < max_stable_step(c, g):
        raise ValueError(f"eta = {e} is not a stable step: GD converges only for 0 < eta < "
                         f"2/lambda_max = {max_stable_step(c, g):.4g}")
    m = e * g @ c  # (d, d)
    it = [torch.zeros_like(ww)]
    for _ in range(int(steps)):
        it.append(it[-1] + (ww - it[-1]) @ m.T)  # (…, d)
    return torch.stack(it)


def empirical_gd(x: torch.Tensor, y: torch.Tensor, eta: float, steps: int = 1) -> torch.Tensor:
    r"""GD on the empirical loss ½·(1/N)Σ(y_i − vᵀx_i)² from v = 0.

    .. math:: v_{k+1} = v_k + \frac{\eta}{N} X^\top (y - X v_k)

    x: (B, N, d), y: (B, N); returns the iterates v_0..v_K, shape (K+1, B, d).
    One step is linear attention: v_1 = (η/N) Xᵀy.
    """
    xx = as_tensor(x, "x", ndim=3)
    yy = as_tensor(y, "y", ndim=2)
    if yy.shape != xx.shape[:2]:
        raise ValueError(f"y must have shape {tuple(xx.shape[:2])}, got {tuple(yy.shape)}")
    e = _check_eta(eta)
    steps = check_positive_int(steps, "steps")
    n = xx.shape[1]
    if n == 0:
        raise ValueError("x must hold at least one example per task (N >= 1), got shape (B, 0, d)")
    it = [torch.zeros(xx.shape[0], xx.shape[2], dtype=xx.dtype, device=xx.device)]
    for _ in range(steps):
        resid = yy - (xx * it[-1][:, None]).sum(-1)  # (B, N)
        it.append(it[-1] + e / n * torch.einsum("bn,bnd->bd", resid, xx))
    return torch.stack(it)


def ols(x: torch.Tensor, y: torch.Tensor, ridge: float = 0.0) -> torch.Tensor:
    r"""(Ridge) least squares ŵ = (XᵀX + λI)⁺ Xᵀy per task; x (B, N, d), y (B, N) -> (B, d).

    With λ = 0 and N < d this is the minimum-norm interpolator.
    """
    xx = as_tensor(x, "x", ndim=3)
    yy = as_tensor(y, "y", ndim=2)
    if yy.shape != xx.shape[:2]:
        raise ValueError(f"y must have shape {tuple(xx.shape[:2])}, got {tuple(yy.shape)}")
    if xx.shape[1] == 0 or xx.shape[2] == 0:
        raise ValueError(f"x must hold at least one example of at least one coordinate per task, got shape "
                         f"{tuple(xx.shape)}")
    lam = check_nonnegative_float(ridge, "ridge")
    gram = xx.transpose(1, 2) @ xx + lam * torch.eye(xx.shape[2], dtype=xx.dtype, device=xx.device)  # (B, d, d)
    return (torch.linalg.pinv(gram, hermitian=True) @ (xx.transpose(1, 2) @ yy[..., None]))[..., 0]


def _n_d(n: object, d: int) -> tuple[np.ndarray, int]:
    nn_ = as_array(n, "n", "a number (or array of numbers) >= 1")
    if np.any(nn_ < 1):
        raise ValueError(f"n must be finite and >= 1, got {n!r}")
    return nn_, check_positive_int(d, "d")


def gd_one_step_risk(n: object, d: int, eta: object, noise: float = 0.0) -> np.ndarray:
    r"""Risk of one empirical GD step ŵ = (η/n)Xᵀy, normalised by d.

    .. math:: R(\eta) = \eta^2\Bigl(1 + \frac{d+1}{n} + \frac{\sigma^2}{n}\Bigr) - 2\eta + 1

    (Wishart moments: E S = I, E tr S² = d(1 + (d+1)/n) for S = XᵀX/n).

    Examples
    --------
    >>> float(gd_one_step_risk(10, 4, 1.0))
    0.5
    """
    nn_, d = _n_d(n, d)
    sigma = _check_noise(noise)
    e = as_array(eta, "eta", "a finite step size (or array of them)")
    with np.errstate(over="ignore", invalid="ignore"):
        risk = e**2 * (1 + (d + 1) / nn_ + sigma**2 / nn_) - 2 * e + 1
    if not np.all(np.isfinite(risk)):
        raise ValueError(f"eta is too large: the risk overflows float64 (got eta = {eta!r})")
    return risk


def gd_optimal_step(n: object, d: int, noise: float = 0.0) -> np.ndarray:
    """η* = n/(n + d + 1 + σ²), the minimiser of :func:`gd_one_step_risk`."""
    nn_, d = _n_d(n, d)
    return nn_ / (nn_ + d + 1 + _check_noise(noise) ** 2)


def gd_optimal_risk(n: object, d: int, noise: float = 0.0) -> np.ndarray:
    """R(η*) = 1 − η* = (d + 1 + σ²)/(n + d + 1 + σ²)."""
    return 1.0 - gd_optimal_step(n, d, noise)


def averaging_risk(n: object, d: int, noise: float = 0.0) -> np.ndarray:
    """Risk of ŵ = (1/n)Xᵀy (one GD step with η = 1): (d + 1 + σ²)/n."""
    return gd_one_step_risk(n, d, 1.0, noise)


def ols_risk(n: object, d: int, noise: float = 0.0) -> np.ndarray:
    r"""Risk of (minimum-norm) least squares, normalised by d.

    n ≥ d + 2: σ²/(n − d − 1); n ≤ d − 2: (d − n)/d + σ² n/(d (d − n − 1));
    noiseless and n ∈ {d−1, d, d+1}: (d − n)⁺/d; otherwise infinite.
    """
    nn_, d = _n_d(n, d)
    s2 = _check_noise(noise) ** 2
    out = np.full(nn_.shape, np.inf)
    over, under = nn_ >= d + 2, nn_ <= d - 2
    out[over] = s2 / (nn_[over] - d - 1)
    out[under] = (d - nn_[under]) / d + s2 * nn_[under] / (d * (d - nn_[under] - 1))
    if s2 == 0:
        mid = ~(over | under)
        out[mid] = np.maximum(d - nn_[mid], 0.0) / d
    return out


def empirical_gd_risk_mc(n: int, d: int, eta: float, steps: int, *, noise: float = 0.0,
                         n_mc: int = 4000, seed: int = 0) -> float:
    """Monte Carlo risk (normalised by d) of K empirical GD steps, from n_mc draws of X, w, ε."""
    tasks = make_regression_tasks(n_mc, n, d, noise=noise, seed=seed)
    v = empirical_gd(tasks.x, tasks.y, eta, steps)[-1]  # (B, d)
    return float(((v - tasks.w) ** 2).sum(-1).mean() / d)
