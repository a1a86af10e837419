"""Chapter 07 (``notebooks/07_trained_attention.md``): does training find the GD construction?

Softmax attention (:class:`covbook.icl.ICLTransformer`, one and two layers) is trained from a
random start on noiseless in-context regression and compared with the covariance-readout
gradient-descent head of T2 (``thm-05-one-step``) and with one and two steps of empirical
gradient descent.  The chapter's results are measurements, not theorems.

The experiments, in the chapter's order:

* :func:`train` — the trained models (best of ``restarts`` runs each) and their test errors;
* :func:`references` — the baselines: the best softmax GD head of each sign of its logit scale,
  one and two linear GD steps with the best step (claims ``best_head_negative_scale``,
  ``head_worse_than_linear_gd``);
* :func:`one_layer` — the learned one-layer head against the construction (claims
  ``random_cos_order_1_over_d``, ``one_layer_*``);
* :func:`two_layers` — the two-layer models (claims ``two_layers_*``) and their per-layer table.

Random streams (``streams.seed_for``): ``eval`` (test tasks), ``init`` and ``tasks`` per
(layers, model, restart), ``tune`` (held-out tuning tasks), ``gd2-tune`` (the two-step learner's
Monte Carlo), ``random-init`` per initialisation of the random baseline.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from covbook import icl
from covbook._validate import check_positive_float, check_positive_int, resolve_device
from covbook.experiments.result import RandomStreams, Result
from covbook.icl.tasks import RegressionTasks
from covbook.icl.training import TrainLog
from covbook.stats import mean_with_se

__all__ = ["CHAPTER", "Run", "TrainedModels", "References", "OneLayer", "TwoLayers", "train", "references",
           "one_layer", "two_layers", "plot_form", "DEPTHS"]

CHAPTER = "07"

#: The depths trained (layers per model).
DEPTHS = (1, 2)
#: |η_a| grid of the softmax GD head (both signs are tried).
HEAD_SCALES = np.linspace(0.05, 1.5, 30)
#: Step grid of the two-step empirical GD learner.
GD2_STEPS = np.linspace(0.3, 1.2, 19)


@dataclass
class Run:
    """One trained model (the kept restart) and what the chapter reads off it.

    ``sq`` (n_eval,) is the per-task squared error on the test tasks over d; ``forms`` and
    ``align`` the per-layer logit form / value map and their alignment with the construction
    (:func:`covbook.icl.construction_alignment`); ``init`` the alignments of the kept run's start;
    ``restart_logs`` the logs of the restarts not kept (up to the selection step).
    """

    model: icl.ICLTransformer
    log: TrainLog
    sq: np.ndarray
    init: list[dict[str, float]]
    restart_logs: list[TrainLog]
    forms: list[dict[str, torch.Tensor]]
    align: list[dict[str, float]]


@dataclass
class TrainedModels(Result):
    """The models trained by :func:`train`: ``runs[(layers, k)]`` for depth ``layers`` and model ``k``."""

    d: int
    n_examples: int
    n_seeds: int
    restarts: int
    select_steps: int
    init_scale: float
    test: RegressionTasks
    runs: dict[tuple[int, int], Run] = field(repr=False)
    train_seconds: float = 0.0

    def of_depth(self, layers: int) -> list[Run]:
        """The runs with ``layers`` layers, in model order."""
        return [self.runs[(layers, k)] for k in range(self.n_seeds)]

    def plot(self, ax: plt.Axes, refs: References) -> None:
        """Training loss / d against the Adam step, with the references as horizontal lines."""
        d = self.d
        for (layers, k), r in self.runs.items():
            ax.plot(r.log.steps, r.log.loss / d, color=f"C{layers - 1}", alpha=0.7, lw=1,
                    label=f"{layers} layer{'s' if layers > 1 else ''}" if k == 0 else None)
            for g in r.restart_logs:  # restarts not kept, up to the selection step
                ax.plot(g.steps, g.loss / d, color=f"C{layers - 1}", alpha=0.5, ls=":")
        ax.axhline(refs.best_head["risk"], color="C0", ls="--", lw=1, label="best softmax GD head")
        ax.axhline(refs.head[1]["risk"], color="C2", ls="--", lw=1, label=r"best softmax GD head, $\eta_a > 0$")
        ax.axhline(refs.gd1_risk, color="k", ls=":", lw=1, label="one GD step, best step")
        ax.axhline(refs.gd2_risk, color="C1", ls=":", lw=1, label="two GD steps, best step")
        ax.set(yscale="log", ylim=(0.03, 2), xlabel="Adam step", ylabel="training loss / d",
               title="Softmax attention trained on in-context regression")
        ax.legend()

    def plot_layers(self, axes: np.ndarray, layers: int, k: int = 0) -> None:
        """Heat maps of model ``k`` of depth ``layers``: row ℓ of ``axes`` (shape (layers, 2), or (2,)
        for one layer) shows layer ℓ's logit form B and value map Θ_V."""
        axes = np.asarray(axes).reshape(-1, 2)
        if axes.shape[0] != layers:
            raise ValueError(f"axes must hold {layers} rows of 2 axes (one row per layer), got {axes.shape}")
        forms = self.runs[(layers, k)].forms
        for layer, (ax_b, ax_v) in enumerate(axes):
            title = "1 layer" if layers == 1 else f"{layers} layers, layer {layer + 1}"
            plot_form(ax_b, ax_v, forms[layer], title)


