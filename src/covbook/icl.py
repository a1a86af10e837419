"""In-context linear regression as gradient descent (Xu & Fang 2026, Sec. 4; THEOREMS.md T2, T3).

Tokens are z_i = (x_i, y_i) ∈ R^{d+1} with y_i = wᵀx_i + ε_i, and a query token
z_q = (x_q, 0).  With P = diag(I_d, 0) and e = e_{d+1}, the softmax head

    Θ_Q = Θ_K = √η P,   Θ_V = e eᵀ

has logits η x_qᵀx_i and, by the covariance readout (T1), its y-output tends to
η x_qᵀ Σ_x w = x_qᵀ w_1, one step of population gradient descent from w_0 = 0 on
L(v) = ½ E(y − vᵀx)² (T2).  Stacking K such heads with Θ_V = −e eᵀ and residual
connections gives, exactly at finite N, the y-column (I − A)^K (y_1, …, y_N, 0)
(A the causal attention matrix, the same at every layer), and in the limit the
K-th population GD iterate w_K = (I − (I − ηΣ_x)^K) w (T3).

This module holds the task sampler, the constructions, streaming evaluation of
the head against linear attention and least squares, population and empirical
GD, the closed-form risks, and a small training loop for chapter 7.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from covbook._validate import (
    as_covariance,
    as_tensor,
    as_vector,
    check_positive_float,
    check_positive_int,
    psd_sqrt_factor,
    resolve_device,
)
from covbook.attention import softmax_attention
from covbook.processes import IIDProcess

__all__ = [
    "X_LAWS", "ELLIPTICAL_LAWS", "RegressionTasks", "RegressionTokens", "make_regression_tasks", "token_covariance",
    "elliptical_gain", "construct_gd_head", "head_predict", "linear_attention_predict",
    "icl_prediction_paths", "ICLTransformer", "stacked_gd_transformer", "random_icl_transformer",
    "causal_attention_matrix", "power_identity_predictions", "max_stable_step", "population_gd",
    "empirical_gd", "ols", "gd_one_step_risk", "gd_optimal_step", "gd_optimal_risk", "ols_risk",
    "averaging_risk", "empirical_gd_risk_mc", "prediction_risk", "TrainLog", "train_icl",
    "bilinear_forms", "construction_alignment", "construction_risk_curve",
]

X_LAWS = ("gaussian", "two_point", "laplace", "uniform")
ELLIPTICAL_LAWS = ("gaussian", "two_point", "laplace")


# ----------------------------------------------------------------------------- sampling


def _check_eta(eta: object, name: str = "eta") -> float:
    return check_positive_float(eta, name)


def _check_law(x_law: str) -> str:
    if x_law not in X_LAWS:
        raise ValueError(f"x_law must be one of {', '.join(X_LAWS)}, got {x_law!r}")
    return x_law


def _check_noise(noise: object) -> float:
    s = float(noise)  # type: ignore[arg-type]
    if not math.isfinite(s) or s < 0:
        raise ValueError(f"noise must be a finite standard deviation >= 0, got {noise!r}")
    return s


def _cov_x(cov_x: object | None, d: int) -> torch.Tensor:
    if cov_x is None:
        return torch.eye(d, dtype=torch.float64)
    return as_covariance(cov_x, "cov_x", size=d)


def _mean_x(mean_x: object | None, d: int) -> torch.Tensor:
    return as_vector(mean_x, "mean_x", d)


def _mixing(x_law: str, shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    """Scale-mixture weights W with E W = 1: x = √W · z gives an elliptical law (shape ``shape``)."""
    dev = gen.device
    if x_law == "gaussian":
        return torch.ones(shape, dtype=torch.float64, device=dev)
    u = torch.rand(shape, generator=gen, dtype=torch.float64, device=dev)
    if x_law == "two_point":  # W uniform on {1/2, 3/2}
        return 0.5 + (u < 0.5).to(torch.float64)
    return -torch.log1p(-u)  # laplace: W ~ Exp(1)


def _draw_x(shape: tuple[int, ...], factor: torch.Tensor, mean: torch.Tensor, x_law: str,
            gen: torch.Generator) -> torch.Tensor:
    d = factor.shape[0]
    dev = gen.device
    if x_law == "uniform":  # x = Σ^{1/2} u, u with iid unit-variance coordinates on (−√3, √3)
        lam, vec = torch.linalg.eigh(factor @ factor.T)
        root = (vec * lam.clamp_min(0).sqrt()) @ vec.T  # symmetric: a diagonal Σ_x keeps coordinates iid
        u = (2 * torch.rand(*shape, d, generator=gen, dtype=torch.float64, device=dev) - 1) * math.sqrt(3)
        return u @ root.to(dev).T + mean.to(dev)  # (..., d)
    z = torch.randn(*shape, d, generator=gen, dtype=torch.float64, device=dev)  # (..., d)
    w = _mixing(x_law, shape, gen)  # (...)
    return w.sqrt()[..., None] * (z @ factor.to(dev).T) + mean.to(dev)  # (..., d)


def elliptical_gain(s: object, x_law: str) -> torch.Tensor:
    r"""Gain g(s) of the readout for a zero-mean Gaussian scale mixture (THEOREMS.md T1 b).

    .. math:: g(s) = \frac{\mathbb E[W e^{sW/2}]}{\mathbb E[e^{sW/2}]}

    gaussian: 1; two_point (W uniform on {1/2, 3/2}): 1/2 + 1/(1 + e^{-s/2});
    laplace (W ~ Exp(1)): 2/(2 − s), finite for s < 2 only.

    Examples
    --------
    >>> float(elliptical_gain(0.0, "two_point")), float(elliptical_gain(1.0, "laplace"))
    (1.0, 2.0)
    """
    law = _check_law(x_law)
    if law not in ELLIPTICAL_LAWS:
        raise ValueError(f"x_law={law!r} is not elliptical: the gain g(s) needs a Gaussian scale mixture "
                         f"({', '.join(ELLIPTICAL_LAWS)})")
    ss = as_tensor(s, "s")
    if bool((ss < 0).any()):
        raise ValueError("the logit variance s must be >= 0")
    if law == "gaussian":
        return torch.ones_like(ss)
    if law == "two_point":
        return 0.5 + torch.sigmoid(ss / 2)
    if bool((ss >= 2).any()):
        raise ValueError("the Laplace gain 2/(2 - s) needs s < 2 (the moment generating function is infinite)")
    return 2.0 / (2.0 - ss)


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
    gen = torch.Generator(device=dev).manual_seed(int(seed))
    if w is None:
        ww = torch.randn(b, d, generator=gen, dtype=torch.float64, device=dev)  # (B, d)
    else:
        wf = as_tensor(w, "w", ndim=1, device=dev)
        if wf.shape[0] != d:
            raise ValueError(f"w must have shape ({d},), got {tuple(wf.shape)}")
        ww = wf.expand(b, d).clone()
    x = _draw_x((b, n + 1), psd_sqrt_factor(cov), mu, law, gen)  # (B, N+1, d)
    eps = torch.randn(b, n + 1, generator=gen, dtype=torch.float64, device=dev)  # (B, N+1)
    y = (x * ww[:, None]).sum(-1) + sigma * eps  # (B, N+1)
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


# ----------------------------------------------------------------------------- the construction


def _precondition(precondition: object | None, d: int) -> torch.Tensor:
    if precondition is None:
        return torch.eye(d, dtype=torch.float64)
    return as_covariance(precondition, "precondition", size=d)


def construct_gd_head(d: int, eta: float, precondition: object | None = None
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""The softmax head that implements one step of (preconditioned) population GD.

    .. math:: \Theta_Q = \Theta_K = \sqrt{\eta}\,\mathrm{diag}(\Gamma^{1/2}, 0),
              \qquad \Theta_V = e\,e^\top,\ e = e_{d+1},

    so that Θ_KᵀΘ_Q = η diag(Γ, 0), the logit of z_i seen from z_q is η x_qᵀΓx_i and
    the y-output tends to η x_qᵀΓΣ_x w (Γ = I by default: Θ_Q = Θ_K = √η P).

    Parameters
    ----------
    d : int
        Input dimension (tokens have d + 1 coordinates).
    eta : float > 0
        Step size.
    precondition : array-like (d, d), symmetric PSD, optional
        The preconditioner Γ.

    Returns
    -------
    (Θ_Q, Θ_K, Θ_V), each float64 of shape (d+1, d+1).

    Examples
    --------
    >>> tq, tk, tv = construct_gd_head(2, 0.25)
    >>> tq.diagonal().tolist(), tv[2, 2].item()
    ([0.5, 0.5, 0.0], 1.0)
    """
    d = check_positive_int(d, "d")
    e = _check_eta(eta)
    root = psd_sqrt_factor(_precondition(precondition, d))  # (d, d)
    lam, vec = torch.linalg.eigh(root @ root.T)
    sym_root = vec @ torch.diag(lam.clamp_min(0).sqrt()) @ vec.T  # symmetric Γ^{1/2}
    tq = torch.zeros(d + 1, d + 1, dtype=torch.float64)
    tq[:d, :d] = math.sqrt(e) * sym_root
    tv = torch.zeros(d + 1, d + 1, dtype=torch.float64)
    tv[d, d] = 1.0
    return tq, tq.clone(), tv


