r"""How close a learned layer is to the GD construction (Xu & Fang 2026, Sec. 4.3; chapter 7)."""

from __future__ import annotations

import math

import torch

from covbook._validate import as_tensor
from covbook.icl.model import ICLTransformer

__all__ = ["bilinear_forms", "construction_alignment"]


def bilinear_forms(model: ICLTransformer) -> list[dict[str, torch.Tensor]]:
    """Per layer: the logit form B = Θ_QᵀΘ_K (logit = z_qᵀ B z_i) and Θ_V, float64 on the CPU."""
    if not isinstance(model, ICLTransformer):
        raise ValueError(f"model must be an ICLTransformer, got {type(model).__name__}")
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
    b = as_tensor(b, "b", ndim=2)
    v = as_tensor(v, "v", ndim=2)
    d = b.shape[0] - 1
    if b.shape != (d + 1, d + 1) or d < 1:
        raise ValueError(f"b must be a square (d+1, d+1) matrix with d >= 1, got shape {tuple(b.shape)}")
    if v.shape != b.shape:
        raise ValueError(f"v must have the shape of b, {tuple(b.shape)}, got {tuple(v.shape)}")
    bxx, bxy = b[:d, :d], b[:d, d]
    # both norms of B's rows: with subnormal entries one may underflow to 0 while the other does not
    if float(bxx.norm()) == 0.0 or float(b[:d].norm()) == 0.0 or float(v[d].norm()) == 0.0:
        raise ValueError("b must have a non-zero x-block and v a non-zero label row: the alignment of a zero "
                         "form is undefined")
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