def plot_form(ax_b: plt.Axes, ax_v: plt.Axes, form: dict[str, torch.Tensor], title: str) -> None:
    """Heat maps of one layer's logit form B = Θ_QᵀΘ_K and value map Θ_V (shared colour scale)."""
    d = form["B"].shape[0] - 1
    lim = max(form["B"].abs().max().item(), form["V"].abs().max().item())
    labels = [f"$x_{i + 1}$" for i in range(d)] + ["$y$"]
    for ax, mat, name in ((ax_b, form["B"], r"$B = \Theta_Q^\top\Theta_K$"), (ax_v, form["V"], r"$\Theta_V$")):
        ax.imshow(mat.numpy(), cmap="RdBu_r", vmin=-lim, vmax=lim)
        ax.set(xticks=range(d + 1), yticks=range(d + 1), xticklabels=labels, yticklabels=labels,
               title=f"{title}: {name}")
        ax.grid(False)


def _alignments(model: icl.ICLTransformer) -> list[dict[str, float]]:
    return [icl.construction_alignment(f["B"], f["V"]) for f in icl.bilinear_forms(model)]


def train(*, d: int, n_examples: int, steps: int, batch: int, lr: float, n_seeds: int, restarts: int,
          select_fraction: float, n_eval: int, init_scale: float, streams: RandomStreams,
          device: str | torch.device = "cpu") -> TrainedModels:
    r"""Train ``n_seeds`` models of each depth in :data:`DEPTHS`, each the best of ``restarts`` runs.

    Run r of model k of depth L starts from :func:`covbook.icl.random_icl_transformer` (weights iid
    N(0, ``init_scale``²), stream ``init`` (L, k, r)) and trains by Adam on fresh tasks (stream
    ``tasks`` (L, k, r)); all runs are compared after ``select_steps = max(2, ⌊select_fraction ·
    steps⌋)`` steps (:func:`covbook.icl.train_icl_restarts`).  The kept model's test error is, per
    test task (stream ``eval``, float32),

    .. math:: e = (\hat y - x_q^\top w)^2 / d .

    Glues the chapter's sizes and ``train_seconds``.
    """
    d, n_examples = check_positive_int(d, "d"), check_positive_int(n_examples, "n_examples")
    steps, batch = check_positive_int(steps, "steps"), check_positive_int(batch, "batch")
    n_seeds, restarts = check_positive_int(n_seeds, "n_seeds"), check_positive_int(restarts, "restarts")
    n_eval = check_positive_int(n_eval, "n_eval")
    if n_eval < 2:
        raise ValueError(f"n_eval must be at least 2 (for standard errors), got {n_eval}")
    if not isinstance(select_fraction, (int, float)) or not 0 < select_fraction <= 1:
        raise ValueError(f"select_fraction must be a number in (0, 1], got {select_fraction!r}")
    select_steps = max(2, int(select_fraction * steps))
    if select_steps > steps:
        raise ValueError(f"steps must be at least 2 (the restarts are compared after 2 steps), got {steps}")
    check_positive_float(lr, "lr")
    init_scale = check_positive_float(init_scale, "init_scale")
    dev = resolve_device(device)
    test = icl.make_regression_tasks(n_eval, n_examples, d, seed=streams.seed_for("eval"), device=dev,
                                     dtype=torch.float32)
    runs: dict[tuple[int, int], Run] = {}
    t0 = time.time()
    for layers in DEPTHS:
        for k in range(n_seeds):
            # restart r of model k: its own initialisation and task stream
            reps = [(layers, k, r) for r in range(restarts)]
            starts = [icl.random_icl_transformer(d, layers, init_scale=init_scale, seed=streams.seed_for("init", rep))
                      for rep in reps]
            inits = [_alignments(m) for m in starts]  # alignments before training, per restart
            fit = icl.train_icl_restarts(starts, [streams.seed_for("tasks", rep) for rep in reps],
                                         n_examples=n_examples, steps=steps, select_steps=select_steps,
                                         batch=batch, lr=lr, device=dev)
            with torch.no_grad():
                sq = ((fit.model.predict(test) - test.clean_target) ** 2).double().cpu().numpy() / d  # (n_eval,)
            runs[(layers, k)] = Run(model=fit.model, log=fit.log, sq=sq, init=inits[fit.chosen],
                                    restart_logs=[g for r, g in enumerate(fit.logs) if r != fit.chosen],
                                    forms=icl.bilinear_forms(fit.model), align=_alignments(fit.model))
    out = TrainedModels(d=d, n_examples=n_examples, n_seeds=n_seeds, restarts=restarts, select_steps=select_steps,
                        init_scale=init_scale, test=test, runs=runs, train_seconds=time.time() - t0)
    for name, value in (("d", d), ("n_examples", n_examples), ("steps", steps), ("n_seeds", n_seeds),
                        ("batch", batch), ("restarts", restarts), ("select_steps", select_steps),
                        ("train_seconds", out.train_seconds)):
        out.glue(name, value)
    return out


