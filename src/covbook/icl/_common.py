"""Argument checks shared by the in-context regression modules (Xu & Fang 2026, Sec. 4)."""

from __future__ import annotations

import math

import torch

from covbook._validate import as_covariance, as_vector, check_nonnegative_float, check_positive_float


def _check_eta(eta: object, name: str = "eta") -> float:
    return check_positive_float(eta, name)


def _check_noise(noise: object) -> float:
    """The label noise σ: a finite standard deviation >= 0 whose variance σ² is finite in float64."""
    s = check_nonnegative_float(noise, "noise")
    if not math.isfinite(s * s):
        raise ValueError(f"noise must be a standard deviation whose square is finite in float64, got {noise!r}")
    return s


def _check_dtype(dtype: object, name: str = "dtype") -> torch.dtype:
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"{name} must be a floating torch.dtype such as torch.float64, got {dtype!r}")
    return dtype


def _cov_x(cov_x: object | None, d: int) -> torch.Tensor:
    if cov_x is None:
        return torch.eye(d, dtype=torch.float64)
    return as_covariance(cov_x, "cov_x", size=d)


def _mean_x(mean_x: object | None, d: int) -> torch.Tensor:
    return as_vector(mean_x, "mean_x", d)


def _precondition(precondition: object | None, d: int) -> torch.Tensor:
    if precondition is None:
        return torch.eye(d, dtype=torch.float64)
    return as_covariance(precondition, "precondition", size=d)
