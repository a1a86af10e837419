r"""A small causal transformer, its mean-field map, generation and a character-level language model.

This package serves the depth and repetition results of Xu & Fang (2026), Sections 5-6 (book
chapters 08-10).  One concept per module:

* :mod:`~covbook.transformer.model` -- :class:`CausalTransformer` (discrete or continuous tokens,
  optional heads, MLP, layer norm, learned or rotary positions, hidden-state taps, KV cache) and
  :func:`hidden_states_at` and :func:`states_before_last_block`.
* :mod:`~covbook.transformer.mean_field` -- the mean-field maps F_l of a NoPE transformer
  (:func:`mean_field`, :func:`mean_field_discrete`, :func:`mean_field_gaussian`,
  :func:`gaussian_tail_exponents`, :func:`mean_field_logit_variances`,
  :func:`mean_field_with_logit_variances`, :func:`tail_safe_logit_scale`)
  and their derivative in the context law
  (:func:`mean_field_jacobian`, :func:`collapse_constant`, :func:`collapse_readout_sd`).
* :mod:`~covbook.transformer.attention_sinks` -- early-position attention sinks, a pre-asymptotic
  regime of the depth collapse (:func:`early_attention_ratio`) and the largest logit scale
  without them (:func:`sink_free_logit_scale`).
* :mod:`~covbook.transformer.quadrature` -- Gaussian quadrature rules used as context laws.
* :mod:`~covbook.transformer.generation` -- :func:`generate`, the one implementation of greedy
  decoding and temperature sampling.
* :mod:`~covbook.transformer.text` -- :class:`CharTokenizer`, :func:`python_reference_text`,
  :func:`spaced_windows`.
* :mod:`~covbook.transformer.training` -- :func:`train_language_model`, :func:`evaluate_loss`,
  and the checkpoint key and reader (:func:`checkpoint_fingerprint`, :func:`load_checkpoint`).
"""

from covbook.transformer.attention_sinks import early_attention_ratio, sink_free_logit_scale
from covbook.transformer.batch import ModelBatch
from covbook.transformer.generation import generate
from covbook.transformer.mean_field import (
    collapse_constant,
    collapse_readout_sd,
    gaussian_logit_variances,
    gaussian_tail_exponents,
    mean_field,
    mean_field_discrete,
    mean_field_gaussian,
    mean_field_jacobian,
    mean_field_logit_variances,
    mean_field_with_logit_variances,
    tail_safe_logit_scale,
)
from covbook.transformer.model import POSITIONS, CausalTransformer, hidden_states_at, states_before_last_block
from covbook.transformer.quadrature import gauss_hermite_rule, gaussian_polar_rule
from covbook.transformer.text import CharTokenizer, python_reference_text, spaced_windows
from covbook.transformer.training import (
    TrainResult,
    checkpoint_fingerprint,
    evaluate_loss,
    load_checkpoint,
    train_language_model,
    training_arguments,
    window_losses,
)

__all__ = [
    "ModelBatch",
    "POSITIONS",
    "CausalTransformer",
    "hidden_states_at",
    "states_before_last_block",
    "mean_field",
    "mean_field_discrete",
    "mean_field_gaussian",
    "gaussian_logit_variances",
    "gaussian_tail_exponents",
    "mean_field_jacobian",
    "mean_field_logit_variances",
    "mean_field_with_logit_variances",
    "tail_safe_logit_scale",
    "collapse_constant",
    "collapse_readout_sd",
    "early_attention_ratio",
    "sink_free_logit_scale",
    "gauss_hermite_rule",
    "gaussian_polar_rule",
    "generate",
    "CharTokenizer",
    "python_reference_text",
    "spaced_windows",
    "TrainResult",
    "train_language_model",
    "training_arguments",
    "evaluate_loss",
    "window_losses",
    "checkpoint_fingerprint",
    "load_checkpoint",
]