@dataclass
class References(Result):
    """The baselines of :func:`references`, on the trained models' test tasks.

    ``head[s]`` (s = ±1, the sign of η_a): the tuned softmax GD head's ``eta_a``, ``c``,
    ``eta_eff`` = c η_a, per-task ``sq`` (n_eval,), ``risk`` and its ``se``; ``c_risk``,
    ``c_scale`` (n_grid,) the head's tuning curve over ``eta_grid``.
    """

    eta_grid: np.ndarray
    c_risk: np.ndarray
    c_scale: np.ndarray
    head: dict[int, dict[str, object]] = field(repr=False)
    best_sign: int
    gd1_risk: float
    gd1_step: float
    gd2_step: float
    gd2_risk: float
    gd2_se: float
    gd2_sq: np.ndarray = field(repr=False)

    @property
    def best_head(self) -> dict[str, object]:
        """The tuned softmax GD head of the better sign."""
        return self.head[self.best_sign]

    def plot(self, ax: plt.Axes) -> None:
        """The softmax GD head's tuning risk / d against η_a, both signs, and one linear GD step."""
        g = self.eta_grid
        ax.plot(g[g < 0], self.c_risk[g < 0], "-", color="C0", label=r"GD head, $\eta_a<0$")
        ax.plot(g[g > 0], self.c_risk[g > 0], "-", color="C2", label=r"GD head, $\eta_a>0$")
        ax.axhline(self.gd1_risk, color="k", ls=":", lw=1, label="one linear GD step, best step")
        ax.set(xlabel=r"logit scale $\eta_a$ (value scale $c$ fitted)", ylabel="risk / d (tuning tasks)",
               ylim=(0, 1.05), title="The softmax GD head against one linear GD step")
        ax.legend()


