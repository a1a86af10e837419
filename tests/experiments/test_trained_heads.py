"""covbook.experiments.trained_heads (chapter 07) at tiny sizes: shapes, determinism, closed forms, claim ids."""

from __future__ import annotations

import re
from pathlib import Path

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from covbook import icl  # noqa: E402
from covbook.experiments import trained_heads as th  # noqa: E402
from covbook.rules import load_rules  # noqa: E402
from covbook.streams import Streams  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "07_trained_attention.md"
RULES = ROOT / "notebooks" / "rules" / "07_trained_attention.yml"
D, N, N_SEEDS, N_EVAL, N_RANDOM = 3, 4, 2, 16, 300
SIZES = dict(d=D, n_examples=N, steps=4, batch=8, lr=0.02, n_seeds=N_SEEDS, restarts=2, select_fraction=0.5,
             n_eval=N_EVAL, init_scale=0.1)


def _all(seed: int = 0):
    s = Streams(seed, "07")
    models = th.train(**SIZES, streams=s)
    refs = th.references(models, streams=s, n_mc=64)
    return models, refs, th.one_layer(models, refs, n_random=N_RANDOM, streams=s), th.two_layers(models, refs)


@pytest.fixture(scope="module")
def results():
    return _all()


def test_shapes(results) -> None:
    models, refs, one, two = results
    assert sorted(models.runs) == [(L, k) for L in th.DEPTHS for k in range(N_SEEDS)]
    assert models.select_steps == 2 and len(models.test) == N_EVAL
    for (layers, _), r in models.runs.items():
        assert r.sq.shape == (N_EVAL,) and len(r.forms) == len(r.align) == len(r.init) == layers
        assert r.forms[0]["B"].shape == r.forms[0]["V"].shape == (D + 1, D + 1)
        assert len(r.restart_logs) == SIZES["restarts"] - 1
    assert refs.eta_grid.shape == refs.c_risk.shape == refs.c_scale.shape == (2 * th.HEAD_SCALES.size,)
    assert refs.gd2_sq.shape == refs.head[1]["sq"].shape == (N_EVAL,) and refs.best_sign in (-1, 1)
    assert all(v.shape == (N_SEEDS,) for v in one.align.values()) and one.cos_random.shape == (N_RANDOM,)
    assert two.risk.shape == two.relay.shape == (N_SEEDS,)
    assert two.table().shape == (2 * N_SEEDS, 7)


def test_deterministic_for_the_streams(results) -> None:
    again = th.train(**SIZES, streams=Streams(0, "07"))
    for key, r in results[0].runs.items():
        np.testing.assert_array_equal(r.sq, again.runs[key].sq)
    other = th.train(**SIZES, streams=Streams(1, "07"))
    assert not np.array_equal(other.runs[(1, 0)].sq, again.runs[(1, 0)].sq)


def test_closed_forms(results) -> None:
    _, refs, one, _ = results
    assert refs.gd1_risk == pytest.approx((D + 1) / (N + D + 1))
    assert refs.gd1_step == pytest.approx(float(icl.gd_optimal_step(N, D)))
    assert refs.best_head["risk"] == min(refs.head[-1]["risk"], refs.head[1]["risk"])
    # the random baseline: d · E|cos(B_xx, I)| is near √(2/π) (the claim's window at a moderate size)
    m = one.measurements["random_cos_order_1_over_d"]
    assert abs(m["value"] - m["prediction"]) < m["allowance"] + 4 * m["se"]


def test_claim_ids_and_glued_names_are_the_chapters(results) -> None:
    ids = [cid for r in results for cid in r.measurements]
    assert ids == list(load_rules(RULES))  # every rule, in the rules file's order
    glued = {name for r in results for name in r.numbers}
    wanted = set(re.findall(r"\{glue:text\}`([A-Za-z0-9_-]+)", NOTEBOOK.read_text(encoding="utf-8")))
    assert wanted <= glued, sorted(wanted - glued)


def test_plots(results) -> None:
    models, refs, _, two = results
    fig, ax = plt.subplots()
    refs.plot(ax)
    models.plot(ax, refs)
    fig1, axes1 = plt.subplots(1, 2)
    models.plot_layers(axes1, layers=1)
    fig2, axes2 = plt.subplots(2, 2)
    models.plot_layers(axes2, layers=2, k=1)
    assert len(axes2[1, 1].images) == 1
    with pytest.raises(ValueError, match="axes"):
        models.plot_layers(axes1, layers=2)
    plt.close("all")


@pytest.mark.parametrize(("change", "match"), [
    (dict(n_eval=1), "n_eval"),
    (dict(steps=1), "steps"),
    (dict(select_fraction=0.0), "select_fraction"),
    (dict(d=0), "d"),
    (dict(lr=-1.0), "lr"),
    (dict(init_scale=0.0), "init_scale"),
])
def test_bad_input(change: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        th.train(**{**SIZES, **change}, streams=Streams(0, "07"))


def test_bad_results(results) -> None:
    models, refs, _, _ = results
    with pytest.raises(ValueError, match="models"):
        th.references(refs, streams=Streams(0, "07"))
    with pytest.raises(ValueError, match="n_random"):
        th.one_layer(models, refs, n_random=1, streams=Streams(0, "07"))
    with pytest.raises(ValueError, match="refs"):
        th.two_layers(models, models)
