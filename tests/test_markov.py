"""Tests of covbook.markov: repetition metrics on hand-computed sequences, cycle
detection on constructed orbits, the Markov kernel and gap on a tiny stand-in
transformer (one layer: exact), and error paths."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from covbook import markov as mk

# ---------------------------------------------------------------------------
# a tiny NoPE transformer and its exact discrete mean field, written here from
# the definitions so that the markov functions are tested independently of
# covbook.transformer
# ---------------------------------------------------------------------------


class TinyNoPE(torch.nn.Module):
    """Causal single-head attention layers with residuals; optional learned positions."""

    def __init__(self, vocab_size: int, d: int, n_layers: int, seed: int, scale: float = 1.5,
                 positions: int = 0) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.vocab_size = vocab_size

        def rnd(*shape: int, s: float = 1.0) -> torch.nn.Parameter:
            return torch.nn.Parameter(s * torch.randn(*shape, generator=g, dtype=torch.float64) / math.sqrt(shape[-1]))

        self.embed = rnd(vocab_size, d, s=math.sqrt(d))
        self.wq = torch.nn.ParameterList([rnd(d, d, s=scale) for _ in range(n_layers)])
        self.wk = torch.nn.ParameterList([rnd(d, d, s=scale) for _ in range(n_layers)])
        self.wv = torch.nn.ParameterList([rnd(d, d) for _ in range(n_layers)])
        self.w_out = rnd(vocab_size, d, s=3.0)
        self.pos = rnd(positions, d) if positions else None

    def logits_from_hidden(self, h: torch.Tensor) -> torch.Tensor:
        return h @ self.w_out.T

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed[tokens]  # (B, T, d)
        if self.pos is not None:
            h = h + self.pos[: tokens.shape[1]]
        t = tokens.shape[1]
        mask = torch.ones(t, t, dtype=torch.bool).triu(1)
        for wq, wk, wv in zip(self.wq, self.wk, self.wv, strict=True):
            logits = (h @ wq.T) @ (h @ wk.T).transpose(1, 2)  # (B, T, T)
            att = torch.softmax(logits.masked_fill(mask, float("-inf")), dim=-1)
            h = h + att @ (h @ wv.T)
        return self.logits_from_hidden(h)


def tiny_mean_field(model: TinyNoPE, freqs: torch.Tensor) -> torch.Tensor:
    """F_{l+1}(x) = F_l(x) + Σ_y π(y) e^{q(x)·k(y)} v(y) / Σ_y π(y) e^{q(x)·k(y)} (THEOREMS.md T4)."""
    f = model.embed.detach().clone()  # (V, d)
    for wq, wk, wv in zip(model.wq, model.wk, model.wv, strict=True):
        logits = (f @ wq.T) @ (f @ wk.T).T  # (V, V)
        w = freqs[None, :] * torch.exp(logits - logits.max(-1, keepdim=True).values)
        f = f + (w / w.sum(-1, keepdim=True)) @ (f @ wv.T)
    return f


V = 5


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """The models here are tiny: one thread avoids contention overhead; restored afterwards."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def one_layer() -> TinyNoPE:
    return TinyNoPE(V, 8, 1, seed=1)


@pytest.fixture(scope="module")
def two_layer() -> TinyNoPE:
    return TinyNoPE(V, 8, 2, seed=2, scale=1.0)


def iid_tokens(batch: int, t: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    probs = torch.tensor([0.4, 0.25, 0.15, 0.12, 0.08], dtype=torch.float64)
    return torch.multinomial(probs.expand(batch, V), t, replacement=True, generator=g)  # (B, T)


# ---------------------------------------------------------------------------
# model-free: frequencies, TV, entropy, stationary law, entropy rate
# ---------------------------------------------------------------------------


def test_frequencies_hand_computed():
    assert mk.empirical_frequencies([0, 0, 1, 3], 4).tolist() == [0.5, 0.25, 0.0, 0.25]
    run = mk.running_frequencies([[2, 0, 2]], 3)
    assert run.shape == (1, 3, 3)
    assert torch.allclose(run[0, -1], torch.tensor([1 / 3, 0, 2 / 3], dtype=torch.float64))
    assert torch.equal(run[0, 0], torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64))


def test_tv_and_entropy_closed_forms():
    assert float(mk.tv_distance([1, 0, 0], [0, 0, 1])) == 1.0
    assert float(mk.tv_distance([0.2, 0.8], [0.2, 0.8])) == 0.0
    assert math.isclose(float(mk.entropy(torch.full((7,), 1 / 7, dtype=torch.float64))), math.log(7))
    assert float(mk.entropy([0.0, 1.0, 0.0])) == 0.0


