"""covbook.experiments.depth (chapter 08) at tiny sizes: shapes, determinism, closed forms, claim ids."""

from __future__ import annotations

import importlib
import math
from collections.abc import Iterator

import matplotlib
import numpy as np
import pytest
import torch
import yaml

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from covbook.experiments import depth  # noqa: E402
from covbook.streams import Streams  # noqa: E402
from covbook.token_laws import flat_dirichlet  # noqa: E402
from covbook.transformer import hidden_states_at  # noqa: E402
from helpers import ROOT  # noqa: E402

SIZES = dict(d_in=2, d_model=4, n_layers=4, vocab=5, t_max=64, n_streams=16, quad_nodes=8, n_boot=20)
RULES = ROOT / "notebooks" / "rules" / "08_depth_collapse.yml"


class RecordingStreams:
    """:class:`Streams` that records each stream's use: ``"draws"`` (a generator) or ``"seed"`` (a seed)."""

    def __init__(self, seed: int) -> None:
        self.inner, self.uses = Streams(seed, "08"), {}

    def _use(self, kind: str, experiment: str, replicate: object) -> None:
        self.uses.setdefault((experiment, self.inner.key(experiment, replicate)), set()).add(kind)

    def seed_for(self, experiment: str, replicate: object = ()) -> int:
        self._use("seed", experiment, replicate)
        return self.inner.seed_for(experiment, replicate)

    def generator(self, experiment: str, replicate: object = ()) -> np.random.Generator:
        self._use("draws", experiment, replicate)
        return self.inner.generator(experiment, replicate)

    def torch_generator(self, experiment: str, replicate: object = (), device: str = "cpu") -> torch.Generator:
        self._use("draws", experiment, replicate)
        return self.inner.torch_generator(experiment, replicate, device)


def _laws(seed: int) -> depth.ContextLaws:
    return depth.context_laws(**SIZES, streams=RecordingStreams(seed), device="cpu")


#: Each experiment as the chapter calls it, on fresh context laws.
EXPERIMENTS = {
    "recursion": depth.recursion,
    "gauss": depth.gaussian,
    "tail": lambda s: depth.tail(s, t_tail=300, n_tail=8),
    "models": depth.models,
    "positions": depth.positions,
    "markov": lambda s: depth.markov(s, stickiness=0.75),
}


def _chain(seed: int) -> dict[str, object]:
    """The chapter's experiments in its order, on one ``ContextLaws``."""
    s = _laws(seed)
    return {"laws": s, **{name: run(s) for name, run in EXPERIMENTS.items()}}


@pytest.fixture(scope="module")
def run() -> Iterator[dict[str, object]]:
    yield _chain(0)  # on one thread (tests/conftest.py), as the chapter runs


def _same(a: dict, b: dict) -> bool:
    """Equal measurement dicts, NaN equal to NaN, floats to rounding.

    Rounding, not bits: LAPACK's solve in ``covbook.markov.asymptotic_covariance`` can differ in the
    last bits between two calls in one process (seen here, at one thread), which moves Experiment 5.
    """
    def eq(x: object, y: object) -> bool:
        if isinstance(x, float) and isinstance(y, float):
            return (math.isnan(x) and math.isnan(y)) or math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12)
        return x == y
    return a.keys() == b.keys() and all(a[k].keys() == b[k].keys() and all(eq(a[k][f], b[k][f]) for f in a[k])
                                        for k in a)


def test_context_laws_fix_the_checkpoints_and_draw_nothing(run) -> None:
    s = run["laws"]
    assert s.checkpoints[0] == 16 and s.checkpoints[-1] == 63 and s.fit.all() and s.n_models == 2
    assert s.numbers == {"t_max": 64, "n_streams": 16, "n_models": 2, "contexts_per_model": 8, "vocab": 5,
                         "d_model": 4, "fit_from": 16}


def test_a_pair_draws_its_law_and_contexts_from_its_own_stream(run) -> None:
    s, cp = run["laws"], run["laws"].checkpoints
    cov, x = s.gaussian_group("gauss", 1)
    assert cov.shape == (2, 2) and torch.allclose(cov, cov.T) and torch.linalg.eigvalsh(cov).min() >= 0.3 - 1e-12
    assert x.shape == (8, 64, 2) and torch.equal(x[0::2, cp - 1], x[1::2, cp - 1]) and not torch.equal(x[0], x[1])
    freqs, xd, pilot = s.discrete_group("dattn", 1, n_pilot=3)
    assert freqs.shape == (5,) and math.isclose(freqs.sum().item(), 1.0) and xd.shape == (8, 64)
    assert pilot.shape == (3, 64) and torch.equal(xd[0::2, cp - 1], xd[1::2, cp - 1])
    assert s.discrete_group("positions", 1, n_contexts=2)[1].shape == (2, 64)
    again_cov, again_x = s.gaussian_group("gauss", 1)
    assert torch.equal(cov, again_cov) and torch.equal(x, again_x)  # a function of (name, k) alone
    other_cov, _ = s.gaussian_group("gauss", 2)
    assert not torch.equal(cov, other_cov)  # every model its own law
    assert not torch.equal(freqs, s.discrete_group("dattn", 2)[0])
    assert not torch.equal(freqs, s.discrete_group("dmlp", 1)[0])  # every family its own stream