def references(models: TrainedModels, *, streams: RandomStreams, n_mc: int = 4000) -> References:
    r"""Tune the baselines on held-out tasks, evaluate them on ``models.test`` (paired errors).

    The softmax GD head ``construction_predict(η_a, c)`` is tuned for each η_a on a grid of both
    signs (c by least squares, :func:`covbook.icl.construction_risk_curve`, stream ``tune``); one
    linear GD step has the closed form R₁ = (d+1)/(N+d+1) at η* (:func:`covbook.icl.gd_optimal_risk`);
    two steps take the best constant step on :data:`GD2_STEPS` by Monte Carlo (``n_mc`` tasks, stream
    ``gd2-tune``).  Measures

    * ``best_head_negative_scale``: z = mean(e₊ − e₋)/SE, the paired risk gap of the signs;
    * ``head_worse_than_linear_gd``: (R_head − R₁)/SE_head.
    """
    if not isinstance(models, TrainedModels):
        raise ValueError(f"models must be the TrainedModels of train(), got {type(models).__name__}")
    n_mc = check_positive_int(n_mc, "n_mc")
    d, n, test64 = models.d, models.n_examples, models.test.to(torch.float64)
    n_eval = len(test64)
    clean64 = test64.clean_target.cpu()  # (n_eval,)

    def test_sq(pred: torch.Tensor) -> np.ndarray:
        return ((pred.double().cpu() - clean64) ** 2).numpy() / d  # (n_eval,)

    tune = icl.make_regression_tasks(n_eval, n, d, seed=streams.seed_for("tune"))  # held-out tuning tasks
    eta_grid = np.r_[-HEAD_SCALES[::-1], HEAD_SCALES]
    c_risk, c_scale = icl.construction_risk_curve(tune, eta_grid)  # (n_grid,) each
    head: dict[int, dict[str, object]] = {}
    for sign in (-1, 1):
        i = int(np.argmin(np.where(np.sign(eta_grid) == sign, c_risk, np.inf)))
        sq_h = test_sq(icl.construction_predict(test64, eta_grid[i], c_scale[i]))
        head[sign] = dict(eta_a=eta_grid[i], c=c_scale[i], eta_eff=eta_grid[i] * c_scale[i], sq=sq_h,
                          risk=sq_h.mean(), se=sq_h.std(ddof=1) / np.sqrt(n_eval))
    best_sign = -1 if head[-1]["risk"] < head[1]["risk"] else 1
    gd2_tune = [icl.empirical_gd_risk_mc(n, d, float(e), 2, n_mc=n_mc, seed=streams.seed_for("gd2-tune"))
                for e in GD2_STEPS]
    gd2_step = float(GD2_STEPS[int(np.argmin(gd2_tune))])
    v2 = icl.empirical_gd(test64.x, test64.y, gd2_step, 2)[-1]  # (n_eval, d), on the test tasks
    gd2_sq = test_sq((test64.x_query * v2).sum(-1))
    gd2_risk, gd2_se = mean_with_se(gd2_sq)
    out = References(eta_grid=eta_grid, c_risk=c_risk, c_scale=c_scale, head=head, best_sign=best_sign,
                     gd1_risk=float(icl.gd_optimal_risk(n, d)), gd1_step=float(icl.gd_optimal_step(n, d)),
                     gd2_step=gd2_step, gd2_risk=gd2_risk, gd2_se=gd2_se, gd2_sq=gd2_sq)
    best = out.best_head
    for key, val in dict(gd1_risk=out.gd1_risk, gd1_step=out.gd1_step, gd2_risk=gd2_risk, gd2_step=gd2_step,
                         head_risk=best["risk"], head_eta_eff=best["eta_eff"], head_eta_a=best["eta_a"],
                         head_c=best["c"], head_risk_pos=head[1]["risk"]).items():
        out.glue(key, val)
    z_sign = mean_with_se(head[1]["sq"] - head[-1]["sq"])
    out.measure("best_head_negative_scale", z_sign[0] / z_sign[1], prediction=0.0, se=1.0, n_eval=n_eval)
    out.measure("head_worse_than_linear_gd", (best["risk"] - out.gd1_risk) / best["se"], prediction=0.0, se=1.0,
                n_eval=n_eval)
    return out


