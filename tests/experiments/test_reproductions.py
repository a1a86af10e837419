"""covbook.experiments.reproductions (chapter 11) at tiny sizes: shapes, determinism, closed forms, claim ids."""

from __future__ import annotations

import re
from pathlib import Path

import matplotlib
import numpy as np
import pytest
import torch

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from covbook import claims  # noqa: E402
from covbook.experiments import reproductions as rp  # noqa: E402
from covbook.rules import load_rules  # noqa: E402
from covbook.streams import Streams  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "11_prior_work.md"
RULES = ROOT / "notebooks" / "rules" / "11_prior_work.yml"
N_EVAL, M, N_MAX = 64, 8, 40
TRAIN = dict(steps=3, batch=8)


def _all(seed: int = 0):
    s = Streams(seed, "11")
    closed = rp.vo_closed_form()
    step = rp.vo_tuned_step(n_eval=N_EVAL, streams=s)
    lsa = rp.vo_linear_attention(step, **TRAIN, lr=0.02, streams=s)
    head = rp.vo_softmax_head(step, **TRAIN, lr=0.1, streams=s)
    limit = rp.softmax_limit(head, step, n_head_tasks=M, n_head_max=N_MAX, streams=s)
    garg = rp.garg_curves(garg_tasks=4, garg_tasks_key=8, streams=s)
    return closed, step, lsa, head, limit, garg


@pytest.fixture(scope="module")
def results():
    return _all()


def test_shapes(results) -> None:
    _, step, lsa, head, limit, garg = results
    assert step.sq.shape == lsa.sq.shape == head.sq.shape == (N_EVAL,) and len(step.test) == N_EVAL
    assert lsa.gamma.shape == (rp.VO_D, rp.VO_D) and len(lsa.log.steps) >= 1
    assert head.eta_grid.shape == head.c_loss.shape == (2 * rp.HEAD_SCALES.size,)
    n_cp = limit.checkpoints.size
    assert limit.checkpoints[0] == rp.VO_N and limit.checkpoints[-1] == N_MAX
    assert tuple(limit.paths.shape) == (M, n_cp) and limit.mse_exact.shape == limit.mse_t2.shape == (n_cp,)
    assert garg.ks.tolist() == list(range(1, 2 * rp.GARG_D + 1))
    assert all(m.shape == (garg.ks.size, 2) for m in garg.meas.values())
    assert garg.per_task_key[("ols", 10)].shape == (8,)


def test_deterministic_for_the_streams(results) -> None:
    again = _all()
    for a, b in zip(results, again, strict=True):
        assert a.measurements == b.measurements and a.numbers == b.numbers
    other = rp.vo_tuned_step(n_eval=N_EVAL, streams=Streams(1, "11"))
    assert not np.array_equal(other.sq, results[1].sq)


def test_closed_forms() -> None:
    closed = rp.vo_closed_form()
    c = 1 + (rp.VO_D - 2 + 9 / 5) / rp.VO_N  # = 1.98
    assert closed.loss_star == pytest.approx(0.5 * rp.VO_VAR * rp.VO_D * (1 - 1 / c))
    assert closed.eta_star == pytest.approx(1 / (rp.VO_VAR * c))
    # at a moderate size the tuned step reaches the closed form, and averaging (d+1)/k at k = 10
    step = rp.vo_tuned_step(n_eval=20_000, streams=Streams(0, "11"))
    m = step.measurements["prior_vo_gd_tuned"]
    assert abs(m["value"] - closed.loss_star) < 4 * m["se"]
    garg = rp.garg_curves(garg_tasks=2, garg_tasks_key=2000, streams=Streams(0, "11"))
    for cid in ("prior_garg_avg_k10", "prior_garg_gd_step_k10", "prior_garg_ls_k10"):
        m = garg.measurements[cid]
        assert abs(m["value"] - m["prediction"]) < 4 * m["se"], cid
    m = garg.measurements["prior_garg_ls_k20"]  # least squares is exact at k = d, to its rounding bound
    assert 0.0 <= m["value"] <= m["upper"] < 1e-12 and m["lower"] == 0.0


