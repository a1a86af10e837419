"""covbook.experiments.depth (chapter 08) at tiny sizes: shapes, determinism, closed forms, claim ids."""

from __future__ import annotations

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
from helpers import ROOT  # noqa: E402

SIZES = dict(d_in=2, d_model=4, n_layers=4, vocab=5, t_max=64, n_streams=6, quad_nodes=8, n_boot=20)
RULES = ROOT / "notebooks" / "rules" / "08_depth_collapse.yml"


def _chain(seed: int) -> dict[str, object]:
    """The chapter's experiments in its order (they share the ``"draws"`` stream)."""
    s = depth.setting(**SIZES, streams=Streams(seed, "08"), device="cpu")
    out: dict[str, object] = {"setting": s, "recursion": depth.recursion(s), "gauss": depth.gaussian(s)}
    out["tail"] = depth.tail(s, t_tail=300, n_tail=8)
    out["models"] = depth.models(s, out["gauss"])
    out["positions"] = depth.positions(s, out["models"])
    out["markov"] = depth.markov(s, stickiness=0.75)
    return out


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


def test_setting_draws_the_laws_and_checkpoints(run) -> None:
    s = run["setting"]
    assert s.cov.shape == (2, 2) and torch.allclose(s.cov, s.cov.T)
    assert torch.linalg.eigvalsh(s.cov).min() >= 0.3 - 1e-12
    assert s.freqs.shape == (5,) and math.isclose(s.freqs.sum().item(), 1.0)
    assert s.checkpoints[0] == 16 and s.checkpoints[-1] == 63 and s.fit.all()
    assert s.numbers == {"t_max": 64, "n_streams": 6, "n_pairs": 3, "vocab": 5, "d_model": 4, "fit_from": 16}


def test_frequencies_are_the_draw_of_the_global_stream() -> None:
    # the chapter drew π from torch's global generator, which setup() seeds from the "global" stream
    streams = Streams(3, "08")
    torch.manual_seed(streams.seed_for("global"))
    expected = torch.distributions.Dirichlet(torch.ones(5, dtype=torch.float64)).sample()
    assert torch.equal(depth.setting(**SIZES, streams=streams).freqs, expected)


def test_paired_contexts_share_the_checkpoint_tokens(run) -> None:
    xd, cp = run["models"].contexts, run["setting"].checkpoints
    assert xd.shape == (6, 64)
    assert torch.equal(xd[0::2, cp - 1], xd[1::2, cp - 1]) and not torch.equal(xd[0::2], xd[1::2])


