"""Repetition and diversity metrics of generated text: seq-rep-n, rep/ℓ, distinct-n.

Xu & Fang (2026), Section 6 (book chapters 09-10).  The standard measures of
degeneration (Holtzman et al., 2020): seq-rep-n and rep/ℓ (Welleck et al., 2020) and
distinct-n (Li et al., 2016), plus :func:`repetition_metrics`, the per-run summary
chapters 09 and 10 tabulate.

References
----------
S. Welleck et al. Neural Text Generation with Unlikelihood Training. ICLR 2020.
A. Holtzman et al. The Curious Case of Neural Text Degeneration. ICLR 2020.
J. Li et al. A Diversity-Promoting Objective Function for Neural Conversation Models.
NAACL 2016.
"""

from __future__ import annotations

import numpy as np
import torch

from covbook._validate import check_positive_int
from covbook.markov._checks import _ngrams, _tokens_np
from covbook.markov.frequencies import empirical_frequencies, entropy, within_between_tv

__all__ = [
    "seq_rep_n",
    "rep_l",
    "distinct_n",
    "repetition_metrics",
]


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
    hits = np.zeros(p2.shape, dtype=bool)  # (B, T): x̂_t equals one of x_{t-l}, ..., x_{t-1}
    for lag in range(1, min(l, t2.shape[1] - 1) + 1):
        hits[:, lag:] |= p2[:, lag:] == t2[:, :-lag]
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
