r"""Softmax attention: an exact reference and a streaming long-context readout.

Implements the attention output of Xu & Fang (2026), Sec. 2,

.. math:: \mathrm{out}_t = \sum_{s\le t} \mathrm{softmax}_s(\langle\Theta_Q q, \Theta_K x_s\rangle)\, \Theta_V x_s

(any :math:`1/\sqrt{d_k}` scale is folded into :math:`\Theta_Q`), in two ways:

* :func:`softmax_attention` (and :func:`causal_attention_matrix`) -- the textbook
  formula on given tensors, the reference every other implementation is tested
  against; it stays finite and correct for any finite input (a log-sum-exp with
  rescaled logits when the logits themselves overflow);
* :func:`readout_path` / :func:`readout_paths` -- one pass over a context drawn
  from a :class:`~covbook.processes.Process`, following many queries and reporting
  the output at chosen context lengths ("checkpoints").  Memory is bounded by the
  chunk size, not by the context length.

The streaming pass rests on one accumulator, :class:`OnlineSoftmax`: running
sums :math:`\sum_s e^{\ell_s - r}` and :math:`\sum_s e^{\ell_s - r} v_s` in float64
relative to a reference :math:`r` that is raised only when needed (a *lazy*
running max; the result is the same in exact arithmetic for any :math:`r`).

How the streaming readout is fast (the logit of token x is :math:`a^\top x` with
:math:`a = \Theta_K^\top\Theta_Q q`):

* the reference is folded into the logit matmul: with the augmented token
  :math:`(x, 1)` and weights :math:`(a, -r)\log_2 e`, one matmul gives the shifted
  base-2 logits (token-major, (streams, chunk, m)), ``exp2`` is taken in place (about
  twice as fast as ``exp`` on CPU), and one batched matmul with :math:`(x, 1)` gives
  both :math:`\sum_s w_s x_s` and :math:`\sum_s w_s` per block of ``BLOCK`` tokens;
  the reference is raised (and the chunk recomputed) only on the first chunk or when
  a chunk overflows;
* :math:`\Theta_V` is applied once per checkpoint to the weighted mean token
  (linearity), not to every token;
* for Gaussian contexts :math:`x = Lz + \mu` the pass works on the standard normal
  draws z directly (logit weights :math:`L^\top a`, bias :math:`a^\top\mu`), generated
  in place into a reused buffer; :math:`L` and :math:`\mu` are applied once per
  checkpoint;
* the steps are large (a (queries × chunk) weight block of 2^23 numbers), so that the
  per-operation cost of torch's thread pool stays small.

Accuracy, the same on any CPU and BLAS.  Per chunk the logits, exponentials and
weighted sums are computed in ``dtype``; the weighted sums run over blocks of
``BLOCK`` = 64 consecutive tokens (:func:`weighted_sums`: a batched matmul whose
reduction is 64 terms long) and the block sums are added in float64, as are the
running sums.  Whatever order a BLAS adds a 64-term block in, its rounding error is
at most :math:`\gamma_{64} \approx 64 \cdot 2^{-24} = 3.8\cdot 10^{-6}` of the sum of
the absolute terms, at any chunk length; one float32 reduction over a whole chunk of
n tokens is only bounded by :math:`\gamma_n` (n = 2^18 by default: 1.6e-2), and some
BLAS builds do add it in plain order (MKL on AMD Zen 4 measured an error growing
linearly with the chunk).  In float64 the result agrees with :func:`softmax_attention`
on the same tokens to rounding (tests: relative ``1e-10``).  In float32 (the default
for :class:`~covbook.processes.GaussianIID` contexts) each weight also carries a
relative error of order :math:`2^{-24}(|\ell_s| + |r|)` (the rounded logits), so the
readout moves by at most about that much times the spread of the values.  Tested
(hypothesis, any chunking, with and without the query among the keys, against the
float64 exact reference on the very same float32 tokens; and at the default chunk of
2^18 tokens with 2^18 - 1 weights each below half an ulp of the running sum, which a
plain-order float32 reduction loses entirely):

.. math:: |\mathrm{out} - \mathrm{ref}| \le \mathtt{FLOAT32\_RTOL}\cdot\max(1, L)\cdot V,
          \qquad L = \max_s |\ell_s|, \quad V = \max_s |\Theta_V x_s|,

with ``FLOAT32_RTOL = 1e-6``; the blocked sums contribute at most
:math:`2\gamma_{64} V \approx 7.6\cdot 10^{-6}\, V` of it (measured 3.7e-6 in the
swamping test above, against 1.6e-2 for one plain-order reduction).  The typical
error is much smaller, since the rounding errors average over tokens: measured
2.7e-7 of the RMS value over 2^20 tokens in chunks of 2^14 (d = 4, m = 8,
``tests/test_attention.py``).  At :math:`10^8` tokens the statistical error of a
readout is of order :math:`10^{-4}` of the value scale.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Sequence

import numpy as np
import torch

from covbook._validate import (
    as_tensor,
    check_checkpoints,
    check_positive_int,
    check_seed,
    psd_sqrt_factor,
    resolve_device,
)
from covbook.processes import GaussianIID, Process

__all__ = [
    "FLOAT32_RTOL",
    "OnlineSoftmax",
    "block_attention",
    "causal_attention_matrix",
    "readout_path",
    "readout_paths",
    "softmax_attention",
    "weighted_sums",
]

FLOAT32_RTOL = 1e-6
"""Documented (and tested) error of the float32 streaming readout: per unit of max(1, max |logit|) * max |value|."""

F64 = torch.float64
LOG2E, LN2 = 1.0 / math.log(2.0), math.log(2.0)

BLOCK = 64
"""Tokens per float32 partial sum of the streaming readout; the partial sums are added in float64."""


def weighted_sums(w: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
    r"""Weighted sums over tokens, :math:`S_{ij} = \sum_s w_{si} f_{sj}`, in float64 whatever the BLAS.

    In ``w.dtype`` the sum runs over blocks of ``BLOCK`` consecutive tokens (one
    batched matmul, whose reduction is only ``BLOCK`` terms long, in whatever order
    the BLAS adds them); the block sums are then added in float64.  So the rounding
    error of a float32 sum is at most :math:`\gamma_{B} \sum_s |w_{si} f_{sj}|` with
    :math:`\gamma_B = B u/(1 - B u)`, :math:`B` = ``BLOCK``, :math:`u = 2^{-24}`, at any
    number of tokens, instead of :math:`\gamma_n` for one n-term reduction.

    Parameters
    ----------
    w : tensor, shape (*B, n, m)
        Weights, token-major.
    f : tensor, shape (*B, n, p)
        Features (same dtype).

    Returns
    -------
    tensor, shape (*B, m, p), float64.
    """
    if w.dtype == F64:
        return torch.matmul(w.mT, f)  # float64 throughout: one matmul is accurate
    n = w.shape[-2]
    nb = n // BLOCK
    cut = nb * BLOCK
    out = torch.zeros(*w.shape[:-2], w.shape[-1], f.shape[-1], dtype=F64, device=w.device)  # (*B, m, p)
    if nb:
        wb = w[..., :cut, :].unflatten(-2, (nb, BLOCK))  # (*B, nb, BLOCK, m)
        fb = f[..., :cut, :].unflatten(-2, (nb, BLOCK))  # (*B, nb, BLOCK, p)
        out += torch.matmul(wb.mT, fb).to(F64).sum(-3)  # (*B, nb, m, p) -> (*B, m, p)
    if cut < n:
        out += torch.matmul(w[..., cut:, :].mT, f[..., cut:, :]).to(F64)  # the < BLOCK tokens left
    return out


# ----------------------------------------------------------------------------- validation


def _float_tensor(x: object, name: str) -> torch.Tensor:
    if isinstance(x, torch.Tensor) and x.is_floating_point():
        if not bool(torch.isfinite(x).all()):
            raise ValueError(f"{name} must be finite (no NaN or inf)")
        return x
    return as_tensor(x, name)


def _check_bool(x: object, name: str) -> bool:
    if not isinstance(x, (bool, np.bool_)):
        raise ValueError(f"{name} must be a bool (True or False), got {x!r}")
    return bool(x)


def _memory_limit(dev: torch.device) -> int:
    """Bytes of memory on ``dev`` (physical memory for the CPU)."""
    if dev.type == "cuda":
        return int(torch.cuda.mem_get_info(dev)[1])
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        return 1 << 36


def _check_fits(nbytes: int, what: str, dev: torch.device, hint: str) -> None:
    """Refuse, with the size needed, an allocation larger than the device's memory."""
    limit = _memory_limit(dev)
    if nbytes > limit:
        raise ValueError(
            f"{what} would need {nbytes / 2**30:,.1f} GiB, more than the {limit / 2**30:,.1f} GiB "
            f"of memory on {dev.type}; {hint}"
        )


