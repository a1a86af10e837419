"""Softmax attention: an exact reference and a streaming long-context readout.

Implements the attention output of Xu & Fang (2026), Sec. 2,

    out_t = sum_{s<=t} softmax_s(<Θ_Q q, Θ_K x_s>) Θ_V x_s ,

(any 1/sqrt(d_k) scale is folded into Θ_Q), in two ways:

* :func:`softmax_attention` -- the textbook formula on given tensors, the
  reference every other implementation is tested against;
* :func:`readout_path` / :func:`readout_paths` -- one pass over a context
  drawn from a :class:`~covbook.processes.Process`, following many queries
  and reporting the output at chosen context lengths ("checkpoints").  It keeps
  an online log-sum-exp (running max, rescaled numerator and denominator) in
  float64, so memory is bounded by the chunk size, not by the context length.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from covbook._validate import as_tensor, check_positive_int, resolve_device
from covbook.processes import Process

__all__ = ["softmax_attention", "readout_path", "readout_paths"]


def _float_tensor(x: object, name: str) -> torch.Tensor:
    if isinstance(x, torch.Tensor) and x.is_floating_point():
        if not bool(torch.isfinite(x).all()):
            raise ValueError(f"{name} must be finite (no NaN or inf)")
        return x
    return as_tensor(x, name)


def softmax_attention(q: object, k: object, v: object, causal: bool = False) -> torch.Tensor:
    r"""Exact softmax attention, the reference implementation.

    .. math:: \mathrm{out}_i = \sum_j \frac{e^{q_i^\top k_j}}{\sum_{j'} e^{q_i^\top k_{j'}}} v_j

    Parameters
    ----------
    q : tensor, shape (..., m, d_k)
        Queries (already multiplied by Θ_Q, any scale folded in).
    k : tensor, shape (..., t, d_k)
        Keys.
    v : tensor, shape (..., t, d_v)
        Values.
    causal : bool
        If true, the m queries are the last m positions of the t-token
        sequence and query i sees only keys j <= t - m + i.

    Returns
    -------
    tensor, shape (..., m, d_v)

    Examples
    --------
    >>> import torch
    >>> k = torch.tensor([[0.0], [0.0]]); v = torch.tensor([[1.0], [3.0]])
    >>> softmax_attention(torch.tensor([[5.0]]), k, v)
    tensor([[2.]])
    """
    q, k, v = _float_tensor(q, "q"), _float_tensor(k, "k"), _float_tensor(v, "v")
    if q.ndim < 2 or k.ndim < 2 or v.ndim < 2:
        raise ValueError("q, k, v must have shapes (..., m, d_k), (..., t, d_k), (..., t, d_v)")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must share the last dim d_k, got {q.shape[-1]} and {k.shape[-1]}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have the same number of tokens, got {k.shape[-2]} and {v.shape[-2]}")
    if k.shape[-2] == 0:
        raise ValueError("attention needs at least one key")
    dtype = torch.promote_types(torch.promote_types(q.dtype, k.dtype), v.dtype)
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    logits = q @ k.transpose(-1, -2)  # (..., m, t)
    if causal:
        m, t = q.shape[-2], k.shape[-2]
        if m > t:
            raise ValueError(f"causal attention needs m <= t queries, got m={m}, t={t}")
        pos = torch.arange(m, device=q.device)[:, None] + (t - m)  # (m, 1)
        mask = torch.arange(t, device=q.device)[None, :] > pos  # (m, t)
        logits = logits.masked_fill(mask, float("-inf"))
    return torch.softmax(logits, dim=-1) @ v  # (..., m, d_v)


def _checkpoints(checkpoints: Sequence[int] | np.ndarray | torch.Tensor) -> list[int]:
    cps = [int(c) for c in np.asarray(checkpoints).reshape(-1)]
    if not cps:
        raise ValueError("checkpoints must be a non-empty increasing sequence of positive integers")
    if cps[0] < 1 or any(b <= a for a, b in zip(cps, cps[1:])):
        raise ValueError(f"checkpoints must be strictly increasing positive integers, got {cps[:5]}...")
    if any(float(c) != float(x) for c, x in zip(cps, np.asarray(checkpoints).reshape(-1))):
        raise ValueError("checkpoints must be integers")
    return cps


def _weights(theta_q: object, theta_k: object, theta_v: object, d: int, dev: torch.device):
    tq = as_tensor(theta_q, "theta_q", ndim=2, device=dev)
    tk = as_tensor(theta_k, "theta_k", ndim=2, device=dev)
    tv = as_tensor(theta_v, "theta_v", ndim=2, device=dev)
    for name, th in (("theta_q", tq), ("theta_k", tk), ("theta_v", tv)):
        if th.shape[1] != d:
            raise ValueError(f"{name} must have shape (*, {d}) to act on d={d} tokens, got {tuple(th.shape)}")
    if tq.shape[0] != tk.shape[0]:
        raise ValueError(
            f"theta_q and theta_k must have the same number of rows d_k, got {tq.shape[0]} and {tk.shape[0]}"
        )
    return tq, tk, tv


class _OnlineSoftmax:
    """Running (max, denominator, numerator) of a softmax-weighted average."""

    def __init__(self, shape: tuple[int, ...], d_v: int, dev: torch.device) -> None:
        self.mx = torch.full(shape, float("-inf"), dtype=torch.float64, device=dev)  # (R, m)
        self.den = torch.zeros(shape, dtype=torch.float64, device=dev)  # (R, m)
        self.num = torch.zeros(*shape, d_v, dtype=torch.float64, device=dev)  # (R, m, d_v)

    def update(self, logits: torch.Tensor, values: torch.Tensor) -> None:
        # logits (R, m, c), values (R, c, d_v)
        new_mx = torch.maximum(self.mx, logits.amax(dim=-1))  # (R, m)
        rescale = torch.exp(self.mx - new_mx)  # (R, m); exp(-inf) = 0 at the start
        w = torch.exp(logits - new_mx[..., None])  # (R, m, c)
        self.den = self.den * rescale + w.sum(-1)
        self.num = self.num * rescale[..., None] + w @ values  # (R, m, d_v)
        self.mx = new_mx

    def readout(self, extra_logit: torch.Tensor | None = None, extra_value: torch.Tensor | None = None) -> torch.Tensor:
        """Current average, optionally with one more (logit, value) term per query."""
        if extra_logit is None:
            return self.num / self.den[..., None]
        mx = torch.maximum(self.mx, extra_logit)  # (R, m)
        a, b = torch.exp(self.mx - mx), torch.exp(extra_logit - mx)
        num = self.num * a[..., None] + b[..., None] * extra_value  # (R, m, d_v)
        return num / (self.den * a + b)[..., None]


def readout_paths(
    process: Process,
    queries: object,
    theta_q: object,
    theta_k: object,
    theta_v: object,
    checkpoints: Sequence[int],
    *,
    streams: int = 1,
    seed: int = 0,
    device: str | torch.device = "cpu",
    chunk: int | None = None,
    query_is_key: bool = False,
) -> torch.Tensor:
    r"""Attention outputs of fixed queries along independent long context streams.

    For every stream r, query q_i and checkpoint t this returns

    .. math:: \mathrm{out}_t(q_i) = \frac{\sum_{s\le t} e^{a_i^\top x_s}\,\Theta_V x_s}
              {\sum_{s\le t} e^{a_i^\top x_s}}, \qquad a_i = \Theta_K^\top\Theta_Q q_i,

    computed in one pass with an online log-sum-exp in float64: memory is
    O(streams * m * chunk), whatever the context length.

    Parameters
    ----------
    process : Process
        Law of the context tokens x_1, x_2, ... in R^d.
    queries : array-like, shape (m, d) or (streams, m, d)
        Query tokens, shared by all streams or one set per stream.
    theta_q, theta_k : array-like, shape (d_k, d)
    theta_v : array-like, shape (d_v, d)
    checkpoints : increasing positive ints
        Context lengths t at which the outputs are reported.
    streams : int
        Number of independent streams R.
    seed : int
        Seed of the generator the context is drawn from.
    device : {"cpu", "cuda", "auto"}
    chunk : int, optional
        Tokens per stream processed at once (the memory bound); by default
        about 2^20 tokens in all, split across the streams.
    query_is_key : bool
        The causal case: at checkpoint t the context is x_1..x_{t-1} followed by
        the query token itself, so the query attends to itself.

    Returns
    -------
    tensor, shape (streams, len(checkpoints), m, d_v), float64, on ``device``.
    """
    if not isinstance(process, Process):
        raise ValueError(f"process must be a covbook.processes.Process, got {type(process).__name__}")
    dev = resolve_device(device)
    streams = check_positive_int(streams, "streams")
    chunk = max(256, (1 << 20) // streams) if chunk is None else check_positive_int(chunk, "chunk")
    cps = _checkpoints(checkpoints)
    d = process.dim
    tq, tk, tv = _weights(theta_q, theta_k, theta_v, d, dev)
    q = as_tensor(queries, "queries", ndim=(2, 3), device=dev)
    if q.shape[-1] != d:
        raise ValueError(f"queries must have last dim d={d}, got shape {tuple(q.shape)}")
    if q.ndim == 3 and q.shape[0] != streams:
        raise ValueError(f"per-stream queries must have shape ({streams}, m, {d}), got {tuple(q.shape)}")
    q = q.expand(streams, *q.shape[-2:]) if q.ndim == 3 else q.expand(streams, *q.shape)  # (R, m, d)
    a = q @ tq.T @ tk  # (R, m, d): logit of token x is a·x
    self_logit = (a * q).sum(-1) if query_is_key else None  # (R, m)
    self_value = q @ tv.T if query_is_key else None  # (R, m, d_v)

    gen = torch.Generator(device=dev).manual_seed(int(seed))
    draw = process.sampler(gen, streams)
    acc = _OnlineSoftmax((streams, q.shape[1]), tv.shape[0], dev)
    out = torch.empty(streams, len(cps), q.shape[1], tv.shape[0], dtype=torch.float64, device=dev)
    seen = 0
    for i, t in enumerate(cps):
        target = t - 1 if query_is_key else t
        while seen < target:
            n = min(chunk, target - seen)
            x = draw(n)  # (R, n, d)
            acc.update(a @ x.transpose(1, 2), x @ tv.T)  # (R, m, n), (R, n, d_v)
            seen += n
        out[:, i] = acc.readout(self_logit, self_value) if query_is_key else acc.readout()
    return out


def readout_path(
    process: Process,
    queries: object,
    theta_q: object,
    theta_k: object,
    theta_v: object,
    checkpoints: Sequence[int],
    *,
    seed: int = 0,
    device: str | torch.device = "cpu",
    chunk: int | None = None,
    query_is_key: bool = False,
) -> torch.Tensor:
    """One stream of :func:`readout_paths`: outputs of shape (len(checkpoints), m, d_v).

    Examples
    --------
    >>> import torch
    >>> from covbook.processes import GaussianIID
    >>> I = torch.eye(2, dtype=torch.float64)
    >>> out = readout_path(GaussianIID(I), I, I, I, I, [10, 1000], seed=0)
    >>> out.shape
    torch.Size([2, 2, 2])
    """
    q = as_tensor(queries, "queries", ndim=2)
    return readout_paths(
        process, q, theta_q, theta_k, theta_v, checkpoints,
        streams=1, seed=seed, device=device, chunk=chunk, query_is_key=query_is_key,
    )[0]