@dataclass
class OneLayer(Result):
    """The one-layer models against the construction (:func:`one_layer`).

    ``align`` maps each alignment measure to its (n_seeds,) values; ``risk``, ``risk_se`` (n_seeds,)
    the test risks; ``cos_random`` (n_random,) the cosines of random initial forms with I.
    """

    align: dict[str, np.ndarray]
    risk: np.ndarray
    risk_se: np.ndarray
    cos_random: np.ndarray


def one_layer(models: TrainedModels, refs: References, *, n_random: int, streams: RandomStreams) -> OneLayer:
    r"""The learned one-layer heads against the construction and against the baselines.

    Measures the random baseline ``random_cos_order_1_over_d`` (d · mean cosine of ``n_random``
    random initial forms with I, prediction √(2/π); stream ``random-init``), the structure of the
    trained heads (``one_layer_cos_identity``: smallest cos(B_xx, I); ``one_layer_y_key_weight``,
    ``one_layer_value_reads_y``: largest shares), ``one_layer_matches_best_head`` (the largest
    relative paired gap mean((e − e_head)/R_head) to the tuned head of the model's sign) and
    ``one_layer_worse_than_linear_gd`` (min over models of (R − R₁)/SE).
    """
    if not isinstance(models, TrainedModels) or not isinstance(refs, References):
        raise ValueError("models and refs must be the results of train() and references()")
    n_random = check_positive_int(n_random, "n_random")
    if n_random < 2:
        raise ValueError(f"n_random must be at least 2 (for a standard error), got {n_random}")
    d, one, n_eval = models.d, models.of_depth(1), len(models.test)
    al = {key: np.array([r.align[0][key] for r in one]) for key in one[0].align[0]}
    risk1 = np.array([r.sq.mean() for r in one])
    risk1_se = np.array([r.sq.std(ddof=1) / np.sqrt(len(r.sq)) for r in one])
    # the baseline: the cosine with I of the logit forms of many random initialisations
    cos_rand = np.array([
        a["cos_identity"] for s_ in range(n_random)
        for a in _alignments(icl.random_icl_transformer(d, 1, init_scale=models.init_scale,
                                                        seed=streams.seed_for("random-init", s_)))])
    out = OneLayer(align=al, risk=risk1, risk_se=risk1_se, cos_random=cos_rand)
    rand_d, rand_d_se = mean_with_se(d * cos_rand)
    out.measure("random_cos_order_1_over_d", rand_d, prediction=float(np.sqrt(2 / np.pi)), se=rand_d_se,
                allowance=0.06, n_random=n_random)
    out.glue("cos_init", float(np.mean(np.abs(cos_rand))))
    out.glue("cos_init_sqrt_d", float(1 / np.sqrt(d)))
    out.measure("one_layer_cos_identity", al["cos_identity"].min())
    out.measure("one_layer_y_key_weight", al["y_key_weight"].max())
    out.measure("one_layer_value_reads_y", al["v_y_other"].max())
    out.glue("eta_eff_1", float(al["eta_eff"].mean()))
    out.glue("eta_a_1", float(np.abs(al["eta_attn"]).mean()))
    out.glue("c_1", float(np.abs(al["v_yy"]).mean()))
    signs = np.sign(al["eta_attn"]).astype(int)
    rel = [mean_with_se((r.sq - refs.head[sg]["sq"]) / refs.head[sg]["risk"]) for r, sg in zip(one, signs, strict=True)]
    worst = int(np.argmax([abs(m) for m, _ in rel]))
    out.glue("n_negative", int((signs < 0).sum()))
    out.measure("one_layer_matches_best_head", rel[worst][0], prediction=0.0, se=rel[worst][1], allowance=0.1,
                n_eval=n_eval)
    z1 = float(np.min((risk1 - refs.gd1_risk) / risk1_se))
    out.measure("one_layer_worse_than_linear_gd", z1, prediction=0.0, se=1.0, n_eval=n_eval)
    out.glue("risk_1", float(risk1.mean()))
    return out


