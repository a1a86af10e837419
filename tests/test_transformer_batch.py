"""covbook.transformer.ModelBatch: several small models as one batch, row by row the arithmetic of each model."""

from __future__ import annotations

import pytest
import torch

from covbook.markov import greedy_decode, sample
from covbook.transformer import CausalTransformer, ModelBatch

torch.set_num_threads(1)


def _models(n: int = 3, **kw) -> list[CausalTransformer]:
    return [CausalTransformer(vocab_size=6, d_model=8, n_layers=2, seed=s, attn_chunk=4, **kw) for s in range(n)]


def test_each_row_is_its_models_forward_pass() -> None:
    ms = _models()
    rows = [2, 0, 0, 1]
    x = torch.randint(0, 6, (4, 11), generator=torch.Generator().manual_seed(0))
    out = ModelBatch(ms, rows)(x)  # (4, 11, 6)
    for j, r in enumerate(rows):
        torch.testing.assert_close(out[j], ms[r](x[j:j + 1])[0], rtol=0, atol=1e-12)


def test_cached_decoding_is_each_models_decoding() -> None:
    ms = _models()
    rows = [0, 1, 2, 1]
    prompts = torch.randint(0, 6, (4, 5), generator=torch.Generator().manual_seed(1))
    batch = greedy_decode(ModelBatch(ms, rows), prompts, 40)  # (4, 45)
    one = torch.cat([greedy_decode(ms[r], prompts[j:j + 1], 40) for j, r in enumerate(rows)])
    assert torch.equal(batch, one)
    s = sample(ModelBatch(ms, rows), prompts, 7, 0.5, generator=torch.Generator().manual_seed(2))
    assert s.shape == (4, 12) and torch.equal(s[:, :5], prompts)


@pytest.mark.parametrize(("call", "match"), [
    (lambda: ModelBatch([], [0]), "models"),
    (lambda: ModelBatch(_models(1) + [CausalTransformer(vocab_size=5, d_model=8, n_layers=2, seed=0)], [0]), "shape"),
    (lambda: ModelBatch(_models(1, mlp=True), [0]), "MLP"),
    (lambda: ModelBatch(_models(2), [0, 2]), "rows"),
    (lambda: ModelBatch(_models(2), [0, 1])(torch.zeros(3, 4, dtype=torch.long)), "rows"),
    (lambda: ModelBatch(_models(2), [0, 1])(torch.full((2, 4), 9)), "token ids"),
])
def test_bad_input(call, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()