# ----------------------------------------------------------------------------- exact reference


def _softmax_weights(q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    r"""softmax_j(q_i·k_j) over the last axis, correct for any finite q, k.

    When q·k overflows, the logits are computed as :math:`s\,\ell'` with
    :math:`\ell' = (q/s_q)\cdot(k/s_k)` and :math:`s = s_q s_k` (powers of two, so
    the rescaling is exact); the weights then depend only on the gaps
    :math:`s(\ell'_{\max} - \ell'_j)`, which may overflow to +inf harmlessly.
    """
    logits = q @ k.transpose(-1, -2)  # (..., m, t)
    if mask is not None:
        logits = logits.masked_fill_(mask, float("-inf"))  # in place: the matmul's fresh output
    if bool(torch.isfinite(logits.amax(-1)).all()):  # no NaN, no +inf, a finite max in every row
        return torch.softmax(logits, dim=-1)
    # overflow: rescale by powers of two, then work with the gaps to the row max
    sq = 2.0 ** math.ceil(math.log2(max(float(q.detach().abs().max()), 1e-300)))
    sk = 2.0 ** math.ceil(math.log2(max(float(k.detach().abs().max()), 1e-300)))
    small = (q / sq) @ (k / sk).transpose(-1, -2)  # (..., m, t), |entries| <= d_k
    if mask is not None:
        small = small.masked_fill(mask, float("-inf"))
    gap = small.amax(-1, keepdim=True) - small  # (..., m, t), >= 0 or +inf where masked
    gap = torch.where(gap > 0, gap * sq * sk, torch.zeros_like(gap))  # 0 * inf avoided
    w = torch.exp(-gap)  # the row max has weight 1
    return w / w.sum(-1, keepdim=True)


def _weighted_values(w: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    out = w @ v  # (..., m, d_v)
    if bool(torch.isfinite(out).all()):
        return out
    sv = 2.0 ** math.ceil(math.log2(float(v.abs().max())))  # values near the float limit
    return (w @ (v / sv)) * sv


def softmax_attention(q: object, k: object, v: object, causal: bool = False) -> torch.Tensor:
    r"""Exact softmax attention, the reference implementation.

    .. math:: \mathrm{out}_i = \sum_j \frac{e^{q_i^\top k_j}}{\sum_{j'} e^{q_i^\top k_{j'}}} v_j

    Computed as a log-sum-exp, so any finite input gives the correct finite answer
    (even when the logits q_i·k_j overflow the floating-point range).

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
    causal = _check_bool(causal, "causal")
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
    try:
        batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except RuntimeError as err:
        raise ValueError(f"q, k, v batch shapes do not broadcast: {tuple(q.shape)}, {tuple(k.shape)}, "
                         f"{tuple(v.shape)}") from err
    m, t = q.shape[-2], k.shape[-2]
    _check_fits(3 * math.prod(batch) * m * t * dtype.itemsize, f"exact attention of {m} queries over {t} keys",
                q.device, "use covbook.attention.readout_paths to stream long contexts")
    mask = None
    if causal:
        if m > t:
            raise ValueError(f"causal attention needs m <= t queries, got m={m}, t={t}")
        mask = _causal_mask(m, t, q.device)  # (m, t)
    return _weighted_values(_softmax_weights(q, k, mask), v)  # (..., m, d_v)


def _causal_mask(m: int, t: int, device: torch.device) -> torch.Tensor:
    """(m, t) boolean: True where query i (the last m of t positions) may not see key j > t − m + i."""
    pos = torch.arange(m, device=device)[:, None] + (t - m)  # (m, 1)
    return torch.arange(t, device=device)[None, :] > pos  # (m, t)


@functools.lru_cache(maxsize=64)
def _causal_bias(m: int, t: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """(m, t): 0 where query i sees key j (:func:`_causal_mask` False), −inf elsewhere."""
    return torch.zeros(m, t, dtype=dtype, device=device).masked_fill_(_causal_mask(m, t, device), float("-inf"))


def block_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    r""":func:`softmax_attention` for a model's own tensors, bit for bit, checked once.

    .. math:: \mathrm{out}_i = \sum_{j \le t - m + i} \mathrm{softmax}_j(q_i^\top k_j)\, v_j
              \quad(\text{all } j \text{ without } \texttt{causal})

    The same operations as the reference's path for finite logits (one matmul, the causal
    mask, ``torch.softmax``, one matmul), so values and gradients are identical; the
    reference's argument, input and logit checks are replaced by one check of the output,
    and a non-finite output (overflowing logits, non-finite inputs) is recomputed by
    :func:`softmax_attention`, which handles or reports it.  For the layers of a model
    (:class:`covbook.transformer.CausalTransformer`, :class:`covbook.icl.ICLTransformer`),
    whose per-call checks cost more than their small attention: q (..., m, d_k), k (..., t, d_k)
    and v (..., t, d_v) are tensors of one floating dtype; m <= t when ``causal``.

    Examples
    --------
    >>> q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 1)
    >>> bool(torch.equal(block_attention(q, k, v, causal=True), softmax_attention(q, k, v, causal=True)))
    True
    """
    logits = q @ k.transpose(-1, -2)  # (..., m, t)
    if causal:  # x + 0 = x and x + (−inf) = −inf for finite x: the masked logits, faster than masked_fill_
        logits.add_(_causal_bias(q.shape[-2], k.shape[-2], q.dtype, q.device))  # in place: a fresh tensor
    out = torch.softmax(logits, dim=-1) @ v  # (..., m, d_v)
    if bool(torch.isfinite(out).all()):
        return out
    return softmax_attention(q, k, v, causal=causal)


def causal_attention_matrix(tokens: object, theta_q: object, theta_k: object) -> torch.Tensor:
    r"""Causal softmax attention matrix :math:`A_{ij} = \mathrm{softmax}_{j\le i}((\Theta_Q z_i)^\top\Theta_K z_j)`.

    Parameters
    ----------
    tokens : tensor, shape (B, T, d)
        Token sequences (float32 or float64; the result has their dtype).
    theta_q, theta_k : array-like, shape (d_k, d)

    Returns
    -------
    tensor, shape (B, T, T), rows summing to one, zero above the diagonal.
    """
    if isinstance(tokens, torch.Tensor) and tokens.is_floating_point():
        z = tokens
    else:
        z = as_tensor(tokens, "tokens")
    if z.ndim != 3 or z.shape[1] == 0 or z.shape[2] == 0:
        raise ValueError(f"tokens must have shape (B, T, d) with T, d >= 1, got {tuple(z.shape)}")
    if not bool(torch.isfinite(z).all()):
        raise ValueError("tokens must be finite (no NaN or inf)")
    d = z.shape[2]
    tq = as_tensor(theta_q, "theta_q", ndim=2, dtype=z.dtype, device=z.device)
    tk = as_tensor(theta_k, "theta_k", ndim=2, dtype=z.dtype, device=z.device)
    for name, th in (("theta_q", tq), ("theta_k", tk)):
        if th.shape[1] != d:
            raise ValueError(f"{name} must have shape (d_k, {d}) to act on d={d} tokens, got {tuple(th.shape)}")
    if tq.shape[0] != tk.shape[0]:
        raise ValueError(f"theta_q and theta_k must have the same number of rows d_k, got {tq.shape[0]} and "
                         f"{tk.shape[0]}")
    b, t = z.shape[0], z.shape[1]
    _check_fits(3 * b * t * t * z.dtype.itemsize, f"a ({b}, {t}, {t}) attention matrix", z.device,
                "use fewer or shorter sequences")
    mask = torch.ones(t, t, dtype=torch.bool, device=z.device).triu(1)  # (T, T)
    return _softmax_weights(z @ tq.T, z @ tk.T, mask)  # (B, T, T)


# ----------------------------------------------------------------------------- the online softmax


class OnlineSoftmax:
    r"""Running softmax-weighted average of a stream, in bounded memory.

    Holds, for every entry of a batch shape (e.g. (streams, queries)), a reference
    :math:`r` and the float64 sums

    .. math:: D = \sum_s e^{\ell_s - r}, \qquad N = \sum_s e^{\ell_s - r} v_s ,

    so that :math:`N/D` is the softmax-weighted mean of the values and
    :math:`r + \log D` the log-sum-exp of the logits.  The reference is raised
    lazily (never lowered): the sums are rescaled by :math:`e^{r - r'}` when it moves
    to :math:`r'`, which changes nothing in exact arithmetic.

    Parameters
    ----------
    shape : tuple of int
        Batch shape S, e.g. ``(streams, m)``.
    value_dim : int
        Dimension p of the values.
    device : torch device, optional

    Examples
    --------
    >>> import torch
    >>> acc = OnlineSoftmax((1,), 1)
    >>> acc.update(torch.tensor([[0.0, 0.0]]), torch.tensor([[1.0], [3.0]]))
    >>> acc.update(torch.tensor([[1000.0]]), torch.tensor([[5.0]]))
    >>> acc.mean()
    tensor([[5.]], dtype=torch.float64)
    """

    def __init__(self, shape: tuple[int, ...], value_dim: int, *, device: str | torch.device | None = None) -> None:
        shape = tuple(int(check_positive_int(s, "shape")) for s in shape)
        p = check_positive_int(value_dim, "value_dim")
        self.ref = torch.full(shape, float("-inf"), dtype=F64, device=device)  # (*S,)
        self.den = torch.zeros(shape, dtype=F64, device=device)  # (*S,)
        self.num = torch.zeros(*shape, p, dtype=F64, device=device)  # (*S, p)

    def rebase(self, new_ref: torch.Tensor) -> None:
        """Move the reference to ``new_ref`` (elementwise >= the current one), rescaling the sums."""
        new_ref = new_ref.to(F64)
        factor = torch.exp(self.ref - new_ref)  # (*S,)
        factor = torch.where(self.den > 0, factor, torch.zeros_like(factor))  # empty entries: avoid -inf - -inf
        self.den.mul_(factor)
        self.num.mul_(factor[..., None])
        self.ref = new_ref

    def add(self, weight_sum: torch.Tensor, weighted_values: torch.Tensor) -> None:
        r"""Add a chunk's sums :math:`\sum e^{\ell-r}` (*S,) and :math:`\sum e^{\ell-r} v` (*S, p), any dtype."""
        self.den.add_(weight_sum.to(F64))
        self.num.add_(weighted_values.to(F64))

    def update(self, logits: torch.Tensor, values: torch.Tensor) -> None:
        """Absorb a chunk: ``logits`` (*S, n) (chunk on the last, contiguous axis), ``values`` (*S', n, p).

        ``values`` broadcasts against the batch shape, e.g. (R, n, p) for logits
        (R, m, n).  Computed in the logits' dtype, accumulated in float64.
        """
        if logits.shape[-1] == 0:
            return
        cm = logits.amax(-1).to(F64)  # (*S,)
        if bool((cm > self.ref).any()):
            self.rebase(torch.maximum(self.ref, cm))
        shift = torch.where(torch.isfinite(self.ref), self.ref, torch.zeros_like(self.ref))  # (*S,)
        w = torch.exp(logits - shift[..., None].to(logits.dtype))  # (*S, n)
        vals = values.to(w.dtype)  # (*S', n, p)
        feats = torch.cat([vals, torch.ones(*vals.shape[:-1], 1, dtype=w.dtype, device=w.device)], -1)  # (*S', n, p+1)
        sums = weighted_sums(w.mT, feats)  # (*S, p+1) float64: (Σ w v, Σ w), blocked like the readout
        self.add(sums[..., -1], sums[..., :-1])

    def logsumexp(self) -> torch.Tensor:
        r"""The log-sum-exp :math:`\log\sum_s e^{\ell_s}` of everything absorbed, shape (*S,)."""
        return self.ref + torch.log(self.den)

    def mean(self, extra_logit: torch.Tensor | None = None, extra_value: torch.Tensor | None = None) -> torch.Tensor:
        """Current weighted mean (*S, p), optionally with one more (logit (*S,), value (*S, p)) term."""
        return _softmax_mean(self.ref, self.den, self.num, extra_logit, extra_value)


