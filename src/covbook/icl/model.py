r"""Stacked softmax heads with residual connections (Xu & Fang 2026, Sec. 4.2; chapters 6–7).

Stacking K GD heads with Θ_V = −e eᵀ and residual connections gives, exactly at finite
N, the y-column (I − A)^K (y_1, …, y_N, 0) (A the causal attention matrix, the same at
every layer), and in the limit N → ∞ the K-th population GD iterate
w_K = (I − (I − ηΣ_x)^K) w.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from covbook._validate import check_positive_int, check_seed
from covbook.attention import block_attention, causal_attention_matrix
from covbook.icl._common import _check_dtype, _check_eta
from covbook.icl.construction import construct_gd_head
from covbook.icl.tasks import RegressionTasks, _check_tasks, make_regression_tasks  # noqa: F401  (doctest)

__all__ = ["ICLTransformer", "stacked_gd_transformer", "random_icl_transformer", "causal_attention_matrix",
           "power_identity_predictions"]


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
        if not isinstance(thetas, Sequence) or isinstance(thetas, str) or len(thetas) == 0:
            raise ValueError(f"thetas must be a non-empty sequence of (theta_q, theta_k, theta_v) triples, one per "
                             f"layer, got {thetas!r:.60}")
        self.theta_q, self.theta_k, self.theta_v = nn.ParameterList(), nn.ParameterList(), nn.ParameterList()
        for i, triple in enumerate(thetas):
            if (not isinstance(triple, Sequence) or len(triple) != 3
                    or not all(isinstance(t, torch.Tensor) and t.is_floating_point() for t in triple)):
                raise ValueError(f"thetas[{i}] must be a triple (theta_q, theta_k, theta_v) of floating tensors")
            for th, name, store in zip(triple, ("theta_q", "theta_k", "theta_v"),
                                       (self.theta_q, self.theta_k, self.theta_v), strict=True):
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
            return h[:, -1:] + block_attention(h[:, -1:] @ tq.T, h @ tk.T, h @ tv.T)  # (B, 1, d+1)
        return h + block_attention(h @ tq.T, h @ tk.T, h @ tv.T, causal=True)  # (B, T, d+1)

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
    """K = ``layers`` GD heads (Θ_Q = Θ_K = √η diag(Γ^{1/2}, 0), Θ_V = −e eᵀ) with residuals (thm-06-stacked).

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
    dtype = _check_dtype(dtype)
    gen = torch.Generator().manual_seed(check_seed(seed))
    thetas = [tuple(s * torch.randn(d + 1, d + 1, generator=gen, dtype=torch.float64) for _ in range(3))
              for _ in range(layers)]
    return ICLTransformer(d, thetas, trainable=True).to(dtype)


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
    # A y as the row-vector product yᵀAᵀ: with Aᵀ contiguous the batched product runs about twice as fast and
    # gives the same sums (one task alone goes through torch's matrix-vector path, which adds in another order)
    at = a.mT.contiguous() if y.shape[0] > 1 else None  # (B, T, T)
    preds = [-y[:, -1]]
    for _ in range(layers):
        ay = (a @ y[..., None])[..., 0] if at is None else (y[:, None, :] @ at)[:, 0]  # (B, T)
        y = y - ay
        preds.append(-y[:, -1])
    return torch.stack(preds)
