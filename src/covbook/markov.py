"""The Markov reduction of generation, greedy orbits, and repetition metrics.

Xu & Fang (2026), Section 6 (book chapters 09-10).  In a causal transformer
without positional encoding the terminal state at position t tends to a
deterministic function F_π(x_t) of the current token, where π is the law of the
context tokens (T4).  Along a context whose empirical token frequencies are
π̂_t, the next-token law is therefore close to the *mean-field Markov kernel*

    K_π(x, ·) = softmax(W_out F_π(x) / τ),        evaluated at π = π̂_t,

so generation is a first-order Markov chain reinforced by its own occupation
measure (the Markov view of generative attention is Ildiz et al., 2024).  This
module computes that kernel and the quantities that test the reduction:

* model-free: empirical frequencies, total variation, entropy, the stationary
  law and entropy rate of a kernel, cycle detection (:func:`find_cycle`), and the
  standard repetition metrics seq-rep-n and rep/ℓ (Welleck et al., 2020) and
  distinct-n (Li et al., 2016), the degeneration Holtzman et al. (2020) describe;
* model-dependent: :func:`markov_kernel`, :func:`markov_gap` (TV between the
  model's next-token law and the kernel along a context), the black-box
  :func:`shuffle_test`, greedy decoding and temperature sampling, and the
  mean-field greedy map whose cycles are the attracting orbits of repetition.

A *model* here is any ``torch.nn.Module`` that maps long tokens (B, T) to
logits (B, T, V) and has ``logits_from_hidden(h)``, such as
:class:`covbook.transformer.CausalTransformer`.  Token ids are 0..V-1 and
context lengths t are 1-based: "position t" is the context x_1..x_t.

References
----------
H. Xu, G. Fang. Self-Attention as a Covariance Readout. arXiv:2605.10466, 2026.
M. E. Ildiz et al. From Self-Attention to Markov Models: Unveiling the Dynamics of
Generative Transformers. ICML 2024.
S. Welleck et al. Neural Text Generation with Unlikelihood Training. ICLR 2020.
A. Holtzman et al. The Curious Case of Neural Text Degeneration. ICLR 2020.
J. Li et al. A Diversity-Promoting Objective Function for Neural Conversation Models.
NAACL 2016.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from covbook._validate import as_tensor, check_positive_float, check_positive_int

__all__ = [
    "empirical_frequencies",
    "running_frequencies",
    "tv_distance",
    "entropy",
    "stationary_distribution",
    "entropy_rate",
    "find_cycle",
    "seq_rep_n",
    "rep_l",
    "distinct_n",
    "within_between_tv",
    "attractor_contrast",
    "repetition_metrics",
    "asymptotic_covariance",
    "sample_markov_chain",
    "markov_kernel",
    "greedy_map",
    "cycle_self_consistent",
    "cycle_break_time",
    "CycleRecord",
    "cycle_records",
    "cycle_summary",
    "fixed_point_residual",
    "next_token_probs",
    "markov_gap",
    "shuffle_test",
    "greedy_decode",
    "sample",
]

MeanField = Callable[[torch.nn.Module, torch.Tensor], torch.Tensor]


# ---------------------------------------------------------------------------
# validation helpers
# ---------------------------------------------------------------------------


def _tokens_np(tokens: object, name: str = "tokens", ndim: Sequence[int] = (1,)) -> np.ndarray:
    """Token ids as a non-negative int64 numpy array with an allowed number of dims."""
    if isinstance(tokens, torch.Tensor):
        tokens = tokens.detach().cpu().numpy()
    arr = np.asarray(tokens)
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        if not np.issubdtype(arr.dtype, np.floating) or not np.all(arr == np.round(arr)):
            raise ValueError(f"{name} must hold integer token ids, got dtype {arr.dtype}")
    arr = arr.astype(np.int64)
    if arr.ndim not in tuple(ndim):
        raise ValueError(f"{name} must have {' or '.join(map(str, ndim))} dims, got shape {arr.shape}")
    if arr.size and arr.min() < 0:
        raise ValueError(f"{name} must be non-negative token ids, got min {arr.min()}")
    return arr


def _tokens_torch(tokens: object, vocab_size: int | None, name: str = "tokens") -> tuple[torch.Tensor, bool]:
    """Token ids as a (B, T) long tensor; also says whether the input was 1-d."""
    if isinstance(tokens, torch.Tensor):
        if tokens.is_floating_point() or tokens.is_complex() or tokens.dtype == torch.bool:
            raise ValueError(f"{name} must be an integer tensor of token ids, got dtype {tokens.dtype}")
        t = tokens.long()
    else:
        t = torch.as_tensor(_tokens_np(tokens, name, ndim=(1, 2)))
    if t.ndim not in (1, 2) or t.shape[-1] == 0:
        raise ValueError(f"{name} must have shape (T,) or (B, T) with T >= 1, got {tuple(t.shape)}")
    if t.numel() and int(t.min()) < 0:
        raise ValueError(f"{name} must be non-negative token ids")
    if vocab_size is not None and t.numel() and int(t.max()) >= vocab_size:
        raise ValueError(f"{name} must be ids in 0..{vocab_size - 1}, got {int(t.max())}")
    single = t.ndim == 1
    return (t[None] if single else t), single


def _distribution(p: object, name: str) -> torch.Tensor:
    """A float64 tensor of probability vectors along the last axis, or a ValueError."""
    d = as_tensor(p, name)
    if d.ndim == 0:
        raise ValueError(f"{name} must have at least one dim (the outcomes), got a scalar")
    if bool((d < 0).any()):
        raise ValueError(f"{name} must be non-negative")
    if not torch.allclose(d.sum(-1), torch.ones((), dtype=d.dtype, device=d.device), atol=1e-6, rtol=0.0):
        raise ValueError(f"{name} must sum to 1 along its last axis")
    return d


def _kernel(kernel: object) -> torch.Tensor:
    k = _distribution(kernel, "kernel")
    if k.ndim != 2 or k.shape[0] != k.shape[1]:
        raise ValueError(f"kernel must be a square (V, V) row-stochastic matrix, got shape {tuple(k.shape)}")
    return k


def _temperature(temperature: object) -> float:
    return check_positive_float(temperature, "temperature")


def _positions(positions: object | None, length: int) -> list[int]:
    """1-based context lengths t in [1, T], strictly increasing (default: all)."""
    if positions is None:
        return list(range(1, length + 1))
    try:
        raw = np.asarray(positions, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError) as err:
        raise ValueError(f"positions must be a sequence of integer context lengths, got {positions!r}") from err
    if raw.size == 0 or not np.all(np.isfinite(raw)) or not np.all(raw == np.round(raw)):
        raise ValueError("positions must be a non-empty sequence of integer context lengths")
    pos = [int(p) for p in raw]
    if pos[0] < 1 or pos[-1] > length or any(b <= a for a, b in zip(pos[:-1], pos[1:], strict=True)):
        raise ValueError(f"positions must be strictly increasing context lengths in [1, {length}], got {pos[:6]}")
    return pos


_MAX_BYTES = 4 * 2**30  # the largest array a metric here may allocate (4 GiB)


def _check_size(n_elements: int, what: str) -> None:
    """Refuse an allocation of more than ``_MAX_BYTES`` float64s, saying how much it needs."""
    need = 8 * int(n_elements)
    if need > _MAX_BYTES:
        raise ValueError(f"{what} would need {need / 2**30:,.1f} GiB of memory (more than "
                         f"{_MAX_BYTES / 2**30:.0f} GiB); use fewer tokens or a smaller vocabulary")


def _ngrams(seq: np.ndarray, n: int) -> list[tuple[int, ...]]:
    return [tuple(seq[i : i + n].tolist()) for i in range(seq.size - n + 1)]


# ---------------------------------------------------------------------------
# model-free quantities
# ---------------------------------------------------------------------------


def empirical_frequencies(tokens: object, vocab_size: int) -> torch.Tensor:
    r"""Token frequencies π̂(x) = (1/T) Σ_s 1[x_s = x] along the last axis.

    Parameters
    ----------
    tokens : int array, shape (..., T), T >= 1
    vocab_size : int
        V; every id must lie in 0..V-1.

    Returns
    -------
    tensor, shape (..., V), float64

    Examples
    --------
    >>> empirical_frequencies([0, 2, 2, 1], 3)
    tensor([0.2500, 0.2500, 0.5000], dtype=torch.float64)
    """
    v = check_positive_int(vocab_size, "vocab_size")
    arr = _tokens_np(tokens, ndim=range(1, 8))
    if arr.shape[-1] == 0:
        raise ValueError("tokens must contain at least one token")
    if arr.max() >= v:
        raise ValueError(f"tokens must be ids in 0..{v - 1}, got {arr.max()}")
    rows = arr.reshape(-1, arr.shape[-1])  # (R, T)
    _check_size(rows.shape[0] * v, f"frequencies of {rows.shape[0]} sequences over {v} tokens")
    counts = np.zeros((rows.shape[0], v))  # (R, V)
    np.add.at(counts, (np.repeat(np.arange(rows.shape[0]), rows.shape[1]), rows.reshape(-1)), 1.0)
    return torch.as_tensor((counts / rows.shape[1]).reshape(*arr.shape[:-1], v))


def running_frequencies(tokens: object, vocab_size: int) -> torch.Tensor:
    r"""Frequencies of every prefix: row t-1 is π̂_t = (1/t) Σ_{s≤t} e_{x_s}.

    Returns
    -------
    tensor, shape (..., T, V), float64

    Examples
    --------
    >>> running_frequencies([1, 0], 2)
    tensor([[0.0000, 1.0000],
            [0.5000, 0.5000]], dtype=torch.float64)
    """
    v = check_positive_int(vocab_size, "vocab_size")
    arr = _tokens_np(tokens, ndim=range(1, 8))
    if arr.shape[-1] == 0:
        raise ValueError("tokens must contain at least one token")
    if arr.max() >= v:
        raise ValueError(f"tokens must be ids in 0..{v - 1}, got {arr.max()}")
    _check_size(2 * arr.size * v, f"running frequencies of {arr.size} tokens over {v} tokens")
    onehot = np.zeros((*arr.shape, v))  # (..., T, V)
    np.put_along_axis(onehot, arr[..., None], 1.0, axis=-1)
    counts = np.cumsum(onehot, axis=-2)  # (..., T, V)
    t = np.arange(1, arr.shape[-1] + 1)[:, None]  # (T, 1)
    return torch.as_tensor(counts / t)


def tv_distance(p: object, q: object) -> torch.Tensor:
    r"""Total variation TV(p, q) = ½ Σ_y |p(y) − q(y)| along the last axis.

    Examples
    --------
    >>> tv_distance([1.0, 0.0], [0.25, 0.75])
    tensor(0.7500, dtype=torch.float64)
    """
    pp = _distribution(p, "p")
    qq = _distribution(q, "q").to(pp.device)
    if pp.shape[-1] != qq.shape[-1]:
        raise ValueError(f"p and q must have the same number of outcomes, got {pp.shape[-1]} and {qq.shape[-1]}")
    return 0.5 * (pp - qq).abs().sum(-1)


def entropy(p: object) -> torch.Tensor:
    r"""Shannon entropy H(p) = −Σ_y p(y) log p(y) in nats (0 log 0 = 0), along the last axis.

    Examples
    --------
    >>> round(float(entropy([0.5, 0.5, 0.0])), 6)
    0.693147
    """
    d = _distribution(p, "p")
    return -torch.where(d > 0, d * torch.log(d.clamp_min(1e-300)), torch.zeros_like(d)).sum(-1)


def stationary_distribution(kernel: object) -> torch.Tensor:
    r"""The stationary law π = π K of a row-stochastic kernel K (unique when K is irreducible).

    Solves the linear system (Kᵀ − I) π = 0, 1ᵀπ = 1 by least squares and checks
    the answer.  A kernel with several stationary laws (reducible) has no unique
    answer and raises ``ValueError``; so does one whose solution is not a law.

    Parameters
    ----------
    kernel : array-like, shape (V, V), rows summing to 1

    Returns
    -------
    tensor, shape (V,), float64

    Examples
    --------
    >>> stationary_distribution([[0.5, 0.5], [0.25, 0.75]])
    tensor([0.3333, 0.6667], dtype=torch.float64)
    """
    k = _kernel(kernel).cpu()
    v = k.shape[0]
    eye = torch.eye(v, dtype=torch.float64)
    sv = torch.linalg.svdvals(k.T - eye)  # (V,): one zero per stationary law
    if v > 1 and float(sv[-2]) < 1e-10:
        raise ValueError("kernel has several stationary laws (it is reducible); no unique answer")
    a = torch.cat([k.T - eye, torch.ones(1, v, dtype=torch.float64)])  # (V+1, V)
    b = torch.zeros(v + 1, dtype=torch.float64)
    b[-1] = 1.0
    pi = torch.linalg.lstsq(a, b[:, None]).solution[:, 0]  # (V,)
    if float(pi.min()) < -1e-8:
        raise ValueError("kernel's stationary solution is not a probability vector")
    pi = pi.clamp_min(0.0)
    return pi / pi.sum()


def entropy_rate(kernel: object, stationary: object | None = None) -> torch.Tensor:
    r"""Entropy rate of a Markov chain, in nats per token.

    .. math:: h(K) = -\sum_x \pi(x) \sum_y K(x, y) \log K(x, y),

    with π the stationary law of K (computed when not given).  It is the
    entropy of the next token given the current one, averaged over the chain's
    long-run occupation; log V for a uniform kernel, 0 for a deterministic one.

    Parameters
    ----------
    kernel : array-like, shape (V, V), row-stochastic
    stationary : array-like, shape (V,), optional
        The averaging law (e.g. the empirical frequencies of a run).

    Examples
    --------
    >>> round(float(entropy_rate([[0.5, 0.5], [0.5, 0.5]])), 6)
    0.693147
    >>> float(entropy_rate([[0.0, 1.0], [1.0, 0.0]], stationary=[0.5, 0.5]))
    0.0
    """
    k = _kernel(kernel)
    pi = stationary_distribution(k) if stationary is None else _distribution(stationary, "stationary")
    if pi.shape != (k.shape[0],):
        raise ValueError(f"stationary must have shape ({k.shape[0]},), got {tuple(pi.shape)}")
    return (pi.to(k.device) * entropy(k)).sum()


def find_cycle(tokens: object, min_repeats: int = 2, min_length: int = 1) -> tuple[int, int] | None:
    r"""Detect the cycle a finite sequence ends in: ``(entry, period)`` or ``None``.

    The period p is the *smallest* p >= 1 such that the tail of the sequence is
    p-periodic over at least ``min_repeats`` full periods; the entry is the
    earliest index e (0-based) from which it is:

    .. math:: x_{i+p} = x_i \ \ \forall\, i \in [e, T-p), \qquad
              T - e \ge \max(\text{min\_repeats}\cdot p,\ \text{min\_length}) .

    For an orbit x_{k+1} = f(x_k) of a map on a finite set this returns exactly
    the orbit's tail length μ and cycle length λ once the sequence covers
    μ + min_repeats·λ terms.  A finite sequence can only *suggest* a cycle:
    ``min_repeats`` is how much evidence is required.

    Parameters
    ----------
    tokens : int array, shape (T,)
    min_repeats : int
        Full periods the periodic tail must span (>= 2).
    min_length : int
        Tokens the periodic tail must span at least (e.g. the last quarter of
        a run, so that two equal tokens at the end are not taken for a cycle).

    Returns
    -------
    (entry, period) or None when no period fits.

    Examples
    --------
    >>> find_cycle([5, 1, 2, 3, 1, 2, 3, 1, 2, 3])
    (1, 3)
    >>> find_cycle([0, 1, 2, 3]) is None
    True
    >>> find_cycle([0, 1, 2, 3, 3], min_length=3) is None
    True
    """
    arr = _tokens_np(tokens)
    reps = check_positive_int(min_repeats, "min_repeats")
    if reps < 2:
        raise ValueError(f"min_repeats must be >= 2 (one period is no evidence of a cycle), got {reps}")
    need = check_positive_int(min_length, "min_length")
    n = arr.size
    for p in range(1, n // reps + 1):
        bad = np.flatnonzero(arr[p:] != arr[:-p])  # i with x_{i+p} != x_i
        entry = int(bad[-1]) + 1 if bad.size else 0
        if n - entry >= max(reps * p, need):
            return entry, p
    return None


def seq_rep_n(tokens: object, n: int) -> float:
    r"""seq-rep-n of a continuation (Welleck et al., 2020): the share of repeated n-grams.

    .. math:: \text{seq-rep-}n = 1 - \frac{|\text{unique } n\text{-grams}(x_{1:T})|}{|n\text{-grams}(x_{1:T})|},
              \qquad |n\text{-grams}| = T - n + 1 .

    0 when no n-gram repeats; for a sequence cycling with period p (p distinct
    n-grams), 1 − p/(T − n + 1).  A 2-d input (B, T) returns the mean over rows.

    Examples
    --------
    >>> seq_rep_n([1, 2, 1, 2, 1, 2], 2)
    0.6
    >>> seq_rep_n([0, 1, 2, 3], 2)
    0.0
    """
    arr = _tokens_np(tokens, ndim=(1, 2))
    n = check_positive_int(n, "n")
    rows = arr[None] if arr.ndim == 1 else arr
    if rows.shape[1] < n:
        raise ValueError(f"seq-rep-n needs sequences of at least n={n} tokens, got {rows.shape[1]}")
    vals = [1.0 - len(set(g)) / len(g) for g in (_ngrams(r, n) for r in rows)]
    return float(np.mean(vals))


def rep_l(predictions: object, targets: object, l: int) -> float:
    r"""rep/ℓ (Welleck et al., 2020): how often the next-token prediction repeats a recent token.

    .. math:: \text{rep}/\ell = \frac{1}{T}\sum_{t=1}^{T} 1\bigl[\hat x_t \in \{x_{t-\ell}, \dots, x_{t-1}\}\bigr],

    where x̂_t is the model's prediction of x_t from x_{<t} and the window is cut
    at the start (x̂_1 has an empty window and counts as no repeat).

    Parameters
    ----------
    predictions : int array (T,) of predicted ids, or float array (T, V) of scores
        Scores are reduced by argmax; ties go to the smallest id.
        A batch (B, T) / (B, T, V) returns the mean over all positions.
    targets : int array, shape (T,) or (B, T)
        The context x_1..x_T the predictions were made along.
    l : int
        Window length ℓ.

    Examples
    --------
    >>> rep_l([9, 0, 1, 0], [0, 1, 0, 1], 2)
    0.75
    >>> rep_l([[0.2, 0.8], [0.5, 0.5]], [0, 0], 1)
    0.5
    """
    l = check_positive_int(l, "l")
    tgt = _tokens_np(targets, "targets", ndim=(1, 2))
    pred_raw = predictions.detach().cpu().numpy() if isinstance(predictions, torch.Tensor) else np.asarray(predictions)
    if pred_raw.ndim == tgt.ndim + 1:
        if not np.issubdtype(pred_raw.dtype, np.number) or not np.all(np.isfinite(pred_raw)):
            raise ValueError("prediction scores must be finite numbers")
        pred = np.argmax(pred_raw, axis=-1)  # (..., T): first maximum on ties
    else:
        pred = _tokens_np(pred_raw, "predictions", ndim=(tgt.ndim,))
    if pred.shape != tgt.shape:
        raise ValueError(f"predictions must match targets' shape {tgt.shape} (or add a V axis), got {pred.shape}")
    if tgt.shape[-1] == 0:
        raise ValueError("rep/l needs at least one position")
    p2, t2 = pred.reshape(-1, tgt.shape[-1]), tgt.reshape(-1, tgt.shape[-1])
    hits = [[p2[b, t] in t2[b, max(0, t - l) : t] for t in range(t2.shape[1])] for b in range(t2.shape[0])]
    return float(np.mean(hits))


def distinct_n(tokens: object, n: int) -> float:
    r"""distinct-n (Li et al., 2016): unique n-grams over all n-grams, pooled over sequences.

    .. math:: \text{distinct-}n = \frac{|\bigcup_b \text{ngrams}_n(x^{(b)})|}{\sum_b (T_b - n + 1)}

    For one sequence it is 1 − seq-rep-n; pooled over a set of generations it
    also falls when different runs repeat each other.

    Parameters
    ----------
    tokens : int array (T,), (B, T), or a list of 1-d sequences of any lengths >= n

    Examples
    --------
    >>> distinct_n([[0, 1, 2], [0, 1, 3]], 2)
    0.75
    """
    n = check_positive_int(n, "n")
    if isinstance(tokens, (list, tuple)) and tokens and not np.isscalar(tokens[0]):
        seqs = [_tokens_np(s) for s in tokens]
    else:
        arr = _tokens_np(tokens, ndim=(1, 2))
        seqs = [arr] if arr.ndim == 1 else list(arr)
    if not seqs or any(s.size < n for s in seqs):
        raise ValueError(f"distinct-n needs sequences of at least n={n} tokens")
    grams = [g for s in seqs for g in _ngrams(s, n)]
    return len(set(grams)) / len(grams)


def within_between_tv(runs: object, vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Ergodicity check: TV of token frequencies within runs and between runs.

    Each run (row) is split into halves A, B.  *Within*: TV(π̂_A, π̂_B) of the
    same run.  *Between*: TV(π̂_{B_i}, π̂_{B_j}) of the second halves of two runs
    i < j.  For an ergodic chain both are sampling noise of the same size; when
    runs settle on different attractors, *between* is much larger.

    Parameters
    ----------
    runs : int array, shape (R, T), R >= 2, T >= 2

    Returns
    -------
    (within (R,), between (R(R-1)/2,)), float64 tensors

    Examples
    --------
    >>> w, b = within_between_tv([[0, 0, 0, 0], [1, 1, 1, 1]], 2)
    >>> w.tolist(), b.tolist()
    ([0.0, 0.0], [1.0])
    """
    arr = _tokens_np(runs, "runs", ndim=(2,))
    if arr.shape[0] < 2 or arr.shape[1] < 2:
        raise ValueError(f"runs must have shape (R, T) with R >= 2 runs of T >= 2 tokens, got {arr.shape}")
    half = arr.shape[1] // 2
    first = empirical_frequencies(arr[:, :half], vocab_size)  # (R, V)
    second = empirical_frequencies(arr[:, half:], vocab_size)  # (R, V)
    within = tv_distance(first, second)  # (R,)
    i, j = torch.triu_indices(arr.shape[0], arr.shape[0], offset=1)
    between = tv_distance(second[i], second[j])  # (R(R-1)/2,)
    return within, between


