r"""Small linear algebra shared by the input laws and the closed forms (paper Sec. 3; book chapter 4).

The stationary covariance of a Gaussian VAR(1) (the discrete Lyapunov
equation), the spectral radius that decides whether it exists, and a least
squares solve that gives the same bits on every call.  Kept apart
from :mod:`covbook.processes` and :mod:`covbook.theory` so that both can use
it without importing each other.
"""

from __future__ import annotations

import torch

from covbook._validate import as_covariance, as_tensor, check_square, finite_result

__all__ = ["lstsq", "spectral_radius", "stationary_covariance"]


def spectral_radius(A: object) -> float:
    r"""Largest modulus of an eigenvalue of the square matrix A, :math:`\rho(A) = \max_i |\lambda_i(A)|`.

    Examples
    --------
    >>> spectral_radius([[0.0, 2.0], [0.5, 0.0]])
    1.0
    """
    a = as_tensor(A, "A", ndim=2)
    check_square(a, "A")
    return float(finite_result(torch.linalg.eigvals(a).abs().max(), "the spectral radius"))


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
    check_square(a, "A")
    d = a.shape[0]
    q = as_covariance(noise_cov, "noise_cov", size=d)
    rho = spectral_radius(a)
    if rho >= 1.0 - 1e-9:
        raise ValueError(f"A must be stable (spectral radius < 1) for a stationary VAR(1), got {rho:.6g}")
    lhs = torch.eye(d * d, dtype=torch.float64) - torch.kron(a, a)  # (d², d²)
    sigma = torch.linalg.solve(lhs, q.reshape(-1)).reshape(d, d)  # row-major vec is consistent with kron(A, A)
    return finite_result(0.5 * (sigma + sigma.T), "the stationary covariance")


def lstsq(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    r"""Least-squares solution :math:`\hat X = \arg\min_X \lVert aX - b\rVert_F`, deterministic on the CPU.

    ``torch.linalg.lstsq``'s default CPU driver, LAPACK ``gelsy`` (pivoted
    QR), returns results that differ in the last bits from call to call on
    the same input with the MKL that torch's wheels ship (about 1 call in 4
    on a 5 × 3 system, one thread or two).  The SVD driver ``gelsd`` gives the
    same bits on every call and also handles a rank-deficient ``a``; CUDA has
    only ``gels`` (QR, full column rank), which is used there.

    Parameters
    ----------
    a : (m, n) tensor
    b : (m, k) tensor, on ``a``'s device and of its dtype

    Returns
    -------
    (n, k) tensor, the minimum-norm least-squares solution.

    Examples
    --------
    The mean of 1 and 3 is the least-squares constant through them:

    >>> one = torch.ones(2, 1, dtype=torch.float64)
    >>> round(float(lstsq(one, torch.tensor([[1.0], [3.0]], dtype=torch.float64))), 12)
    2.0
    """
    if a.ndim != 2 or b.ndim != 2 or a.shape[0] != b.shape[0]:
        raise ValueError(f"a and b must be (m, n) and (m, k) matrices with the same m, got {tuple(a.shape)} "
                         f"and {tuple(b.shape)}")
    driver = "gelsd" if a.device.type == "cpu" else "gels"
    return torch.linalg.lstsq(a, b, driver=driver).solution  # (n, k)