def _softmax_mean(ref: torch.Tensor, den: torch.Tensor, num: torch.Tensor, extra_logit: torch.Tensor | None = None,
                  extra_value: torch.Tensor | None = None) -> torch.Tensor:
    """num/den, or with one more term: (num e^{r-M} + v e^{l-M}) / (den e^{r-M} + e^{l-M}), M = max(r, l)."""
    if extra_logit is None or extra_value is None:
        return num / den[..., None]
    extra_logit = extra_logit.to(F64)
    mx = torch.maximum(ref, extra_logit)  # (*S,)
    a = torch.where(den > 0, torch.exp(ref - mx), torch.zeros_like(mx))
    b = torch.exp(extra_logit - mx)
    return (num * a[..., None] + b[..., None] * extra_value.to(F64)) / (den * a + b)[..., None]  # (*S, p)


# ----------------------------------------------------------------------------- streaming readout


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


class _Features:
    """Feature draws f (R, n, k) with tokens x = f @ L^T + mu: Gaussian normals, or the tokens themselves.

    Standard normals are drawn in place into a reused contiguous buffer (torch's
    fast path, several times faster than allocating ``torch.randn`` per chunk).
    """

    def __init__(self, process: Process, gen: torch.Generator, streams: int, dev: torch.device) -> None:
        self.gen = gen
        if type(process) is GaussianIID:  # exact type: a subclass may draw differently
            self.factor = psd_sqrt_factor(process.covariance).to(dev)  # (d, k), k = d
            self.shift = process.mean.to(dev)  # (d,)
            self.draw: Callable[[int], torch.Tensor] | None = None
        else:
            self.factor = torch.eye(process.dim, dtype=F64, device=dev)  # (d, d)
            self.shift = torch.zeros(process.dim, dtype=F64, device=dev)  # (d,)
            self.draw = process.sampler(gen, streams)
        self.k = self.factor.shape[1]

    def fill(self, out: torch.Tensor, scratch: torch.Tensor) -> None:
        """Write the next n features of every stream into ``out[..., :k]`` (R, n, k+1)."""
        if self.draw is None:
            scratch.normal_(generator=self.gen)  # (R, n, k), contiguous
            out[..., : self.k].copy_(scratch)
        else:
            out[..., : self.k].copy_(self.draw(out.shape[1]))