def attractor_contrast(runs: object, vocab_size: int) -> tuple[float, float]:
    r"""Between-run minus within-run TV of token frequencies, with a jackknife SE over runs.

    .. math:: \Delta = \overline{\mathrm{TV}}_{\text{between}} - \overline{\mathrm{TV}}_{\text{within}},

    the means of :func:`within_between_tv`.  For runs of one ergodic chain (or windows of
    a stationary text) Δ is sampling noise around 0 (to O(1/T)); runs that settle on
    different attractors give Δ > 0.  The standard error is the leave-one-run-out
    jackknife, which accounts for the dependence of the pairwise *between* distances.

    Parameters
    ----------
    runs : int array, shape (R, T), R >= 3, T >= 2

    Returns
    -------
    (Δ, jackknife SE)

    Examples
    --------
    >>> d, se = attractor_contrast([[0, 0, 0, 0], [1, 1, 1, 1], [2, 2, 2, 2]], 3)
    >>> d, se
    (1.0, 0.0)
    """
    arr = _tokens_np(runs, "runs", ndim=(2,))
    if arr.shape[0] < 3:
        raise ValueError(f"runs must hold at least 3 runs for a jackknife SE, got shape {arr.shape}")
    within, between = within_between_tv(arr, vocab_size)
    r = arr.shape[0]
    i, j = torch.triu_indices(r, r, offset=1)
    full = float(between.mean() - within.mean())
    loo = []
    for k in range(r):
        keep_pairs = (i != k) & (j != k)
        keep_runs = torch.arange(r) != k
        loo.append(float(between[keep_pairs].mean() - within[keep_runs].mean()))
    loo_arr = np.array(loo)
    se = float(np.sqrt((r - 1) / r * ((loo_arr - loo_arr.mean()) ** 2).sum()))
    return full, se


