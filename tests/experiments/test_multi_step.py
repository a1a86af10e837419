"""covbook.experiments.multi_step (chapter 06) at tiny sizes: shapes, determinism, the identity, claim ids."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
import yaml

from covbook import icl
from covbook.experiments import multi_step, one_step
from covbook.experiments.regression import RegressionProblem
from covbook.icl import RegressionTasks
from covbook.streams import Streams
from helpers import ROOT

RULES = set(yaml.safe_load((ROOT / "notebooks" / "rules" / "06_icl_multi_step.yml").read_text(encoding="utf-8")))
SIZES = {"n_tasks": 4, "n_max": 32}


def _problem(seed: int = 0) -> RegressionProblem:
    return multi_step.setting(3, eta=0.5, streams=Streams(seed, "06"))


@pytest.fixture(scope="module")
def results() -> dict[str, object]:
    st = Streams(0, "06")
    p = multi_step.setting(3, eta=0.5, streams=st)
    return {"setting": p,
            "identity": multi_step.identity(p, streams=st),
            "tracking": multi_step.tracking(p, k_track=3, streams=st, n_min=4, **SIZES),
            "convergence": multi_step.convergence(p, streams=st, **SIZES),
            "unstable": multi_step.unstable(p, streams=st, **SIZES),
            "depth": multi_step.depth(p, n_tasks=4, n_depth=(8, 16), k_max=5, streams=st)}


def test_setting() -> None:
    p, q = _problem(), _problem()
    assert torch.equal(p.cov_x, q.cov_x) and torch.equal(p.w, q.w) and not torch.equal(p.w, _problem(1).w)
    np.testing.assert_allclose(torch.linalg.eigvalsh(p.cov_x).numpy(), [0.25, 0.5, 1.0], atol=1e-12)
    assert p.eta_crit == pytest.approx(2.0)
    assert torch.allclose(p.gamma @ p.cov_x, torch.eye(3, dtype=torch.float64))
    assert set(p.numbers) == {"eta_crit", "eta"}


def test_setting_is_the_regression_problem_of_chapter_05() -> None:
    p, q = _problem(), one_step.setting(3, eta=0.5, noise=0.5, streams=Streams(0, "05"))
    assert type(p) is type(q) is RegressionProblem
    assert p.noise == multi_step.NOISE and p.directions == {} and set(q.directions) == {"rate", "mean"}


def test_measurements_carry_exactly_the_rules_ids(results) -> None:
    ids = [k for r in results.values() for k in r.measurements]
    assert len(ids) == len(set(ids)) and set(ids) == RULES


def test_the_literal_model_is_the_identity(results) -> None:
    assert 0 <= results["identity"].measurements["identity_max_error"]["value"] < 1e-12


def test_tracking_shapes_and_determinism(results) -> None:
    t = results["tracking"]
    assert t.ns.tolist() == [4, 8, 16, 32] and t.sq["plain"].shape == (4, 4, 4)
    assert t.numbers["n_min_track"] == 4 and t.numbers["k_track"] == 3
    again = multi_step.tracking(_problem(), k_track=3, streams=Streams(0, "06"), n_min=4, **SIZES)
    assert again.measurements == t.measurements
    np.testing.assert_array_equal(again.sq["newton"], t.sq["newton"])
    assert t.measurements["track_slope_plain_k2"]["k"] == 2 and t.measurements["track_slope_plain_kmax"]["k"] == 3


def test_tracking_reads_prefixes_of_the_same_contexts_at_queries_of_one_logit_variance() -> None:
    """The model at N is the model on the first N examples of each context, its query scaled to TRACK_S."""
    st = Streams(0, "06")
    p = multi_step.setting(3, eta=0.5, streams=st)
    t = multi_step.tracking(p, k_track=3, streams=st, n_min=4, **SIZES)
    drawn = multi_step._tasks(p, 4, 32, Streams(0, "06").seed_for("track"), torch.device("cpu"))
    q = multi_step.at_logit_variance(drawn.x_query, p.cov_x, 0.5, multi_step.TRACK_S)  # (B, d)
    np.testing.assert_allclose((0.25 * ((q @ p.cov_x) * q).sum(-1)).numpy(), multi_step.TRACK_S, rtol=1e-12)
    first = drawn.with_query(q)
    for j, n in enumerate(t.ns):
        short = RegressionTasks(first.tokens[:, :n], first.query, first.y_query, first.w)  # the first n examples
        pred = icl.power_identity_predictions(short, 0.5, 3)  # (K+1, B)
        target = icl.population_gd(p.cov_x, p.w, 0.5, 3) @ q.T  # (K+1, B)
        np.testing.assert_allclose(t.sq["plain"][:, j], ((pred - target) ** 2).T.numpy(), rtol=1e-9, atol=1e-15)


def test_at_logit_variance_scales_each_query_along_itself() -> None:
    x = torch.tensor([[1.0, 2.0], [-3.0, 0.5]], dtype=torch.float64)
    m = torch.tensor([[2.0, 0.3], [0.3, 1.0]], dtype=torch.float64)
    q = multi_step.at_logit_variance(x, m, 0.7, 1.5)
    np.testing.assert_allclose((0.49 * ((q @ m) * q).sum(-1)).numpy(), [1.5, 1.5], rtol=1e-12)
    assert torch.allclose(q / q.norm(dim=-1, keepdim=True), x / x.norm(dim=-1, keepdim=True))
    with pytest.raises(ValueError, match="x_query"):
        multi_step.at_logit_variance(torch.zeros(1, 2, dtype=torch.float64), m, 0.7, 1.5)


def test_closed_forms(results) -> None:
    c = results["convergence"]
    assert list(c.conv) == list(multi_step.CONVERGENCE_ETAS)
    for e in c.conv.values():  # K = 0 predicts 0: the relative error is 1 exactly
        assert e["pop"].shape == (multi_step.K_CONV + 1,)
        assert e["pop"][0] == pytest.approx(1.0) and e["model"][0] == pytest.approx(1.0)
    assert c.measurements["pop_diverges"]["value"] > 1 and c.measurements["pop_converges"]["value"] < 0.1
    lam = np.array([1.0, 0.5, 0.25])  # the closed form over w ~ N(0, I): Σλ(1 − ηλ)^(2K)/Σλ, for every draw
    for e, conv in c.conv.items():
        expect = [(lam * (1 - e * lam) ** (2 * k)).sum() / lam.sum() for k in range(multi_step.K_CONV + 1)]
        np.testing.assert_allclose(conv["pop_mean"], expect, rtol=1e-10)
    assert c.measurements["pop_diverges"]["value"] == pytest.approx(expect[-1] / expect[1])  # η = 2.2, ≈ 53
    u = results["unstable"].measurements["t3_population_model_diverges"]
    assert u["value"] == pytest.approx(u["prediction"], abs=1e-9)  # (1 − ηλ_max)^(2K), λ_max = 1
    # the task is w = v_max whatever the seed's w: x_qᵀw_1 = 0.15 η λ_max
    assert results["unstable"].measurements["t3_model_layer1_tracks"]["prediction"] == pytest.approx(0.15 * 2.2)
    d = results["depth"]
    assert list(d.depth) == [8, 16] and d.depth[8].shape == (6,) and d.pop_err[0] == pytest.approx(1.0)
    assert d.depth[16][0] == pytest.approx(1.0) and np.all(np.diff(d.pop_err) < 0)  # GD decreases in K


def test_plots(results) -> None:
    fig, ax = plt.subplots()
    results["tracking"].plot(ax)
    assert len(ax.get_lines()) == 8  # points and fitted line for 4 curves
    plt.close(fig)
    fig, axes = plt.subplots(1, 2)
    results["convergence"].plot(axes)
    assert len(axes[0].get_lines()) == 2 * len(multi_step.CONVERGENCE_ETAS)  # the chapter's w and w ~ N(0, I)
    plt.close(fig)
    fig, ax = plt.subplots()
    results["depth"].plot(ax)
    assert len(ax.get_lines()) == 3
    plt.close(fig)


@pytest.mark.parametrize(("call", "match"), [
    (lambda p, st: multi_step.setting(0, eta=0.5, streams=st), "d"),
    (lambda p, st: multi_step.setting(3, eta=0.0, streams=st), "eta"),
    (lambda p, st: multi_step.tracking(p, n_tasks=4, n_max=32, k_track=2, streams=st, n_min=4), "k_track"),
    (lambda p, st: multi_step.tracking(p, n_tasks=4, n_max=128, k_track=3, streams=st), "n_max"),
    (lambda p, st: multi_step.tracking(p, n_tasks=4, n_max=32, k_track=3, streams=st, n_min=0), "n_min"),
    (lambda p, st: multi_step.tracking(p, n_tasks=1, n_max=32, k_track=3, streams=st, n_min=4), "n_tasks"),
    (lambda p, st: multi_step.convergence(p, n_tasks=0, n_max=32, streams=st), "n_tasks"),
    (lambda p, st: multi_step.unstable(p, n_tasks=1, n_max=32, streams=st), "n_tasks"),
    (lambda p, st: multi_step.depth(p, n_tasks=4, n_depth=(8,), k_max=5, streams=st), "n_depth"),
    (lambda p, st: multi_step.depth(p, n_tasks=4, n_depth=(8, -1), k_max=5, streams=st), "n_depth"),
])
def test_bad_input(call, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call(_problem(), Streams(0, "06"))


# --- mutants: the claims that decide T3's parts fail at the published profile (quick) when the theory is broken ---

QUICK = {"n_tasks": 64, "n_max": 1024, "k_max": 200, "n_depth": (64, 256, 512)}  # notebooks/06's parameters cell


def _judged(result, cid: str):
    from covbook.rules import Measurement, judge, load_rules

    m = dict(result.measurements[cid])
    value, fields = m.pop("value"), {k: m.pop(k) for k in ("prediction", "se", "dof") if k in m}
    rule = load_rules(ROOT / "notebooks" / "rules" / "06_icl_multi_step.yml")[cid]
    return judge(rule, Measurement(cid, "06_icl_multi_step", value, **fields, extra=m))


def _population_model(cov_x: torch.Tensor, sign: float = -1.0):
    """Mutant: a model that is population GD at every N, x_qᵀ(I − (I − ηΣ)^K)w (no finite-context forgetting);
    ``sign=+1``: the residual adds the step, (I + ηΣ)^K, where gradient descent subtracts it."""
    def predictions(tasks: RegressionTasks, eta: float, layers: int) -> torch.Tensor:
        eye = torch.eye(tasks.d, dtype=torch.float64)
        p = torch.stack([eye - torch.linalg.matrix_power(eye + sign * eta * cov_x, k) for k in range(layers + 1)])
        return torch.einsum("bi,kij,bj->kb", tasks.x_query.cpu(), p, tasks.w.cpu())  # (K+1, B)
    return predictions


def test_a_residual_that_adds_the_step_fails_the_convergence_claim(monkeypatch) -> None:
    st = Streams(0, "06")
    p = multi_step.setting(3, eta=0.5, streams=st)
    monkeypatch.setattr(multi_step, "identity_by_depth", _population_model(p.cov_x, sign=1.0))
    claim = _judged(multi_step.convergence(p, streams=st, n_tasks=QUICK["n_tasks"], n_max=QUICK["n_max"]),
                    "model_converges")
    assert claim.rule_kind == "evidence" and not claim.passed
    monkeypatch.setattr(multi_step, "identity_by_depth", _population_model(p.cov_x))  # the unbroken limit passes
    claim = _judged(multi_step.convergence(p, streams=Streams(0, "06"), n_tasks=QUICK["n_tasks"],
                                           n_max=QUICK["n_max"]), "model_converges")
    assert claim.passed and claim.kind == "evidence"


@pytest.mark.parametrize("cid", ["depth_tradeoff", "depth_forgets", "depth_larger_n_better"])
def test_a_model_that_is_population_gd_at_every_n_fails_the_depth_claims(monkeypatch, cid: str) -> None:
    st = Streams(0, "06")
    p = multi_step.setting(3, eta=0.5, streams=st)
    sizes = {k: QUICK[k] for k in ("n_tasks", "k_max", "n_depth")}
    monkeypatch.setattr(multi_step, "identity_by_depth", _population_model(p.cov_x))
    claim = _judged(multi_step.depth(p, streams=st, **sizes), cid)
    assert claim.rule_kind == "evidence" and not claim.passed


def test_relative_error_with_se_is_the_delta_method() -> None:
    rng = np.random.default_rng(0)
    norm = rng.chisquare(1, 4000)
    sq = 0.3 * norm + 0.1 * rng.standard_normal(4000)  # e = 0.3 c + noise: r ≈ 0.3, se ≈ 0.1/(√n c̄)
    r, se = multi_step.relative_error_with_se(sq, norm)
    assert r == pytest.approx(0.3, abs=0.01) and se == pytest.approx(0.1 / (np.sqrt(4000) * norm.mean()), rel=0.05)
