"""Streaming readout against the exact reference; the reference against closed forms."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from covbook.attention import readout_path, readout_paths, softmax_attention
from covbook.processes import GaussianIID, Replay

f64 = torch.float64


def rand(g, *shape):
    return torch.randn(*shape, generator=g, dtype=f64)


def test_softmax_attention_uniform_keys_average_values():
    v = torch.tensor([[1.0, 0.0], [3.0, 2.0], [5.0, 4.0]], dtype=f64)
    out = softmax_attention(torch.ones(2, 1, dtype=f64), torch.zeros(3, 1, dtype=f64), v)
    assert torch.allclose(out, v.mean(0).expand(2, 2))


def test_softmax_attention_is_stable_for_huge_logits():
    k = torch.tensor([[1000.0], [999.0]], dtype=f64)
    v = torch.tensor([[1.0], [0.0]], dtype=f64)
    out = softmax_attention(torch.ones(1, 1, dtype=f64), k, v)
    assert torch.isfinite(out).all()
    assert out.item() == pytest.approx(1 / (1 + np.exp(-1.0)))


def test_softmax_attention_causal_matches_prefix_attention():
    g = torch.Generator().manual_seed(1)
    q, k, v = rand(g, 5, 3), rand(g, 5, 3), rand(g, 5, 2)
    out = softmax_attention(q, k, v, causal=True)
    for i in range(5):
        assert torch.allclose(out[i], softmax_attention(q[i : i + 1], k[: i + 1], v[: i + 1])[0])


def test_softmax_attention_batches():
    g = torch.Generator().manual_seed(2)
    q, k, v = rand(g, 4, 2, 3), rand(g, 4, 6, 3), rand(g, 4, 6, 5)
    out = softmax_attention(q, k, v)
    assert out.shape == (4, 2, 5)
    assert torch.allclose(out[3], softmax_attention(q[3], k[3], v[3]))


@pytest.mark.parametrize(
    "args, match",
    [
        ((torch.ones(2, 3), torch.ones(4, 2), torch.ones(4, 1)), "d_k"),
        ((torch.ones(2, 3), torch.ones(4, 3), torch.ones(5, 1)), "same number of tokens"),
        ((torch.ones(2, 3), torch.ones(0, 3), torch.ones(0, 1)), "at least one key"),
        ((torch.tensor([[float("nan")]]), torch.ones(1, 1), torch.ones(1, 1)), "finite"),
        ((torch.ones(3), torch.ones(4, 3), torch.ones(4, 1)), "shapes"),
    ],
)
def test_softmax_attention_rejects_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        softmax_attention(*args)


def test_softmax_attention_causal_needs_enough_keys():
    with pytest.raises(ValueError, match="m <= t"):
        softmax_attention(torch.ones(3, 1), torch.ones(2, 1), torch.ones(2, 1), causal=True)


@settings(max_examples=40, deadline=None)
@given(
    t=st.integers(1, 60), d=st.integers(1, 4), m=st.integers(1, 3), chunk=st.integers(1, 17),
    scale=st.floats(0.1, 6.0), seed=st.integers(0, 10_000), self_key=st.booleans(),
)
def test_streaming_readout_equals_exact_attention(t, d, m, chunk, scale, seed, self_key):
    g = torch.Generator().manual_seed(seed)
    x, q = scale * rand(g, t, d), rand(g, m, d)
    tq, tk, tv = rand(g, 2, d), rand(g, 2, d), rand(g, 3, d)
    cps = sorted({1, (t + 1) // 2, t})
    out = readout_path(Replay(x), q, tq, tk, tv, cps, chunk=chunk, query_is_key=self_key)
    for i, c in enumerate(cps):
        for j in range(m):
            ctx = torch.cat([x[: c - 1], q[j : j + 1]]) if self_key else x[:c]
            ref = softmax_attention((q[j] @ tq.T)[None], ctx @ tk.T, ctx @ tv.T)[0]
            assert torch.allclose(out[i, j], ref, rtol=1e-10, atol=1e-10)


def test_readout_paths_streams_are_independent_and_seeded():
    p = GaussianIID(torch.eye(2, dtype=f64))
    eye = torch.eye(2, dtype=f64)
    a = readout_paths(p, eye, eye, eye, eye, [10, 100], streams=3, seed=5)
    b = readout_paths(p, eye, eye, eye, eye, [10, 100], streams=3, seed=5)
    c = readout_paths(p, eye, eye, eye, eye, [10, 100], streams=3, seed=6)
    assert a.shape == (3, 2, 2, 2)
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert not torch.allclose(a[0], a[1])


def test_readout_paths_per_stream_queries():
    x = torch.randn(2, 50, 2, generator=torch.Generator().manual_seed(0), dtype=f64)
    q = torch.randn(2, 1, 2, generator=torch.Generator().manual_seed(1), dtype=f64)
    eye = torch.eye(2, dtype=f64)
    out = readout_paths(Replay(x), q, eye, eye, eye, [50], streams=2)
    for r in range(2):
        assert torch.allclose(out[r, 0], softmax_attention(q[r], x[r], x[r]))


def test_long_stream_runs_in_bounded_memory_and_converges():
    # 2 million tokens in chunks of 4096: memory is set by the chunk, not by t
    cov = torch.tensor([[1.0, 0.3], [0.3, 0.5]], dtype=f64)
    eye = torch.eye(2, dtype=f64)
    q = torch.tensor([[0.5, -0.5]], dtype=f64)
    out = readout_path(GaussianIID(cov), q, eye, eye, eye, [2_000_000], chunk=4096, seed=3)
    limit = (q @ cov)[0]
    assert torch.allclose(out[0, 0], limit, atol=0.01)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(checkpoints=[10, 5]), "increasing"),
        (dict(checkpoints=[0, 5]), "increasing"),
        (dict(checkpoints=[]), "non-empty"),
        (dict(device="tpu"), "device"),
        (dict(streams=0), "streams"),
        (dict(chunk=-1), "chunk"),
        (dict(theta_q=torch.ones(2, 3)), "theta_q"),
        (dict(theta_k=torch.ones(3, 2)), "same number of rows"),
        (dict(queries=torch.ones(1, 3)), "queries"),
        (dict(queries=torch.ones(3, 1, 2), streams=2), "per-stream"),
    ],
)
def test_readout_paths_rejects_bad_input(kwargs, match):
    eye = torch.eye(2, dtype=f64)
    args = dict(process=GaussianIID(eye), queries=eye, theta_q=eye, theta_k=eye, theta_v=eye, checkpoints=[5])
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        readout_paths(**args)


def test_readout_paths_rejects_non_process():
    eye = torch.eye(2)
    with pytest.raises(ValueError, match="Process"):
        readout_paths(torch.zeros(3, 2), eye, eye, eye, eye, [1])