def test_stationary_of_two_state_chain():
    a, b = 0.3, 0.1
    k = torch.tensor([[1 - a, a], [b, 1 - b]], dtype=torch.float64)
    pi = mk.stationary_distribution(k)
    assert torch.allclose(pi, torch.tensor([b / (a + b), a / (a + b)], dtype=torch.float64), atol=1e-12)
    # entropy rate of the two-state chain: Σ π_i H(row_i)
    h = pi[0] * mk.entropy(k[0]) + pi[1] * mk.entropy(k[1])
    assert torch.isclose(mk.entropy_rate(k), h, atol=1e-12)


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 6), st.integers(0, 10_000))
def test_stationary_is_fixed_point_and_entropy_rate_bounded(v, seed):
    g = torch.Generator().manual_seed(seed)
    k = torch.softmax(2 * torch.randn(v, v, generator=g, dtype=torch.float64), dim=-1)
    pi = mk.stationary_distribution(k)
    assert torch.allclose(pi @ k, pi, atol=1e-10)
    h = float(mk.entropy_rate(k))
    assert 0.0 <= h <= math.log(v) + 1e-12


def test_entropy_rate_deterministic_cycle_and_uniform():
    perm = torch.eye(4, dtype=torch.float64)[[1, 2, 3, 0]]  # the cycle 0→1→2→3→0
    assert float(mk.entropy_rate(perm)) == pytest.approx(0.0, abs=1e-12)
    assert torch.allclose(mk.stationary_distribution(perm), torch.full((4,), 0.25, dtype=torch.float64))
    assert float(mk.entropy_rate(torch.full((3, 3), 1 / 3))) == pytest.approx(math.log(3))


def test_stationary_rejects_reducible_and_bad_kernels():
    with pytest.raises(ValueError, match="several stationary"):
        mk.stationary_distribution(torch.eye(3, dtype=torch.float64))
    with pytest.raises(ValueError, match="sum to 1"):
        mk.stationary_distribution([[0.5, 0.4], [0.5, 0.5]])
    with pytest.raises(ValueError, match="square"):
        mk.stationary_distribution([[0.5, 0.5]])
    with pytest.raises(ValueError, match="non-negative"):
        mk.entropy_rate([[1.5, -0.5], [0.5, 0.5]])
    with pytest.raises(ValueError, match="shape"):
        mk.entropy_rate([[0.5, 0.5], [0.5, 0.5]], stationary=[1.0])


# ---------------------------------------------------------------------------
# cycle detection
# ---------------------------------------------------------------------------


def test_find_cycle_hand_cases():
    assert mk.find_cycle([3, 3, 3, 3]) == (0, 1)
    assert mk.find_cycle([0, 1, 0, 1, 0, 1]) == (0, 2)
    assert mk.find_cycle([4, 2, 0, 1, 0, 1, 0]) == (2, 2)  # ends mid-period
    assert mk.find_cycle([0, 1, 2, 3, 4]) is None
    assert mk.find_cycle([1, 2, 1]) is None  # one period and a bit is not evidence
    assert mk.find_cycle([1, 2, 1], min_repeats=2) is None
    assert mk.find_cycle([7, 1, 2, 1, 2, 1, 2], min_repeats=3) == (1, 2)
    assert mk.find_cycle([7, 1, 2, 1, 2], min_repeats=3) is None
    # smallest period wins: period 2 also explains a constant tail, period 1 is returned
    assert mk.find_cycle([0, 1, 5, 5, 5, 5]) == (2, 1)


def _orbit(f: list[int], x0: int, n: int) -> list[int]:
    out = [x0]
    for _ in range(n - 1):
        out.append(f[out[-1]])
    return out


def _rho(f: list[int], x0: int) -> tuple[int, int]:
    seen: dict[int, int] = {}
    x, i = x0, 0
    while x not in seen:
        seen[x] = i
        x, i = f[x], i + 1
    return seen[x], i - seen[x]


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 12).flatmap(lambda n: st.tuples(st.lists(st.integers(0, n - 1), min_size=n, max_size=n),
                                                     st.integers(0, n - 1))))