def test_shapes(run) -> None:
    n_t = len(run["setting"].checkpoints)
    for d in (run["gauss"], run["models"].gmlp, run["models"].dattn, run["models"].dmlp):
        assert d.sq.shape == (5, 6, n_t) and d.hs.shape == (5, 6, n_t, 4)
        assert len(d.slopes) == 4 and len(d.reach) == 4 and all(b >= 0 for b in d.reach)
    assert np.all(run["gauss"].sq[0] < 1e-20)  # h^(0) = E x = F_0(x)
    assert run["tail"].sq["large"].shape == (8, len(run["tail"].t_stream))
    assert set(run["positions"].variance) == {"none", "learned", "rotary"}
    r_pos = SIZES["n_streams"]  # Experiment 4's own contexts, as many as the setting's by default
    assert run["positions"].variance["rotary"].shape == (r_pos // 2, n_t)
    assert run["positions"].gap["learned"].shape == (r_pos, n_t)
    assert run["positions"].numbers["n_pairs_positions"] == r_pos // 2
    assert run["markov"].sq[2].shape == (6, n_t)


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
    n = run["setting"].n_streams * depth.CONSTANT_CHAINS
    assert m.measurements["t4_markov_constant"]["n_streams"] == m.measurements["t4_markov_not_iid"]["n_streams"] == n


def test_context_variance_of_identical_pairs_is_zero() -> None:
    h = torch.randn(3, 2, 5, 4, dtype=torch.float64).repeat_interleave(2, dim=1)  # (L+1, R, n_t, d)
    assert np.array_equal(depth.context_variance(h), np.zeros((2, 5)))


def test_measurements_are_the_rules_ids(run) -> None:
    rules = list(yaml.safe_load(RULES.read_text(encoding="utf-8")))
    ids = [k for name in ("recursion", "gauss", "tail", "models", "positions", "markov")
           for k in run[name].measurements]
    assert ids == rules  # every rule, once, in the rules file's order
    assert list(run["gauss"].measurements) == [f"slope_gauss_L{l}" for l in range(1, 5)] + ["mean_gap_slope_gauss"]
    assert not run["setting"].measurements


def test_rules_declare_no_per_run_claims() -> None:
    # every family draws a model per pair of streams: the pairs are replicates of model and context
    assert "per_run" not in RULES.read_text(encoding="utf-8")


def test_mean_gap_slope_is_the_slope_of_the_arithmetic_mean(run) -> None:
    s = run["setting"]
    for d in (run["gauss"], run["models"].dattn):
        m = d.measurements[f"mean_gap_slope_{d.tag}"]
        pairs = depth.pair_means(d.sq[-1])[:, s.fit]  # (R/2, n_fit)
        assert m["value"] == pytest.approx(np.polyfit(np.log(s.t_fit), np.log(pairs.mean(0)), 1)[0])
        assert m["typical"] == pytest.approx(np.polyfit(np.log(s.t_fit), np.log(pairs).mean(0), 1)[0])


def test_attention_only_families_draw_a_model_per_pair(run) -> None:
    s, g, d = run["setting"], run["gauss"], run["models"].dattn
    want = [depth.tail_safe_logit_scale(s.cov, list(depth.SCALES), kappa_min=depth.KAPPA_MIN, **s.shape,
                                        seed=s.streams.seed_for("gauss", k)) for k in range(s.n_streams // 2)]
    assert g.scales == want and len(d.scales) == s.n_streams // 2
    assert g.chi is not None and g.chi >= 1.0 - 1e-9
    assert g.numbers["scale_g"] == depth._range_text(want)


def test_recursion_refuses_no_scale_and_holds_for_the_model_of_seed_31337() -> None:
    # the probe of seed 31337 (d_model 8, depth 4): every scale from 0.1 up has some κ_l < 2 and its mean field
    # grows ~170-fold by depth 4 at 0.1, where the quadrature disagreed with the closed form by 38.65 (relative)
    s = depth.setting(d_in=2, d_model=8, n_layers=4, vocab=5, t_max=64, n_streams=2, quad_nodes=48,
                      n_boot=20, streams=Streams(31337, "08"))
    with pytest.raises(ValueError, match="no logit scale"):
        depth.tail_safe_logit_scale(s.cov, [0.1, 0.2, 0.5, 1.0], kappa_min=depth.KAPPA_MIN, **s.shape,
                                    seed=s.streams.seed_for("probe"))
    r = depth.recursion(s)
    assert r.logit_scale < 0.1 and r.rel < 1e-8


def test_deterministic_for_a_seed(run) -> None:
    again = _chain(0)
    for name in ("recursion", "gauss", "tail", "models", "positions", "markov"):
        assert _same(run[name].measurements, again[name].measurements), name
        assert _same({"": run[name].numbers}, {"": again[name].numbers}), name
    other = depth.setting(**SIZES, streams=Streams(1, "08"))
    assert not torch.equal(other.cov, run["setting"].cov)


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
    (lambda s: depth.setting(**{**SIZES, "n_streams": 5}, streams=s), "n_streams must be an even"),
    (lambda s: depth.setting(**{**SIZES, "t_max": 20}, streams=s), "t_max must be at least"),
    (lambda s: depth.setting(**{**SIZES, "vocab": 0}, streams=s), "vocab must be"),
    (lambda s: depth.setting(**SIZES, streams=s, device="tpu"), "device must be"),
    (lambda s: depth.tail(depth.setting(**SIZES, streams=s), t_tail=100, n_tail=8), "t_tail must exceed"),
    (lambda s: depth.tail(depth.setting(**SIZES, streams=s), t_tail=300, n_tail=1), "n_tail must be"),
    (lambda s: depth.markov(depth.setting(**SIZES, streams=s), stickiness=1.0), "stickiness must lie"),
    (lambda s: depth.models(depth.setting(**SIZES, streams=s), None), "gauss must be"),
    (lambda s: depth.positions(depth.setting(**SIZES, streams=s), None), "m must be"),
    (lambda s: depth.positions(depth.setting(**SIZES, streams=s), depth.Models.__new__(depth.Models), n_streams=5),
     "n_streams must be an even"),
    (lambda s: depth.positions(depth.setting(**SIZES, streams=s), depth.Models.__new__(depth.Models), n_streams=0),
     "n_streams"),
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
