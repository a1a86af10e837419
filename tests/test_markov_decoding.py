"""Tests of covbook.markov.decoding: greedy decoding and seeded temperature sampling agree with the model's
next-token laws (also with the KV cache of covbook.transformer.CausalTransformer)."""

from __future__ import annotations

import pytest
import torch

from covbook import markov as mk

# _one_layer, _two_layer, _one_thread: the fixtures one_layer, two_layer and (autouse) one_thread
from markov_models import V, _one_layer, _one_thread, _two_layer  # noqa: F401


def test_greedy_decode_matches_argmax_and_sampling_is_seeded(two_layer):
    prompt = torch.tensor([[0, 3, 1], [2, 2, 4]])
    seq = mk.greedy_decode(two_layer, prompt, 6)
    assert seq.shape == (2, 9)
    assert torch.equal(seq[:, :3], prompt)
    probs = mk.next_token_probs(two_layer, seq)  # (2, 9, V)
    assert torch.equal(seq[:, 3:], torch.argmax(probs[:, 2:-1], dim=-1))
    s1 = mk.sample(two_layer, prompt[0], 10, 0.7, torch.Generator().manual_seed(4))
    s2 = mk.sample(two_layer, prompt[0], 10, 0.7, torch.Generator().manual_seed(4))
    assert s1.shape == (13,) and torch.equal(s1, s2)


def test_low_temperature_sampling_approaches_greedy(two_layer):
    prompt = torch.tensor([1, 0, 4])
    greedy = mk.greedy_decode(two_layer, prompt, 12)
    cold = mk.sample(two_layer, prompt, 12, 1e-4, torch.Generator().manual_seed(0))
    assert torch.equal(greedy, cold)


def test_decoding_errors(one_layer):
    with pytest.raises(ValueError, match="integer tensor"):
        mk.greedy_decode(one_layer, torch.tensor([0.0, 1.0]), 3)
    with pytest.raises(ValueError, match="steps"):
        mk.sample(one_layer, torch.tensor([0]), 0)


def test_kv_cached_decoding_agrees_with_the_forward_pass():
    from covbook.transformer import CausalTransformer

    m = CausalTransformer(vocab_size=V, d_model=8, n_layers=2, logit_scale=2.0, seed=2)
    prompt = torch.tensor([[0, 1, 2], [4, 4, 3]])
    seq = mk.greedy_decode(m, prompt, 10)
    probs = mk.next_token_probs(m, seq)  # (2, 13, V)
    assert torch.equal(seq[:, 3:], torch.argmax(probs[:, 2:-1], dim=-1))
    s = mk.sample(m, prompt[0], 10, 1.0, torch.Generator().manual_seed(0))
    assert s.shape == (13,) and torch.equal(s[:3], prompt[0])
