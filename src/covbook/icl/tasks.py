r"""In-context linear regression tasks (Xu & Fang 2026, Sec. 4; book chapters 5–7).

Tokens are z_i = (x_i, y_i) ∈ R^{d+1} with y_i = wᵀx_i + ε_i, and a query token
z_q = (x_q, 0).  The inputs x are Gaussian or a Gaussian scale mixture
x = μ + √W L z (an elliptical law, whose mixing law W comes from
:mod:`covbook.processes`), so that Cov x = Σ_x = L Lᵀ for every law.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from covbook._validate import as_covariance, as_tensor, check_positive_int, check_seed, psd_sqrt_factor, resolve_device
from covbook.icl._common import _check_dtype, _check_noise, _cov_x, _mean_x
from covbook.processes import INPUT_LAWS, IIDProcess, _scale_by_factor, input_law, mixing_law
from covbook.theory import elliptical_gain as _theory_gain

__all__ = ["X_LAWS", "RegressionTasks", "RegressionTokens", "make_regression_tasks", "token_covariance",
           "elliptical_gain", "mixing_law"]


#: The input laws a task can draw x from: every law of :data:`covbook.processes.INPUT_LAWS`.
X_LAWS = tuple(INPUT_LAWS)


def _check_law(x_law: str) -> str:
    return input_law(x_law).name


def _draw_x(shape: tuple[int, ...], factor: torch.Tensor, mean: torch.Tensor, x_law: str,
            gen: torch.Generator) -> torch.Tensor:
    """x = μ + √W · L z of the given batch shape, (..., d); Gaussian x draws no W."""
    d = factor.shape[0]
    dev = gen.device
    if not input_law(x_law).elliptical:  # uniform: x = μ + Σ^{1/2} u, u with iid unit-variance coordinates on (−√3, √3)
        lam, vec = torch.linalg.eigh(factor @ factor.T)
        root = (vec * lam.clamp_min(0).sqrt()) @ vec.T  # symmetric: a diagonal Σ_x keeps coordinates iid
        u = torch.rand(*shape, d, generator=gen, dtype=torch.float64, device=dev)
        u = _scale_by_factor(u.mul_(2).sub_(1).mul_(math.sqrt(3)), root)  # (2u − 1)√3, in place; then Σ^{1/2}
        return u + mean.to(dev) if bool(mean.any()) else u  # (..., d)
    z = torch.randn(*shape, d, generator=gen, dtype=torch.float64, device=dev)  # (..., d)
    x = _scale_by_factor(z, factor)  # (..., d)
    if x_law != "gaussian":
        x = mixing_law(x_law).sample(shape, gen).sqrt()[..., None] * x  # (..., d)
    return x + mean.to(dev) if bool(mean.any()) else x  # x + 0 = x: no sum for μ = 0


def elliptical_gain(s: object, x_law: str) -> torch.Tensor:
    r"""Gain g(s) of the readout for the inputs of ``x_law`` (Xu & Fang 2026, Sec. 3.2).

    .. math:: g(s) = \frac{\mathbb E[W e^{sW/2}]}{\mathbb E[e^{sW/2}]}

    A string adapter to :func:`covbook.theory.elliptical_gain` through :func:`mixing_law`:
    gaussian: 1; two_point (W uniform on {1/2, 3/2}): 1/2 + 1/(1 + e^{-s/2});
    laplace (W ~ Exp(1)): 2/(2 − s), finite for s < 2 only (larger s raise ``ValueError``).

    Examples
    --------
    >>> float(elliptical_gain(0.0, "two_point")), float(elliptical_gain(1.0, "laplace"))
    (1.0, 2.0)
    """
    law = mixing_law(x_law)
    ss = as_tensor(s, "s")
    if bool((ss < 0).any()):
        raise ValueError("the logit variance s must be >= 0")
    if bool((ss / 2 >= law.abscissa).any()):
        raise ValueError(f"the {x_law} gain needs s < {2 * law.abscissa:g} "
                         "(the moment generating function of W is infinite beyond)")
    return _theory_gain(ss, law)


@dataclass(frozen=True)
class RegressionTasks:
    """A batch of in-context regression tasks.

    Attributes
    ----------
    tokens : tensor (B, N, d+1)
        Context tokens z_i = (x_i, y_i).
    query : tensor (B, d+1)
        Query tokens (x_q, 0).
    y_query : tensor (B,)
        Targets y_q = wᵀx_q + ε_q.
    w : tensor (B, d)
        The task vectors.
    """

    tokens: torch.Tensor
    query: torch.Tensor
    y_query: torch.Tensor
    w: torch.Tensor

    @property
    def d(self) -> int:
        return self.w.shape[-1]

    @property
    def x(self) -> torch.Tensor:
        return self.tokens[..., : self.d]  # (B, N, d)

    @property
    def y(self) -> torch.Tensor:
        return self.tokens[..., self.d]  # (B, N)

    @property
    def x_query(self) -> torch.Tensor:
        return self.query[..., : self.d]  # (B, d)

    @property
    def clean_target(self) -> torch.Tensor:
        """x_qᵀw, the noiseless answer, shape (B,)."""
        return (self.x_query * self.w).sum(-1)

    def sequence(self) -> torch.Tensor:
        """The causal layout: the N context tokens followed by the query, shape (B, N+1, d+1)."""
        return torch.cat([self.tokens, self.query[:, None, :]], dim=1)

    def __len__(self) -> int:
        return self.tokens.shape[0]

    def __getitem__(self, idx: int | slice | torch.Tensor) -> RegressionTasks:
        """The tasks ``idx`` (a slice, index tensor or boolean mask over the batch), every field alike.

        Examples
        --------
        >>> t = make_regression_tasks(6, 4, 2, seed=0)
        >>> len(t[1:3]), len(t[torch.tensor([0, 5])])
        (2, 2)
        """
        if isinstance(idx, (int, np.integer)) and not isinstance(idx, bool):
            idx = slice(int(idx), int(idx) + 1 if int(idx) != -1 else None)
        elif not isinstance(idx, (slice, torch.Tensor)):
            raise TypeError(f"idx must be an int, a slice or an index tensor, got {type(idx).__name__}")
        return RegressionTasks(self.tokens[idx], self.query[idx], self.y_query[idx], self.w[idx])

    def to(self, *args: object, **kwargs: object) -> RegressionTasks:
        """Every field moved/cast like :meth:`torch.Tensor.to` (e.g. ``tasks.to(torch.float64)``)."""
        return RegressionTasks(*(t.to(*args, **kwargs) for t in (self.tokens, self.query, self.y_query, self.w)))

    def with_query(self, x_query: object) -> RegressionTasks:
        """The same contexts with the query inputs replaced by ``x_query`` ((d,) for all tasks, or (B, d)).

        The targets become the noiseless x_qᵀw.
        """
        xq = as_tensor(x_query, "x_query", ndim=(1, 2), dtype=self.tokens.dtype, device=self.tokens.device)
        if xq.shape[-1] != self.d or (xq.ndim == 2 and xq.shape[0] != len(self)):
            raise ValueError(f"x_query must have shape ({self.d},) or ({len(self)}, {self.d}), got {tuple(xq.shape)}")
        xq = xq.expand(len(self), self.d)  # (B, d)
        query = torch.cat([xq, torch.zeros_like(xq[:, :1])], dim=-1)  # (B, d+1)
        return RegressionTasks(self.tokens, query, (xq * self.w).sum(-1), self.w)


def _check_tasks(tasks: RegressionTasks) -> None:
    if not isinstance(tasks, RegressionTasks):
        raise ValueError(f"tasks must be a RegressionTasks, got {type(tasks).__name__}")


def make_regression_tasks(
    n_tasks: int,
    n_examples: int,
    d: int,
    *,
    cov_x: object | None = None,
    noise: float = 0.0,
    x_law: str = "gaussian",
    mean_x: object | None = None,
    w: object | None = None,
    seed: int = 0,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float64,
) -> RegressionTasks:
    """Sample in-context linear regression tasks.

    x_i = μ_x + √W_i L z_i with L Lᵀ = Σ_x, z_i ~ N(0, I) and W_i the mixing weight of
    ``x_law`` (``gaussian``: W = 1; ``two_point``: W uniform on {1/2, 3/2}; ``laplace``:
    W ~ Exp(1)); or, for ``uniform`` (not elliptical), x_i = μ_x + Σ_x^{1/2} u_i with u_i iid
    coordinates uniform on (−√3, √3), so ``cov_x = I/12`` gives U(−½, ½)^d.  Cov x = Σ_x for
    every law; y_i = wᵀx_i + noise·ε_i, ε_i ~ N(0, 1);
    w ~ N(0, I_d) per task unless a fixed ``w`` (d,) is given.  The query is drawn
    from the same law.  Deterministic given ``seed`` on a given device.

    Examples
    --------
    >>> t = make_regression_tasks(2, 5, 3, seed=0)
    >>> tuple(t.tokens.shape), tuple(t.query.shape), tuple(t.w.shape)
    ((2, 5, 4), (2, 4), (2, 3))
    >>> bool(torch.allclose(t.y, (t.x * t.w[:, None]).sum(-1)))
    True
    """
    b = check_positive_int(n_tasks, "n_tasks")
    n = check_positive_int(n_examples, "n_examples")
    d = check_positive_int(d, "d")
    law, sigma = _check_law(x_law), _check_noise(noise)
    cov, mu = _cov_x(cov_x, d), _mean_x(mean_x, d)
    dev = resolve_device(device)
    dtype = _check_dtype(dtype)
    gen = torch.Generator(device=dev).manual_seed(check_seed(seed))
    if w is None:
        ww = torch.randn(b, d, generator=gen, dtype=torch.float64, device=dev)  # (B, d)
    else:
        wf = as_tensor(w, "w", ndim=1, device=dev)
        if wf.shape[0] != d:
            raise ValueError(f"w must have shape ({d},), got {tuple(wf.shape)}")
        ww = wf.expand(b, d).clone()
    x = _draw_x((b, n + 1), psd_sqrt_factor(cov), mu, law, gen)  # (B, N+1, d)
    y = (x * ww[:, None]).sum(-1)  # (B, N+1)
    if sigma != 0:  # noiseless tasks draw no ε: the last draw, so the rest is the same either way
        y = y + sigma * torch.randn(b, n + 1, generator=gen, dtype=torch.float64, device=dev)  # (B, N+1)
    tokens = torch.cat([x[:, :n], y[:, :n, None]], dim=-1)  # (B, N, d+1)
    query = torch.cat([x[:, n], torch.zeros(b, 1, dtype=torch.float64, device=dev)], dim=-1)  # (B, d+1)
    return RegressionTasks(tokens.to(dtype), query.to(dtype), y[:, n].to(dtype), ww.to(dtype))


def token_covariance(cov_x: object, w: object, noise: float = 0.0) -> torch.Tensor:
    """Covariance of z = (x, wᵀx + noise·ε): [[Σ_x, Σ_x w], [wᵀΣ_x, wᵀΣ_x w + noise²]], shape (d+1, d+1).

    Examples
    --------
    >>> token_covariance(torch.eye(1), torch.tensor([2.0]), noise=1.0)
    tensor([[1., 2.],
            [2., 5.]], dtype=torch.float64)
    """
    c = as_covariance(cov_x, "cov_x")
    d = c.shape[0]
    ww = as_tensor(w, "w", ndim=1)
    if ww.shape[0] != d:
        raise ValueError(f"w must have shape ({d},), got {tuple(ww.shape)}")
    sigma = _check_noise(noise)
    cw = c @ ww  # (d,)
    out = torch.zeros(d + 1, d + 1, dtype=torch.float64)
    out[:d, :d], out[:d, d], out[d, :d] = c, cw, cw
    out[d, d] = ww @ cw + sigma**2
    return out


class RegressionTokens(IIDProcess):
    """The token law z = (x, wᵀx + noise·ε) of one task with a fixed w, as a covbook process.

    Lets :func:`covbook.attention.readout_paths` stream the GD head over contexts of
    any length.  ``x_law`` as in :func:`make_regression_tasks`.
    """

    def __init__(self, w: object, cov_x: object | None = None, *, noise: float = 0.0,
                 x_law: str = "gaussian", mean_x: object | None = None) -> None:
        self.w = as_tensor(w, "w", ndim=1)
        d = self.w.shape[0]
        if d == 0:
            raise ValueError("w must have at least one coordinate, got an empty vector")
        self.dim = d + 1
        self.cov_x, self.mean_x = _cov_x(cov_x, d), _mean_x(mean_x, d)
        self.noise, self.x_law = _check_noise(noise), _check_law(x_law)
        self._factor = psd_sqrt_factor(self.cov_x)  # (d, d)

    @property
    def mean(self) -> torch.Tensor:
        return torch.cat([self.mean_x, (self.w @ self.mean_x)[None]])

    @property
    def covariance(self) -> torch.Tensor:
        return token_covariance(self.cov_x, self.w, self.noise)

    def draw(self, shape: tuple[int, int], generator: torch.Generator) -> torch.Tensor:
        dev = generator.device
        x = _draw_x(shape, self._factor, self.mean_x, self.x_law, generator)  # (R, n, d)
        eps = torch.randn(*shape, generator=generator, dtype=torch.float64, device=dev)  # (R, n)
        y = x @ self.w.to(dev) + self.noise * eps  # (R, n)
        return torch.cat([x, y[..., None]], dim=-1)  # (R, n, d+1)