def test_find_cycle_recovers_orbits_of_maps(case):
    f, x0 = case
    mu, lam = _rho(f, x0)
    orbit = _orbit(f, x0, mu + 3 * lam)
    assert mk.find_cycle(orbit) == (mu, lam)
    assert mk.find_cycle(orbit, min_repeats=3) == (mu, lam)


def test_find_cycle_errors():
    with pytest.raises(ValueError, match="min_repeats"):
        mk.find_cycle([0, 0, 0], min_repeats=1)
    with pytest.raises(ValueError, match="integer token"):
        mk.find_cycle([0.5, 1.0])
    with pytest.raises(ValueError, match="1 dims"):
        mk.find_cycle([[0, 1]])
    with pytest.raises(ValueError, match="non-negative"):
        mk.find_cycle([0, -1, 0])


# ---------------------------------------------------------------------------
# repetition metrics
# ---------------------------------------------------------------------------


def test_seq_rep_n_pure_cycle_and_no_repetition():
    cyc = [0, 1, 2] * 10  # T = 30, period 3
    for n in (1, 2, 4):
        assert mk.seq_rep_n(cyc, n) == pytest.approx(1 - 3 / (30 - n + 1))
    assert mk.seq_rep_n(list(range(12)), 4) == 0.0
    assert mk.seq_rep_n([5] * 6, 2) == pytest.approx(1 - 1 / 5)
    # batch: mean of the rows
    assert mk.seq_rep_n([[0, 1, 2, 3], [1, 1, 1, 1]], 2) == pytest.approx((0 + 2 / 3) / 2)


def test_distinct_n_pools_sequences():
    assert mk.distinct_n([0, 1, 2] * 10, 2) == pytest.approx(1 - mk.seq_rep_n([0, 1, 2] * 10, 2))
    # two identical runs: distinct-n halves, per-run seq-rep-n does not move
    run = [0, 1, 2, 3]
    assert mk.distinct_n([run, run], 2) == pytest.approx(0.5)
    assert mk.seq_rep_n([run, run], 2) == 0.0
    assert mk.distinct_n([[0, 1, 2], [4, 5]], 2) == 1.0  # ragged lists are fine


def test_rep_l_hand_computed_and_ties():
    targets = [0, 1, 2, 0, 1, 2]
    preds = [1, 2, 0, 1, 2, 0]  # a perfect cyclic predictor
    # window 1: the prediction never equals the previous token; window 2: it does from
    # 0-based t = 2 on (x̂_2 = 0 ∈ {0, 1}, x̂_3 = 1 ∈ {1, 2}, ...), 4 of 6 positions
    assert mk.rep_l(preds, targets, 1) == 0.0
    assert mk.rep_l(preds, targets, 2) == pytest.approx(4 / 6)
    assert mk.rep_l([1, 1, 1, 1], [0, 1, 2, 3], 3) == pytest.approx(2 / 4)  # t = 2, 3 see token 1
    # scores with a tie: argmax takes the smallest id
    scores = torch.tensor([[0.0, 0.0, 0.0], [0.3, 0.3, 0.1], [0.1, 0.5, 0.5]], dtype=torch.float64)
    assert mk.rep_l(scores, [0, 1, 2], 2) == pytest.approx(2 / 3)  # preds 0, 0, 1
    assert mk.rep_l([[0, 0], [1, 1]], [[0, 0], [0, 1]], 1) == pytest.approx(1 / 4)  # only row 0, t = 1


def test_metric_errors():
    with pytest.raises(ValueError, match="at least n"):
        mk.seq_rep_n([0, 1], 3)
    with pytest.raises(ValueError, match="positive integer"):
        mk.seq_rep_n([0, 1], 0)
    with pytest.raises(ValueError, match="shape"):
        mk.rep_l([0, 1, 2], [0, 1], 2)
    with pytest.raises(ValueError, match="finite"):
        mk.rep_l([[np.nan, 1.0]], [0], 1)
    with pytest.raises(ValueError, match="at least n"):
        mk.distinct_n([[0, 1, 2], [0]], 2)
    with pytest.raises(ValueError, match="0..2"):
        mk.empirical_frequencies([0, 3], 3)
    with pytest.raises(ValueError, match="sum to 1"):
        mk.tv_distance([0.5, 0.4], [0.5, 0.5])
    with pytest.raises(ValueError, match="same number"):
        mk.tv_distance([0.5, 0.5], [1.0, 0.0, 0.0])


