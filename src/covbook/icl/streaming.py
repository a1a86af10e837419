r"""The GD head, linear attention and least squares along one long context (chapter 5).

A single pass over a stream of tokens keeps, for every fixed query, the online
log-sum-exp of the softmax head, the running XᵀY of linear attention and the running
Gram matrix of least squares, and reads all three at a list of context lengths
(Xu & Fang 2026, Sec. 4.1: the head converges to the population GD step).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from covbook._validate import as_tensor, check_checkpoints, check_positive_int, check_seed, resolve_device
from covbook.attention import OnlineSoftmax
from covbook.icl._common import _check_eta, _precondition
from covbook.icl.tasks import RegressionTokens

__all__ = ["icl_prediction_paths"]


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
    cps = check_checkpoints(checkpoints)
    xq = as_tensor(queries, "queries", ndim=2, device=dev)  # (m, d)
    if xq.shape[1] != d:
        raise ValueError(f"queries must have shape (m, {d}), got {tuple(xq.shape)}")
    a = e * xq @ _precondition(precondition, d).to(dev)  # (m, d): logit of x is a·x
    gen = torch.Generator(device=dev).manual_seed(check_seed(seed))
    draw = proc.sampler(gen, streams)
    m = xq.shape[0]
    soft = OnlineSoftmax((streams, m), 1, device=dev)  # the online log-sum-exp of covbook.attention
    xty = torch.zeros(streams, d, dtype=torch.float64, device=dev)  # (R, d)
    xtx = torch.zeros(streams, d, d, dtype=torch.float64, device=dev)  # (R, d, d)
    out = {k: torch.empty(streams, len(cps), m, dtype=torch.float64) for k in ("softmax", "linear", "ols")}
    seen = 0
    for j, t in enumerate(cps):
        while seen < t:
            z = draw(min(chunk, t - seen))  # (R, n, d+1)
            x, y = z[..., :d], z[..., d]  # (R, n, d), (R, n)
            soft.update(a @ x.transpose(1, 2), y[..., None])  # logits (R, m, n), values (R, n, 1)
            xty += (x * y[..., None]).sum(1)
            xtx += x.transpose(1, 2) @ x
            seen += z.shape[1]
        out["softmax"][:, j] = soft.mean()[..., 0].cpu()
        out["linear"][:, j] = (e * (xty / t) @ (xq @ _precondition(precondition, d).to(dev)).T).cpu()
        w_ols = (torch.linalg.pinv(xtx, hermitian=True) @ xty[..., None])[..., 0]  # (R, d)
        out["ols"][:, j] = (w_ols @ xq.T).cpu()
    return out