def repetition_metrics(runs: object, vocab_size: int, n: int = 4) -> dict[str, float]:
    r"""The repetition and diversity metrics of a batch of generations, in one call.

    Returns ``seq_rep`` (:func:`seq_rep_n`, mean over runs), ``distinct``
    (:func:`distinct_n`, pooled), ``entropy`` (mean entropy H(π̂) of each run's token
    frequencies), ``within`` and ``between`` (means of :func:`within_between_tv`).

    Parameters
    ----------
    runs : int array, shape (R, T), R >= 2, T >= max(n, 2)
    n : int, the n of seq-rep-n and distinct-n

    Examples
    --------
    >>> m = repetition_metrics([[0, 1, 0, 1], [1, 1, 1, 1]], 2, n=2)
    >>> round(m["seq_rep"], 4), round(m["distinct"], 4), m["between"]
    (0.5, 0.5, 0.5)
    """
    arr = _tokens_np(runs, "runs", ndim=(2,))
    within, between = within_between_tv(arr, vocab_size)
    return {"seq_rep": seq_rep_n(arr, n), "distinct": distinct_n(arr, n),
            "entropy": float(entropy(empirical_frequencies(arr, vocab_size)).mean()),
            "within": float(within.mean()), "between": float(between.mean())}


def asymptotic_covariance(kernel: object, stationary: object | None = None) -> torch.Tensor:
    r"""Asymptotic covariance of the token frequencies of a stationary ergodic Markov chain.

    For a chain with kernel K and stationary law π, √t(π̂_t − π) → N(0, Σ) with

    .. math:: \Sigma = \sum_{k\in\mathbb Z} \mathrm{Cov}(e_{x_0}, e_{x_k})
              = D_\pi Z + Z^\top D_\pi - D_\pi - \pi\pi^\top,\qquad
              Z = (I - K + \mathbf 1\pi^\top)^{-1},

    the Markov-chain central limit theorem (Z is the fundamental matrix, D_π = diag π).
    For iid tokens (K = 1πᵀ) it is D_π − ππᵀ; a chain that stays put with probability
    ρ and otherwise draws from π multiplies that by (1 + ρ)/(1 − ρ).

    Parameters
    ----------
    kernel : (V, V) row-stochastic and irreducible
    stationary : (V,), optional (computed from the kernel when not given)

    Returns
    -------
    tensor (V, V), float64, symmetric, rows summing to 0

    Examples
    --------
    >>> asymptotic_covariance([[0.5, 0.5], [0.5, 0.5]])
    tensor([[ 0.2500, -0.2500],
            [-0.2500,  0.2500]], dtype=torch.float64)
    """
    k = _kernel(kernel).cpu()
    v = k.shape[0]
    pi = stationary_distribution(k) if stationary is None else _distribution(stationary, "stationary").cpu()
    if pi.shape != (v,):
        raise ValueError(f"stationary must have shape ({v},), got {tuple(pi.shape)}")
    if not torch.allclose(pi @ k, pi, atol=1e-8, rtol=0.0):
        raise ValueError("stationary is not stationary for kernel (π K ≠ π)")
    eye = torch.eye(v, dtype=torch.float64)
    a = eye - k + torch.outer(torch.ones(v, dtype=torch.float64), pi)  # (V, V)
    if float(torch.linalg.svdvals(a).min()) < 1e-12:
        raise ValueError("kernel is reducible: its frequencies have no asymptotic covariance")
    z = torch.linalg.inv(a)  # (V, V) fundamental matrix
    d = torch.diag(pi)
    sigma = d @ z + z.T @ d - d - torch.outer(pi, pi)
    return 0.5 * (sigma + sigma.T)