def test_within_between_tv_detects_two_attractors():
    a = [0, 1] * 50
    b = [2, 3] * 50
    within, between = mk.within_between_tv([a, a, b], 4)
    assert within.tolist() == [0.0, 0.0, 0.0]
    assert between.tolist() == [0.0, 1.0, 1.0]
    with pytest.raises(ValueError, match="R >= 2"):
        mk.within_between_tv([a], 4)


# ---------------------------------------------------------------------------
# model-dependent: kernel, gap, shuffle test, decoding
# ---------------------------------------------------------------------------


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


def test_shuffle_test_sees_positional_encoding():
    model = TinyNoPE(V, 8, 1, seed=3, positions=64)
    x = iid_tokens(4, 30, seed=2)
    shuf = mk.shuffle_test(model, x, positions=[30], generator=torch.Generator().manual_seed(0))
    assert float(shuf.min()) > 1e-6


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


class LookupModel(torch.nn.Module):
    """A stand-in whose mean field is F_π(x) = e_{f(x)} + c A π and whose read-out is the identity."""

    def __init__(self, f: list[int], c: float, a: torch.Tensor | None = None) -> None:
        super().__init__()
        self.vocab_size, self.f, self.c = len(f), f, c
        self.a = torch.eye(len(f), dtype=torch.float64) if a is None else a

    def logits_from_hidden(self, h: torch.Tensor) -> torch.Tensor:
        return h


def lookup_mean_field(model: LookupModel, freqs: torch.Tensor) -> torch.Tensor:
    return torch.eye(model.vocab_size, dtype=torch.float64)[model.f] + model.c * (model.a @ freqs)  # (V, V)


def test_cycle_self_consistency_on_a_designed_map():
    f = [1, 2, 0, 0]  # the bare map: 0→1→2→0, 3→0
    m = LookupModel(f, c=1.5)
    assert mk.cycle_self_consistent(m, [0, 1, 2], mean_field=lookup_mean_field)
    assert mk.cycle_self_consistent(m, [1, 2, 0], mean_field=lookup_mean_field)
    # the fixed point 3 holds itself by its own statistics although f(3) = 0
    assert mk.cycle_self_consistent(m, [3], mean_field=lookup_mean_field)
    # 0→1→0 is not an orbit of g at its statistics (1 goes to 2): it would break
    assert not mk.cycle_self_consistent(m, [0, 1], mean_field=lookup_mean_field)
    assert mk.greedy_map(m, mk.empirical_frequencies([0, 1], 4), mean_field=lookup_mean_field).tolist() == [1, 2, 0, 0]
    # with c = 2 row 1 ties between 0, 1, 2 and the tie goes to the smallest id: 1→0 closes the 2-cycle
    tie = LookupModel(f, c=2.0)
    assert mk.greedy_map(tie, mk.empirical_frequencies([0, 1], 4), mean_field=lookup_mean_field)[1] == 0
    assert mk.cycle_self_consistent(tie, [0, 1], mean_field=lookup_mean_field)


def test_cycle_break_time_of_a_cycle_held_by_leftover_statistics():
    # F_π(x) = e_1 + 2 π(2) e_0: token 0 repeats while the prefix's token 2 keeps 2π(2) >= 1
    # (a tie goes to 0); after k = 10 copies of token 2 and n copies of 0, π(2) = 10/(10+n):
    # it holds up to n = 10 and breaks at n = 11, i.e. at context length 21
    a = torch.zeros(3, 3, dtype=torch.float64)
    a[0, 2] = 1.0
    m = LookupModel([1, 1, 1], c=2.0, a=a)
    prefix = [2] * 10
    assert mk.cycle_break_time(m, prefix, [0], 100, mean_field=lookup_mean_field) == 21
    assert mk.cycle_break_time(m, prefix, [0], 100, t_min=15, mean_field=lookup_mean_field) == 21
    assert mk.cycle_break_time(m, prefix, [0], 20, mean_field=lookup_mean_field) is None
    assert mk.cycle_break_time(m, prefix, [0], 100, t_min=30, mean_field=lookup_mean_field) == 30
    assert not mk.cycle_self_consistent(m, [0], mean_field=lookup_mean_field)
    # a self-consistent cycle never breaks
    m2 = LookupModel([1, 2, 0], c=1.5)
    assert mk.cycle_break_time(m2, [2, 2], [0, 1, 2], 10_000, mean_field=lookup_mean_field) is None
    with pytest.raises(ValueError, match="ids in"):
        mk.cycle_break_time(m, [5], [0], 100, mean_field=lookup_mean_field)
    with pytest.raises(ValueError, match="at least one"):
        mk.cycle_break_time(m, [2], [], 100, mean_field=lookup_mean_field)


