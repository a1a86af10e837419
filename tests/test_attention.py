"""Streaming readout against the exact reference; the reference against closed forms."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import covbook.attention as attention_module
from covbook._validate import psd_sqrt_factor
from covbook.attention import (
    BLOCK,
    FLOAT32_RTOL,
    OnlineSoftmax,
    _default_chunk,
    causal_attention_matrix,
    readout_path,
    readout_paths,
    softmax_attention,
)
from covbook.processes import GaussianIID, Replay

f64 = torch.float64
NAN = float("nan")


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
    # 2 million tokens in chunks of 2^17: memory is set by the chunk, not by t
    cov = torch.tensor([[1.0, 0.3], [0.3, 0.5]], dtype=f64)
    eye = torch.eye(2, dtype=f64)
    q = torch.tensor([[0.5, -0.5]], dtype=f64)
    out = readout_path(GaussianIID(cov), q, eye, eye, eye, [2_000_000], chunk=1 << 17, seed=3)
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
        (dict(checkpoints=["a"]), "checkpoints"),
        (dict(checkpoints=[1.5]), "checkpoints must be integers"),
        (dict(checkpoints=[float("nan")]), "checkpoints"),
        (dict(checkpoints=[[True]]), "checkpoints"),
        (dict(checkpoints=None), "checkpoints"),
        (dict(seed="a"), "seed"),
        (dict(seed=-1), "seed"),
        (dict(seed=1.5), "seed"),
        (dict(query_is_key="yes"), "query_is_key"),
        (dict(dtype=torch.float16), "dtype"),
        (dict(queries=torch.ones(0, 2)), "queries"),
        (dict(queries=[[NAN, 1.0]]), "queries"),
        (dict(streams=10**7, chunk=10**6, checkpoints=[10**6]), "GiB"),
    ],
)
def test_readout_paths_bad_input_names_the_argument(kwargs, match):
    eye = torch.eye(2, dtype=f64)
    args = dict(process=GaussianIID(eye), queries=eye, theta_q=eye, theta_k=eye, theta_v=eye, checkpoints=[5])
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        readout_paths(**args)


def test_readout_paths_rejects_non_process():
    eye = torch.eye(2)
    with pytest.raises(ValueError, match="Process"):
        readout_paths(torch.zeros(3, 2), eye, eye, eye, eye, [1])


# ----------------------------------------------------------------------------- float32 kernel accuracy


def _float32_bound(x, q, tq, tk, tv, self_key=False):
    """FLOAT32_RTOL * max(1, max |logit|) * max |value| over the context (and the query, when it is a key)."""
    ctx = torch.cat([x, q]) if self_key else x
    logits = (q @ tq.T) @ (ctx @ tk.T).T  # (m, t)
    return FLOAT32_RTOL * max(1.0, float(logits.abs().max())) * float((ctx @ tv.T).abs().max())


def _reference(x, q, tq, tk, tv, cps, self_key=False):
    out = []
    for c in cps:
        rows = []
        for j in range(q.shape[0]):
            ctx = torch.cat([x[: c - 1], q[j : j + 1]]) if self_key else x[:c]
            rows.append(softmax_attention((q[j] @ tq.T)[None], ctx @ tk.T, ctx @ tv.T)[0])
        out.append(torch.stack(rows))
    return torch.stack(out)  # (len(cps), m, d_v)


@settings(max_examples=30, deadline=None)
@given(
    t=st.integers(1, 3000), d=st.integers(1, 6), m=st.integers(1, 4), chunk=st.integers(1, 700),
    max_logit=st.floats(0.1, 20.0), seed=st.integers(0, 10_000), self_key=st.booleans(),
)
def test_float32_streaming_within_documented_error_of_float64_reference(t, d, m, chunk, max_logit, seed, self_key):
    g = torch.Generator().manual_seed(seed)
    x = rand(g, t, d).float().double()  # float32 tokens, so both passes read the very same numbers
    tq, tk, tv = rand(g, 2, d), rand(g, 2, d), rand(g, 3, d)
    q = rand(g, m, d)
    a = q @ tq.T @ tk  # (m, d)
    q = q * (max_logit / float((x @ a.T).abs().max().clamp_min(1e-12)))  # |logits| <= max_logit
    q = q.float().double()
    cps = sorted({1, (t + 1) // 2, t})
    out = readout_path(Replay(x), q, tq, tk, tv, cps, chunk=chunk, query_is_key=self_key, dtype=torch.float32)
    ref = _reference(x, q, tq, tk, tv, cps, self_key)
    err = float((out - ref).abs().max())
    assert err <= _float32_bound(x, q, tq, tk, tv, self_key)


@pytest.mark.parametrize("mean", [None, [0.5, -1.0, 2.0]])
def test_gaussian_fast_path_draws_lz_plus_mu_and_matches_reference(mean):
    # the GaussianIID pass draws float32 standard normals z in place and reads x = L z + mu
    cov = torch.tensor([[2.0, 0.3, 0.0], [0.3, 1.0, 0.2], [0.0, 0.2, 0.5]], dtype=f64)
    proc = GaussianIID(cov, mean=mean)
    g = torch.Generator().manual_seed(4)
    tq, tk, tv, q = rand(g, 3, 3), rand(g, 3, 3), rand(g, 2, 3), rand(g, 5, 3) / 3
    t = 5000
    out = readout_path(proc, q, tq, tk, tv, [t], seed=11, chunk=t)  # one chunk of draws
    z = torch.empty(1, t, 3).normal_(generator=torch.Generator().manual_seed(11))[0].double()
    x = z @ psd_sqrt_factor(cov).T + proc.mean  # (t, 3)
    ref = _reference(x, q, tq, tk, tv, [t])
    assert float((out - ref).abs().max()) <= _float32_bound(x, q, tq, tk, tv)


def test_float32_error_stays_small_over_a_million_tokens_in_many_chunks():
    g = torch.Generator().manual_seed(5)
    t, d = 1 << 20, 4
    x = rand(g, t, d).float().double()
    tq, tk, tv, q = rand(g, d, d), rand(g, d, d), rand(g, d, d), rand(g, 8, d) / 2
    out32 = readout_path(Replay(x), q, tq, tk, tv, [t // 3, t], chunk=1 << 14, dtype=torch.float32)
    out64 = readout_path(Replay(x), q, tq, tk, tv, [t // 3, t], chunk=1 << 14, dtype=torch.float64)
    rms = float(((x @ tv.T) ** 2).sum(-1).mean().sqrt())
    assert float((out32 - out64).abs().max()) <= FLOAT32_RTOL * rms  # typical: far inside the worst-case bound


def _plain_order_float32_sums(w, f):
    """What one float32 GEMM may do (MKL on AMD Zen 4 did): add the n token terms in plain order, in float32."""
    prod = w.numpy()[..., :, :, None] * f.numpy()[..., :, None, :]  # (R, n, m, p) float32
    return torch.from_numpy(np.add.accumulate(prod, axis=-3, dtype=np.float32)[..., -1, :, :]).double()


def _swamped_readout_error():
    """|float32 readout - exact| for one token of weight 1 and 2^18 - 1 tokens of weight 2^-25 each.

    One default-length chunk (2^18 tokens at one query).  In one float32 reduction added in
    plain order every small weight is below half an ulp of the running sum 1, so all of them
    are lost (relative 2^-7 of the mass); in blocks of BLOCK only the first block's are.
    """
    n = _default_chunk(1, 1)
    eps = 2.0**-25
    x = torch.zeros(n, 2, dtype=f64)
    x[0] = torch.tensor([0.0, 1.0])  # logit 0, value +1
    x[1:, 0], x[1:, 1] = np.log(eps), -1.0  # logit log 2^-25, value -1
    eye, q, tv = torch.eye(2, dtype=f64), torch.tensor([[1.0, 0.0]], dtype=f64), torch.tensor([[0.0, 1.0]], dtype=f64)
    out = readout_path(Replay(x), q, eye, eye, tv, [n], dtype=torch.float32)
    exact = (1 - (n - 1) * eps) / (1 + (n - 1) * eps)
    return abs(out.item() - exact), _float32_bound(x, q, eye, eye, tv)


def test_float32_sum_over_the_default_chunk_keeps_small_weights_on_any_blas():
    # the chunk's sum runs in float32 blocks of BLOCK tokens and float64 across blocks, so the
    # rounding is set by BLOCK, not by the chunk length or by the order the BLAS adds in
    err, bound = _swamped_readout_error()
    assert err <= bound


def test_plain_order_float32_sum_over_the_default_chunk_would_fail_that_test(monkeypatch):
    # teeth: the same readout with one plain-order float32 reduction per chunk is off by ~2^-6
    monkeypatch.setattr(attention_module, "weighted_sums", _plain_order_float32_sums)
    err, bound = _swamped_readout_error()
    assert err > 100 * bound


def test_weighted_sums_are_blocked_and_exact_to_float32_block_rounding():
    g = torch.Generator().manual_seed(9)
    n = 5 * BLOCK + 7  # full blocks and a tail
    w, f = torch.rand(2, n, 3, generator=g), torch.randn(2, n, 4, generator=g)
    exact = w.double().mT @ f.double()
    got = attention_module.weighted_sums(w, f)
    assert got.dtype == f64
    gamma = BLOCK * 2.0**-24 / (1 - BLOCK * 2.0**-24)
    assert torch.all((got - exact).abs() <= gamma * (w.double().mT @ f.double().abs()) + 1e-30)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_lazy_reference_survives_logits_that_jump_by_hundreds(dtype):
    # logits 0, then 300 (float32 exp would overflow without a rebase), then -300
    x = torch.cat([torch.zeros(50, 1), torch.full((50, 1), 300.0), torch.full((50, 1), -300.0)]).double()
    x = x + torch.linspace(0, 1, 150, dtype=f64)[:, None]
    one = torch.ones(1, 1, dtype=f64)
    out = readout_path(Replay(x), one, one, one, one, [50, 100, 150], chunk=16, dtype=dtype)
    ref = _reference(x, one, one, one, one, [50, 100, 150])
    assert torch.isfinite(out).all()
    assert torch.allclose(out, ref, rtol=1e-6, atol=1e-6)


def test_readout_paths_default_dtype_keeps_float64_for_other_processes():
    # a Replay context is read in float64 by default: agreement to rounding
    g = torch.Generator().manual_seed(6)
    x, q = rand(g, 300, 2), rand(g, 2, 2)
    eye = torch.eye(2, dtype=f64)
    out = readout_path(Replay(x), q, eye, eye, eye, [300])
    assert torch.allclose(out[0], softmax_attention(q, x, x), rtol=1e-12, atol=1e-12)


# ----------------------------------------------------------------------------- OnlineSoftmax


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 200), parts=st.integers(1, 6), scale=st.floats(0.1, 500.0), seed=st.integers(0, 1000))
def test_online_softmax_equals_softmax_over_the_whole_stream(n, parts, scale, seed):
    g = torch.Generator().manual_seed(seed)
    logits, values = scale * rand(g, 2, 3, n), rand(g, 2, n, 4)  # (R, m, n), (R, n, p)
    acc = OnlineSoftmax((2, 3), 4)
    for idx in torch.tensor_split(torch.arange(n), parts):
        acc.update(logits[..., idx], values[:, idx])
    assert torch.allclose(acc.mean(), torch.softmax(logits, -1) @ values, rtol=1e-10, atol=1e-10)
    assert torch.allclose(acc.logsumexp(), torch.logsumexp(logits, -1), rtol=1e-12, atol=1e-12)


def test_online_softmax_masked_logits_and_an_extra_term():
    acc = OnlineSoftmax((2,), 1)
    acc.update(torch.tensor([[float("-inf"), float("-inf")], [0.0, 0.0]], dtype=f64),
               torch.tensor([[1.0], [3.0]], dtype=f64))
    assert acc.den[0] == 0 and acc.den[1] == 2
    out = acc.mean(torch.tensor([5.0, 0.0], dtype=f64), torch.tensor([[7.0], [7.0]], dtype=f64))
    assert out[0, 0] == pytest.approx(7.0)  # only the extra term: the masked row has no mass
    assert out[1, 0] == pytest.approx((1 + 3 + 7) / 3)


def test_online_softmax_rejects_bad_shapes():
    with pytest.raises(ValueError, match="shape"):
        OnlineSoftmax((0, 2), 1)
    with pytest.raises(ValueError, match="value_dim"):
        OnlineSoftmax((2,), 0)


# ----------------------------------------------------------------------------- bad input (issue: never NaN)


def test_softmax_attention_huge_finite_inputs_give_the_correct_finite_answer():
    q = torch.tensor([[1e200]], dtype=f64)
    k = torch.tensor([[1e200], [-1e200], [5e199]], dtype=f64)
    v = torch.tensor([[1.0], [2.0], [3.0]], dtype=f64)
    out = softmax_attention(q, k, v)
    assert torch.equal(out, torch.tensor([[1.0]], dtype=f64))  # the largest logit takes all the weight
    tie = softmax_attention(q, torch.tensor([[1e200], [1e200]], dtype=f64), torch.tensor([[1.0], [3.0]], dtype=f64))
    assert tie.item() == pytest.approx(2.0)
    causal = softmax_attention(torch.tensor([[1e200], [-1e200]], dtype=f64), k[:2], v[:2], causal=True)
    assert torch.equal(causal, torch.tensor([[1.0], [2.0]], dtype=f64))
    cancel = softmax_attention(torch.tensor([[1e200, 1e200]], dtype=f64),  # q·k_0 = inf - inf naively
                               torch.tensor([[1e200, -1e200], [1.0, 1.0]], dtype=f64), v[:2])
    assert torch.equal(cancel, torch.tensor([[2.0]], dtype=f64))  # true logits 0 and 2e200
    all_low = softmax_attention(-q, torch.tensor([[1e200], [2e200]], dtype=f64), v[:2])  # both -inf naively
    assert torch.equal(all_low, torch.tensor([[1.0]], dtype=f64))
    big_v = softmax_attention(torch.ones(1, 1, dtype=f64), torch.zeros(2, 1, dtype=f64),
                              torch.full((2, 1), 1.5e308, dtype=f64))
    assert big_v.item() == pytest.approx(1.5e308)


def test_causal_attention_matrix_rows_are_causal_softmax():
    g = torch.Generator().manual_seed(7)
    z, tq, tk = rand(g, 2, 5, 3), rand(g, 2, 3), rand(g, 2, 3)
    a = causal_attention_matrix(z, tq, tk)
    assert a.shape == (2, 5, 5)
    assert torch.allclose(a.sum(-1), torch.ones(2, 5, dtype=f64))
    assert torch.all(a.triu(1) == 0)
    for i in range(5):
        w = torch.softmax((z[1, i] @ tq.T) @ (z[1, : i + 1] @ tk.T).T, -1)
        assert torch.allclose(a[1, i, : i + 1], w)
    huge = causal_attention_matrix(1e200 * z, tq, tk)
    assert torch.isfinite(huge).all() and torch.allclose(huge.sum(-1), torch.ones(2, 5, dtype=f64))



@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: softmax_attention(torch.ones(1, 1), torch.ones(1, 1), torch.ones(1, 1), causal="no"), "causal"),
        (lambda: softmax_attention(torch.ones(1, 1), torch.ones(1, 1), torch.ones(1, 1), causal=1), "causal"),
        (lambda: softmax_attention(torch.ones(1, 1), torch.ones(1, 1).expand(10**6, 1).expand(10**6, 1),
                                   torch.ones(1, 1).expand(10**6, 1)), "ok"),
        (lambda: softmax_attention(torch.ones(1, 1).expand(10**6, 1), torch.ones(1, 1).expand(10**6, 1),
                                   torch.ones(1, 1).expand(10**6, 1)), "GiB"),
        (lambda: causal_attention_matrix(torch.tensor([[[NAN]]]), [[1.0]], [[1.0]]), "tokens"),
        (lambda: causal_attention_matrix(torch.ones(3), [[1.0]], [[1.0]]), "tokens"),
        (lambda: causal_attention_matrix(torch.ones(1, 3, 2), torch.ones(2, 3), torch.ones(2, 2)), "theta_q"),
        (lambda: causal_attention_matrix(torch.ones(1, 3, 2), torch.ones(2, 2), torch.ones(3, 2)), "rows"),
        (lambda: causal_attention_matrix(torch.ones(1, 1, 1).expand(1, 10**6, 1), [[1.0]], [[1.0]]), "GiB"),
        (lambda: causal_attention_matrix("abc", [[1.0]], [[1.0]]), "tokens"),
    ],
)
def test_attention_bad_input_names_the_argument(call, match):
    if match == "ok":  # a long but feasible context is not refused
        assert call().shape == (1, 1)
        return
    with pytest.raises(ValueError, match=match):
        call()


def test_float32_overflow_is_an_error_not_nan():
    x = torch.tensor([[0.0], [1e30]], dtype=f64)
    one = torch.ones(1, 1, dtype=f64)
    with pytest.raises(ValueError, match="dtype=torch.float64"):
        readout_path(Replay(x), torch.full((1, 1), 1e10, dtype=f64), one, one, one, [2], chunk=1, dtype=torch.float32)
    out = readout_path(Replay(x), torch.full((1, 1), 1e10, dtype=f64), one, one, one, [2], chunk=1)
    assert out.item() == 1e30