def sample_markov_chain(kernel: object, n_chains: int, length: int, *, generator: torch.Generator | None = None,
                        initial: object | None = None) -> torch.Tensor:
    r"""Sample ``n_chains`` paths x_1..x_T of the chain x_{t+1} ~ K(x_t, ·).

    x_1 is drawn from ``initial`` (default: the stationary law, so the paths are
    stationary).  Returns a long tensor of shape (n_chains, length) on the CPU.

    Examples
    --------
    >>> x = sample_markov_chain([[0.0, 1.0], [1.0, 0.0]], 2, 5, initial=[1.0, 0.0])
    >>> x.tolist()
    [[0, 1, 0, 1, 0], [0, 1, 0, 1, 0]]
    """
    k = _kernel(kernel).cpu()
    n_chains = check_positive_int(n_chains, "n_chains")
    length = check_positive_int(length, "length")
    _check_size(n_chains * length, f"{n_chains} chains of length {length}")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    p0 = stationary_distribution(k) if initial is None else _distribution(initial, "initial").cpu()
    if p0.shape != (k.shape[0],):
        raise ValueError(f"initial must have shape ({k.shape[0]},), got {tuple(p0.shape)}")
    cum = torch.cumsum(k, dim=1)  # (V, V)
    cum[:, -1] = 1.0
    out = torch.empty(n_chains, length, dtype=torch.long)
    out[:, 0] = torch.multinomial(p0.expand(n_chains, -1), 1, replacement=True, generator=generator)[:, 0]
    u = torch.rand(n_chains, length - 1, generator=generator, dtype=torch.float64)  # (n, T-1)
    for t in range(1, length):
        rows = cum[out[:, t - 1]]  # (n, V)
        out[:, t] = torch.searchsorted(rows, u[:, t - 1 : t].contiguous(), right=True)[:, 0].clamp_max(k.shape[0] - 1)
    return out