def test_no_stream_gives_both_draws_and_a_seed(run) -> None:
    # a model's weights from the seed of the stream its law and contexts are drawn from repeat its draws: the
    # torch generator of (name, k) is seeded with seed_for(name, k), so the contexts held the weights' values
    uses = run["laws"].streams.uses
    assert {"gauss", "gauss-model", "dmlp", "dmlp-model", "markov-constant"} <= {name for name, _ in uses}
    assert {key: kinds for key, kinds in uses.items() if len(kinds) > 1} == {}


def test_a_gaussian_models_contexts_do_not_repeat_its_weights(run) -> None:
    s = run["laws"]
    _, x = s.gaussian_group("gauss", 0)  # (m, T, d_in)
    model = depth.CausalTransformer(**s.shape, seed=s.streams.seed_for("gauss-model", 0))
    z = torch.linalg.solve_triangular(torch.linalg.cholesky(s.gaussian_group("gauss", 0)[0]),
                                      x.reshape(-1, s.d_in).T, upper=False).reshape(-1)  # the standard normals
    w = torch.cat([p.detach().reshape(-1) * math.sqrt(p.shape[-1]) for p in model.parameters()])
    assert not torch.isclose(z[None, :], w[:, None], rtol=0, atol=1e-12).any()


def test_flat_dirichlet_is_normalised_exponentials_with_the_dirichlet_moments() -> None:
    g = torch.Generator().manual_seed(0)
    pi = flat_dirichlet((40_000, 5), g)  # (n, V)
    assert pi.dtype == torch.float64 and (pi > 0).all()
    assert torch.allclose(pi.sum(-1), torch.ones(40_000, dtype=torch.float64))
    # Dirichlet(1, ..., 1): E π_v = 1/V, Var π_v = (V − 1)/(V²(V + 1)) = 4/150
    se_mean = math.sqrt(4 / 150 / 40_000)
    assert torch.allclose(pi.mean(0), torch.full((5,), 0.2, dtype=torch.float64), atol=5 * se_mean)
    assert torch.allclose(pi.var(0), torch.full((5,), 4 / 150, dtype=torch.float64), rtol=0.05)
    g = torch.Generator().manual_seed(1)
    e = torch.empty(5, dtype=torch.float64).exponential_(generator=g)
    assert torch.equal(flat_dirichlet(5, torch.Generator().manual_seed(1)), e / e.sum())
    with pytest.raises(ValueError, match="shape must end in a vocabulary of at least 2"):
        flat_dirichlet(1, g)


def test_markov_kernel_is_stochastic_and_sticky() -> None:
    P = depth.markov_kernel(4, 0.75, torch.Generator().manual_seed(0))
    assert torch.allclose(P.sum(1), torch.ones(4, dtype=torch.float64)) and (P.diagonal() >= 0.75).all()


@pytest.mark.parametrize("name", list(EXPERIMENTS))
def test_an_experiment_alone_gives_the_chapters_numbers(run, name) -> None:
    # every experiment draws only from streams named for it: run alone, on fresh laws, it gives the same numbers
    alone = EXPERIMENTS[name](_laws(0))
    assert _same(alone.measurements, run[name].measurements)
    assert _same({"": alone.numbers}, {"": run[name].numbers})


def test_paired_contexts_share_the_checkpoint_tokens(run) -> None:
    xd, cp = run["models"].contexts, run["laws"].checkpoints
    assert xd.shape == (16, 64)
    assert torch.equal(xd[0::2, cp - 1], xd[1::2, cp - 1]) and not torch.equal(xd[0::2], xd[1::2])