@dataclass
class TwoLayers(Result):
    """The two-layer models (:func:`two_layers`): ``risk`` (n_seeds,), ``relay`` (n_seeds,) the cosine of
    Θ_V¹[x, y] with Θ_V²[y, x], and ``rows`` the per-(seed, layer) measures of :meth:`table`."""

    risk: np.ndarray
    relay: np.ndarray
    rows: list[dict[str, object]] = field(repr=False)

    def table(self) -> pd.DataFrame:
        """One row per (seed, layer): the alignment measures and whether the layer is a GD head."""
        return pd.DataFrame(self.rows).set_index(["seed", "layer"])


def _layer_row(k: int, layer: int, a: dict[str, float], form: dict[str, torch.Tensor]) -> dict[str, object]:
    d = form["V"].shape[0] - 1
    v_xx = form["V"][:d, :d]  # (d, d)
    return {"seed": k, "layer": layer + 1, "cos(B_xx, I)": a["cos_identity"], "η_a": a["eta_attn"],
            "B on keys' y": a["y_key_weight"], "Θ_V[y,y]": a["v_yy"], "Θ_V[y,·] on x": a["v_y_other"],
            "tr Θ_V[x,x]/d": v_xx.trace().item() / d,
            "GD head": a["cos_identity"] > 0.9 and a["y_key_weight"] < 0.1 and a["v_y_other"] < 0.1}


def two_layers(models: TrainedModels, refs: References) -> TwoLayers:
    r"""The two-layer models against one layer and two GD steps, and their layers' structure.

    Measures ``two_layers_beat_one`` (z = mean(e_worst two-layer − e_best one-layer)/SE, paired) and
    ``two_layers_not_below_two_gd_steps`` (the best two-layer model's paired gap to two GD steps);
    glues the relay cosines |cos(Θ_V¹[x, y], Θ_V²[y, x])| and the count of GD-head layers.
    """
    if not isinstance(models, TrainedModels) or not isinstance(refs, References):
        raise ValueError("models and refs must be the results of train() and references()")
    d, n_eval = models.d, len(models.test)
    one, two = models.of_depth(1), models.of_depth(2)
    risk1 = np.array([r.sq.mean() for r in one])
    risk2 = np.array([r.sq.mean() for r in two])
    rows = [_layer_row(k, layer, a, f) for k, r in enumerate(two)
            for layer, (a, f) in enumerate(zip(r.align, r.forms, strict=True))]
    # does layer 1 write along the direction that layer 2's label row reads?
    relay = np.array([torch.nn.functional.cosine_similarity(r.forms[0]["V"][:d, d], r.forms[1]["V"][d, :d],
                                                            dim=0).item() for r in two])
    out = TwoLayers(risk=risk2, relay=relay, rows=rows)
    out.glue("risk_2", float(risk2.mean()))
    out.glue("risk_2_vs_gd2", float(risk2.mean() / refs.gd2_risk))
    out.glue("n_gd_heads", int(out.table()["GD head"].groupby(level="seed").sum().sum()))
    out.glue("n_layers_total", 2 * models.n_seeds)
    out.glue("relay_cos_min", float(np.abs(relay).min()))
    out.glue("relay_cos_max", float(np.abs(relay).max()))
    worst2, best1 = two[int(np.argmax(risk2))], one[int(np.argmin(risk1))]
    m21, se21 = mean_with_se(worst2.sq - best1.sq)
    out.measure("two_layers_beat_one", m21 / se21, prediction=0.0, se=1.0, n_eval=n_eval, restarts=models.restarts,
                select_steps_2=models.select_steps // 2, select_steps=models.select_steps)
    m2g, se2g = mean_with_se(two[int(np.argmin(risk2))].sq - refs.gd2_sq)  # the best two-layer model, paired
    out.measure("two_layers_not_below_two_gd_steps", m2g, prediction=0.0, se=se2g, n_eval=n_eval)
    return out
