"""covbook.experiments.multi_step (chapter 06) at tiny sizes: shapes, determinism, the identity, claim ids."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
import yaml

from covbook.experiments import multi_step
from covbook.streams import Streams
from helpers import ROOT

RULES = set(yaml.safe_load((ROOT / "notebooks" / "rules" / "06_icl_multi_step.yml").read_text(encoding="utf-8")))
SIZES = {"n_tasks": 4, "n_max": 32}


def _problem(seed: int = 0) -> multi_step.Setting:
    return multi_step.setting(3, eta=0.5, streams=Streams(seed, "06"))


@pytest.fixture(scope="module")
def results() -> dict[str, object]:
    st = Streams(0, "06")
    p = multi_step.setting(3, eta=0.5, streams=st)
    return {"setting": p,
            "identity": multi_step.identity(p, streams=st),
            "tracking": multi_step.tracking(p, k_track=2, streams=st, **SIZES),
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


def test_measurements_carry_exactly_the_rules_ids(results) -> None:
    ids = [k for r in results.values() for k in r.measurements]
    assert len(ids) == len(set(ids)) and set(ids) == RULES


def test_the_literal_model_is_the_identity(results) -> None:
    assert 0 <= results["identity"].measurements["identity_max_error"]["value"] < 1e-12


def test_tracking_shapes_and_determinism(results) -> None:
    t = results["tracking"]
    assert len(t.ns) == 4 and (t.ns[0], t.ns[-1]) == (4, 32) and t.sq["plain"].shape == (4, 4, 3)
    assert t.numbers["n_min_track"] == 4 and t.numbers["k_track"] == 2
    again = multi_step.tracking(_problem(), k_track=2, streams=Streams(0, "06"), **SIZES)
    assert again.measurements == t.measurements
    np.testing.assert_array_equal(again.sq["newton"], t.sq["newton"])


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
    (lambda p, st: multi_step.tracking(p, n_tasks=4, n_max=32, k_track=1, streams=st), "k_track"),
    (lambda p, st: multi_step.tracking(p, n_tasks=4, n_max=8, k_track=2, streams=st), "n_max"),
    (lambda p, st: multi_step.convergence(p, n_tasks=0, n_max=32, streams=st), "n_tasks"),
    (lambda p, st: multi_step.unstable(p, n_tasks=1, n_max=32, streams=st), "n_tasks"),
    (lambda p, st: multi_step.depth(p, n_tasks=4, n_depth=(8,), k_max=5, streams=st), "n_depth"),
    (lambda p, st: multi_step.depth(p, n_tasks=4, n_depth=(8, -1), k_max=5, streams=st), "n_depth"),
])
def test_bad_input(call, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call(_problem(), Streams(0, "06"))