# ---------------------------------------------------------------------------
# model-dependent quantities
# ---------------------------------------------------------------------------


def _default_mean_field(model: torch.nn.Module, freqs: torch.Tensor) -> torch.Tensor:
    from covbook.transformer import mean_field_discrete

    return mean_field_discrete(model, freqs)


def _vocab_size(model: torch.nn.Module) -> int:
    v = getattr(model, "vocab_size", None)
    if v is None:
        raise ValueError("model must expose its vocabulary size as `vocab_size`")
    return int(v)


def _model_device_dtype(model: torch.nn.Module) -> tuple[torch.device, torch.dtype]:
    p = next(iter(model.parameters()), None)
    if p is None:
        return torch.device("cpu"), torch.float64
    return p.device, p.dtype


def markov_kernel(
    model: torch.nn.Module, freqs: object, temperature: float = 1.0, *, mean_field: MeanField | None = None
) -> torch.Tensor:
    r"""The mean-field next-token kernel of a NoPE transformer at context law π.

    .. math:: K_\pi(x, \cdot) = \operatorname{softmax}\bigl(W_{\text{out}} F_\pi(x) / \tau\bigr),

    F_π(x) the terminal mean-field state of token x when the context tokens have
    law π (paper Section 5, computed by ``mean_field``; by default
    :func:`covbook.transformer.mean_field_discrete`) and W_out the model's
    read-out (``model.logits_from_hidden``).  Row x is the Markov chain's law of
    the next token after x (paper Section 6).

    Parameters
    ----------
    model : torch module with ``vocab_size`` and ``logits_from_hidden``
    freqs : array-like, shape (V,)
        The context law π (e.g. empirical frequencies π̂_t).
    temperature : float
        τ > 0.
    mean_field : callable (model, freqs) -> (V, d_model), optional

    Returns
    -------
    tensor, shape (V, V), float64, rows summing to 1.
    """
    tau = _temperature(temperature)
    v = _vocab_size(model)
    pi = _distribution(freqs, "freqs")
    if pi.shape != (v,):
        raise ValueError(f"freqs must have shape ({v},) for a vocabulary of {v} tokens, got {tuple(pi.shape)}")
    dev, dtype = _model_device_dtype(model)
    with torch.no_grad():
        h = (mean_field or _default_mean_field)(model, pi.to(device=dev, dtype=dtype))  # (V, d)
        logits = model.logits_from_hidden(h).to(torch.float64)  # (V, V)
    return torch.softmax(logits / tau, dim=-1)


def greedy_map(model: torch.nn.Module, freqs: object, *, mean_field: MeanField | None = None) -> torch.Tensor:
    r"""The mean-field greedy map g_π(x) = argmax_y K_π(x, y) (ties: smallest id), shape (V,).

    Greedy decoding with a context whose statistics have settled at π is the
    iteration of this map on the finite vocabulary; its cycles are the
    attracting orbits behind repetition.  Independent of the temperature.
    """
    k = markov_kernel(model, freqs, 1.0, mean_field=mean_field)
    return torch.argmax(k, dim=-1)


