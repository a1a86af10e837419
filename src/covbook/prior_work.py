r"""Prior work in its own settings: closed forms and small models for the comparison chapter.

Serves the chapter "Relation to prior work" (Chapter 11), which reproduces the in-context
regression numbers of von Oswald et al. (2023) and Garg et al. (2022) next to the
covariance-readout view of Xu & Fang (2026, Sec. 4).

* :func:`one_step_risk`, :func:`one_step_optimum` -- the risk of one empirical gradient step
  ŵ = (η/n) Xᵀy for isotropic inputs of any of the task laws of :mod:`covbook.icl`,
  through the fourth moment E|x|⁴ (no Gaussian assumption);
* :func:`tilted_mean` -- the exact mean of x under the exponential tilt e^{aᵀx}, the
  long-context limit of a softmax readout, for Gaussian, elliptical and uniform inputs;
* :func:`head_limit`, :func:`head_paths` -- the long-context limit of one trained softmax
  layer (:class:`covbook.icl.ICLTransformer`) and its output along growing contexts;
* :class:`LinearSelfAttention` and :func:`train_on_tasks` -- one linear self-attention layer
  (the model of von Oswald et al.) and a training loop on tasks of any input law.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from covbook._seeds import derive_seed
from covbook._validate import as_tensor, check_checkpoints, check_positive_float, check_positive_int, resolve_device
from covbook.attention import OnlineSoftmax
from covbook.icl import (
    ICLTransformer,
    RegressionTasks,
    TrainLog,
    elliptical_gain,
    make_regression_tasks,
)
from covbook.icl.training import adam_on_tasks
from covbook.processes import input_law

__all__ = [
    "fourth_moment_ratio", "one_step_risk", "one_step_optimum", "langevin", "tilted_mean",
    "head_limit", "head_paths", "softmax_head", "LinearSelfAttention", "train_on_tasks",
]


def _law(x_law: str) -> str:
    return input_law(x_law).name


def fourth_moment_ratio(d: int, x_law: str) -> float:
    r"""E|x|⁴ / σ⁴ for x in R^d with covariance σ² I drawn from ``x_law``.

    gaussian: d(d + 2); two_point (E W² = 5/4): 5/4 · d(d + 2); laplace (E W² = 2): 2 d(d + 2);
    nig (E W² = 3/2): 3/2 · d(d + 2); uniform (iid coordinates, kurtosis 9/5): d(d − 1) + 9d/5
    (:meth:`covbook.processes.InputLaw.fourth_moment_ratio`).

    Examples
    --------
    >>> fourth_moment_ratio(1, "uniform"), fourth_moment_ratio(2, "gaussian")
    (1.8, 8.0)
    """
    return input_law(x_law).fourth_moment_ratio(check_positive_int(d, "d"))


def _n(n: object) -> np.ndarray:
    nn_ = np.asarray(n, dtype=np.float64)
    if not np.all(np.isfinite(nn_)) or np.any(nn_ < 1):
        raise ValueError(f"n must be >= 1 (the number of in-context examples), got {n!r}")
    return nn_


def one_step_risk(n: object, d: int, eta: object, *, var_x: float = 1.0, x_law: str = "gaussian") -> np.ndarray:
    r"""Risk E(x_qᵀ(ŵ − w))² of one empirical GD step ŵ = (η/n)Xᵀy (not normalised by d).

    Inputs x_i, x_q iid with covariance σ² I (σ² = ``var_x``) from ``x_law``, w ~ N(0, I_d),
    no noise.  With S = XᵀX/n, E S = σ² I and E tr S² = (E|x|⁴ + (n − 1) d σ⁴)/n, so

    .. math:: \mathcal R(\eta) = \sigma^2 d\,\bigl[\eta^2\sigma^4 c - 2\eta\sigma^2 + 1\bigr],
              \qquad c = 1 + \frac{E|x|^4/(d\sigma^4) - 1}{n}.

    For Gaussian x, c = 1 + (d + 1)/n (:func:`covbook.icl.gd_one_step_risk` times d);
    for uniform coordinates, c = 1 + (d − 1/5)/n.

    Examples
    --------
    >>> float(one_step_risk(10, 4, 1.0)) == 4 * 0.5
    True
    """
    nn_ = _n(n)
    s2 = check_positive_float(var_x, "var_x")
    c = 1.0 + (fourth_moment_ratio(d, x_law) / d - 1.0) / nn_
    e = np.asarray(eta, dtype=np.float64)
    return s2 * d * (e**2 * s2**2 * c - 2 * e * s2 + 1.0)


def one_step_optimum(n: object, d: int, *, var_x: float = 1.0, x_law: str = "gaussian"
                     ) -> tuple[np.ndarray, np.ndarray]:
    r"""The best step and its risk for :func:`one_step_risk`: η* = 1/(σ² c), R* = σ² d (1 − 1/c).

    Examples
    --------
    >>> eta, risk = one_step_optimum(10, 10, var_x=1 / 12, x_law="uniform")
    >>> round(float(risk) / 2, 4)          # von Oswald et al.'s ½·MSE setting
    0.2062
    """
    nn_ = _n(n)
    s2 = check_positive_float(var_x, "var_x")
    c = 1.0 + (fourth_moment_ratio(d, x_law) / d - 1.0) / nn_
    return 1.0 / (s2 * c), s2 * d * (1.0 - 1.0 / c)


# ----------------------------------------------------------------------------- tilted means


def langevin(t: torch.Tensor) -> torch.Tensor:
    r"""The Langevin function L(t) = coth t − 1/t (series t/3 − t³/45 + 2t⁵/945 near 0).

    h·L(b h) is the mean of U(−h, h) tilted by e^{b u}.

    Examples
    --------
    >>> round(float(langevin(torch.tensor(1e-4)) / 1e-4), 6)
    0.333333
    """
    t = torch.as_tensor(t, dtype=torch.float64)
    small = t.abs() < 1e-2
    ts = torch.where(small, torch.ones_like(t), t)
    big = 1.0 / torch.tanh(ts) - 1.0 / ts
    series = t / 3 - t**3 / 45 + 2 * t**5 / 945
    return torch.where(small, series, big)


def _sym_root(cov: torch.Tensor) -> torch.Tensor:
    lam, vec = torch.linalg.eigh(cov)
    return (vec * lam.clamp_min(0).sqrt()) @ vec.T  # (d, d)


def tilted_mean(a: object, x_law: str, cov_x: object | None = None) -> torch.Tensor:
    r"""Mean of x under the tilt e^{aᵀx}: E[x e^{aᵀx}] / E[e^{aᵀx}], shape of ``a`` (..., d).

    x has mean zero and covariance Σ_x (identity by default) with the law of
    :func:`covbook.icl.make_regression_tasks`:

    * ``gaussian``: Σ_x a (the covariance readout);
    * ``two_point``, ``laplace``: g(s) Σ_x a with s = aᵀΣ_x a (:func:`covbook.icl.elliptical_gain`);
    * ``uniform`` (x = Σ_x^{1/2} u, u iid on (−√3, √3)): Σ_x^{1/2} m(Σ_x^{1/2} a) with
      m(b)_k = √3 L(√3 b_k) (:func:`langevin`), = Σ_x a − O(|a|³): not the covariance readout.

    Examples
    --------
    >>> a = torch.tensor([0.01, -0.02], dtype=torch.float64)
    >>> bool(torch.allclose(tilted_mean(a, "uniform"), a, atol=1e-5))  # b − b³/5 per coordinate
    True
    """
    law = _law(x_law)
    aa = as_tensor(a, "a")
    d = aa.shape[-1]
    cov = torch.eye(d, dtype=torch.float64) if cov_x is None else as_tensor(cov_x, "cov_x", ndim=2)
    if cov.shape != (d, d):
        raise ValueError(f"cov_x must have shape ({d}, {d}), got {tuple(cov.shape)}")
    cov = cov.to(aa)
    if not input_law(law).elliptical:  # uniform, the one law with iid coordinates
        root = _sym_root(cov)
        b = aa @ root  # (..., d): root is symmetric
        return (math.sqrt(3) * langevin(math.sqrt(3) * b)) @ root
    lin = aa @ cov  # (..., d)
    if law == "gaussian":
        return lin
    s = (lin * aa).sum(-1)  # (...)
    return elliptical_gain(s, law)[..., None] * lin


def _forms(model: ICLTransformer) -> tuple[torch.Tensor, torch.Tensor]:
    if not isinstance(model, ICLTransformer) or model.layers != 1:
        raise ValueError("model must be a one-layer covbook.icl.ICLTransformer")
    tq, tk, tv = (t.detach().double().cpu() for t in (model.theta_q[0], model.theta_k[0], model.theta_v[0]))
    return tq.T @ tk, tv  # B (logit = z_qᵀ B z_i), Θ_V


def _tasks_arrays(w: object, xq: object, d: int) -> tuple[torch.Tensor, torch.Tensor]:
    ww, qq = as_tensor(w, "w", ndim=2), as_tensor(xq, "xq", ndim=2)
    if ww.shape[1] != d or qq.shape != ww.shape:
        raise ValueError(f"w and xq must both have shape (B, {d}), got {tuple(ww.shape)} and {tuple(qq.shape)}")
    return ww, qq


def head_limit(model: ICLTransformer, w: object, xq: object, *, x_law: str = "gaussian",
               cov_x: object | None = None) -> torch.Tensor:
    r"""Long-context limit of a one-layer ICLTransformer's prediction, per task, shape (B,).

    With B = Θ_QᵀΘ_K and z_q = (x_q, 0), the logit of z_i = (x_i, wᵀx_i) is aᵀx_i with
    a = r_x + r_y w with r = B[:d]ᵀx_q (r_x its first d entries, r_y the last), and the
    value's label coordinate is vᵀx_i with v = Θ_V[y, x] + Θ_V[y, y] w.  By the law of large
    numbers the prediction −h_q[y] tends to

    .. math:: \hat y_\infty = -v^\top\,\mathbb E_a[x] ,

    the tilted mean of :func:`tilted_mean`.  With ``x_law="gaussian"`` this is the
    covariance readout −vᵀΣ_x a; for the GD head (B = η_a diag(I, 0), Θ_V = −c e eᵀ) it is
    one population GD step c η_a x_qᵀΣ_x w.
    """
    b, v = _forms(model)
    d = model.d
    ww, qq = _tasks_arrays(w, xq, d)
    r = qq @ b[:d]  # (B, d+1): z_qᵀ B
    a = r[:, :d] + r[:, d:] * ww  # (B, d)
    val = v[d, :d] + v[d, d] * ww  # (B, d)
    return -(val * tilted_mean(a, x_law, cov_x)).sum(-1)


def head_paths(model: ICLTransformer, w: object, xq: object, checkpoints: Sequence[int], *,
               x_law: str = "gaussian", cov_x: object | None = None, seed: int = 0, chunk: int = 4096,
               device: str | torch.device = "cpu") -> torch.Tensor:
    r"""A one-layer ICLTransformer's prediction on growing noiseless contexts, shape (B, len(checkpoints)).

    Task b has the vector w[b] and the query x_q[b]; its context grows by chunks whose inputs
    are ``make_regression_tasks(B, n_chunk, d, x_law=x_law, cov_x=cov_x, seed=derive_seed(seed, j)).x``
    (chunk j), labels wᵀx.  At each checkpoint N the output is exactly the model's on the
    causal layout (z_1, …, z_N, z_q) — the query attends to itself too — computed with
    :class:`covbook.attention.OnlineSoftmax` (float64 sums).
    """
    b, v = _forms(model)
    d = model.d
    ww, qq = _tasks_arrays(w, xq, d)
    dev = resolve_device(device)
    chunk = check_positive_int(chunk, "chunk")
    cps = check_checkpoints(checkpoints)
    ww, qq, b, v = ww.to(dev), qq.to(dev), b.to(dev), v.to(dev)
    nb = ww.shape[0]
    r = qq @ b[:d]  # (B, d+1)
    a = r[:, :d] + r[:, d:] * ww  # (B, d): logit of context token = aᵀx
    val = v[d, :d] + v[d, d] * ww  # (B, d): value's label coordinate = valᵀx
    self_logit = (r[:, :d] * qq).sum(-1)  # (B,): z_qᵀ B z_q
    self_val = (v[d, :d] * qq).sum(-1)  # (B,)
    acc = OnlineSoftmax((nb, 1), 1, device=dev)  # one query per task
    acc.update(self_logit[:, None, None], self_val[:, None, None])  # the query attends to itself
    out = torch.empty(nb, len(cps), dtype=torch.float64)
    seen, j = 0, 0
    for k, t in enumerate(cps):
        while seen < t:
            n = min(chunk, t - seen)
            sub = derive_seed(seed, j)  # chunk j's own stream
            x = make_regression_tasks(nb, n, d, x_law=x_law, cov_x=cov_x, seed=sub, device=dev).x  # (B, n, d)
            logits = (x * a[:, None]).sum(-1)  # (B, n)
            values = (x * val[:, None]).sum(-1)  # (B, n)
            acc.update(logits[:, None, :], values[..., None])  # (B, 1, n), (B, n, 1)
            seen, j = seen + n, j + 1
        out[:, k] = -acc.mean()[:, 0, 0].cpu()
    return out


def softmax_head(d: int, *, init_scale: float = 0.1, seed: int = 0, dtype: torch.dtype = torch.float32
                 ) -> ICLTransformer:
    r"""One trainable softmax layer with a merged key-query matrix: Θ_Q = I fixed, Θ_K = W_KQ and Θ_V trainable.

    The logit form is B = Θ_QᵀΘ_K = W_KQ, as in the merged parametrisation of von Oswald et al.
    (2023); W_KQ and Θ_V start iid N(0, init_scale²).  Training B directly avoids the slow
    escape from the small-weight saddle of the product Θ_QᵀΘ_K.

    Examples
    --------
    >>> m = softmax_head(3, seed=0)
    >>> m.theta_q[0].requires_grad, m.theta_k[0].requires_grad
    (False, True)
    """
    d = check_positive_int(d, "d")
    s = check_positive_float(init_scale, "init_scale")
    gen = torch.Generator().manual_seed(int(seed))
    tk, tv = (s * torch.randn(d + 1, d + 1, generator=gen, dtype=torch.float64) for _ in range(2))
    model = ICLTransformer(d, [(torch.eye(d + 1, dtype=torch.float64), tk, tv)], trainable=True).to(dtype)
    model.theta_q[0].requires_grad_(False)
    return model


# ----------------------------------------------------------------------------- linear self-attention


class LinearSelfAttention(nn.Module):
    r"""One linear self-attention layer read at the query (von Oswald et al. 2023).

    .. math:: \hat y = \Bigl[W_{PV}\,\tfrac1N \sum_{i\le N} z_i z_i^\top\, W_{KQ}\, z_q\Bigr]_{d+1}

    with trainable W_{KQ}, W_{PV} of shape (d+1, d+1).  W_{KQ} = η diag(I, 0), W_{PV} = e eᵀ
    gives one GD step ŷ = (η/N) Σ_i y_i x_iᵀx_q (:meth:`gd`).
    """

    def __init__(self, d: int, *, init_scale: float = 0.01, seed: int = 0, dtype: torch.dtype = torch.float32
                 ) -> None:
        super().__init__()
        self.d = check_positive_int(d, "d")
        s = check_positive_float(init_scale, "init_scale")
        gen = torch.Generator().manual_seed(int(seed))
        self.w_kq = nn.Parameter((s * torch.randn(d + 1, d + 1, generator=gen, dtype=torch.float64)).to(dtype))
        self.w_pv = nn.Parameter((s * torch.randn(d + 1, d + 1, generator=gen, dtype=torch.float64)).to(dtype))

    @classmethod
    def gd(cls, d: int, eta: float) -> LinearSelfAttention:
        """The construction: W_KQ = η diag(I_d, 0), W_PV = e eᵀ (float64).

        Examples
        --------
        >>> m = LinearSelfAttention.gd(2, 0.5)
        >>> t = make_regression_tasks(3, 4, 2, seed=0)
        >>> bool(torch.allclose(m.predict(t), 0.5 * (t.x * t.y[..., None]).mean(1).mul(t.x_query).sum(-1)))
        True
        """
        m = cls(d, dtype=torch.float64)
        e = check_positive_float(eta, "eta")
        with torch.no_grad():
            m.w_kq.zero_()
            m.w_kq[:d, :d] = e * torch.eye(d, dtype=torch.float64)
            m.w_pv.zero_()
            m.w_pv[d, d] = 1.0
        return m

    def predict(self, tasks: RegressionTasks) -> torch.Tensor:
        """ŷ per task, shape (B,)."""
        if not isinstance(tasks, RegressionTasks):
            raise ValueError(f"tasks must be a RegressionTasks, got {type(tasks).__name__}")
        if tasks.d != self.d:
            raise ValueError(f"tasks have d = {tasks.d}, the model d = {self.d}")
        z = tasks.tokens.to(self.w_kq.dtype)  # (B, N, d+1)
        m = z.transpose(1, 2) @ z / z.shape[1]  # (B, d+1, d+1)
        q = tasks.query.to(self.w_kq.dtype) @ self.w_kq.T  # (B, d+1)
        return ((m @ q[..., None])[..., 0] @ self.w_pv[self.d])  # (B,)

    def preconditioner(self) -> torch.Tensor:
        r"""Γ = W_PV[y, y] · W_KQ[x, x] (float64, (d, d)): ŷ ≈ x_qᵀΓᵀ(1/N)Σ y_i x_i when the other blocks vanish."""
        d = self.d
        return (self.w_pv[d, d] * self.w_kq[:d, :d]).detach().double().cpu()


def train_on_tasks(model: nn.Module, *, n_examples: int, steps: int, batch: int = 512, lr: float = 1e-2,
                   x_law: str = "gaussian", cov_x: object | None = None, seed: int = 0,
                   final_lr_fraction: float = 0.05, log_every: int = 10) -> TrainLog:
    """Train a model with a ``predict(tasks)`` method by Adam on fresh noiseless tasks every step.

    Tasks: N = ``n_examples`` inputs of law ``x_law`` with covariance ``cov_x``, w ~ N(0, I_d);
    loss: mean of (ŷ − y_q)².  The learning rate decays linearly to ``final_lr_fraction · lr``.
    Deterministic given ``seed`` on the CPU.  Returns the logged batch losses (MSE, no ½).
    """
    if not hasattr(model, "predict") or not hasattr(model, "d"):
        raise ValueError("model must have a predict(tasks) method and an attribute d")
    n, steps = check_positive_int(n_examples, "n_examples"), check_positive_int(steps, "steps")
    batch, log_every = check_positive_int(batch, "batch"), check_positive_int(log_every, "log_every")
    lr = check_positive_float(lr, "lr")
    _law(x_law)
    frac = float(final_lr_fraction)
    if not 0 < frac <= 1:
        raise ValueError(f"final_lr_fraction must be in (0, 1], got {final_lr_fraction!r}")
    dtype = next(model.parameters()).dtype
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # per-step tensors are tiny: intra-op threads only add overhead
    try:
        return _train(model, n, steps, batch, lr, x_law, cov_x, int(seed), frac, log_every, dtype)
    finally:
        torch.set_num_threads(threads)


def _train(model: nn.Module, n: int, steps: int, batch: int, lr: float, x_law: str, cov_x: object | None,
           seed: int, frac: float, log_every: int, dtype: torch.dtype) -> TrainLog:
    return adam_on_tasks(model, n_examples=n, steps=steps, batch=batch, lr=lr, x_law=x_law, cov_x=cov_x,
                         seed=seed, dtype=dtype, log_every=log_every, final_lr_fraction=frac, per_draw=32)