def test_shapes(run) -> None:
    n_t = len(run["laws"].checkpoints)
    for d in (run["gauss"], run["models"].gmlp, run["models"].dattn, run["models"].dmlp):
        assert d.sq.shape == (5, 16, n_t) and d.hs.shape == (5, 16, n_t, 4)
        assert len(d.slopes) == 4 and len(d.reach) == 4 and all(b >= 0 for b in d.reach)
    assert np.all(run["gauss"].sq[0] < 1e-20)  # h^(0) = E x = F_0(x)
    assert run["tail"].sq["large"].shape == (8, len(run["tail"].t_stream))
    assert set(run["positions"].variance) == {"none", "learned", "rotary"}
    r_pos = SIZES["n_streams"]  # Experiment 4's own contexts, as many as the laws' by default
    assert run["positions"].variance["rotary"].shape == (r_pos // 2, n_t)
    assert run["positions"].gap["learned"].shape == (r_pos, n_t)
    assert run["positions"].numbers["n_pairs_positions"] == r_pos // 2
    assert run["markov"].sq[2].shape == (16, n_t)  # 16 / MARKOV_PATHS kernels, MARKOV_PATHS paths each
    assert run["markov"].numbers["n_kernels"] == 16 // depth.MARKOV_PATHS
    assert run["markov"].sq_constant.shape == (16 * depth.CONSTANT_CHAINS, n_t)


def test_bias_slope_groups_is_the_fit_of_the_group_means_with_a_delta_method_se() -> None:
    t = np.geomspace(50, 500, 8)
    rng = np.random.default_rng(0)
    bias = np.sqrt(t) * (1 + 0.1 * rng.standard_normal((16, 8)))  # (pairs, n_fit): slope 1/2
    slope, se, dof = depth._bias_slope_groups(t, bias)
    groups = np.array_split(np.arange(8), 4)
    t_g = np.array([np.exp(np.log(t[g]).mean()) for g in groups])
    m = np.stack([bias[:, g].mean(1) for g in groups], 1).mean(0)
    assert slope == pytest.approx(np.polyfit(np.log(t_g), np.log(m), 1)[0]) and dof == 15
    assert 0 < se < 0.1
    bias[:, :2] = -1.0  # a non-positive group mean: no slope
    assert np.isnan(depth._bias_slope_groups(t, bias)[0])


def test_recursion_matches_the_closed_form(run) -> None:
    assert run["recursion"].rel < 1e-8
    assert run["recursion"].numbers == {"gh_nodes_sq": 64}


def test_tail_exponents_are_the_chosen_ones(run) -> None:
    # κ₀ ∝ 1/scale²: the two scales give κ₀ = 5/2 and 2/5
    assert run["tail"].kappa["moderate"] == pytest.approx(2.5)
    assert run["tail"].kappa["large"] == pytest.approx(0.4)


def test_markov_constant_exceeds_the_iid_one_for_a_sticky_chain(run) -> None:
    m = run["markov"]
    assert m.c_markov > m.c_iid > 0 and m.numbers["c_ratio"] == pytest.approx(m.c_markov / m.c_iid)
    # the constant is read on chains of its own, CONSTANT_CHAINS times as many as the slopes'
    n = run["laws"].n_streams * depth.CONSTANT_CHAINS
    assert m.measurements["t4_markov_constant"]["n_streams"] == m.measurements["t4_markov_not_iid"]["n_streams"] == n


def test_context_variance_of_identical_pairs_is_zero() -> None:
    h = torch.randn(3, 2, 5, 4, dtype=torch.float64).repeat_interleave(2, dim=1)  # (L+1, R, n_t, d)
    assert np.array_equal(depth.context_variance(h), np.zeros((2, 5)))


def test_measurements_are_the_rules_ids(run) -> None:
    rules = list(yaml.safe_load(RULES.read_text(encoding="utf-8")))
    ids = [k for name in EXPERIMENTS for k in run[name].measurements]
    assert ids == rules  # every rule, once, in the rules file's order
    assert list(run["gauss"].measurements) == [f"slope_gauss_L{l}" for l in range(1, 5)] + ["mean_gap_slope_gauss"]
    assert not run["laws"].measurements


def test_rules_declare_no_per_run_claims() -> None:
    # every family draws a model per pair of streams: the pairs are replicates of model and context
    assert "per_run" not in RULES.read_text(encoding="utf-8")


def test_mean_gap_slope_is_the_slope_of_the_pooled_mean_and_the_rate_that_of_the_models_means(run) -> None:
    s = run["laws"]
    for d in (run["gauss"], run["models"].dattn):
        m = d.measurements[f"mean_gap_slope_{d.tag}"]
        sq = d.sq[-1][:, s.fit]  # (R, n_fit)
        per_model = sq.reshape(2, 8, -1).mean(1)  # (models, n_fit): each model's mean over its 8 contexts
        assert m["value"] == pytest.approx(np.polyfit(np.log(s.t_fit), np.log(sq.mean(0)), 1)[0])
        assert m["per_model"] == pytest.approx(np.polyfit(np.log(s.t_fit), np.log(per_model).mean(0), 1)[0])
        rate = d.measurements[f"slope_{d.tag}_L4"]
        slopes = [np.polyfit(np.log(s.t_fit), np.log(g), 1)[0] for g in per_model]
        assert rate["value"] == pytest.approx(np.mean(slopes))
        assert rate["se"] == pytest.approx(np.std(slopes, ddof=1) / np.sqrt(2)) and rate["dof"] == 1


def test_group_means_and_rate_slope_closed_forms() -> None:
    t = np.array([10.0, 100.0, 1000.0])
    sq = np.stack([c / t for c in (1.0, 3.0, 2.0, 4.0)])  # (4, n_t): every stream falls like 1/t
    assert np.allclose(depth.group_means(sq, 2), np.stack([2 / t, 3 / t]))
    b, se, dof, per = depth.rate_slope(t, sq, 2)
    assert b == pytest.approx(-1.0) and se == pytest.approx(0.0, abs=1e-12) and dof == 1 and per.shape == (2,)
    # a model whose mean gap falls like t^(-1/2): the mean of the models' slopes is −3/4
    sq[2:] = np.stack([2 / np.sqrt(t), 4 / np.sqrt(t)])
    assert depth.rate_slope(t, sq, 2)[0] == pytest.approx(-0.75)
    with pytest.raises(ValueError, match="multiple of m=4"):
        depth.group_means(sq[:3], 4)


def test_attention_only_families_draw_a_law_and_a_model_per_pair(run) -> None:
    s, g, d = run["laws"], run["gauss"], run["models"].dattn
    want = [depth.tail_safe_logit_scale(s.gaussian_group("gauss", k)[0], list(depth.SCALES),
                                        kappa_min=depth.KAPPA_MIN, **s.shape, seed=s.streams.seed_for("gauss-model", k))
            for k in range(s.n_models)]
    assert g.scales == want and len(d.scales) == s.n_models
    assert g.chi is not None and g.chi >= 1.0 - 1e-9 and g.numbers["chi_gauss"] == g.chi
    assert g.numbers["scale_g"] == depth._range_text(want)


def test_models_of_a_family_see_the_contexts_of_their_own_law(run) -> None:
    # pair k of the attention-only discrete family: its model's gaps are those of its law's contexts
    s, d = run["laws"], run["models"].dattn
    freqs, x, pilot = s.discrete_group("dattn", 1, n_pilot=depth.PILOT_CONTEXTS)
    shape = dict(vocab_size=s.vocab, d_model=s.d_model, n_layers=s.n_layers, seed=s.streams.seed_for("discrete", 1))
    scale, _ = depth.sink_free_logit_scale(list(depth.SCALES), pilot, **shape)
    _, sq, _, _ = depth._discrete(s, depth.CausalTransformer(**shape, logit_scale=scale), freqs, x)
    assert np.allclose(sq, d.sq[:, 8:16], rtol=1e-12, atol=0)


def test_recursion_refuses_no_scale_and_holds_for_the_law_and_model_of_seed_31337() -> None:
    # Σ and probe of seed 31337 as the chapter once drew them (d_model 8, depth 4): every scale from 0.1 up
    # has some κ_l < 2 and the mean field grows ~170-fold by depth 4 at 0.1, where the quadrature disagreed
    # with the closed form by 38.65 (relative)
    streams = Streams(31337, "08")
    s = depth.context_laws(d_in=2, d_model=8, n_layers=4, vocab=5, t_max=64, n_streams=16, quad_nodes=48,
                           n_boot=20, streams=streams)
    cov = s.covariance(streams.torch_generator("draws"))
    with pytest.raises(ValueError, match="no logit scale"):
        depth.tail_safe_logit_scale(cov, [0.1, 0.2, 0.5, 1.0], kappa_min=depth.KAPPA_MIN, **s.shape,
                                    seed=streams.seed_for("probe"))
    queries = torch.randn(64, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    scale, rel = depth.recursion_error(s, cov, streams.seed_for("probe"), queries @ torch.linalg.cholesky(cov).T)
    assert scale < 0.1 and rel < 1e-8


def test_deterministic_for_a_seed(run) -> None:
    again = _chain(0)
    for name in EXPERIMENTS:
        assert _same(run[name].measurements, again[name].measurements), name
        assert _same({"": run[name].numbers}, {"": again[name].numbers}), name
    other = _laws(1)
    assert not torch.equal(other.gaussian_group("gauss", 0)[0], run["laws"].gaussian_group("gauss", 0)[0])


def test_plots(run) -> None:
    fig, ax = plt.subplots()
    run["gauss"].plot(ax)
    run["tail"].plot(ax)
    run["markov"].plot(ax)
    fig2, axes = plt.subplots(2, 2)
    run["models"].plot(axes)
    assert len(fig2.axes) == 3
    fig3, axes = plt.subplots(1, 2)
    run["positions"].plot(axes)
    for f in (fig, fig2, fig3):
        plt.close(f)


@pytest.mark.parametrize(("call", "match"), [
    (lambda s: depth.context_laws(**{**SIZES, "n_streams": 12}, streams=s), "n_streams must be a multiple of 8"),
    (lambda s: depth.context_laws(**{**SIZES, "n_streams": 8}, streams=s), "at least 16"),
    (lambda s: depth.context_laws(**{**SIZES, "t_max": 20}, streams=s), "t_max must be at least"),
    (lambda s: depth.context_laws(**{**SIZES, "vocab": 0}, streams=s), "vocab must be"),
    (lambda s: depth.context_laws(**SIZES, streams=s, device="tpu"), "device must be"),
    (lambda s: depth.tail(depth.context_laws(**SIZES, streams=s), t_tail=100, n_tail=8), "t_tail must exceed"),
    (lambda s: depth.tail(depth.context_laws(**SIZES, streams=s), t_tail=300, n_tail=1), "n_tail must be"),
    (lambda s: depth.markov(depth.context_laws(**SIZES, streams=s), stickiness=1.0), "stickiness must lie"),
    (lambda s: depth.positions(depth.context_laws(**SIZES, streams=s), n_streams=5), "n_streams must be an even"),
    (lambda s: depth.positions(depth.context_laws(**SIZES, streams=s), n_streams=0), "n_streams"),
    (lambda s: depth.paired(torch.zeros(3, 20), np.array([4, 8])), "even number of streams"),
])
def test_bad_input(call, match) -> None:
    with pytest.raises(ValueError, match=match):
        call(Streams(0, "08"))


def test_models_plot_needs_a_grid(run) -> None:
    fig, axes = plt.subplots(1, 2)
    with pytest.raises(ValueError, match="2 x 2"):
        run["models"].plot(axes)
    plt.close(fig)


@pytest.mark.parametrize("kw", [dict(n_layers=3), dict(n_layers=1), dict(n_layers=2, pos="rotary", n_heads=2),
                                dict(n_layers=2, pos="learned", mlp=True, layer_norm=True, max_len=40)])
def test_states_at_are_the_forwards_states_at_the_checkpoints(kw) -> None:
    # the last block runs for the checkpoints' queries only: the states of the full forward, to rounding
    m = depth.CausalTransformer(vocab_size=5, d_model=4, attn_chunk=8, seed=3, **kw)
    x = torch.randint(0, 5, (11, 40), generator=torch.Generator().manual_seed(0))
    cp = np.array([1, 2, 9, 16, 17, 33, 40])
    want = hidden_states_at(m, x, cp)  # (L+1, R, n_t, d)
    got = depth.states_at(m, x, cp, batch=4)
    assert got.shape == want.shape and torch.allclose(got, want, rtol=1e-12, atol=1e-13)
    before = depth.states_before_last_block(m, x)  # L of (R, T, d): the forward's, bit for bit
    _, full = m(x, return_hidden=True)
    assert len(before) == m.n_layers and all(torch.equal(a, b) for a, b in zip(before, full, strict=False))
    assert torch.equal(depth.states_at(m, x, cp, hidden=before)[:-1], want[:-1])
    assert torch.equal(depth.early_attention_ratio(m, x, hidden=full), depth.early_attention_ratio(m, x))


def test_mean_field_attention_in_blocks_is_one_softmax_to_rounding(monkeypatch) -> None:
    mf = importlib.import_module("covbook.transformer.mean_field")  # the module: the package re-exports a function
    m = depth.CausalTransformer(d_in=2, d_model=4, n_layers=3, mlp=True, layer_norm=True, seed=1)
    pts, w = depth.gaussian_polar_rule(torch.eye(2, dtype=torch.float64), 12, 10)  # (120, 2), (120,)
    q = torch.randn(7, 2, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    whole = depth.mean_field_with_logit_variances(m, pts, w, q)
    monkeypatch.setattr(mf, "_BLOCK_LOGITS", 5 * 120)  # blocks of 5 queries
    blocks = depth.mean_field_with_logit_variances(m, pts, w, q)
    assert all(torch.allclose(a, b, rtol=1e-13, atol=1e-14) for a, b in zip(whole, blocks, strict=True))
