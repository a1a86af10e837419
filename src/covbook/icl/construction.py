r"""The softmax head that implements one step of gradient descent (Xu & Fang 2026, Sec. 4.1; chapter 5).

With P = diag(I_d, 0) and e = e_{d+1}, the head Θ_Q = Θ_K = √η P, Θ_V = e eᵀ has logits
η x_qᵀx_i and, by the covariance readout, its y-output tends to η x_qᵀ Σ_x w = x_qᵀ w_1,
one step of population gradient descent from w_0 = 0 on L(v) = ½ E(y − vᵀx)².
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from covbook._validate import as_tensor, check_positive_int, psd_sqrt_factor
from covbook.attention import block_attention
from covbook.icl._common import _check_eta, _precondition
from covbook.icl.tasks import RegressionTasks, _check_tasks

__all__ = ["construct_gd_head", "head_predict", "linear_attention_predict", "construction_predict",
           "construction_risk_curve"]


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


def head_predict(tasks: RegressionTasks, theta_q: object, theta_k: object, theta_v: object,
                 *, include_query: bool = False) -> torch.Tensor:
    r"""The y-output of one softmax head read at the query, shape (B,).

    .. math:: \hat y = \Big[\sum_i \mathrm{softmax}_i\big((\Theta_Q z_q)^\top \Theta_K z_i\big)\,
              \Theta_V z_i\Big]_{d+1}

    over the N context tokens (and the query itself when ``include_query``), computed
    with :func:`covbook.attention.block_attention` (the values of
    :func:`covbook.attention.softmax_attention`, which handles or reports non-finite inputs).
    """
    _check_tasks(tasks)
    dt, dev = tasks.tokens.dtype, tasks.tokens.device
    tq, tk, tv = (as_tensor(t, n, ndim=2, dtype=dt, device=dev)
                  for t, n in ((theta_q, "theta_q"), (theta_k, "theta_k"), (theta_v, "theta_v")))
    side = tasks.d + 1
    if tq.shape[1] != side or tk.shape != (tq.shape[0], side) or tv.shape != (side, side):
        raise ValueError(f"theta_q and theta_k must be (k, {side}) of the same shape and theta_v ({side}, {side}) "
                         f"for tokens of dimension {side}; got theta_q {tuple(tq.shape)}, theta_k {tuple(tk.shape)}, "
                         f"theta_v {tuple(tv.shape)}")
    keys = tasks.sequence() if include_query else tasks.tokens  # (B, T, d+1)
    q = (tasks.query @ tq.T)[:, None]  # (B, 1, d_k)
    # block_attention: the reference's values for finite inputs without its checks of the (B, T, d+1) inputs
    # (half of this function's time at n_eval = 32,000); a non-finite output goes to the reference, which reports it
    out = block_attention(q, keys @ tk.T, keys @ tv.T)  # (B, 1, d+1)
    return out[:, 0, tasks.d]


def linear_attention_predict(tasks: RegressionTasks, eta: float, precondition: object | None = None
                             ) -> torch.Tensor:
    r"""Linear attention = one step of empirical GD from 0: ŷ = (η/N) Σ_i (x_qᵀΓx_i) y_i, shape (B,)."""
    _check_tasks(tasks)
    e = _check_eta(eta)
    g = _precondition(precondition, tasks.d).to(tasks.tokens)
    w1 = e * torch.einsum("bn,bnd->bd", tasks.y, tasks.x) / tasks.tokens.shape[1]  # (B, d)
    return ((tasks.x_query @ g) * w1).sum(-1)


def _check_scale(e: object, name: str) -> float:
    if isinstance(e, bool):
        raise ValueError(f"{name} must be a finite non-zero logit scale, got the bool {e!r}")
    try:
        v = float(e)  # type: ignore[arg-type]
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be a finite non-zero logit scale, got {e!r}") from err
    if not math.isfinite(v) or v == 0:
        raise ValueError(f"{name} must be a finite non-zero logit scale, got {e!r}")
    return v


def _query_logits(tasks: RegressionTasks) -> tuple[torch.Tensor, torch.Tensor]:
    """x_qᵀx_i and y_i over the causal layout (the N context tokens, then the query with its empty
    label slot 0), shape (B, N+1) each: the construction's logits at η_a = 1 and its values."""
    seq = tasks.sequence()  # (B, N+1, d+1)
    g = (seq[..., : tasks.d] @ tasks.x_query[..., None])[..., 0]  # (B, N+1)
    return g, seq[..., tasks.d]