class _Stream:
    """The fused chunk kernel: shifted base-2 logits by one matmul, exp2 in place, blocked sums.

    The logits are laid out token-major, (R, n, m), so that a block of ``BLOCK``
    consecutive tokens is one contiguous (BLOCK, m) slab for the blocked sums.
    """

    def __init__(self, a_feat: torch.Tensor, bias: torch.Tensor, acc: OnlineSoftmax, dtype: torch.dtype) -> None:
        self.acc, self.dtype = acc, dtype
        r, m, k = a_feat.shape
        # (R, m, k+1): (a L log2 e, (a·mu - r) log2 e); the weight of feature f is 2^(row · (f, 1)) = e^(logit - r)
        self.weights = torch.empty(r, m, k + 1, dtype=dtype, device=a_feat.device)
        self.weights[..., :k] = a_feat.to(F64) * LOG2E
        self.bias = bias  # (R, m) float64: a·mu
        self.fresh = True
        self._set_reference(torch.zeros_like(bias))

    def _set_reference(self, target: torch.Tensor) -> None:
        """Put the reference near ``target`` (R, m): the one used exactly is a·mu minus the rounded column."""
        col = ((self.bias - target) * LOG2E).to(self.dtype)  # (R, m), base-2 units
        self.weights[..., -1] = col
        self.ref = self.bias - col.to(F64) * LN2  # (R, m) float64, natural units, monotone in target

    def _logits(self, feats: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        return torch.matmul(feats, self.weights.mT, out=logits)  # (R, n, m): (logit - ref) log2 e

    def _rebase(self, feats: torch.Tensor, logits: torch.Tensor) -> None:
        """Raise the reference to the chunk max (the first chunk: set it), rescaling the running sums."""
        gap = self._logits(feats, logits).amax(-2).to(F64) * LN2  # (R, m): max of logit - ref
        self._set_reference(self.ref + gap if self.fresh else torch.maximum(self.ref, self.ref + gap))
        self.fresh = False
        self.acc.rebase(self.ref)

    def _sums(self, feats: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        return weighted_sums(self._logits(feats, logits).exp2_(), feats)  # (R, m, k+1) float64: (Σ w f, Σ w)

    def absorb(self, feats: torch.Tensor, logits: torch.Tensor) -> None:
        """Absorb a chunk of augmented features (R, n, k+1), last column 1; ``logits`` is scratch (R, n, m)."""
        if self.fresh:
            self._rebase(feats, logits)
        res = self._sums(feats, logits)
        if not bool(torch.isfinite(res).all()):  # a weight or a sum overflowed: raise the reference, redo
            self._rebase(feats, logits)
            res = self._sums(feats, logits)
            if not bool(torch.isfinite(res).all()):
                raise ValueError(f"the logits or tokens of this context overflow {self.dtype}; "
                                 "pass dtype=torch.float64 to readout_paths")
        self.acc.add(res[..., -1], res[..., :-1])


def _default_chunk(streams: int, m: int) -> int:
    """Tokens per stream per step: a (streams, m, chunk) weight block of about 2^23 entries (32 MiB in float32).

    Large steps amortise the per-operation cost of torch's thread pool, which
    dominates on a loaded machine (measured by ``make bench``: at m = 64, steps of
    2^17 tokens ran 2-3× faster than steps of 2^14 under a load of 10 on 2 cores).
    """
    return int(min(1 << 18, max(1 << 10, (1 << 23) // (streams * m))))


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
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    r"""Attention outputs of fixed queries along independent long context streams.

    For every stream r, query q_i and checkpoint t this returns

    .. math:: \mathrm{out}_t(q_i) = \frac{\sum_{s\le t} e^{a_i^\top x_s}\,\Theta_V x_s}
              {\sum_{s\le t} e^{a_i^\top x_s}}, \qquad a_i = \Theta_K^\top\Theta_Q q_i,

    computed in one pass with an online log-sum-exp (:class:`OnlineSoftmax`):
    memory is O(streams · m · chunk), whatever the context length.

    Parameters
    ----------
    process : Process
        Law of the context tokens x_1, x_2, ... in R^d.  A
        :class:`~covbook.processes.GaussianIID` context is drawn here, as
        x = L z + μ from standard normals z in ``dtype`` (the same law; another
        stream of numbers than ``process.sampler`` gives); any other process
        through its sampler.
    queries : array-like, shape (m, d) or (streams, m, d)
        Query tokens, shared by all streams or one set per stream.
    theta_q, theta_k : array-like, shape (d_k, d)
    theta_v : array-like, shape (d_v, d)
    checkpoints : increasing positive ints
        Context lengths t at which the outputs are reported.
    streams : int
        Number of independent streams R.
    seed : int
        Seed of the generator the context is drawn from, in [0, 2**63).
    device : {"cpu", "cuda", "auto"}
    chunk : int, optional
        Tokens per stream processed at once (the memory bound); by default the
        weight block (streams, m, chunk) holds about 2^23 numbers.
    query_is_key : bool
        The causal case: at checkpoint t the context is x_1..x_{t-1} followed by
        the query token itself, so the query attends to itself.
    dtype : {torch.float32, torch.float64}, optional
        Precision of the per-chunk logits, exponentials and weighted sums (the
        running sums are float64 always).  Default: float32 for a
        ``GaussianIID`` context (error at most ``FLOAT32_RTOL`` times
        max(1, max |logit|) times max |value|, see the module docstring),
        float64 for any other process.

    Returns
    -------
    tensor, shape (streams, len(checkpoints), m, d_v), float64, on ``device``.
    """
    if not isinstance(process, Process):
        raise ValueError(f"process must be a covbook.processes.Process, got {type(process).__name__}")
    dev = resolve_device(device)
    streams = check_positive_int(streams, "streams")
    cps = check_checkpoints(checkpoints)
    seed = check_seed(seed)
    query_is_key = _check_bool(query_is_key, "query_is_key")
    if dtype is None:
        dtype = torch.float32 if type(process) is GaussianIID else F64
    if dtype not in (torch.float32, F64):
        raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype!r}")
    d = process.dim
    tq, tk, tv = _weights(theta_q, theta_k, theta_v, d, dev)
    q = as_tensor(queries, "queries", ndim=(2, 3), device=dev)
    if q.shape[-1] != d or q.shape[-2] == 0:
        raise ValueError(f"queries must have shape (m, {d}) or ({streams}, m, {d}) with m >= 1, got {tuple(q.shape)}")
    if q.ndim == 3 and q.shape[0] != streams:
        raise ValueError(f"per-stream queries must have shape ({streams}, m, {d}), got {tuple(q.shape)}")
    m = q.shape[-2]
    chunk = _default_chunk(streams, m) if chunk is None else check_positive_int(chunk, "chunk")
    chunk = min(chunk, cps[-1])
    _check_fits(
        streams * chunk * (m + 2 * d + 2) * dtype.itemsize + streams * len(cps) * m * tv.shape[0] * 8
        + streams * (chunk // BLOCK + 1) * m * (d + 1) * (dtype.itemsize + 8),  # the block sums
        f"streaming {streams} stream(s) of {m} queries in chunks of {chunk} tokens",
        dev, "use fewer streams or queries, or a smaller chunk",
    )
    q = q.expand(streams, *q.shape[-2:]) if q.ndim == 3 else q.expand(streams, *q.shape)  # (R, m, d)
    a = q @ tq.T @ tk  # (R, m, d): logit of token x is a·x

    feats = _Features(process, torch.Generator(device=dev).manual_seed(seed), streams, dev)
    return _stream(feats, a, q, tv, cps, streams, chunk, query_is_key, dtype, dev)


def _stream(feats: _Features, a: torch.Tensor, q: torch.Tensor, tv: torch.Tensor, cps: list[int], streams: int,
            chunk: int, query_is_key: bool, dtype: torch.dtype, dev: torch.device) -> torch.Tensor:
    """The pass of :func:`readout_paths` over validated input; a (R, m, d), q (R, m, d)."""
    m = q.shape[1]
    acc = OnlineSoftmax((streams, m), feats.k, device=dev)
    kernel = _Stream((a @ feats.factor).to(dtype), a @ feats.shift, acc, dtype)
    buf = torch.ones(streams, chunk, feats.k + 1, dtype=dtype, device=dev)  # (R, c, k+1), last column 1
    scratch = torch.empty(streams, chunk, feats.k, dtype=dtype, device=dev)  # (R, c, k)
    logits = torch.empty(streams, chunk, m, dtype=dtype, device=dev)  # (R, c, m), token-major

    out = torch.empty(streams, len(cps), m, tv.shape[0], dtype=F64, device=dev)
    seen = 0
    for i, t in enumerate(cps):
        target = t - 1 if query_is_key else t
        while seen < target:
            n = min(chunk, target - seen)
            if n == chunk:
                feats.fill(buf, scratch)
                kernel.absorb(buf, logits)
            else:  # a short last step before a checkpoint: fresh contiguous buffers
                part = torch.ones(streams, n, feats.k + 1, dtype=dtype, device=dev)
                feats.fill(part, torch.empty(streams, n, feats.k, dtype=dtype, device=dev))
                kernel.absorb(part, torch.empty(streams, n, m, dtype=dtype, device=dev))
            seen += n
        # back to token space: Σ w x = L Σ w f + mu Σ w (linearity), then Θ_V once
        num_x = acc.num @ feats.factor.T + acc.den[..., None] * feats.shift  # (R, m, d)
        self_logit = (a * q).sum(-1) if query_is_key else None  # (R, m): the query's own logit
        mean_x = _softmax_mean(acc.ref, acc.den, num_x, self_logit, q)  # (R, m, d)
        out[:, i] = mean_x @ tv.T  # (R, m, d_v)
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
    dtype: torch.dtype | None = None,
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
        streams=1, seed=seed, device=device, chunk=chunk, query_is_key=query_is_key, dtype=dtype,
    )[0]