def cycle_self_consistent(
    model: torch.nn.Module, cycle: object, *, mean_field: MeanField | None = None
) -> bool:
    r"""Does a cycle reproduce itself under its own statistics?

    With π_c the token frequencies of one period c_0..c_{p-1}, the cycle is
    self-consistent when the mean-field greedy map at π_c follows it:
    g_{π_c}(c_i) = c_{i+1 mod p} for every i.  Such a cycle is a fixed point of
    greedy generation (an attracting orbit: once the context is dominated by it,
    it continues); a cycle that fails this is held only by the leftover
    statistics of the prompt and transient, and breaks as they wash out.

    Parameters
    ----------
    cycle : int array, shape (p,), one period of the cycle
    """
    c = _tokens_np(cycle, "cycle")
    if c.size == 0:
        raise ValueError("cycle must contain at least one token")
    v = _vocab_size(model)
    return _follows(greedy_map(model, empirical_frequencies(c, v), mean_field=mean_field).cpu().numpy(), c)


def _follows(g: np.ndarray, cycle: np.ndarray) -> bool:
    return bool(np.all(g[cycle] == np.roll(cycle, -1)))


def cycle_break_time(
    model: torch.nn.Module,
    prefix: object,
    cycle: object,
    t_max: int,
    *,
    t_min: int | None = None,
    n_grid: int = 48,
    mean_field: MeanField | None = None,
) -> int | None:
    r"""Mean-field prediction of when greedy decoding leaves a cycle held by leftover statistics.

    A context made of ``prefix`` (prompt and transient) followed by n copies of
    one period c of a cycle has token frequencies

    .. math:: \pi(n) = \frac{T_0\,\hat\pi_{\text{prefix}} + n\,p\,\hat\pi_c}{T_0 + n p}
              \;\to\; \hat\pi_c \quad (n \to \infty).

    The cycle continues while the mean-field greedy map g_{π(n)} follows it
    (:func:`greedy_map`).  This returns the first context length
    t = T_0 + n p in [``t_min``, ``t_max``] at which it does not (to within one
    period, by bisection between points of a geometric grid of ``n_grid``
    lengths), or ``None`` when it follows the cycle at every grid point.  The
    limit n = ∞ is :func:`cycle_self_consistent`.  Start at ``t_min`` = the
    length up to which the cycle has been seen to hold: the mean field is least
    accurate at short contexts.

    Parameters
    ----------
    prefix : int array (T_0,), T_0 >= 0: the tokens before the first full period
    cycle : int array (p,), one period
    t_max : int, longest context considered
    t_min : int, optional, shortest context considered (default T_0 + p)

    Returns
    -------
    int or None
    """
    v = _vocab_size(model)
    pre, c = _tokens_np(prefix, "prefix"), _tokens_np(cycle, "cycle")
    if c.size == 0:
        raise ValueError("cycle must contain at least one token")
    t_max = check_positive_int(t_max, "t_max")
    n_grid = check_positive_int(n_grid, "n_grid")
    if (pre.size and pre.max() >= v) or c.max() >= v:
        raise ValueError(f"prefix and cycle must be ids in 0..{v - 1}")
    counts_pre = np.bincount(pre, minlength=v).astype(np.float64)  # (V,)
    counts_c = np.bincount(c, minlength=v).astype(np.float64)  # (V,)

    def follows(n: int) -> bool:
        freqs = torch.as_tensor((counts_pre + n * counts_c) / (pre.size + n * c.size))  # (V,)
        return _follows(greedy_map(model, freqs, mean_field=mean_field).cpu().numpy(), c)

    if t_min is not None:
        t_min = check_positive_int(t_min, "t_min")
        if t_min > t_max:
            raise ValueError(f"t_min={t_min} must not exceed t_max={t_max}")
    n_max = (t_max - pre.size) // c.size
    n_min = 1 if t_min is None else max(1, -(-(t_min - pre.size) // c.size))
    if n_max < n_min:
        return None
    grid = np.unique(np.geomspace(n_min, n_max, n_grid).astype(int))
    if not follows(int(grid[0])):
        return int(pre.size + grid[0] * c.size)
    prev = int(grid[0])
    for n in grid:
        if not follows(int(n)):
            lo, hi = prev, int(n)  # follows at lo, fails at hi
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if follows(mid) else (lo, mid)
            return int(pre.size + hi * c.size)
        prev = int(n)
    return None


@dataclass
class CycleRecord:
    """What :func:`cycle_records` found in one greedy run (times are 0-based indices of the run).

    ``final`` is (entry, period) of the cycle the run ends in (:func:`find_cycle` with
    three periods covering the last quarter of the continuation), else None; ``entry`` is
    that entry counted in steps after the prompt.  ``simple``: the final cycle visits
    distinct tokens.  ``self_consistent``: :func:`cycle_self_consistent` of the final
    cycle (None when not computed).  ``early``: the cycle present at index ``t_check``
    (same rule on the prefix), ``observed_break``: the first index at which the run
    leaves that cycle (None: it holds to the end), ``predicted_break``:
    :func:`cycle_break_time` of it from t_check on (None: predicted to hold).
    """

    final: tuple[int, int] | None
    entry: int | None = None
    period: int | None = None
    simple: bool | None = None
    self_consistent: bool | None = None
    t_check: int | None = None
    early: tuple[int, int] | None = None
    early_simple: bool | None = None
    observed_break: int | None = None
    predicted_break: int | None = None


def _observed_break(seq: np.ndarray, entry: int, period: int) -> int | None:
    """First index i >= entry + period with seq[i] != seq[i - period], or None."""
    bad = np.flatnonzero(seq[entry + period:] != seq[entry:seq.size - period])
    return int(entry + period + bad[0]) if bad.size else None


def cycle_records(model: torch.nn.Module | None, runs: object, prompt_len: int, *, t_detect: int | None = None,
                  self_consistency: bool = True, mean_field: MeanField | None = None) -> list[CycleRecord]:
    r"""Find the cycles greedy runs end in and, optionally, test the mean field's predictions on them.

    For each run (prompt of ``prompt_len`` tokens, then the continuation of length n):
    the final cycle is :func:`find_cycle` with 3 periods covering at least n/4 tokens.
    With a ``model`` and ``self_consistency``, :func:`cycle_self_consistent` is evaluated
    on it.  With ``t_detect``, the cycle already present at t_check = prompt_len +
    t_detect (3 periods covering t_detect/4) is followed to the end of the run and
    compared with :func:`cycle_break_time`.

    Parameters
    ----------
    model : the model that generated the runs (needed for self-consistency and breaks), or None
    runs : int array (R, T)
    prompt_len : int >= 0
    t_detect : int, optional, 1 <= t_detect < T - prompt_len

    Returns
    -------
    list of :class:`CycleRecord`, one per run
    """
    arr = _tokens_np(runs, "runs", ndim=(2,))
    if isinstance(prompt_len, bool) or not isinstance(prompt_len, (int, np.integer)) or prompt_len < 0:
        raise ValueError(f"prompt_len must be a non-negative integer, got {prompt_len!r}")
    n_cont = arr.shape[1] - int(prompt_len)
    if n_cont < 4:
        raise ValueError(f"runs must continue their prompt by at least 4 tokens, got shape {arr.shape} "
                         f"with prompt_len={prompt_len}")
    if t_detect is not None:
        t_detect = check_positive_int(t_detect, "t_detect")
        if t_detect >= n_cont:
            raise ValueError(f"t_detect={t_detect} must be shorter than the continuation ({n_cont} tokens)")
    if model is None and (self_consistency or t_detect is not None):
        raise ValueError("model is needed for self_consistency or t_detect")
    out = []
    for s in arr:
        final = find_cycle(s, min_repeats=3, min_length=max(1, n_cont // 4))
        rec = CycleRecord(final=final)
        if final is not None:
            e, p = final
            cyc = s[e:e + p]
            rec.entry, rec.period = max(0, e - int(prompt_len)), p
            rec.simple = len(set(cyc.tolist())) == p
            if self_consistency:
                rec.self_consistent = cycle_self_consistent(model, cyc, mean_field=mean_field)
        if t_detect is not None:
            t_check = int(prompt_len) + t_detect
            rec.t_check = t_check
            rec.early = find_cycle(s[:t_check], min_repeats=3, min_length=max(1, t_detect // 4))
            if rec.early is not None:
                e, p = rec.early
                rec.early_simple = len(set(s[e:e + p].tolist())) == p
                rec.observed_break = _observed_break(s, e, p)
                rec.predicted_break = cycle_break_time(model, s[:e], s[e:e + p], s.size, t_min=t_check,
                                                       mean_field=mean_field)
        out.append(rec)
    return out


def cycle_summary(records: Sequence[CycleRecord]) -> dict[str, float]:
    """Counts and shares over :func:`cycle_records` (NaN where a share has no cases).

    Keys: n_runs, n_cycled, frac_cycled, frac_simple_all, frac_consistent, median_entry; with
    early detection also n_early, n_held (held to the end), frac_simple_held, n_pred_hold
    (predicted to hold), hold_precision (share of those that held), n_broke, n_later
    (broke, predicted break after t_check), n_not_early (of those, broke no earlier than
    predicted), n_at_check (predicted break at t_check) and n_at_check_held.
    """
    recs = list(records)
    if not recs or not all(isinstance(r, CycleRecord) for r in recs):
        raise ValueError("records must be a non-empty list of CycleRecord")

    def share(xs: list[bool]) -> float:
        return float(np.mean(xs)) if xs else float("nan")

    cycled = [r for r in recs if r.final is not None]
    early = [r for r in recs if r.early is not None]
    held = [r for r in early if r.observed_break is None]
    pred_hold = [r for r in early if r.predicted_break is None]
    broke = [r for r in early if r.observed_break is not None]
    later = [r for r in broke if r.predicted_break is not None and r.predicted_break > r.t_check]
    at_check = [r for r in early if r.predicted_break == r.t_check]
    return {
        "n_runs": len(recs), "n_cycled": len(cycled), "frac_cycled": len(cycled) / len(recs),
        "frac_simple_all": share([bool(r.simple) for r in cycled]),
        "frac_consistent": share([bool(r.self_consistent) for r in cycled if r.self_consistent is not None]),
        "median_entry": float(np.median([r.entry for r in cycled])) if cycled else float("nan"),
        "n_early": len(early), "n_held": len(held),
        "frac_simple_held": share([bool(r.early_simple) for r in held]),
        "n_pred_hold": len(pred_hold), "hold_precision": share([r.observed_break is None for r in pred_hold]),
        "n_broke": len(broke), "n_later": len(later),
        "n_not_early": sum(r.observed_break >= r.predicted_break for r in later),
        "n_at_check": len(at_check), "n_at_check_held": sum(r.observed_break is None for r in at_check),
    }


def next_token_probs(model: torch.nn.Module, tokens: object, temperature: float = 1.0) -> torch.Tensor:
    r"""The model's next-token laws p(x_{t+1} = · | x_{1:t}) = softmax(logits_t / τ) at every t.

    Parameters
    ----------
    tokens : long, shape (T,) or (B, T)

    Returns
    -------
    tensor, shape (T, V) or (B, T, V), float64; row t-1 is the law after x_{1:t}.
    """
    tau = _temperature(temperature)
    x, single = _tokens_torch(tokens, _vocab_size(model))
    dev, _ = _model_device_dtype(model)
    with torch.no_grad():
        logits = model(x.to(dev)).to(torch.float64)  # (B, T, V)
    probs = torch.softmax(logits / tau, dim=-1)
    return probs[0] if single else probs


def markov_gap(
    model: torch.nn.Module,
    tokens: object,
    positions: object | None = None,
    temperature: float = 1.0,
    *,
    mean_field: MeanField | None = None,
) -> torch.Tensor:
    r"""Markov gap: TV between the model's next-token law and the mean-field kernel row.

    .. math:: \mathrm{gap}_t = \mathrm{TV}\bigl(p(\cdot \mid x_{1:t}),\; K_{\hat\pi_t}(x_t, \cdot)\bigr),
              \qquad \hat\pi_t = \tfrac1t \textstyle\sum_{s \le t} e_{x_s},

    Paper Section 6: O(t^{-1/2}) for a NoPE transformer on a stationary ergodic
    context.  For one layer it is 0 exactly: the attention at position t *is*
    the tilted mean over π̂_t.

    Parameters
    ----------
    tokens : long, shape (T,) or (B, T)
    positions : increasing 1-based context lengths t (default 1..T)
    temperature : float

    Returns
    -------
    tensor, shape (n_pos,) or (B, n_pos), float64
    """
    v = _vocab_size(model)
    x, single = _tokens_torch(tokens, v)
    pos = _positions(positions, x.shape[1])
    probs = next_token_probs(model, x, temperature)  # (B, T, V)
    freqs = running_frequencies(x.cpu(), v)  # (B, T, V)
    gap = torch.empty(x.shape[0], len(pos), dtype=torch.float64)
    for b in range(x.shape[0]):
        for j, t in enumerate(pos):
            row = markov_kernel(model, freqs[b, t - 1], temperature, mean_field=mean_field)[x[b, t - 1]]  # (V,)
            gap[b, j] = tv_distance(probs[b, t - 1].cpu(), row.cpu())
    return gap[0] if single else gap


def fixed_point_residual(
    model: torch.nn.Module,
    tokens: object,
    positions: object | None = None,
    temperature: float = 1.0,
    *,
    start: int = 0,
    mean_field: MeanField | None = None,
) -> torch.Tensor:
    r"""Residual of the mean-field fixed-point equation π = π K_π along a sequence.

    .. math:: r_t = \mathrm{TV}\bigl(\nu_t K_{\hat\pi_t},\ \nu_t\bigr),\qquad
              \nu_t = \frac{1}{t - t_0}\sum_{t_0 < s \le t} e_{x_s},

    with π̂_t the frequencies of the whole context x_{1:t} (which set the kernel) and ν_t
    the occupation of the tokens after the first t_0 = ``start`` (e.g. the generated
    tokens after a prompt; ``start=0`` gives ν_t = π̂_t).  Along the model's own
    generation the tokens follow, up to the Markov gap, the chain
    x_{s+1} ~ K_{π̂_s}(x_s, ·), so ν_t K − ν_t is an average of martingale increments
    plus drift terms, each O_P((t − t_0)^{-1/2}) (paper Section 6): a limit π* of π̂_t
    must solve π* = π* K_{π*}.

    Parameters
    ----------
    tokens : long, shape (T,) or (B, T)
    positions : increasing 1-based context lengths t > start (default start+1..T)
    temperature : float, τ > 0 (the temperature the tokens were sampled at)
    start : int >= 0, tokens excluded from the occupation ν_t

    Returns
    -------
    tensor, shape (n_pos,) or (B, n_pos), float64
    """
    v = _vocab_size(model)
    x, single = _tokens_torch(tokens, v)
    if isinstance(start, bool) or not isinstance(start, (int, np.integer)) or not 0 <= start < x.shape[1]:
        raise ValueError(f"start must be an integer in [0, {x.shape[1]}), got {start!r}")
    pos = list(range(int(start) + 1, x.shape[1] + 1)) if positions is None else _positions(positions, x.shape[1])
    if pos[0] <= start:
        raise ValueError(f"positions must exceed start={start}, got {pos[0]}")
    tau = _temperature(temperature)
    freqs = running_frequencies(x.cpu(), v)  # (B, T, V)
    occ = running_frequencies(x[:, int(start):].cpu(), v)  # (B, T - start, V)
    out = torch.empty(x.shape[0], len(pos), dtype=torch.float64)
    for b in range(x.shape[0]):
        for j, t in enumerate(pos):
            k = markov_kernel(model, freqs[b, t - 1], tau, mean_field=mean_field).cpu()  # (V, V)
            nu = occ[b, t - 1 - int(start)]  # (V,)
            out[b, j] = tv_distance(nu @ k, nu)
    return out[0] if single else out


def shuffle_test(
    model: torch.nn.Module,
    tokens: object,
    positions: object | None = None,
    n_perm: int = 1,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    r"""Black-box shuffle test: does the next-token law depend on the order of the past?

    For each context length t, permute x_1..x_{t-1} uniformly at random, keep
    the current token x_t last, and measure

    .. math:: \mathrm{TV}\bigl(p(\cdot \mid x_{1:t}),\; p(\cdot \mid x_{\sigma(1)}, \dots, x_{\sigma(t-1)}, x_t)\bigr),

    averaged over ``n_perm`` permutations.  Needs only the model's outputs.  For
    a Markov law given π̂_t it is 0 (π̂_t is permutation invariant): exactly 0 for
    a one-layer NoPE transformer, O(t^{-1/2}) for deeper ones (paper Section 6).

    Parameters
    ----------
    tokens : long, shape (T,) or (B, T)
    positions : increasing 1-based context lengths t (default 2..T is sensible)
    n_perm : int
    generator : torch.Generator on the CPU, optional (seeds the permutations)

    Returns
    -------
    tensor, shape (n_pos,) or (B, n_pos), float64
    """
    v = _vocab_size(model)
    x, single = _tokens_torch(tokens, v)
    n_perm = check_positive_int(n_perm, "n_perm")
    pos = _positions(positions, x.shape[1])
    dev, _ = _model_device_dtype(model)
    x = x.to(dev)
    probs = next_token_probs(model, x, temperature)  # (B, T, V)
    out = torch.zeros(x.shape[0], len(pos), dtype=torch.float64)
    for j, t in enumerate(pos):
        for _ in range(n_perm):
            keys = torch.rand(x.shape[0], t - 1, generator=generator)  # (B, t-1)
            perm = torch.argsort(keys, dim=1).to(dev)  # (B, t-1): a uniform permutation per row
            shuffled = torch.cat([torch.gather(x[:, : t - 1], 1, perm), x[:, t - 1 : t]], dim=1)  # (B, t)
            p_shuf = next_token_probs(model, shuffled, temperature)[:, -1]  # (B, V)
            out[:, j] += tv_distance(probs[:, t - 1], p_shuf).cpu() / n_perm
    return out[0] if single else out


def _generate(model: torch.nn.Module, prompt: object, steps: int, temperature: float,
              generator: torch.Generator | None) -> torch.Tensor:
    """Validate a (T0,) or (B, T0) prompt and continue it with :func:`covbook.transformer.generate`."""
    from covbook.transformer.generation import generate

    x, single = _tokens_torch(prompt, _vocab_size(model), "prompt")
    seq = generate(model, x, steps, temperature=temperature, generator=generator)
    return seq[0] if single else seq


def greedy_decode(model: torch.nn.Module, prompt: object, steps: int) -> torch.Tensor:
    """Greedy continuation x_{t+1} = argmax p(· | x_{1:t}) (ties: smallest id).

    Calls :func:`covbook.transformer.generate` (temperature 0): a
    :class:`covbook.transformer.CausalTransformer` decodes with its KV cache, any
    other model reruns its forward pass.

    Parameters
    ----------
    prompt : long, shape (T0,) or (B, T0)
    steps : int, tokens to append

    Returns
    -------
    long tensor, shape (T0 + steps,) or (B, T0 + steps): prompt then continuation.
    """
    return _generate(model, prompt, steps, 0.0, None)


def sample(
    model: torch.nn.Module,
    prompt: object,
    steps: int,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    r"""Ancestral sampling at temperature τ: x_{t+1} ~ softmax(logits_t / τ).

    Parameters
    ----------
    prompt : long, shape (T0,) or (B, T0)
    steps : int
    temperature : float, τ > 0
    generator : torch.Generator on the model's device, optional

    Returns
    -------
    long tensor, shape (T0 + steps,) or (B, T0 + steps).
    """
    return _generate(model, prompt, steps, _temperature(temperature), generator)
