r"""The fixed in-context regression problem that chapters 05 and 06 share (one class, two draws).

Inputs :math:`x \sim (0, \Sigma_x)`, labels :math:`y = x^\top w + \sigma\varepsilon`, a head of step
:math:`\eta` ({prf:ref}`thm-05-one-step`, {prf:ref}`thm-06-stacked`). Each chapter draws its own
:math:`\Sigma_x` and :math:`w` from its stream ``configs`` (``one_step.setting``, ``multi_step.setting``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import torch

from covbook import icl
from covbook.experiments.result import Result

__all__ = ["RegressionProblem"]


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