def _check_tasks(tasks: RegressionTasks) -> None:
    if not isinstance(tasks, RegressionTasks):
        raise ValueError(f"tasks must be a RegressionTasks, got {type(tasks).__name__}")


def head_predict(tasks: RegressionTasks, theta_q: object, theta_k: object, theta_v: object,
                 *, include_query: bool = False) -> torch.Tensor:
    r"""The y-output of one softmax head read at the query, shape (B,).

    .. math:: \hat y = \Big[\sum_i \mathrm{softmax}_i\big((\Theta_Q z_q)^\top \Theta_K z_i\big)\,
              \Theta_V z_i\Big]_{d+1}

    over the N context tokens (and the query itself when ``include_query``), computed
    with :func:`covbook.attention.softmax_attention`.
    """
    _check_tasks(tasks)
    dt, dev = tasks.tokens.dtype, tasks.tokens.device
    tq, tk, tv = (as_tensor(t, n, ndim=2, dtype=dt, device=dev)
                  for t, n in ((theta_q, "theta_q"), (theta_k, "theta_k"), (theta_v, "theta_v")))
    keys = tasks.sequence() if include_query else tasks.tokens  # (B, T, d+1)
    q = (tasks.query @ tq.T)[:, None]  # (B, 1, d_k)
    out = softmax_attention(q, keys @ tk.T, keys @ tv.T)  # (B, 1, d+1)
    return out[:, 0, tasks.d]


