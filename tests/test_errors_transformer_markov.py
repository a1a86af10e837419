"""Bad input to every public function of covbook.transformer and covbook.markov.

Each row of the table is one bad call and the name of the argument its error message must
mention.  A call passes when it raises ``ValueError`` or ``TypeError`` whose message names
that argument; returning NaN/inf, raising anything else, or accepting the input fails.
``test_bad_input_table_counts`` prints the counts (calls tried, clear errors, NaN/inf,
internal errors, accepted).  A hypothesis test fuzzes the main entry points.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from covbook import markov as mk
from covbook import transformer as tr

NAN = float("nan")
INF = float("inf")


def _lm(**kw: object) -> tr.CausalTransformer:
    return tr.CausalTransformer(vocab_size=5, d_model=8, n_layers=kw.pop("n_layers", 1), seed=0, **kw)


def _cont() -> tr.CausalTransformer:
    return tr.CausalTransformer(d_in=2, d_model=4, n_layers=1, seed=0)


def _toks(n: int = 200) -> torch.Tensor:
    return torch.randint(0, 5, (n,), generator=torch.Generator().manual_seed(0))


def _garbage(tmp: str = "/tmp") -> str:
    import tempfile

    fd, path = tempfile.mkstemp(suffix=".pt", dir=tmp)
    with open(fd, "wb") as f:
        f.write(b"\x80\x04garbage, not a checkpoint")
    return path


U3 = [1 / 3, 1 / 3, 1 / 3]
K2 = [[0.5, 0.5], [0.2, 0.8]]
TRAIN = dict(steps=2, batch_size=2, seq_len=4, lr=1e-3, seed=0)

# (label, call, the argument its message must name)
BAD: list[tuple[str, Callable[[], object], str]] = [
    # ---- CausalTransformer
    ("model both kinds", lambda: tr.CausalTransformer(vocab_size=3, d_in=2, d_model=4, n_layers=1), "vocab_size"),
    ("model neither kind", lambda: tr.CausalTransformer(d_model=4, n_layers=1), "vocab_size"),
    ("model d_model 0", lambda: tr.CausalTransformer(vocab_size=3, d_model=0, n_layers=1), "d_model"),
    ("model d_model float", lambda: tr.CausalTransformer(vocab_size=3, d_model=4.0, n_layers=1), "d_model"),
    ("model n_layers -1", lambda: tr.CausalTransformer(vocab_size=3, d_model=4, n_layers=-1), "n_layers"),
    ("model n_heads not dividing", lambda: tr.CausalTransformer(vocab_size=3, d_model=4, n_layers=1, n_heads=3),
     "n_heads"),
    ("model pos bad", lambda: tr.CausalTransformer(vocab_size=3, d_model=4, n_layers=1, pos="abs"), "pos"),
    ("model rotary odd head", lambda: tr.CausalTransformer(vocab_size=3, d_model=6, n_layers=1, n_heads=2,
                                                           pos="rotary"), "rotary"),
    ("model logit_scale nan", lambda: tr.CausalTransformer(vocab_size=3, d_model=4, n_layers=1,
                                                           logit_scale=NAN), "logit_scale"),
    ("model logit_scale str", lambda: tr.CausalTransformer(vocab_size=3, d_model=4, n_layers=1,
                                                           logit_scale="1"), "logit_scale"),
    ("model dtype int", lambda: tr.CausalTransformer(vocab_size=3, d_model=4, n_layers=1, dtype=torch.int64),
     "dtype"),
    ("model seed negative", lambda: tr.CausalTransformer(vocab_size=3, d_model=4, n_layers=1, seed=-1), "seed"),
    ("model seed str", lambda: tr.CausalTransformer(vocab_size=3, d_model=4, n_layers=1, seed="a"), "seed"),
    ("model seed float", lambda: tr.CausalTransformer(vocab_size=3, d_model=4, n_layers=1, seed=1.5), "seed"),
    ("model d_model huge", lambda: tr.CausalTransformer(vocab_size=3, d_model=10**7, n_layers=4), "d_model"),
    ("model vocab 0", lambda: tr.CausalTransformer(vocab_size=0, d_model=4, n_layers=1), "vocab_size"),
    ("model d_in None-ish", lambda: tr.CausalTransformer(d_in=0, d_model=4, n_layers=1), "d_in"),
    ("model max_len 0", lambda: tr.CausalTransformer(vocab_size=3, d_model=4, n_layers=1, max_len=0), "max_len"),
    ("model attn_chunk 0", lambda: tr.CausalTransformer(vocab_size=3, d_model=4, n_layers=1, attn_chunk=0),
     "attn_chunk"),
    ("forward list", lambda: _lm()([[0, 1]]), "x"),
    ("forward float ids", lambda: _lm()(torch.zeros(1, 3)), "x"),
    ("forward id too large", lambda: _lm()(torch.tensor([[0, 9]])), "token ids"),
    ("forward negative id", lambda: _lm()(torch.tensor([[0, -1]])), "token ids"),
    ("forward empty", lambda: _lm()(torch.zeros(1, 0, dtype=torch.long)), "x"),
    ("forward last_only with hidden", lambda: _lm()(torch.zeros(1, 3, dtype=torch.long), last_only=True,
                                                     return_hidden=True), "last_only"),
    ("forward nan continuous", lambda: _cont()(torch.full((1, 3, 2), NAN)), "x"),
    ("forward wrong d_in", lambda: _cont()(torch.zeros(1, 3, 5)), "x"),
    ("learned too long", lambda: _lm(pos="learned", max_len=4)(torch.zeros(1, 6, dtype=torch.long)), "max_len"),
    ("head_matrices layer 5", lambda: _lm().head_matrices(5), "layer"),
    ("head_matrices layer str", lambda: _lm().head_matrices("0"), "layer"),
    ("logits_from_hidden continuous", lambda: _cont().logits_from_hidden(torch.zeros(2, 4)), "vocab_size"),
    ("logits_from_hidden wrong width", lambda: _lm().logits_from_hidden(torch.zeros(2, 3)), "h"),
    # ---- states_before_last_block
    ("states model", lambda: tr.states_before_last_block(None, torch.zeros(1, 4, dtype=torch.long)), "model"),
    ("states x list", lambda: tr.states_before_last_block(_lm(), [[0, 1]]), "x"),
    ("states x float ids", lambda: tr.states_before_last_block(_lm(), torch.zeros(1, 4)), "x"),
    ("states x id", lambda: tr.states_before_last_block(_lm(), torch.full((1, 4), 9)), "token ids"),
    ("states x width", lambda: tr.states_before_last_block(_cont(), torch.zeros(1, 4, 3)), "x"),
    # ---- hidden_states_at
    ("hidden positions 0", lambda: tr.hidden_states_at(_lm(), torch.zeros(1, 4, dtype=torch.long), [0]),
     "positions"),
    ("hidden positions past T", lambda: tr.hidden_states_at(_lm(), torch.zeros(1, 4, dtype=torch.long), [9]),
     "positions"),
    ("hidden positions empty", lambda: tr.hidden_states_at(_lm(), torch.zeros(1, 4, dtype=torch.long), []),
     "positions"),
    ("hidden positions str", lambda: tr.hidden_states_at(_lm(), torch.zeros(1, 4, dtype=torch.long), ["a"]),
     "positions"),
    ("hidden x list", lambda: tr.hidden_states_at(_lm(), [[0, 1]], [1]), "x"),
    ("hidden batch 0", lambda: tr.hidden_states_at(_lm(), torch.zeros(1, 4, dtype=torch.long), [1], batch=0),
     "batch"),
    # ---- mean field
    ("mean_field not a model", lambda: tr.mean_field(None, [0], [1.0], [0]), "model"),
    ("mean_field positions", lambda: tr.mean_field(_lm(pos="learned"), [0], [1.0], [0]), "positional"),
    ("mean_field weights nan", lambda: tr.mean_field(_lm(), [0, 1], [NAN, 1.0], [0]), "weights"),
    ("mean_field weights negative", lambda: tr.mean_field(_lm(), [0, 1], [-1.0, 2.0], [0]), "weights"),
    ("mean_field weights zero", lambda: tr.mean_field(_lm(), [0, 1], [0.0, 0.0], [0]), "weights"),
    ("mean_field weights shape", lambda: tr.mean_field(_lm(), [0, 1], [1.0], [0]), "weights"),
    ("mean_field weights None", lambda: tr.mean_field(_lm(), [0, 1], None, [0]), "weights"),
    ("mean_field support float", lambda: tr.mean_field(_lm(), [0.5], [1.0], [0]), "support"),
    ("mean_field support str", lambda: tr.mean_field(_lm(), "ab", [1.0], [0]), "support"),
    ("mean_field continuous 1-d", lambda: tr.mean_field(_cont(), [0.0, 1.0], [1.0], [[0.0, 0.0]]), "support"),
    ("mean_field queries None", lambda: tr.mean_field(_lm(), [0], [1.0], None), "queries"),
    ("mean_field_discrete continuous", lambda: tr.mean_field_discrete(_cont(), [1.0]), "vocab_size"),
    ("mean_field_discrete freqs shape", lambda: tr.mean_field_discrete(_lm(), [1.0, 0.0]), "freqs"),
    ("mean_field_gaussian discrete", lambda: tr.mean_field_gaussian(_lm(), torch.eye(2)), "d_in"),
    ("mean_field_gaussian cov asym", lambda: tr.mean_field_gaussian(_cont(), [[1.0, 0.5], [0.0, 1.0]]), "cov"),
    ("mean_field_gaussian cov nan", lambda: tr.mean_field_gaussian(_cont(), [[NAN, 0.0], [0.0, 1.0]]), "cov"),
    ("gaussian_logit_variances queries shape", lambda: tr.gaussian_logit_variances(_cont(), torch.eye(2), [[1.0]]),
     "queries"),
    ("gaussian_logit_variances cov asym",
     lambda: tr.gaussian_logit_variances(_cont(), [[1.0, 0.5], [0.0, 1.0]], [[1.0, 0.0]]), "cov"),
    ("mean_field_gaussian cov size", lambda: tr.mean_field_gaussian(_cont(), torch.eye(3)), "cov"),
    ("mean_field_gaussian cov None", lambda: tr.mean_field_gaussian(_cont(), None), "cov"),
    ("tail_exponents cov indefinite", lambda: tr.gaussian_tail_exponents(_cont(), [[1.0, 2.0], [2.0, 1.0]]), "cov"),
    ("logit_variances positions", lambda: tr.mean_field_logit_variances(_lm(pos="learned"), [0], [1.0], [0]),
     "positional"),
    ("logit_variances weights", lambda: tr.mean_field_logit_variances(_lm(), [0, 1], [-1.0, 2.0], [0]), "weights"),
    ("with_logit_variances weights",
     lambda: tr.mean_field_with_logit_variances(_lm(), [0, 1], [-1.0, 2.0], [0]), "weights"),
    ("tail_safe_scale empty", lambda: tr.tail_safe_logit_scale(torch.eye(2), [], d_in=2, d_model=4, n_layers=1),
     "scales"),
    ("tail_safe_scale negative", lambda: tr.tail_safe_logit_scale(torch.eye(2), [-1.0], d_in=2, d_model=4,
                                                                   n_layers=1), "scales"),
    ("tail_safe_scale kappa", lambda: tr.tail_safe_logit_scale(torch.eye(2), [0.1], kappa_min=0.0, d_in=2,
                                                                d_model=4, n_layers=1), "kappa_min"),
    ("tail_safe_scale cov", lambda: tr.tail_safe_logit_scale([[1.0, 2.0], [2.0, 1.0]], [0.1], d_in=2, d_model=4,
                                                              n_layers=1), "cov"),
    ("sinks model", lambda: tr.early_attention_ratio(None, torch.zeros(1, 16, dtype=torch.long)), "model"),
    ("sinks k 0", lambda: tr.early_attention_ratio(_lm(), torch.zeros(1, 16, dtype=torch.long), k=0), "k"),
    ("sinks short contexts", lambda: tr.early_attention_ratio(_lm(), torch.zeros(1, 8, dtype=torch.long), k=8),
     "contexts"),
    ("sinks contexts list", lambda: tr.early_attention_ratio(_lm(), [[0, 1]]), "contexts"),
    ("sinks contexts empty", lambda: tr.early_attention_ratio(_lm(), torch.zeros(0, 16, dtype=torch.long)),
     "contexts"),
    ("sinks contexts float", lambda: tr.early_attention_ratio(_lm(), torch.zeros(1, 16)), "contexts"),
    ("sinks contexts id", lambda: tr.early_attention_ratio(_lm(), torch.full((1, 16), 9)), "contexts"),
    ("sinks hidden shape", lambda: tr.early_attention_ratio(_lm(), torch.zeros(1, 16, dtype=torch.long),
                                                            hidden=[torch.zeros(1, 15, 8)]), "hidden"),
    ("sinks hidden too few", lambda: tr.early_attention_ratio(_lm(n_layers=2), torch.zeros(1, 16, dtype=torch.long),
                                                              hidden=[torch.zeros(1, 16, 8)]), "hidden"),
    ("sink_free logit_scale", lambda: tr.sink_free_logit_scale([0.1], torch.zeros(1, 16, dtype=torch.long),
                                                               logit_scale=1.0, vocab_size=5, d_model=8,
                                                               n_layers=1), "logit_scale"),
    ("sink_free contexts list", lambda: tr.sink_free_logit_scale([0.1], [[0, 1]], vocab_size=5, d_model=8,
                                                                 n_layers=1), "contexts"),
    ("sink_free empty", lambda: tr.sink_free_logit_scale([], torch.zeros(1, 16, dtype=torch.long), vocab_size=5,
                                                         d_model=8, n_layers=1), "scales"),
    ("sink_free chi_max", lambda: tr.sink_free_logit_scale([0.1], torch.zeros(1, 16, dtype=torch.long), chi_max=0.0,
                                                           vocab_size=5, d_model=8, n_layers=1), "chi_max"),
    ("jacobian continuous", lambda: tr.mean_field_jacobian(_cont(), [1.0]), "vocab_size"),
    ("jacobian zero freq", lambda: tr.mean_field_jacobian(_lm(), [0.0, 0.25, 0.25, 0.25, 0.25]), "freqs"),
    ("collapse_constant deep", lambda: tr.collapse_constant(_lm(n_layers=2), [0.2] * 5, torch.eye(5)), "n_layers"),
    ("collapse_constant cov shape", lambda: tr.collapse_constant(_lm(), [0.2] * 5, torch.eye(3)), "covariance"),
    ("collapse_constant jacobian shape", lambda: tr.collapse_constant(_lm(), [0.2] * 5, torch.eye(5),
                                                                      jacobian=torch.zeros(5, 8, 4)), "jacobian"),
    ("collapse_readout_sd deep", lambda: tr.collapse_readout_sd(_lm(n_layers=2), [0.2] * 5, torch.eye(5), [9], [1.0]),
     "n_layers"),
    ("collapse_readout_sd positions", lambda: tr.collapse_readout_sd(_lm(), [0.2] * 5, torch.eye(5), [], []),
     "positions"),
    ("collapse_readout_sd weights nan", lambda: tr.collapse_readout_sd(_lm(), [0.2] * 5, torch.eye(5), [9], [NAN]),
     "weights"),
    # ---- quadrature
    ("hermite n 0", lambda: tr.gauss_hermite_rule(torch.eye(1), 0), "n_nodes"),
    ("hermite too many", lambda: tr.gauss_hermite_rule(torch.eye(8), 10), "n_nodes"),
    ("hermite mean shape", lambda: tr.gauss_hermite_rule(torch.eye(2), 3, mean=[0.0]), "mean"),
    ("hermite mean nan", lambda: tr.gauss_hermite_rule(torch.eye(2), 3, mean=[NAN, 0.0]), "mean"),
    ("hermite cov 1-d", lambda: tr.gauss_hermite_rule([1.0, 2.0], 3), "cov"),
    ("polar 3-d", lambda: tr.gaussian_polar_rule(torch.eye(3), 4, 4), "cov"),
    ("polar r_max 0", lambda: tr.gaussian_polar_rule(torch.eye(2), 4, 4, r_max=0), "r_max"),
    ("polar r_max nan", lambda: tr.gaussian_polar_rule(torch.eye(2), 4, 4, r_max=NAN), "r_max"),
    ("polar n_theta 0", lambda: tr.gaussian_polar_rule(torch.eye(2), 4, 0), "n_theta"),
    # ---- generation
    ("model batch rows out of range", lambda: tr.ModelBatch([_lm()], [1]), "rows"),
    ("model batch continuous", lambda: tr.ModelBatch([_cont()], [0]), "shape"),
    ("generate continuous", lambda: tr.generate(_cont(), torch.zeros(1, 2, dtype=torch.long), 2), "vocab_size"),
    ("generate not a module", lambda: tr.generate("m", torch.zeros(1, 2, dtype=torch.long), 2), "model"),
    ("generate steps 0", lambda: tr.generate(_lm(), torch.zeros(1, 2, dtype=torch.long), 0), "steps"),
    ("generate temperature -1", lambda: tr.generate(_lm(), torch.zeros(1, 2, dtype=torch.long), 2,
                                                    temperature=-1), "temperature"),
    ("generate temperature nan", lambda: tr.generate(_lm(), torch.zeros(1, 2, dtype=torch.long), 2,
                                                     temperature=NAN), "temperature"),
    ("generate temperature str", lambda: tr.generate(_lm(), torch.zeros(1, 2, dtype=torch.long), 2,
                                                     temperature="1"), "temperature"),
    ("generate prompt 1-d", lambda: tr.generate(_lm(), torch.zeros(2, dtype=torch.long), 2), "x"),
    ("generate prompt id", lambda: tr.generate(_lm(), torch.tensor([[7]]), 2), "token ids"),
    ("generate generator", lambda: tr.generate(_lm(), torch.zeros(1, 2, dtype=torch.long), 2, generator=3),
     "generator"),
    # ---- text
    ("tokenizer empty", lambda: tr.CharTokenizer(""), "CharTokenizer"),
    ("tokenizer not str", lambda: tr.CharTokenizer(["a"]), "CharTokenizer"),
    ("encode unknown char", lambda: tr.CharTokenizer("ab").encode("abc"), "character"),
    ("encode not str", lambda: tr.CharTokenizer("ab").encode(3), "text"),
    ("decode out of range", lambda: tr.CharTokenizer("ab").decode([0, 5]), "ids"),
    ("decode floats", lambda: tr.CharTokenizer("ab").decode([0.5]), "ids"),
    ("reference max_chars 0", lambda: tr.python_reference_text(0), "max_chars"),
    ("reference max_chars str", lambda: tr.python_reference_text("10"), "max_chars"),
    ("windows n_tokens 0", lambda: tr.spaced_windows(0, 2, 1), "n_tokens"),
    ("windows n_windows float", lambda: tr.spaced_windows(100, 2.5, 10), "n_windows"),
    ("windows n_windows 0", lambda: tr.spaced_windows(100, 0, 10), "n_windows"),
    ("windows length negative", lambda: tr.spaced_windows(100, 2, -1), "length"),
    ("windows length beyond the text", lambda: tr.spaced_windows(10, 2, 11), "length"),
    ("windows generator not a Generator", lambda: tr.spaced_windows(100, 2, 10, generator=0), "generator"),
    # ---- training
    ("train not a model", lambda: tr.train_language_model(None, _toks(), **TRAIN), "model"),
    ("train continuous", lambda: tr.train_language_model(_cont(), _toks(), **TRAIN), "vocab_size"),
    ("train tokens float", lambda: tr.train_language_model(_lm(), torch.zeros(100), **TRAIN), "tokens"),
    ("train tokens 2-d", lambda: tr.train_language_model(_lm(), torch.zeros(2, 100, dtype=torch.long), **TRAIN),
     "tokens"),
    ("train tokens out of range", lambda: tr.train_language_model(_lm(), _toks() + 10, **TRAIN), "tokens"),
    ("train too few tokens", lambda: tr.train_language_model(_lm(), _toks(8), **TRAIN), "tokens"),
    ("train lr 0", lambda: tr.train_language_model(_lm(), _toks(), **{**TRAIN, "lr": 0}), "lr"),
    ("train lr nan", lambda: tr.train_language_model(_lm(), _toks(), **{**TRAIN, "lr": NAN}), "lr"),
    ("train lr str", lambda: tr.train_language_model(_lm(), _toks(), **{**TRAIN, "lr": "1e-3"}), "lr"),
    ("train steps 0", lambda: tr.train_language_model(_lm(), _toks(), **{**TRAIN, "steps": 0}), "steps"),
    ("train seed negative", lambda: tr.train_language_model(_lm(), _toks(), **{**TRAIN, "seed": -3}), "seed"),
    ("train seed str", lambda: tr.train_language_model(_lm(), _toks(), **{**TRAIN, "seed": "a"}), "seed"),
    ("train val_fraction 1", lambda: tr.train_language_model(_lm(), _toks(), **TRAIN, val_fraction=1.0),
     "val_fraction"),
    ("train val_fraction str", lambda: tr.train_language_model(_lm(), _toks(), **TRAIN, val_fraction="a"),
     "val_fraction"),
    ("train weight_decay -1", lambda: tr.train_language_model(_lm(), _toks(), **TRAIN, weight_decay=-1),
     "weight_decay"),
    ("train grad_clip nan", lambda: tr.train_language_model(_lm(), _toks(), **TRAIN, grad_clip=NAN), "grad_clip"),
    ("train eval_windows 0", lambda: tr.train_language_model(_lm(), _toks(), **TRAIN, eval_windows=0),
     "eval_windows"),
    ("train checkpoint_every 0", lambda: tr.train_language_model(_lm(), _toks(), **TRAIN, checkpoint_every=0),
     "checkpoint_every"),
    ("train diverges", lambda: tr.train_language_model(_lm(dtype=torch.float32), _toks(400),
                                                       **{**TRAIN, "steps": 20, "lr": 1e6}, grad_clip=1e9), "lr"),
    ("train garbage checkpoint", lambda: tr.train_language_model(_lm(), _toks(), **TRAIN, checkpoint=_garbage()),
     "checkpoint"),
    ("load garbage checkpoint", lambda: tr.load_checkpoint(_garbage()), "checkpoint"),
    ("load missing checkpoint", lambda: tr.load_checkpoint("/nonexistent/x.pt"), "checkpoint"),
    ("evaluate max_windows 0", lambda: tr.evaluate_loss(_lm(), _toks(), 8, max_windows=0), "max_windows"),
    ("evaluate seq_len 0", lambda: tr.evaluate_loss(_lm(), _toks(), 0), "seq_len"),
    ("evaluate too short", lambda: tr.evaluate_loss(_lm(), _toks(5), 8), "seq_len"),
    ("evaluate batch_size 0", lambda: tr.evaluate_loss(_lm(), _toks(), 8, batch_size=0), "batch_size"),
    ("evaluate tokens float", lambda: tr.evaluate_loss(_lm(), torch.zeros(100), 8), "tokens"),
    ("window_losses model", lambda: tr.window_losses("m", _toks(), 8), "model"),
    ("fingerprint lr", lambda: tr.checkpoint_fingerprint(_lm(), _toks(), **{**TRAIN, "lr": -1}), "lr"),
    ("training_arguments seed", lambda: tr.training_arguments(**{**TRAIN, "seed": 2**70}), "seed"),
    # ---- markov: model-free
    ("frequencies vocab 0", lambda: mk.empirical_frequencies([0, 1], 0), "vocab_size"),
    ("frequencies id too large", lambda: mk.empirical_frequencies([0, 3], 2), "tokens"),
    ("frequencies negative", lambda: mk.empirical_frequencies([0, -1], 2), "tokens"),
    ("frequencies floats", lambda: mk.empirical_frequencies([0.5, 1], 2), "tokens"),
    ("frequencies id beyond int64", lambda: mk.empirical_frequencies([0.0, 1e300], 2), "below 2**62"),
    ("frequencies empty", lambda: mk.empirical_frequencies([], 2), "tokens"),
    ("frequencies huge vocab", lambda: mk.empirical_frequencies(np.zeros((1000, 2), dtype=int), 10**9), "GiB"),
    ("running huge vocab", lambda: mk.running_frequencies([0, 1, 2], 10**9), "GiB"),
    ("running empty", lambda: mk.running_frequencies([], 2), "tokens"),
    ("tv not normalised", lambda: mk.tv_distance([0.5, 0.6], [0.5, 0.5]), "p"),
    ("tv nan", lambda: mk.tv_distance([NAN, 1.0], [0.5, 0.5]), "p"),
    ("tv mismatched", lambda: mk.tv_distance([1.0], [0.5, 0.5]), "outcomes"),
    ("entropy negative", lambda: mk.entropy([1.5, -0.5]), "p"),
    ("entropy scalar", lambda: mk.entropy(1.0), "p"),
    ("stationary not square", lambda: mk.stationary_distribution([[0.5, 0.5]]), "kernel"),
    ("stationary reducible", lambda: mk.stationary_distribution([[1.0, 0.0], [0.0, 1.0]]), "kernel"),
    ("stationary inf", lambda: mk.stationary_distribution([[INF, 0.0], [0.0, 1.0]]), "kernel"),
    ("entropy_rate stationary shape", lambda: mk.entropy_rate(K2, stationary=U3), "stationary"),
    ("find_cycle min_repeats 1", lambda: mk.find_cycle([0, 1, 0, 1], min_repeats=1), "min_repeats"),
    ("find_cycle 2-d", lambda: mk.find_cycle([[0, 1]]), "tokens"),
    ("find_cycle min_length 0", lambda: mk.find_cycle([0, 1], min_length=0), "min_length"),
    ("seq_rep n 0", lambda: mk.seq_rep_n([0, 1], 0), "n"),
    ("seq_rep too short", lambda: mk.seq_rep_n([0, 1], 4), "n"),
    ("rep_l l 0", lambda: mk.rep_l([0, 1], [0, 1], 0), "l"),
    ("rep_l shape", lambda: mk.rep_l([0, 1, 2], [0, 1], 1), "predictions"),
    ("rep_l scores nan", lambda: mk.rep_l([[NAN, 1.0]], [0], 1), "scores"),
    ("distinct too short", lambda: mk.distinct_n([[0], [1]], 2), "n"),
    ("within_between one run", lambda: mk.within_between_tv([[0, 1, 0]], 2), "runs"),
    ("attractor two runs", lambda: mk.attractor_contrast([[0, 1], [1, 0]], 2), "runs"),
    ("repetition 1-d", lambda: mk.repetition_metrics([0, 1, 0, 1], 2), "runs"),
    ("asymptotic not stochastic", lambda: mk.asymptotic_covariance([[0.5, 0.6], [0.5, 0.5]]), "kernel"),
    ("asymptotic reducible", lambda: mk.asymptotic_covariance([[1.0, 0.0], [0.0, 1.0]]), "kernel"),
    ("asymptotic wrong stationary", lambda: mk.asymptotic_covariance(K2, stationary=[0.5, 0.5]), "stationary"),
    ("sample_chain n 0", lambda: mk.sample_markov_chain(K2, 0, 3), "n_chains"),
    ("sample_chain huge", lambda: mk.sample_markov_chain(K2, 10**6, 10**6), "GiB"),
    ("sample_chain initial", lambda: mk.sample_markov_chain(K2, 1, 3, initial=U3), "initial"),
    ("sample_chain generator", lambda: mk.sample_markov_chain(K2, 1, 3, generator="g"), "generator"),
    ("cycle_summary empty", lambda: mk.cycle_summary([]), "records"),
    ("least_rotation empty", lambda: mk.least_rotation([]), "cycle"),
    ("perturbed_returns empty", lambda: mk.perturbed_returns(_lm(), [], context_len=4, kick_len=1, n_steps=8,
                                                             n_kicks=1, generator=torch.Generator()), "cycle"),
    ("perturbed_returns id", lambda: mk.perturbed_returns(_lm(), [0, 9], context_len=4, kick_len=1, n_steps=8,
                                                          n_kicks=1, generator=torch.Generator()), "cycle"),
    ("perturbed_returns context", lambda: mk.perturbed_returns(_lm(), [0, 1, 2], context_len=2, kick_len=1,
                                                               n_steps=8, n_kicks=1, generator=torch.Generator()),
     "context_len"),
    ("perturbed_returns n_steps", lambda: mk.perturbed_returns(_lm(), [0, 1], context_len=4, kick_len=1, n_steps=3,
                                                               n_kicks=1, generator=torch.Generator()), "n_steps"),
    ("cycle_records prompt_len", lambda: mk.cycle_records(None, [[0, 1, 0, 1, 0, 1]], -1,
                                                          self_consistency=False), "prompt_len"),
    ("cycle_records short", lambda: mk.cycle_records(None, [[0, 1, 0]], 1, self_consistency=False), "runs"),
    # ---- markov: model-dependent
    ("kernel no vocab", lambda: mk.markov_kernel(torch.nn.Linear(2, 2), [1.0]), "vocab_size"),
    ("kernel freqs shape", lambda: mk.markov_kernel(_lm(), U3), "freqs"),
    ("kernel temperature 0", lambda: mk.markov_kernel(_lm(), [0.2] * 5, 0.0), "temperature"),
    ("kernel temperature inf", lambda: mk.markov_kernel(_lm(), [0.2] * 5, INF), "temperature"),
    ("kernel batch dims", lambda: mk.markov_kernel(_lm(), [[[0.2] * 5]]), "freqs"),
    ("kernel_rows current", lambda: mk.kernel_rows(_lm(), [[0.2] * 5], [[0]]), "current"),
    ("kernel_rows one law each", lambda: mk.kernel_rows(_lm(), [[0.2] * 5] * 2, [0]), "freqs"),
    ("kernel_rows current id", lambda: mk.kernel_rows(_lm(), [[0.2] * 5], [7]), "current"),
    ("greedy_map freqs nan", lambda: mk.greedy_map(_lm(), [NAN] * 5), "freqs"),
    ("self_consistent empty", lambda: mk.cycle_self_consistent(_lm(), []), "cycle"),
    ("break_time t_min > t_max", lambda: mk.cycle_break_time(_lm(), [0], [1, 2], 10, t_min=20), "t_min"),
    ("break_time cycle id", lambda: mk.cycle_break_time(_lm(), [0], [1, 9], 10), "cycle"),
    ("break_time t_max 0", lambda: mk.cycle_break_time(_lm(), [0], [1, 2], 0), "t_max"),
    ("break_time n_grid 0", lambda: mk.cycle_break_time(_lm(), [0], [1, 2], 10, n_grid=0), "n_grid"),
    ("margin t_min >= t_max", lambda: mk.cycle_margin(_lm(), [0], [1, 2], 10, t_min=10), "t_min"),
    ("margin cycle id", lambda: mk.cycle_margin(_lm(), [0], [1, 9], 10), "cycle"),
    ("margin empty cycle", lambda: mk.cycle_margin(_lm(), [0], [], 10), "cycle"),
    ("margin t_max 0", lambda: mk.cycle_margin(_lm(), [0], [1, 2], 0), "t_max"),
    ("detection_gap period", lambda: mk.detection_gap(_lm(), [0, 1], 3), "period"),
    ("detection_gap empty", lambda: mk.detection_gap(_lm(), [], 1), "tokens"),
    ("summary record without margin", lambda: mk.cycle_summary([mk.CycleRecord(final=None, early=(0, 1))]),
     "records"),
    ("next_token tokens id", lambda: mk.next_token_probs(_lm(), [0, 9]), "tokens"),
    ("next_token empty", lambda: mk.next_token_probs(_lm(), torch.zeros(1, 0, dtype=torch.long)), "tokens"),
    ("next_token float tensor", lambda: mk.next_token_probs(_lm(), torch.zeros(1, 3)), "tokens"),
    ("gap positions 0", lambda: mk.markov_gap(_lm(), [0, 1, 2], [0]), "positions"),
    ("gap positions decreasing", lambda: mk.markov_gap(_lm(), [0, 1, 2], [2, 1]), "positions"),
    ("gap positions str", lambda: mk.markov_gap(_lm(), [0, 1, 2], ["a"]), "positions"),
    ("fixed_point start", lambda: mk.fixed_point_residual(_lm(), [0, 1, 2], [2], start=5), "start"),
    ("cached_mean_field not callable", lambda: mk.cached_mean_field(3), "mean_field"),
    ("fixed_point positions", lambda: mk.fixed_point_residual(_lm(), [0, 1, 2], [1], start=1), "positions"),
    ("shuffle n_perm 0", lambda: mk.shuffle_test(_lm(), [0, 1, 2], n_perm=0), "n_perm"),
    ("gap probs shape", lambda: mk.markov_gap(_lm(), [0, 1, 2], [2], probs=torch.zeros(2, 5)), "probs"),
    ("gap probs list", lambda: mk.markov_gap(_lm(), [0, 1, 2], [2], probs=[[0.2] * 5] * 3), "probs"),
    ("shuffle probs ids", lambda: mk.shuffle_test(_lm(), [0, 1, 2], probs=torch.zeros(3, 5, dtype=torch.long)),
     "probs"),
    ("greedy_decode steps 0", lambda: mk.greedy_decode(_lm(), [0, 1], 0), "steps"),
    ("greedy_decode prompt id", lambda: mk.greedy_decode(_lm(), [0, 9], 2), "prompt"),
    ("sample temperature 0", lambda: mk.sample(_lm(), [0, 1], 2, 0.0), "temperature"),
    ("sample temperature str", lambda: mk.sample(_lm(), [0, 1], 2, "hot"), "temperature"),
]


def _classify(call: Callable[[], object], arg: str) -> tuple[str, str]:
    """'clear', 'nan', 'internal' or 'accepted', with the message."""
    try:
        out = call()
    except (ValueError, TypeError) as err:
        msg = str(err)
        return ("clear" if re.search(re.escape(arg), msg, re.IGNORECASE) else "internal"), msg
    except Exception as err:  # noqa: BLE001 - anything else is an internal error
        return "internal", f"{type(err).__name__}: {err}"
    vals = out if isinstance(out, (tuple, list)) else [out]
    for v in vals:
        if isinstance(v, torch.Tensor) and v.is_floating_point() and not bool(torch.isfinite(v).all()):
            return "nan", "non-finite tensor"
        if isinstance(v, float) and not math.isfinite(v):
            return "nan", "non-finite float"
    return "accepted", repr(out)[:80]


@pytest.mark.parametrize("label,call,arg", BAD, ids=[b[0] for b in BAD])
def test_bad_input_gives_a_clear_error(label: str, call: Callable[[], object], arg: str) -> None:
    outcome, msg = _classify(call, arg)
    assert outcome == "clear", f"{label}: {outcome}: {msg}"


def test_bad_input_table_counts(capsys: pytest.CaptureFixture[str]) -> None:
    counts = {"clear": 0, "nan": 0, "internal": 0, "accepted": 0}
    for _, call, arg in BAD:
        counts[_classify(call, arg)[0]] += 1
    with capsys.disabled():
        print(f"\npart3 bad-input table: {len(BAD)} calls tried, {counts['clear']} clear errors, "
              f"{counts['nan']} NaN/inf, {counts['internal']} internal errors, {counts['accepted']} accepted")
    assert counts["clear"] == len(BAD)


def test_every_public_function_is_in_the_table() -> None:
    import inspect

    source = inspect.getsource(__import__(__name__))
    names = [n for n in (*tr.__all__, *mk.__all__) if n not in ("POSITIONS", "TrainResult", "CycleRecord")]
    missing = [n for n in names if f".{n}(" not in source and f"{n}(" not in source]
    assert not missing, f"public functions without a bad call: {missing}"


# ---------------------------------------------------------------------------
# fuzzing the main entry points: any input either works (finite output) or raises a clear error
# ---------------------------------------------------------------------------

_ANY = st.one_of(st.none(), st.booleans(), st.integers(-5, 10**12), st.floats(allow_nan=True),
                 st.text(max_size=3), st.lists(st.integers(-2, 6), max_size=6),
                 st.lists(st.floats(allow_nan=True, width=32), max_size=6))
# sizes: bad values, or valid ones small enough to build quickly (huge valid sizes are in the table)
_SIZE = st.one_of(st.none(), st.booleans(), st.integers(-5, 48), st.floats(allow_nan=True), st.text(max_size=3))


def _fuzz(call: Callable[[], object]) -> None:
    try:
        out = call()
    except (ValueError, TypeError):
        return
    vals = out if isinstance(out, (tuple, list)) else [out]
    for v in vals:
        if isinstance(v, torch.Tensor) and v.is_floating_point():
            assert bool(torch.isfinite(v).all())
        if isinstance(v, float):
            assert math.isfinite(v)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(a=_ANY, b=_ANY)
def test_fuzz_markov_metrics(a: object, b: object) -> None:
    for f in (lambda: mk.empirical_frequencies(a, b), lambda: mk.running_frequencies(a, b),
              lambda: mk.seq_rep_n(a, b), lambda: mk.distinct_n(a, b), lambda: mk.find_cycle(a, b),
              lambda: mk.tv_distance(a, b), lambda: mk.entropy(a), lambda: mk.rep_l(a, a, b)):
        _fuzz(f)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(d_model=_SIZE, n_layers=_SIZE, seed=_ANY, steps=_SIZE, temperature=_ANY)
def test_fuzz_model_and_generation(d_model: object, n_layers: object, seed: object, steps: object,
                                   temperature: object) -> None:
    _fuzz(lambda: tr.CausalTransformer(vocab_size=4, d_model=d_model, n_layers=1, seed=0))
    _fuzz(lambda: tr.CausalTransformer(vocab_size=4, d_model=4, n_layers=n_layers, seed=0))
    _fuzz(lambda: tr.CausalTransformer(vocab_size=4, d_model=4, n_layers=1, seed=seed))
    m = tr.CausalTransformer(vocab_size=4, d_model=4, n_layers=1, seed=0)
    _fuzz(lambda: tr.generate(m, torch.tensor([[0, 1]]), steps, temperature=0))
    _fuzz(lambda: tr.generate(m, torch.tensor([[0, 1]]), 2, temperature=temperature))
    _fuzz(lambda: mk.markov_kernel(m, [0.25] * 4, temperature))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lr=_ANY, seq_len=_SIZE, max_windows=_ANY, seed=_ANY)
def test_fuzz_training_arguments(lr: object, seq_len: object, max_windows: object, seed: object) -> None:
    m = tr.CausalTransformer(vocab_size=5, d_model=8, n_layers=1, seed=0)
    toks = _toks(120)
    _fuzz(lambda: tr.training_arguments(steps=1, batch_size=1, seq_len=4, lr=lr, seed=seed))
    _fuzz(lambda: tr.evaluate_loss(m, toks, seq_len, max_windows=max_windows))