def test_find_cycle_min_length():
    seq = [0, 1, 2, 3, 4, 5, 5]
    assert mk.find_cycle(seq) == (5, 1)
    assert mk.find_cycle(seq, min_length=3) is None
    assert mk.find_cycle([9] + [1, 2] * 4, min_length=8) == (1, 2)
    with pytest.raises(ValueError, match="min_length"):
        mk.find_cycle(seq, min_length=0)


def test_model_errors(one_layer):
    pi = torch.full((V,), 1 / V, dtype=torch.float64)
    with pytest.raises(ValueError, match="temperature"):
        mk.markov_kernel(one_layer, pi, 0.0, mean_field=tiny_mean_field)
    with pytest.raises(ValueError, match="shape"):
        mk.markov_kernel(one_layer, torch.full((V + 1,), 1 / (V + 1)), mean_field=tiny_mean_field)
    with pytest.raises(ValueError, match="0..4"):
        mk.next_token_probs(one_layer, torch.tensor([0, 5]))
    with pytest.raises(ValueError, match="integer tensor"):
        mk.greedy_decode(one_layer, torch.tensor([0.0, 1.0]), 3)
    with pytest.raises(ValueError, match="positions"):
        mk.markov_gap(one_layer, torch.tensor([0, 1, 2]), positions=[0, 2], mean_field=tiny_mean_field)
    with pytest.raises(ValueError, match="positions"):
        mk.shuffle_test(one_layer, torch.tensor([0, 1, 2]), positions=[3, 2])
    with pytest.raises(ValueError, match="steps"):
        mk.sample(one_layer, torch.tensor([0]), 0)
    with pytest.raises(ValueError, match="cycle"):
        mk.cycle_self_consistent(one_layer, [], mean_field=tiny_mean_field)


# ---------------------------------------------------------------------------
# with covbook.transformer.CausalTransformer (the default mean field)
# ---------------------------------------------------------------------------


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


def test_kv_cached_decoding_agrees_with_the_forward_pass():
    from covbook.transformer import CausalTransformer

    m = CausalTransformer(vocab_size=V, d_model=8, n_layers=2, logit_scale=2.0, seed=2)
    prompt = torch.tensor([[0, 1, 2], [4, 4, 3]])
    seq = mk.greedy_decode(m, prompt, 10)
    probs = mk.next_token_probs(m, seq)  # (2, 13, V)
    assert torch.equal(seq[:, 3:], torch.argmax(probs[:, 2:-1], dim=-1))
    s = mk.sample(m, prompt[0], 10, 1.0, torch.Generator().manual_seed(0))
    assert s.shape == (13,) and torch.equal(s[:3], prompt[0])


# ---------------------------------------------------------------------------
# Markov-chain statistics, the fixed-point residual, repetition bookkeeping
# ---------------------------------------------------------------------------


def test_asymptotic_covariance_closed_forms():
    pi = torch.tensor([0.2, 0.3, 0.5], dtype=torch.float64)
    iid = torch.outer(torch.ones(3, dtype=torch.float64), pi)
    d = torch.diag(pi) - torch.outer(pi, pi)
    torch.testing.assert_close(mk.asymptotic_covariance(iid), d)
    rho = 0.6
    sticky = rho * torch.eye(3, dtype=torch.float64) + (1 - rho) * iid
    torch.testing.assert_close(mk.asymptotic_covariance(sticky), (1 + rho) / (1 - rho) * d)


def test_asymptotic_covariance_matches_simulation():
    g = torch.Generator().manual_seed(0)
    k = torch.tensor([[0.8, 0.2, 0.0], [0.1, 0.7, 0.2], [0.3, 0.0, 0.7]], dtype=torch.float64)
    x = mk.sample_markov_chain(k, 400, 2000, generator=g)  # (400, 2000)
    pi = mk.stationary_distribution(k)
    dev = (mk.empirical_frequencies(x, 3) - pi) * math.sqrt(2000)  # (400, 3)
    emp = dev.T @ dev / 400
    sigma = mk.asymptotic_covariance(k)
    assert float((emp - sigma).abs().max()) < 0.25 * float(sigma.abs().max())