def linear_attention_predict(tasks: RegressionTasks, eta: float, precondition: object | None = None
                             ) -> torch.Tensor:
    r"""Linear attention = one step of empirical GD from 0: ŷ = (η/N) Σ_i (x_qᵀΓx_i) y_i, shape (B,)."""
    _check_tasks(tasks)
    e = _check_eta(eta)
    g = _precondition(precondition, tasks.d).to(tasks.tokens)
    w1 = e * torch.einsum("bn,bnd->bd", tasks.y, tasks.x) / tasks.tokens.shape[1]  # (B, d)
    return ((tasks.x_query @ g) * w1).sum(-1)


def icl_prediction_paths(
    w: object,
    queries: object,
    eta: float,
    checkpoints: Sequence[int],
    *,
    cov_x: object | None = None,
    noise: float = 0.0,
    x_law: str = "gaussian",
    mean_x: object | None = None,
    precondition: object | None = None,
    streams: int = 1,
    seed: int = 0,
    device: str | torch.device = "cpu",
    chunk: int = 1 << 14,
) -> dict[str, torch.Tensor]:
    r"""Predictions of the GD head, linear attention and least squares along long contexts.

    One pass over ``streams`` independent contexts of one task (fixed w) reports, at each
    context length N in ``checkpoints`` and for each fixed query x_q,

    * ``softmax``: Σ_i e^{η x_qᵀΓx_i} y_i / Σ_i e^{η x_qᵀΓx_i} (the head of
      :func:`construct_gd_head`, query not among the keys), via an online log-sum-exp;
    * ``linear``: (η/N) Σ_i (x_qᵀΓx_i) y_i (empirical one-step GD);
    * ``ols``: x_qᵀ ŵ with ŵ = (XᵀX)⁺Xᵀy (minimum-norm least squares).

    Returns
    -------
    dict of tensors, each (streams, len(checkpoints), m), float64 on the CPU.
    """
    e = _check_eta(eta)
    proc = RegressionTokens(w, cov_x, noise=noise, x_law=x_law, mean_x=mean_x)
    d = proc.dim - 1
    dev = resolve_device(device)
    streams, chunk = check_positive_int(streams, "streams"), check_positive_int(chunk, "chunk")
    cps = [int(c) for c in np.asarray(checkpoints).reshape(-1)]
    if not cps or cps[0] < 1 or any(b <= a for a, b in zip(cps, cps[1:], strict=False)):
        raise ValueError("checkpoints must be a non-empty strictly increasing sequence of positive integers")
    xq = as_tensor(queries, "queries", ndim=2, device=dev)  # (m, d)
    if xq.shape[1] != d:
        raise ValueError(f"queries must have shape (m, {d}), got {tuple(xq.shape)}")
    a = e * xq @ _precondition(precondition, d).to(dev)  # (m, d): logit of x is a·x
    gen = torch.Generator(device=dev).manual_seed(int(seed))
    draw = proc.sampler(gen, streams)
    m = xq.shape[0]
    mx = torch.full((streams, m), float("-inf"), dtype=torch.float64, device=dev)  # (R, m)
    den = torch.zeros(streams, m, dtype=torch.float64, device=dev)  # (R, m)
    num = torch.zeros(streams, m, dtype=torch.float64, device=dev)  # (R, m)
    xty = torch.zeros(streams, d, dtype=torch.float64, device=dev)  # (R, d)
    xtx = torch.zeros(streams, d, d, dtype=torch.float64, device=dev)  # (R, d, d)
    out = {k: torch.empty(streams, len(cps), m, dtype=torch.float64) for k in ("softmax", "linear", "ols")}
    seen = 0
    for j, t in enumerate(cps):
        while seen < t:
            z = draw(min(chunk, t - seen))  # (R, n, d+1)
            x, y = z[..., :d], z[..., d]  # (R, n, d), (R, n)
            logits = x @ a.T  # (R, n, m)
            new_mx = torch.maximum(mx, logits.amax(1))  # (R, m)
            wts = torch.exp(logits - new_mx[:, None])  # (R, n, m)
            scale = torch.exp(mx - new_mx)  # (R, m)
            den = den * scale + wts.sum(1)
            num = num * scale + (wts * y[..., None]).sum(1)
            mx = new_mx
            xty += (x * y[..., None]).sum(1)
            xtx += x.transpose(1, 2) @ x
            seen += z.shape[1]
        out["softmax"][:, j] = (num / den).cpu()
        out["linear"][:, j] = (e * (xty / t) @ (xq @ _precondition(precondition, d).to(dev)).T).cpu()
        w_ols = (torch.linalg.pinv(xtx, hermitian=True) @ xty[..., None])[..., 0]  # (R, d)
        out["ols"][:, j] = (w_ols @ xq.T).cpu()
    return out


