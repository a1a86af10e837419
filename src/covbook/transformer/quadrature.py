r"""Quadrature rules for Gaussian context laws (book chapter 08).

The mean-field map :func:`covbook.transformer.mean_field` takes a discrete context law; for a
Gaussian context it is fed a quadrature rule

.. math:: E f(X) \approx \sum_i w_i f(x_i),\qquad X \sim N(\mu, \Sigma):

a tensor Gauss–Hermite rule (:func:`gauss_hermite_rule`) or, in two dimensions, a polar rule
(:func:`gaussian_polar_rule`) for integrands that depend on the direction of x, such as a layer
norm of a linear embedding.
"""

from __future__ import annotations

import numpy as np
import torch

from covbook._validate import as_covariance, as_vector, check_positive_float, check_positive_int, psd_sqrt_factor

__all__ = ["gauss_hermite_rule", "gaussian_polar_rule"]


def gauss_hermite_rule(cov: object, n_nodes: int, mean: object | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Tensor-product Gauss–Hermite rule for N(mean, cov): points (n^d, d) and weights (n^d,).

    .. math:: E f(X) \approx \sum_i w_i f(\mu + L z_i), \qquad L L^\top = \Sigma,

    exact for polynomials of degree < 2n in each coordinate; use it as the ``support`` of
    :func:`mean_field` for Gaussian contexts with MLPs or layer norm.

    Examples
    --------
    >>> pts, w = gauss_hermite_rule(torch.eye(1), 5)
    >>> round(float((w * pts[:, 0] ** 2).sum()), 12)
    1.0
    """
    sigma = as_covariance(cov, "cov")
    d = sigma.shape[0]
    n_nodes = check_positive_int(n_nodes, "n_nodes")
    if n_nodes ** d > 2_000_000:
        raise ValueError(f"n_nodes**d = {n_nodes ** d} points is too many; lower n_nodes")
    z, wz = np.polynomial.hermite_e.hermegauss(n_nodes)  # probabilists' Hermite: weight e^{-z²/2}
    wz = wz / wz.sum()
    grids = np.meshgrid(*([z] * d), indexing="ij")
    zs = torch.as_tensor(np.stack([g.reshape(-1) for g in grids], axis=1))  # (n^d, d)
    ws = torch.as_tensor(np.prod(np.meshgrid(*([wz] * d), indexing="ij"), axis=0).reshape(-1))  # (n^d,)
    mu = as_vector(mean, "mean", d)
    return mu + zs @ psd_sqrt_factor(sigma).T, ws  # (n^d, d), (n^d,)


def gaussian_polar_rule(cov: object, n_r: int, n_theta: int, r_max: float = 10.0,
                        mean: object | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Polar quadrature for a two-dimensional Gaussian N(mean, cov): points (n_r n_θ, 2), weights.

    With X = μ + L r (cos θ, sin θ), L Lᵀ = Σ,

    .. math:: E f(X) = \frac{1}{2\pi}\int_0^{2\pi}\!\!\int_0^\infty f\,r e^{-r^2/2}\,dr\,d\theta
              \approx \sum_{i,j} w_i\,\frac{1}{n_\theta}\, f(\mu + L r_i(\cos\theta_j, \sin\theta_j)),

    Gauss–Legendre in r on [0, r_max] (weights w_i ∝ r_i e^{-r_i²/2}) and the trapezoid rule in θ.
    Unlike a tensor Gauss–Hermite rule it converges fast for integrands that are smooth in
    (r, θ) but not at the origin, such as a layer norm of a linear embedding, which depends on
    the direction of x only.

    Examples
    --------
    >>> pts, w = gaussian_polar_rule(torch.eye(2), 40, 16)
    >>> round(float((w * (pts ** 2).sum(1)).sum()), 10)
    2.0
    """
    sigma = as_covariance(cov, "cov", size=2)
    n_r, n_theta = check_positive_int(n_r, "n_r"), check_positive_int(n_theta, "n_theta")
    r_max = check_positive_float(r_max, "r_max")
    z, wz = np.polynomial.legendre.leggauss(n_r)
    r = 0.5 * r_max * (z + 1.0)  # (n_r,) nodes on [0, r_max]
    wr = 0.5 * r_max * wz * r * np.exp(-0.5 * r**2)  # (n_r,)
    wr = wr / wr.sum()
    theta = 2.0 * np.pi * np.arange(n_theta) / n_theta  # (n_θ,)
    unit = np.stack([np.cos(theta), np.sin(theta)], axis=1)  # (n_θ, 2)
    zs = torch.as_tensor((r[:, None, None] * unit[None]).reshape(-1, 2))  # (n_r n_θ, 2)
    ws = torch.as_tensor(np.repeat(wr / n_theta, n_theta))  # (n_r n_θ,)
    mu = as_vector(mean, "mean", 2)
    return mu + zs @ psd_sqrt_factor(sigma).T, ws  # (n, 2), (n,)

