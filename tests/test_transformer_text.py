"""Tests of covbook.transformer.text: the character tokenizer, the reference text and spaced windows."""

from __future__ import annotations

import pytest
import torch

from covbook.transformer import CharTokenizer, python_reference_text, spaced_windows


def test_char_tokenizer_roundtrip_and_errors():
    text = python_reference_text(max_chars=5000)
    assert len(text) == 5000 and "assert" in text
    tok = CharTokenizer(text)
    assert tok.decode(tok.encode(text)) == text
    with pytest.raises(ValueError, match="not in the tokenizer"):
        tok.encode("\u2603")
    with pytest.raises(ValueError, match="non-empty"):
        CharTokenizer("")
    with pytest.raises(ValueError, match="ids must lie"):
        tok.decode([tok.vocab_size])


def test_spaced_windows_are_disjoint_random_and_inside_the_text():
    starts = spaced_windows(1000, 6, 80, generator=torch.Generator().manual_seed(3))  # (6,)
    assert starts.shape == (6,) and int(starts[-1]) + 80 <= 1000
    assert bool((starts[1:] - starts[:-1] >= 80).all())  # disjoint: a stride of 166 >= 80
    offsets = {int(spaced_windows(1000, 6, 80, generator=torch.Generator().manual_seed(s))[0]) for s in range(20)}
    assert len(offsets) > 1 and max(offsets) <= 1000 // 6 - 80  # the random start moves
    assert spaced_windows(1000, 6, 80).tolist() == [0, 166, 332, 498, 664, 830]
    tight = spaced_windows(100, 4, 40)  # too short for disjoint windows: evenly spaced, overlapping
    assert tight.tolist() == [0, 20, 40, 60]
    assert spaced_windows(10, 1, 10).tolist() == [0]
    with pytest.raises(ValueError, match="length"):
        spaced_windows(10, 2, 11)
    with pytest.raises(ValueError, match="n_windows"):
        spaced_windows(10, 0, 5)
    with pytest.raises(TypeError, match="generator"):
        spaced_windows(10, 2, 5, generator=3)