def test_square_least_squares_meets_the_rounding_bound_where_the_gram_route_does_not() -> None:
    # an ill-conditioned 20 x 20 draw (cond ~ 1e7): through the Gram matrix the error grows like eps·cond²
    g = torch.Generator().manual_seed(0)
    u, _ = torch.linalg.qr(torch.randn(20, 20, generator=g, dtype=torch.float64))
    v, _ = torch.linalg.qr(torch.randn(20, 20, generator=g, dtype=torch.float64))
    x = (u * torch.logspace(0, -7, 20, dtype=torch.float64)) @ v.T  # (20, 20)
    w = torch.randn(20, generator=g, dtype=torch.float64)
    bound = 20 * torch.finfo(torch.float64).eps * torch.linalg.cond(x) * w.norm()
    assert (torch.linalg.solve(x[None], (x @ w)[None])[0] - w).norm() <= bound
    assert (rp.icl.ols(x[None], (x @ w)[None])[0] - w).norm() > bound


def test_best_gd_head_gap_is_signed_with_its_paired_se(results) -> None:
    head = results[3]
    m = head.measurements["prior_vo_softmax_is_best_gd_head"]
    assert m["prediction"] == rp.HEAD_GAP_ALTERNATIVE and m["se"] > 0 and m["n_ref"] == N_EVAL
    # the refined best GD head is no worse than the grid's best of the same sign (same tasks)
    sign = np.sign(head.align["eta_attn"])
    grid_best = head.c_loss[np.sign(head.eta_grid) == sign].min()
    assert float(head.sq.mean()) / (1 + m["value"]) <= grid_best * (1 + 1e-12)


def test_claim_ids_and_glued_names_are_the_chapters(results) -> None:
    ids = [cid for r in results for cid in r.measurements]
    assert ids == list(load_rules(RULES))
    glued = {name for r in results for name in r.numbers}
    wanted = set(re.findall(r"\{glue:text\}`([A-Za-z0-9_-]+)", NOTEBOOK.read_text(encoding="utf-8")))
    assert wanted <= glued, sorted(wanted - glued)


def test_summary_table(results, monkeypatch) -> None:
    monkeypatch.delenv(claims.CLAIMS_FILE_ENV, raising=False)
    monkeypatch.setenv(claims.RULES_FILE_ENV, str(RULES))
    judged = claims.record(*results, show=False)
    table = rp.summary_table(judged).data
    assert table.shape == (len(rp.TABLE) + 1, 6)  # no raw claim ids: the prose cites each claim
    assert table["quantity"].tolist()[:-1] == [q for _, q, *_ in rp.TABLE]
    assert table.loc[0, "verdict"] == "✓ pass"  # the closed form is the published number
    with pytest.raises(ValueError, match="lacks"):
        rp.summary_table({})
    with pytest.raises(ValueError, match="judged"):
        rp.summary_table([])


def test_plots(results) -> None:
    _, _, lsa, _, limit, garg = results
    fig, axes = plt.subplots(1, 3)
    lsa.plot(axes[0])
    limit.plot(axes[1])
    garg.plot(axes[2])
    assert len(axes[1].lines) == 3
    plt.close("all")


@pytest.mark.parametrize(("call", "match"), [
    (lambda s, r: rp.vo_tuned_step(n_eval=1, streams=s), "n_eval"),
    (lambda s, r: rp.vo_linear_attention(r[1], steps=0, batch=8, lr=0.02, streams=s), "steps"),
    (lambda s, r: rp.vo_linear_attention(r[0], steps=3, batch=8, lr=0.02, streams=s), "step"),
    (lambda s, r: rp.vo_softmax_head(r[1], steps=3, batch=8, lr=-1.0, streams=s), "lr"),
    (lambda s, r: rp.softmax_limit(r[1], r[1], n_head_tasks=M, n_head_max=N_MAX, streams=s), "head"),
    (lambda s, r: rp.softmax_limit(r[3], r[1], n_head_tasks=M, n_head_max=5, streams=s), "n_head_max"),
    (lambda s, r: rp.softmax_limit(r[3], r[1], n_head_tasks=0, n_head_max=N_MAX, streams=s), "n_head_tasks"),
    (lambda s, r: rp.garg_curves(garg_tasks=1, garg_tasks_key=8, streams=s), "garg_tasks"),
])
def test_bad_input(results, call, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call(Streams(0, "11"), results)