# ----------------------------------------------------------------------------- stacked heads


class ICLTransformer(nn.Module):
    r"""Softmax attention layers with residual connections on in-context regression tokens.

    Layer l maps h ← h + Attn_l(h) with causal softmax attention
    (:func:`covbook.attention.softmax_attention`) and weights (Θ_Q^l, Θ_K^l, Θ_V^l), each
    (d+1, d+1).  The input is the causal layout (z_1, …, z_N, z_q); the prediction is
    ŷ = −h_q^{(L)}[d+1], minus the y-slot of the query after the last layer.
    """

    def __init__(self, d: int, thetas: Sequence[tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
                 *, trainable: bool = False) -> None:
        super().__init__()
        self.d = check_positive_int(d, "d")
        if len(thetas) == 0:
            raise ValueError("an ICLTransformer needs at least one layer")
        self.theta_q, self.theta_k, self.theta_v = nn.ParameterList(), nn.ParameterList(), nn.ParameterList()
        for i, (tq, tk, tv) in enumerate(thetas):
            for th, name, store in ((tq, "theta_q", self.theta_q), (tk, "theta_k", self.theta_k),
                                    (tv, "theta_v", self.theta_v)):
                if tuple(th.shape) != (d + 1, d + 1):
                    raise ValueError(f"layer {i}: {name} must have shape ({d + 1}, {d + 1}), got {tuple(th.shape)}")
                store.append(nn.Parameter(th.detach().clone(), requires_grad=trainable))

    @property
    def layers(self) -> int:
        return len(self.theta_q)

    def _layer(self, h: torch.Tensor, i: int, last_only: bool = False) -> torch.Tensor:
        """One residual layer; with ``last_only`` only the last position's new state, shape (B, 1, d+1)."""
        tq, tk, tv = self.theta_q[i], self.theta_k[i], self.theta_v[i]
        if last_only:  # the last token attends to every position: no mask needed
            return h[:, -1:] + softmax_attention(h[:, -1:] @ tq.T, h @ tk.T, h @ tv.T)  # (B, 1, d+1)
        return h + softmax_attention(h @ tq.T, h @ tk.T, h @ tv.T, causal=True)  # (B, T, d+1)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """Hidden states after all layers, shape (B, T, d+1)."""
        if h.ndim != 3 or h.shape[-1] != self.d + 1:
            raise ValueError(f"input must have shape (B, T, {self.d + 1}), got {tuple(h.shape)}")
        for i in range(self.layers):
            h = self._layer(h, i)
        return h

    def predict(self, tasks: RegressionTasks) -> torch.Tensor:
        """ŷ = −h_q^{(L)}[d+1] for each task, shape (B,)."""
        _check_tasks(tasks)
        h = tasks.sequence().to(self.theta_q[0].dtype)  # (B, T, d+1)
        for i in range(self.layers - 1):
            h = self._layer(h, i)
        return -self._layer(h, self.layers - 1, last_only=True)[:, 0, self.d]

    def predict_by_depth(self, tasks: RegressionTasks) -> torch.Tensor:
        """Predictions after 0, 1, …, L layers, shape (L+1, B)."""
        _check_tasks(tasks)
        h = tasks.sequence().to(self.theta_q[0].dtype)  # (B, T, d+1)
        preds = [-h[:, -1, self.d]]
        for i in range(self.layers):
            h = self._layer(h, i)
            preds.append(-h[:, -1, self.d])
        return torch.stack(preds)


def stacked_gd_transformer(d: int, eta: float, layers: int, precondition: object | None = None
                           ) -> ICLTransformer:
    """K = ``layers`` GD heads (Θ_Q = Θ_K = √η diag(Γ^{1/2}, 0), Θ_V = −e eᵀ) with residuals (T3).

    Examples
    --------
    >>> model = stacked_gd_transformer(2, 0.5, 3)
    >>> tasks = make_regression_tasks(4, 50, 2, seed=1)
    >>> tuple(model.predict(tasks).shape)
    (4,)
    """
    check_positive_int(layers, "layers")
    tq, tk, tv = construct_gd_head(d, eta, precondition)
    return ICLTransformer(d, [(tq, tk, -tv) for _ in range(layers)])


def random_icl_transformer(d: int, layers: int, *, init_scale: float = 0.1, seed: int = 0,
                           dtype: torch.dtype = torch.float32) -> ICLTransformer:
    """A trainable ICLTransformer with iid N(0, init_scale²) weights, deterministic given ``seed``."""
    d, layers = check_positive_int(d, "d"), check_positive_int(layers, "layers")
    s = _check_eta(init_scale, "init_scale")
    gen = torch.Generator().manual_seed(int(seed))
    thetas = [tuple(s * torch.randn(d + 1, d + 1, generator=gen, dtype=torch.float64) for _ in range(3))
              for _ in range(layers)]
    return ICLTransformer(d, thetas, trainable=True).to(dtype)


def causal_attention_matrix(tokens: torch.Tensor, theta_q: object, theta_k: object) -> torch.Tensor:
    """Causal softmax attention matrix A_ij = softmax_{j≤i}((Θ_Q z_i)ᵀΘ_K z_j), shape (B, T, T)."""
    tq = as_tensor(theta_q, "theta_q", ndim=2, dtype=tokens.dtype, device=tokens.device)
    tk = as_tensor(theta_k, "theta_k", ndim=2, dtype=tokens.dtype, device=tokens.device)
    logits = (tokens @ tq.T) @ (tokens @ tk.T).transpose(1, 2)  # (B, T, T)
    t = tokens.shape[1]
    mask = torch.ones(t, t, dtype=torch.bool, device=tokens.device).triu(1)
    return torch.softmax(logits.masked_fill(mask, float("-inf")), dim=-1)


def power_identity_predictions(tasks: RegressionTasks, eta: float, layers: int,
                               precondition: object | None = None) -> torch.Tensor:
    r"""Predictions of the K-layer GD stack from the identity Y^{(K)} = (I − A)^K (y_1, …, y_N, 0).

    A is the causal attention matrix of the GD head on the x-part (the same at every
    layer, because no layer writes the x-coordinates); returns −Y^{(k)}_q for k = 0..K,
    shape (K+1, B).
    """
    _check_tasks(tasks)
    layers = check_positive_int(layers, "layers")
    tq, tk, _ = construct_gd_head(tasks.d, eta, precondition)
    seq = tasks.sequence()  # (B, T, d+1)
    a = causal_attention_matrix(seq, tq, tk)  # (B, T, T)
    y = seq[..., tasks.d]  # (B, T)
    preds = [-y[:, -1]]
    for _ in range(layers):
        y = y - (a @ y[..., None])[..., 0]  # (B, T)
        preds.append(-y[:, -1])
    return torch.stack(preds)


# ----------------------------------------------------------------------------- gradient descent


def max_stable_step(cov_x: object, precondition: object | None = None) -> float:
    """2/λ_max(ΓΣ_x): population GD from any start converges iff 0 < η < this value.

    Examples
    --------
    >>> max_stable_step(torch.diag(torch.tensor([1.0, 4.0])))
    0.5
    """
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
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 0:
        raise ValueError(f"steps must be a non-negative integer, got {steps!r}")
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
    lam = float(ridge)
    if not math.isfinite(lam) or lam < 0:
        raise ValueError(f"ridge must be >= 0, got {ridge!r}")
    gram = xx.transpose(1, 2) @ xx + lam * torch.eye(xx.shape[2], dtype=xx.dtype, device=xx.device)  # (B, d, d)
    return (torch.linalg.pinv(gram, hermitian=True) @ (xx.transpose(1, 2) @ yy[..., None]))[..., 0]


# ----------------------------------------------------------------------------- closed-form risks
# Setting: x ~ N(0, I_d), w ~ N(0, I_d), y = wᵀx + σε; risk R = E(x_qᵀ(ŵ − w))² / d.


def _n_d(n: object, d: int) -> tuple[np.ndarray, int]:
    nn_ = np.asarray(n, dtype=np.float64)
    if np.any(nn_ < 1) or not np.all(np.isfinite(nn_)):
        raise ValueError("n must be >= 1")
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
    e = np.asarray(eta, dtype=np.float64)
    return e**2 * (1 + (d + 1) / nn_ + sigma**2 / nn_) - 2 * e + 1


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


def prediction_risk(pred: torch.Tensor, tasks: RegressionTasks) -> float:
    """E(ŷ − x_qᵀw)²/d over the batch (the noiseless excess risk, normalised by d)."""
    _check_tasks(tasks)
    if pred.shape != tasks.y_query.shape:
        raise ValueError(f"pred must have shape {tuple(tasks.y_query.shape)}, got {tuple(pred.shape)}")
    return float(((pred.double() - tasks.clean_target.double()) ** 2).mean() / tasks.d)


def construction_risk_curve(tasks: RegressionTasks, eta_grid: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    r"""Risk of the best-scaled one-layer GD head for each logit scale η_a, on given tasks.

    The head has Θ_KᵀΘ_Q = η_a diag(I, 0) (η_a ≠ 0 of either sign) and Θ_V = c e eᵀ, with the
    query among the keys (the causal layout of :class:`ICLTransformer`).  Its prediction is
    c·S with S the softmax average of the labels, so the best c is ⟨S, t⟩/⟨S, S⟩
    (t = x_qᵀw), and

    .. math:: \mathcal R(\eta_a) = \min_c \mathbb E (c S - t)^2 / d .

    Returns
    -------
    (risk, c_opt), each of shape (len(eta_grid),).
    """
    _check_tasks(tasks)
    risks, scales = [], []
    t = tasks.clean_target.double()  # (B,)
    for e in eta_grid:
        e = float(e)
        if not math.isfinite(e) or e == 0:
            raise ValueError(f"eta_grid must hold finite non-zero logit scales, got {e!r}")
        tq, tk, tv = construct_gd_head(tasks.d, abs(e))
        s = head_predict(tasks, math.copysign(1.0, e) * tq, tk, tv, include_query=True).double()  # (B,)
        c = float((s * t).sum() / (s * s).sum())
        risks.append(float(((c * s - t) ** 2).mean()) / tasks.d)
        scales.append(c)
    return np.asarray(risks), np.asarray(scales)


# ----------------------------------------------------------------------------- training


@dataclass
class TrainLog:
    """Training record: the step numbers and the batch loss (mean squared error) at each."""

    steps: np.ndarray
    loss: np.ndarray


def train_icl(model: ICLTransformer, *, n_examples: int, steps: int, batch: int = 256, lr: float = 1e-2,
              noise: float = 0.0, cov_x: object | None = None, seed: int = 0,
              device: str | torch.device = "cpu", progress: bool = False, log_every: int = 10,
              final_lr_fraction: float = 0.1) -> TrainLog:
    """Train ``model`` with Adam on fresh in-context regression tasks every step.

    Loss: mean of (ŷ − y_q)² over a batch of ``batch`` tasks with N = ``n_examples``
    Gaussian examples, w ~ N(0, I_d).  The learning rate decays linearly from ``lr`` to
    ``final_lr_fraction · lr``.  Deterministic given ``seed`` on the CPU (task draws come
    from their own generator).  ``progress`` shows a plain ``tqdm`` bar on stdout.
    """
    if not isinstance(model, ICLTransformer):
        raise ValueError(f"model must be an ICLTransformer, got {type(model).__name__}")
    n, steps = check_positive_int(n_examples, "n_examples"), check_positive_int(steps, "steps")
    batch, log_every = check_positive_int(batch, "batch"), check_positive_int(log_every, "log_every")
    lr = _check_eta(lr, "lr")
    dev = resolve_device(device)
    model.to(dev)
    threads = torch.get_num_threads()
    if dev.type == "cpu":  # per-step tensors are tiny: intra-op threads only add overhead
        torch.set_num_threads(1)
    try:
        return _train_loop(model, n, steps, batch, lr, noise, cov_x, int(seed), dev, progress, log_every,
                           final_lr_fraction)
    finally:
        torch.set_num_threads(threads)


def _train_loop(model: ICLTransformer, n: int, steps: int, batch: int, lr: float, noise: float,
                cov_x: object | None, seed: int, dev: torch.device, progress: bool, log_every: int,
                final_lr_fraction: float) -> TrainLog:
    dtype = model.theta_q[0].dtype
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    frac = float(final_lr_fraction)
    if not 0 < frac <= 1:
        raise ValueError(f"final_lr_fraction must be in (0, 1], got {final_lr_fraction!r}")
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: 1.0 - (1.0 - frac) * k / max(1, steps - 1))
    gen_seed = np.random.SeedSequence(int(seed)).generate_state(1)[0]
    log_steps, log_loss = [], []
    bar = tqdm(range(steps), file=sys.stdout, disable=not progress, mininterval=2.0, ncols=80)
    pool, per_draw = None, 64  # tasks are drawn for 64 steps at a time (fewer small calls)
    for k in bar:
        if k % per_draw == 0:
            pool = make_regression_tasks(batch * per_draw, n, model.d, cov_x=cov_x, noise=noise,
                                         seed=int(gen_seed) + k, device=dev, dtype=dtype)
        j = (k % per_draw) * batch
        tasks = RegressionTasks(pool.tokens[j:j + batch], pool.query[j:j + batch],
                                pool.y_query[j:j + batch], pool.w[j:j + batch])
        loss = ((model.predict(tasks) - tasks.y_query) ** 2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        if k % log_every == 0 or k == steps - 1:
            log_steps.append(k)
            log_loss.append(loss.item())
            bar.set_postfix(loss=f"{log_loss[-1]:.3f}", refresh=False)
    bar.close()
    return TrainLog(np.asarray(log_steps), np.asarray(log_loss))


def bilinear_forms(model: ICLTransformer) -> list[dict[str, torch.Tensor]]:
    """Per layer: the logit form B = Θ_QᵀΘ_K (logit = z_qᵀ B z_i) and Θ_V, float64 on the CPU."""
    out = []
    for tq, tk, tv in zip(model.theta_q, model.theta_k, model.theta_v, strict=True):
        tq, tk, tv = (t.detach().double().cpu() for t in (tq, tk, tv))
        out.append({"B": tq.T @ tk, "V": tv})
    return out


def construction_alignment(b: torch.Tensor, v: torch.Tensor) -> dict[str, float]:
    r"""Compare one learned layer with the GD construction (B = η diag(I, 0), V = −e eᵀ).

    Only the rows of B for the query's x-coordinates matter in a first layer (the
    query's y-slot is 0).  Returns

    * ``cos_identity``: |⟨B_xx, I⟩_F| / (|B_xx|_F √d), 1 for a multiple of the identity (the
      absolute value because (B, Θ_V) and (−B, −Θ_V) are the same learner: flipping the sign
      of the logits flips the sign of the tilted mean, and the law of the tokens is symmetric);
    * ``eta_attn``: tr(B_xx)/d, the logit scale;
    * ``y_key_weight``: |B_{x,y}| / |B_{x,·}|_F, the weight of the keys' y on the logits;
    * ``v_yy``: Θ_V[y, y] and ``v_y_other``: |Θ_V[y, x]| / |Θ_V[y, ·]|;
    * ``eta_eff``: −v_yy · eta_attn, the effective GD step (prediction = −h_q[y]).
    """
    d = b.shape[0] - 1
    bxx, bxy = b[:d, :d], b[:d, d]
    cos = float(torch.trace(bxx).abs() / (bxx.norm() * math.sqrt(d)))
    eta_attn = float(torch.trace(bxx) / d)
    v_row = v[d]
    return {
        "cos_identity": cos,
        "eta_attn": eta_attn,
        "y_key_weight": float(bxy.norm() / b[:d].norm()),
        "v_yy": float(v_row[d]),
        "v_y_other": float(v_row[:d].norm() / v_row.norm()),
        "eta_eff": float(-v_row[d] * eta_attn),
    }
