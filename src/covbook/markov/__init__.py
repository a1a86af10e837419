"""The Markov reduction of generation, greedy orbits, and repetition metrics.

Xu & Fang (2026), Section 6 (book chapters 09-10; the chain facts also serve chapter
08).  In a causal transformer without positional encoding the terminal state at
position t tends to a deterministic function F_π(x_t) of the current token, so
generation is close to a first-order Markov chain with the mean-field kernel
K_π(x, ·) = softmax(W_out F_π(x) / τ) evaluated at the context's empirical
frequencies π = π̂_t.  One concept per module:

* :mod:`~covbook.markov.frequencies`: empirical and running frequencies, TV, entropy,
  within-run / between-prompt contrasts of attractors;
* :mod:`~covbook.markov.chain`: a finite chain's stationary law, entropy rate,
  asymptotic covariance, and sampling;
* :mod:`~covbook.markov.metrics`: seq-rep-n, rep/ℓ, distinct-n, repetition summaries;
* :mod:`~covbook.markov.reduction`: the kernel K_π (at one law or a batch of laws), the
  Markov gap, the fixed-point residual, the shuffle test;
* :mod:`~covbook.markov.cycles`: cycle detection, the mean-field greedy map, cycle
  break times, greedy margins, the gap at detection, orbits, kicks and bookkeeping;
* :mod:`~covbook.markov.decoding`: greedy decoding and temperature sampling.

Every public name is re-exported here (``from covbook.markov import find_cycle``).

References
----------
H. Xu, G. Fang. Self-Attention as a Covariance Readout. arXiv:2605.10466, 2026.
"""

from __future__ import annotations

from covbook.markov._checks import MeanField as MeanField  # the mean-field callable type, for annotations
from covbook.markov.chain import asymptotic_covariance, entropy_rate, sample_markov_chain, stationary_distribution
from covbook.markov.cycles import (
    CycleRecord,
    cycle_break_time,
    cycle_margin,
    cycle_records,
    cycle_self_consistent,
    cycle_summary,
    detection_gap,
    find_cycle,
    greedy_map,
    least_rotation,
    perturbed_returns,
)
from covbook.markov.decoding import greedy_decode, sample
from covbook.markov.frequencies import (
    attractor_contrast,
    empirical_frequencies,
    entropy,
    running_frequencies,
    tv_distance,
    within_between_tv,
)
from covbook.markov.metrics import distinct_n, rep_l, repetition_metrics, seq_rep_n
from covbook.markov.reduction import (
    cached_mean_field,
    fixed_point_residual,
    kernel_rows,
    markov_gap,
    markov_kernel,
    next_token_probs,
    shuffle_test,
)

__all__ = [
    "empirical_frequencies",
    "running_frequencies",
    "tv_distance",
    "entropy",
    "stationary_distribution",
    "entropy_rate",
    "find_cycle",
    "least_rotation",
    "perturbed_returns",
    "seq_rep_n",
    "rep_l",
    "distinct_n",
    "within_between_tv",
    "attractor_contrast",
    "repetition_metrics",
    "asymptotic_covariance",
    "sample_markov_chain",
    "markov_kernel",
    "kernel_rows",
    "cached_mean_field",
    "greedy_map",
    "cycle_self_consistent",
    "cycle_break_time",
    "cycle_margin",
    "detection_gap",
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
