r"""What the chapters' experiments share (one implementation each): checks, grids, the regression problem.

:class:`RegressionProblem` is the fixed in-context regression problem of chapters 05 and 06:
inputs :math:`x \sim (0, \Sigma_x)`, labels :math:`y = x^\top w + \sigma\varepsilon`, a head of step
:math:`\eta`. Each chapter draws its own :math:`\Sigma_x` (``one_step.setting``, ``multi_step.setting``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import torch

from covbook import icl
from covbook._validate import check_positive_int
from covbook.experiments.result import Result

__all__ = ["RegressionProblem", "log_checkpoints", "check_length", "check_streams"]


@dataclass
class RegressionProblem(Result):
    r"""A fixed regression problem: :math:`\Sigma_x` (d, d), :math:`w` (d,), step :math:`\eta`, noise :math:`\sigma`.

    ``directions`` holds raw query directions drawn with the problem (name → (m, d)), so that a
    chapter draws them in one order from the stream that draws :math:`\Sigma_x` and :math:`w`.

    Examples
    --------
    >>> p = RegressionProblem(2, 0.5, 0.1, torch.diag(torch.tensor([1.0, 0.5], dtype=torch.float64)),
    ...                       torch.tensor([1.0, 0.0], dtype=torch.float64))
    >>> p.eta_crit, p.gamma.diagonal().tolist(), p.u.tolist()
    (2.0, [1.0, 2.0], [1.0, 0.0])
    """

    d: int
    eta: float
    noise: float
    cov_x: torch.Tensor  # (d, d)
    w: torch.Tensor  # (d,)
    directions: dict[str, torch.Tensor] = field(default_factory=dict)  # name → (m, d)

    @property
    def u(self) -> torch.Tensor:
        r"""The unit query direction along the task, :math:`u = w/\sqrt{w^\top\Sigma_x w}`, shape (d,).

        So :math:`u^\top\Sigma_x u = 1`.
        """
        return self.w / torch.sqrt(self.w @ self.cov_x @ self.w)

    @cached_property
    def gamma(self) -> torch.Tensor:
        r"""The Newton preconditioner :math:`\Gamma = \Sigma_x^{-1}`, shape (d, d)."""
        return torch.linalg.inv(self.cov_x)

    @cached_property
    def eta_crit(self) -> float:
        r"""The largest stable step of gradient descent, :math:`2/\lambda_{\max}(\Sigma_x)`."""
        return icl.max_stable_step(self.cov_x)


def log_checkpoints(t_end: int, n: int, start: int = 100) -> np.ndarray:
    r"""``n`` log-spaced context lengths from ``start`` to about ``t_end`` (duplicates dropped): shape (≤ n,).

    :math:`\lfloor 10^{\,\log_{10} t_0 + k(\log_{10} t_{\rm end} - \log_{10} t_0)/(n-1)}\rfloor`,
    :math:`k = 0, \dots, n-1` (the last can fall one short of ``t_end`` by rounding).

    Examples
    --------
    >>> log_checkpoints(10_000, 3).tolist()
    [100, 1000, 10000]
    >>> log_checkpoints(1000, 3, start=10).tolist()
    [10, 100, 1000]
    """
    return np.unique(np.logspace(np.log10(start), np.log10(t_end), n).astype(int))


def check_length(t: object, name: str, least: int = 101) -> int:
    """A positive int context length of at least ``least`` (the checkpoints start at 100)."""
    t = check_positive_int(t, name)
    if t < least:
        raise ValueError(f"{name} must be at least {least} (the checkpoints run from t = 100), got {t}")
    return t


def check_streams(n: object, name: str = "n_streams") -> int:
    """At least two streams: the standard errors are across streams."""
    n = check_positive_int(n, name)
    if n < 2:
        raise ValueError(f"{name} must be at least 2 (standard errors across streams), got {n}")
    return n