def _label_average(g: torch.Tensor, y: torch.Tensor, eta_a: float, tasks: RegressionTasks) -> torch.Tensor:
    r"""S = Σ_i softmax_i(η_a x_qᵀx_i) y_i over the causal layout, shape (B,), from :func:`_query_logits`.

    The head of :func:`construction_predict` at c = 1 (Θ_KᵀΘ_Q = η_a diag(I, 0), Θ_V = e eᵀ), computed
    from the logits at η_a = 1, which a grid of scales shares.  Overflowing logits (a non-finite S) go to
    :func:`head_predict`, whose reference attention handles or reports them.
    """
    s = (torch.softmax(eta_a * g, dim=-1) * y).sum(-1)  # (B,)
    if bool(torch.isfinite(s).all()):
        return s
    tq, tk, tv = construct_gd_head(tasks.d, abs(eta_a))
    return head_predict(tasks, math.copysign(1.0, eta_a) * tq, tk, tv, include_query=True)


def construction_predict(tasks: RegressionTasks, eta_a: float, c: float = 1.0) -> torch.Tensor:
    r"""Prediction c·S of the one-layer GD head with logit scale η_a (either sign) and value scale c, shape (B,).

    Θ_KᵀΘ_Q = η_a diag(I, 0), Θ_V = c e eᵀ, the query among the keys (the causal layout of
    :class:`ICLTransformer`); S is the softmax average of the labels (the query contributes its empty slot, 0).
    """
    _check_tasks(tasks)
    e = _check_scale(eta_a, "eta_a")
    if isinstance(c, bool):
        raise ValueError(f"c must be a finite number, got the bool {c!r}")
    try:
        cc = float(c)
    except (TypeError, ValueError) as err:
        raise ValueError(f"c must be a finite number, got {c!r}") from err
    if not math.isfinite(cc):
        raise ValueError(f"c must be a finite number, got {c!r}")
    out = cc * _label_average(*_query_logits(tasks), e, tasks)  # (B,)
    if not bool(torch.isfinite(out).all()):
        raise ValueError(f"c = {c!r} is too large: c times the softmax average of the labels overflows")
    return out


def construction_risk_curve(tasks: RegressionTasks, eta_grid: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    r"""Risk of the best-scaled one-layer GD head for each logit scale η_a, on given tasks.

    The head is that of :func:`construction_predict`.  Its prediction is c·S with S the softmax
    average of the labels, so the best c on these tasks is ⟨S, t⟩/⟨S, S⟩ (t = x_qᵀw), and

    .. math:: \mathcal R(\eta_a) = \min_c \mathbb E (c S - t)^2 / d .

    The minimum is taken on the same tasks: to compare the tuned head with other learners, tune
    (η_a, c) here on held-out tasks and evaluate :func:`construction_predict` on fresh ones.

    Returns
    -------
    (risk, c_opt), each of shape (len(eta_grid),).
    """
    _check_tasks(tasks)
    grid = [_check_scale(e, "eta_grid") for e in np.asarray(eta_grid, dtype=object).reshape(-1)]
    if not grid:
        raise ValueError("eta_grid must hold at least one logit scale")
    risks, scales = [], []
    t = tasks.clean_target.double()  # (B,)
    g, y = _query_logits(tasks)  # (B, N+1) each: shared by every η_a of the grid
    for e in grid:
        s = _label_average(g, y, e, tasks).double()  # (B,)
        c = float((s * t).sum() / (s * s).sum())
        risks.append(float(((c * s - t) ** 2).mean()) / tasks.d)
        scales.append(c)
    return np.asarray(risks), np.asarray(scales)
