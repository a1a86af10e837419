"""Tests of covbook.markov.reduction: the mean-field kernel, the Markov gap, the shuffle test and the fixed-point
residual, on a tiny stand-in transformer (one layer: exact) and on covbook.transformer.CausalTransformer."""

from __future__ import annotations

import pytest
import torch

from covbook import markov as mk

# _one_layer, _two_layer, _one_thread: the fixtures one_layer, two_layer and (autouse) one_thread
from markov_models import TinyNoPE, V, _one_layer, _one_thread, _two_layer, iid_tokens, tiny_mean_field  # noqa: F401


def test_markov_kernel_is_row_stochastic_and_tempered(one_layer):
    pi = torch.full((V,), 1 / V, dtype=torch.float64)
    k1 = mk.markov_kernel(one_layer, pi, mean_field=tiny_mean_field)
    assert k1.shape == (V, V)
    assert torch.allclose(k1.sum(-1), torch.ones(V, dtype=torch.float64))
    k_half = mk.markov_kernel(one_layer, pi, 0.5, mean_field=tiny_mean_field)
    # softmax(z/τ) ∝ K^(1/τ) row by row
    sq = k1**2
    assert torch.allclose(k_half, sq / sq.sum(-1, keepdim=True), atol=1e-12)
    assert torch.equal(mk.greedy_map(one_layer, pi, mean_field=tiny_mean_field), torch.argmax(k1, -1))


def test_one_layer_markov_gap_and_shuffle_are_exactly_zero(one_layer):
    x = iid_tokens(3, 40, seed=5)
    gap = mk.markov_gap(one_layer, x, positions=[1, 5, 20, 40], mean_field=tiny_mean_field)
    assert gap.shape == (3, 4)
    assert float(gap.max()) < 1e-12
    g = torch.Generator().manual_seed(0)
    shuf = mk.shuffle_test(one_layer, x, positions=[2, 10, 40], n_perm=2, generator=g)
    assert float(shuf.max()) < 1e-12


def test_two_layer_gap_is_positive_and_shrinks(two_layer):
    x = iid_tokens(16, 300, seed=7)
    gap = mk.markov_gap(two_layer, x, positions=[10, 300], mean_field=tiny_mean_field)  # (B, 2)
    assert float(gap[:, 0].min()) > 1e-6
    assert float(gap[:, 1].mean()) < 0.6 * float(gap[:, 0].mean())  # ~ t^{-1/2}: ratio ~0.16 expected
    g = torch.Generator().manual_seed(1)
    shuf = mk.shuffle_test(two_layer, x, positions=[10, 300], generator=g)
    assert float(shuf[:, 0].mean()) > 1e-3
    assert float(shuf[:, 1].mean()) < 0.6 * float(shuf[:, 0].mean())


def test_gap_and_shuffle_take_the_laws_a_caller_already_has(two_layer):
    x = iid_tokens(3, 60, seed=4)
    probs = mk.next_token_probs(two_layer, x)  # (3, 60, V): one pass for both
    pos = [10, 30, 60]
    assert torch.equal(mk.markov_gap(two_layer, x, pos, mean_field=tiny_mean_field, probs=probs),
                       mk.markov_gap(two_layer, x, pos, mean_field=tiny_mean_field))
    shuf = [mk.shuffle_test(two_layer, x, pos, generator=torch.Generator().manual_seed(2), probs=p)
            for p in (probs, None)]
    assert torch.equal(*shuf)
    one = mk.markov_gap(two_layer, x[0], pos, mean_field=tiny_mean_field, probs=probs[0])  # (T,) tokens, (T, V) laws
    assert torch.equal(one, mk.markov_gap(two_layer, x, pos, mean_field=tiny_mean_field)[0])
    with pytest.raises(ValueError, match="probs"):
        mk.markov_gap(two_layer, x, pos, mean_field=tiny_mean_field, probs=probs[:, :-1])
    with pytest.raises(ValueError, match="probs"):
        mk.shuffle_test(two_layer, x, pos, probs=probs[0])


def test_shuffle_test_sees_positional_encoding():
    model = TinyNoPE(V, 8, 1, seed=3, positions=64)
    x = iid_tokens(4, 30, seed=2)
    shuf = mk.shuffle_test(model, x, positions=[30], generator=torch.Generator().manual_seed(0))
    assert float(shuf.min()) > 1e-6