def test_sample_markov_chain_is_stationary_and_seeded():
    k = torch.tensor([[0.5, 0.5], [0.1, 0.9]], dtype=torch.float64)
    a = mk.sample_markov_chain(k, 3, 50, generator=torch.Generator().manual_seed(1))
    b = mk.sample_markov_chain(k, 3, 50, generator=torch.Generator().manual_seed(1))
    assert torch.equal(a, b) and a.shape == (3, 50) and a.dtype == torch.long
    x = mk.sample_markov_chain(k, 2000, 2, generator=torch.Generator().manual_seed(2))
    assert abs(float((x[:, 0] == 1).double().mean()) - 5 / 6) < 0.05
    with pytest.raises(ValueError, match="kernel"):
        mk.sample_markov_chain([[0.5, 0.6], [0.5, 0.5]], 1, 3)
    with pytest.raises(ValueError, match="length"):
        mk.sample_markov_chain(k, 1, 0)


def test_asymptotic_covariance_of_periodic_and_reducible_chains():
    # an alternating chain's frequencies are within 1/t of (1/2, 1/2): no fluctuation at scale t^(-1/2)
    torch.testing.assert_close(mk.asymptotic_covariance([[0.0, 1.0], [1.0, 0.0]]),
                               torch.zeros(2, 2, dtype=torch.float64), atol=1e-12, rtol=0)
    with pytest.raises(ValueError, match="several stationary laws"):
        mk.asymptotic_covariance([[1.0, 0.0], [0.0, 1.0]])


def test_attractor_contrast_and_repetition_metrics():
    d, se = mk.attractor_contrast([[0, 0, 0, 0], [1, 1, 1, 1], [2, 2, 2, 2]], 3)
    assert d == 1.0 and se == 0.0
    # one ergodic-looking pattern repeated: no contrast
    d, se = mk.attractor_contrast([[0, 1, 0, 1]] * 4, 2)
    assert d == 0.0 and se == 0.0
    m = mk.repetition_metrics([[0, 1, 0, 1], [1, 1, 1, 1]], 2, n=2)
    assert m["seq_rep"] == pytest.approx(mk.seq_rep_n([[0, 1, 0, 1], [1, 1, 1, 1]], 2))
    assert m["distinct"] == pytest.approx(0.5) and m["between"] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="at least 3 runs"):
        mk.attractor_contrast([[0, 1], [1, 0]], 2)


def test_cycle_records_on_constructed_runs(one_layer):
    prompt = [0, 1]
    runs = np.array([prompt + [2, 3] * 10, prompt + [0, 1, 2, 3, 0, 2, 1, 3, 0, 3, 2, 1, 1, 2, 0, 3, 3, 0, 2, 1]])
    recs = mk.cycle_records(None, runs, 2, self_consistency=False)
    assert recs[0].final == (2, 2) and recs[0].entry == 0 and recs[0].period == 2 and recs[0].simple
    assert recs[1].final is None
    summ = mk.cycle_summary(recs)
    assert summ["n_runs"] == 2 and summ["n_cycled"] == 1 and summ["frac_cycled"] == 0.5
    assert math.isnan(summ["frac_consistent"])
    with pytest.raises(ValueError, match="model is needed"):
        mk.cycle_records(None, runs, 2)
    with pytest.raises(ValueError, match="t_detect"):
        mk.cycle_records(one_layer, runs, 2, t_detect=100)


def test_cycle_records_detects_breaks(two_layer):
    g = torch.Generator().manual_seed(0)
    prompts = torch.randint(0, two_layer.vocab_size, (4, 6), generator=g)
    runs = mk.greedy_decode(two_layer, prompts, 60)
    recs = mk.cycle_records(two_layer, runs, 6, t_detect=30, mean_field=tiny_mean_field)
    for r, s in zip(recs, runs.numpy(), strict=True):
        assert r.t_check == 36
        if r.early is not None and r.observed_break is not None:
            e, p = r.early
            assert s[r.observed_break] != s[r.observed_break - p]
            assert np.all(s[e + p:r.observed_break] == s[e:r.observed_break - p])


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


def test_size_guards_refuse_with_the_size_needed():
    with pytest.raises(ValueError, match="GiB"):
        mk.running_frequencies([0, 1, 2], 10**9)
    with pytest.raises(ValueError, match="GiB"):
        mk.empirical_frequencies(np.zeros((10**3, 2), dtype=int), 10**9)


def test_cycle_break_time_rejects_t_min_above_t_max(two_layer):
    with pytest.raises(ValueError, match="t_min"):
        mk.cycle_break_time(two_layer, [0], [1, 2], 10, t_min=20)