def test_model_errors(one_layer):
    pi = torch.full((V,), 1 / V, dtype=torch.float64)
    with pytest.raises(ValueError, match="temperature"):
        mk.markov_kernel(one_layer, pi, 0.0, mean_field=tiny_mean_field)
    with pytest.raises(ValueError, match="shape"):
        mk.markov_kernel(one_layer, torch.full((V + 1,), 1 / (V + 1)), mean_field=tiny_mean_field)
    with pytest.raises(ValueError, match="0..4"):
        mk.next_token_probs(one_layer, torch.tensor([0, 5]))
    with pytest.raises(ValueError, match="positions"):
        mk.markov_gap(one_layer, torch.tensor([0, 1, 2]), positions=[0, 2], mean_field=tiny_mean_field)
    with pytest.raises(ValueError, match="positions"):
        mk.shuffle_test(one_layer, torch.tensor([0, 1, 2]), positions=[3, 2])


@pytest.mark.parametrize("mlp,layer_norm", [(False, False), (True, True)])
def test_one_layer_causal_transformer_gap_is_exactly_zero(mlp, layer_norm):
    from covbook.transformer import CausalTransformer

    m = CausalTransformer(vocab_size=V, d_model=8, n_layers=1, mlp=mlp, layer_norm=layer_norm,
                          logit_scale=2.0, seed=0)
    x = iid_tokens(2, 30, seed=3)
    gap = mk.markov_gap(m, x, positions=[1, 7, 30], temperature=0.5)
    assert float(gap.max()) < 1e-12
    shuf = mk.shuffle_test(m, x, positions=[2, 30], generator=torch.Generator().manual_seed(0))
    assert float(shuf.max()) < 1e-12


def test_causal_transformer_gap_shrinks_and_positions_break_the_shuffle_test():
    from covbook.transformer import CausalTransformer

    m = CausalTransformer(vocab_size=V, d_model=8, n_layers=2, logit_scale=2.0, seed=1)
    x = iid_tokens(12, 300, seed=4)
    gap = mk.markov_gap(m, x, positions=[10, 300])
    assert float(gap[:, 0].mean()) > 1e-3
    assert float(gap[:, 1].mean()) < 0.6 * float(gap[:, 0].mean())
    rot = CausalTransformer(vocab_size=V, d_model=8, n_layers=1, pos="rotary", logit_scale=2.0, seed=1)
    shuf = mk.shuffle_test(rot, x[:4], positions=[30], generator=torch.Generator().manual_seed(0))
    assert float(shuf.min()) > 1e-6
    with pytest.raises(ValueError, match="positional"):
        mk.markov_kernel(rot, torch.full((V,), 1 / V, dtype=torch.float64))


def test_fixed_point_residual_is_zero_at_a_stationary_frequency(one_layer):
    v = one_layer.vocab_size
    # a sequence whose frequencies are the stationary law of its own kernel gives residual ~ 0
    x = torch.arange(v).repeat(8)  # uniform frequencies at every multiple of v
    res = mk.fixed_point_residual(one_layer, x, [v * 8], mean_field=tiny_mean_field)
    pi = torch.full((v,), 1.0 / v, dtype=torch.float64)
    k = mk.markov_kernel(one_layer, pi, mean_field=tiny_mean_field)
    assert float(res[0]) == pytest.approx(float(mk.tv_distance(pi @ k, pi)))
    with pytest.raises(ValueError, match="start"):
        mk.fixed_point_residual(one_layer, x, [4], start=10, mean_field=tiny_mean_field)


def test_cached_mean_field_gives_identical_results_and_computes_each_law_once():
    from covbook.markov._checks import _default_mean_field
    from covbook.transformer import CausalTransformer

    model = CausalTransformer(vocab_size=4, d_model=8, n_layers=2, seed=1)
    x = torch.randint(0, 4, (2, 40), generator=torch.Generator().manual_seed(0))
    pos = [5, 10, 20, 40]
    calls = []

    def counting(m, freqs):
        calls.append(freqs.clone())
        return _default_mean_field(m, freqs)

    mf = mk.cached_mean_field(counting)
    gap = mk.markov_gap(model, x, pos, mean_field=mf)
    fp = mk.fixed_point_residual(model, x, pos, start=3, mean_field=mf)
    # one batched call for the gap's 2 x 4 laws; the fixed-point residual reuses every one of them
    assert len(calls) == 1 and calls[0].shape == (2 * len(pos), 4)
    assert torch.equal(gap, mk.markov_gap(model, x, pos))
    assert torch.equal(fp, mk.fixed_point_residual(model, x, pos, start=3))
