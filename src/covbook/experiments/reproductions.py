r"""Chapter 11 (``notebooks/11_prior_work.md``): prior work reproduced in its own settings.

The setting of von Oswald et al. (2023) — d = N = 10, inputs uniform on the cube (−½, ½)^d,
½·MSE — and that of Garg et al. (2022) — d = 20, Gaussian inputs, error per dimension against
the number k of examples.  covbook adds the closed form of the best one-step loss
(:func:`covbook.prior_work.one_step_optimum`) and a trained softmax head, whose long-context
limit on the cube tests T2 (``thm-05-one-step``) off the Gaussian family (claims ``prior_*``).

The experiments, in the chapter's order: :func:`vo_closed_form`, :func:`vo_tuned_step`,
:func:`vo_linear_attention`, :func:`vo_softmax_head`, :func:`softmax_limit`, :func:`garg_curves`;
:func:`summary_table` sets the judged claims against the published values.

Random streams (``streams.seed_for``): ``tune`` and ``test`` (von Oswald tasks), ``lsa-init``,
``lsa-train``, ``softmax-init``, ``softmax-train``, ``head-paths`` (the growing contexts), and
``garg`` per number of examples (replicate i for the i-th k).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from pandas.io.formats.style import Styler

from covbook import icl
from covbook import prior_work as pw
from covbook._validate import check_positive_float, check_positive_int, resolve_device
from covbook.experiments.result import RandomStreams, Result
from covbook.icl.tasks import RegressionTasks
from covbook.icl.training import TrainLog
from covbook.rules import Claim
from covbook.stats import mean_with_se

__all__ = ["CHAPTER", "VO_D", "VO_N", "VO_VAR", "PUBLISHED_VO", "GARG_D", "GARG_KEY_KS", "TABLE",
           "VOClosedForm", "VOTunedStep", "VOLinearAttention", "VOSoftmaxHead", "SoftmaxLimit", "GargCurves",
           "vo_closed_form", "vo_tuned_step", "vo_linear_attention", "vo_softmax_head", "softmax_limit",
           "garg_curves", "summary_table", "table_number"]

CHAPTER = "11"

#: The setting of von Oswald et al. (2023): dimension, examples per context, Var x_i (the cube (−½, ½)^d).
VO_D, VO_N, VO_VAR = 10, 10, 1 / 12
#: Their loss (½·MSE) of the best single gradient step.
PUBLISHED_VO = 0.206
#: The published values are rounded to 3 decimals.
ROUND3 = 0.0005
#: Test tasks (at most) on which the softmax GD heads are tuned against the trained head.
HEAD_REF_TASKS = 10_000
#: |η_a| grid of the softmax GD head (both signs are tried).
HEAD_SCALES = np.geomspace(0.5, 30, 20)
#: The best |η_a| of the grid is refined on geomspace(η/HEAD_REFINE, η·HEAD_REFINE) (2·HEAD_REFINE_POINTS + 1
#: scales): one grid step is a factor (30/0.5)^(1/19) ≈ 1.24, enough to move the best head's loss by about its SE.
HEAD_REFINE, HEAD_REFINE_POINTS = 1.25, 6
#: The relative loss gap to the best GD head that ``prior_vo_softmax_is_best_gd_head`` excludes.
HEAD_GAP_ALTERNATIVE = 0.1
#: The setting of Garg et al. (2022): dimension, and the numbers of examples with published values.
GARG_D, GARG_KEY_KS = 20, (10, 20)
#: The summary table's rows: (claim id, quantity, published value, source).
TABLE = (
    ("prior_vo_gd_closed_form", "best one-step GD loss (closed form)", "0.206", "von Oswald et al. (2023)"),
    ("prior_vo_gd_tuned", "best one-step GD loss (step tuned on held-out tasks)", "0.206",
     "von Oswald et al. (2023)"),
    ("prior_vo_lsa_trained", "one trained linear self-attention layer, loss", "0.206 (= GD)",
     "von Oswald et al. (2023)"),
    ("prior_vo_lsa_is_gd", "trained layer = GD construction (cos(Γ, I))", "weights match GD (figure)",
     "von Oswald et al. (2023)"),
    ("prior_garg_ls_k10", "least squares, k = 10 (d = 20)", "0.5 = (d−k)/d", "Garg et al. (2022)"),
    ("prior_garg_avg_k10", "averaging, k = 10 (d = 20)", "2.1 = (d+1)/k", "Garg et al. (2022)"),
    ("prior_garg_ls_k20", "least squares, k = 20 (d = 20)", "0", "Garg et al. (2022)"),
    ("prior_garg_gd_step_k10", "one GD step, best step, k = 10 (d = 20)", "— (not in Garg et al.; 21/31)",
     "covbook, Chapter 5"),
)


def _cov_vo() -> torch.Tensor:
    return torch.eye(VO_D, dtype=torch.float64) * VO_VAR  # (d, d)


def _vo_tasks(n: int, stream_seed: int, device: torch.device) -> RegressionTasks:
    """``n`` tasks of the von Oswald et al. setting drawn from the stream seed ``stream_seed``."""
    return icl.make_regression_tasks(n, VO_N, VO_D, cov_x=_cov_vo(), x_law="uniform", seed=stream_seed,
                                     device=device)


def _half_sq(pred: torch.Tensor, tasks: RegressionTasks) -> np.ndarray:
    return (0.5 * (pred - tasks.y_query) ** 2).cpu().numpy()  # (B,)


@dataclass
class VOClosedForm(Result):
    """The best one-step GD loss in the von Oswald et al. setting: its step and ½R* for uniform and
    Gaussian inputs of the same covariance."""

    eta_star: float
    loss_star: float
    loss_star_gauss: float


def vo_closed_form() -> VOClosedForm:
    r"""½R(η*) = ½σ²d(1 − 1/c), c = 1 + (d − 2 + κ)/N, at η* = 1/(σ²c) (κ = 9/5 uniform, 3 Gaussian).

    Measures ``prior_vo_gd_closed_form`` against the published 0.206 (allowance: its rounding).
    """
    eta_star, risk_star = (float(v) for v in pw.one_step_optimum(VO_N, VO_D, var_x=VO_VAR, x_law="uniform"))
    gauss = float(pw.one_step_optimum(VO_N, VO_D, var_x=VO_VAR, x_law="gaussian")[1]) / 2
    out = VOClosedForm(eta_star=eta_star, loss_star=risk_star / 2, loss_star_gauss=gauss)
    out.glue("eta_star", eta_star)
    out.glue("loss_star", out.loss_star)
    out.glue("loss_star_gauss", gauss)
    out.measure("prior_vo_gd_closed_form", out.loss_star, prediction=PUBLISHED_VO, se=0.0, allowance=ROUND3)
    return out


@dataclass
class VOTunedStep(Result):
    """One GD step with its step tuned on held-out tasks: ``test`` the fresh test tasks (shared by the
    later experiments), ``sq`` (n_eval,) the per-task ½ squared errors on them."""

    eta_hat: float
    test: RegressionTasks = field(repr=False)
    sq: np.ndarray = field(repr=False)


def vo_tuned_step(*, n_eval: int, streams: RandomStreams, device: str | torch.device = "cpu") -> VOTunedStep:
    r"""Tune η on ``n_eval`` held-out tasks (stream ``tune``), evaluate on ``n_eval`` fresh ones (``test``).

    The loss is quadratic in η, so with p = x_qᵀ(1/N)Xᵀy the best step is η̂ = Σ p y_q / Σ p².
    Measures ``prior_vo_gd_tuned``: mean ½(η̂ p − y_q)² on the test tasks, with its SE.
    """
    n_eval = check_positive_int(n_eval, "n_eval")
    if n_eval < 2:
        raise ValueError(f"n_eval must be at least 2 (for a standard error), got {n_eval}")
    dev = resolve_device(device)
    tune = _vo_tasks(n_eval, streams.seed_for("tune"), dev)
    test = _vo_tasks(n_eval, streams.seed_for("test"), dev)
    p_tune = icl.linear_attention_predict(tune, 1.0)  # (B,) x_qᵀ(1/N)Xᵀy
    eta_hat = float((p_tune * tune.y_query).sum() / (p_tune**2).sum())  # argmin of the held-out ½·MSE
    sq = _half_sq(eta_hat * icl.linear_attention_predict(test, 1.0), test)  # (B,)
    out = VOTunedStep(eta_hat=eta_hat, test=test, sq=sq)
    loss, se = mean_with_se(sq)
    out.glue("n_eval", n_eval)
    out.glue("eta_hat", eta_hat)
    out.measure("prior_vo_gd_tuned", loss, prediction=PUBLISHED_VO, se=se, n_eval=n_eval, allowance=ROUND3)
    return out


def _check_step(step: object) -> VOTunedStep:
    if not isinstance(step, VOTunedStep):
        raise ValueError(f"step must be the VOTunedStep of vo_tuned_step(), got {type(step).__name__}")
    return step


def _check_training(steps: int, batch: int, lr: float) -> None:
    check_positive_int(steps, "steps")
    check_positive_int(batch, "batch")
    check_positive_float(lr, "lr")


@dataclass
class VOLinearAttention(Result):
    """One trained linear self-attention layer: its training ``log``, per-task ½ squared errors ``sq``
    (n_eval,), and its effective preconditioner ``gamma`` (d, d)."""

    model: pw.LinearSelfAttention = field(repr=False)
    log: TrainLog = field(repr=False)
    sq: np.ndarray = field(repr=False)
    gamma: torch.Tensor = field(repr=False)

    def plot(self, ax: plt.Axes) -> None:
        """The training loss (½·MSE) against the Adam step, with the published best GD step."""
        ax.plot(self.log.steps, self.log.loss / 2, lw=1, label="linear self-attention (batch ½·MSE)")
        ax.axhline(PUBLISHED_VO, color="k", ls=":", lw=1, label="published best GD step, 0.206")
        ax.set(yscale="log", ylim=(0.15, 1.0), xlabel="Adam step", ylabel="training loss (½·MSE)",
               title="von Oswald et al. setting: d = N = 10, uniform inputs")
        ax.legend()


#: Independent trainings of the linear self-attention layer; the lowest final training loss is kept.
LSA_RESTARTS = 3


def vo_linear_attention(step: VOTunedStep, *, steps: int, batch: int, lr: float, streams: RandomStreams,
                        device: str | torch.device = "cpu") -> VOLinearAttention:
    r"""Train a linear self-attention layer (:class:`covbook.prior_work.LinearSelfAttention`, weights
    N(0, 0.01²), stream ``("lsa-init", i)``) by Adam on fresh uniform tasks (stream ``("lsa-train", i)``),
    :data:`LSA_RESTARTS` times, and keep the one with the lowest final training loss (the mean of the
    last ten logged batch losses): from small weights a layer sits on the zero predictor's plateau for
    a random number of steps, and a restart that has not left it by the end is not the one kept.

    Its prediction is ŷ ≈ x_qᵀΓᵀ(1/N)Σ y_i x_i.  Measures ``prior_vo_lsa_trained`` (test ½·MSE) and
    ``prior_vo_lsa_is_gd``: |tr Γ| / (|Γ|_F √d), the cosine of Γ with the identity.
    """
    test = _check_step(step).test
    _check_training(steps, batch, lr)
    dev = resolve_device(device)
    runs = []
    for i in range(LSA_RESTARTS):  # the layer of the lowest final training loss (the test tasks are not seen)
        lsa = pw.LinearSelfAttention(VO_D, init_scale=0.01, seed=streams.seed_for("lsa-init", i))
        log = pw.train_on_tasks(lsa, n_examples=VO_N, steps=steps, batch=batch, lr=lr, x_law="uniform",
                                cov_x=_cov_vo(), seed=streams.seed_for("lsa-train", i))
        runs.append((float(np.mean(log.loss[-10:])), i, lsa, log))
    _, _, lsa, log = min(runs, key=lambda r: r[:2])
    with torch.no_grad():
        pred = lsa.to(dev).predict(test).double()  # (B,)
    sq = _half_sq(pred, test)
    loss, se = mean_with_se(sq)
    gamma = lsa.preconditioner()  # (d, d)
    cos = float(torch.trace(gamma).abs() / (gamma.norm() * np.sqrt(VO_D)))
    out = VOLinearAttention(model=lsa, log=log, sq=sq, gamma=gamma)
    out.glue("lsa_steps", steps)
    out.glue("lsa_batch", batch)
    out.glue("eta_lsa", float(torch.trace(gamma) / VO_D))
    out.measure("prior_vo_lsa_trained", loss, prediction=PUBLISHED_VO, se=se, n_eval=len(test), allowance=ROUND3)
    out.measure("prior_vo_lsa_is_gd", cos)
    return out


@dataclass
class VOSoftmaxHead(Result):
    """One trained softmax head in the von Oswald et al. setting: the ``model`` (on the CPU), its ``log``,
    per-task ½ squared errors ``sq`` (n_eval,), its ``align`` ment with the GD construction, and the
    tuned softmax GD heads' ½·MSE ``c_loss`` over ``eta_grid``."""

    model: icl.ICLTransformer = field(repr=False)
    log: TrainLog = field(repr=False)
    sq: np.ndarray = field(repr=False)
    align: dict[str, float]
    eta_grid: np.ndarray
    c_loss: np.ndarray


def vo_softmax_head(step: VOTunedStep, *, steps: int, batch: int, lr: float, streams: RandomStreams,
                    device: str | torch.device = "cpu") -> VOSoftmaxHead:
    r"""Train one softmax head with merged key-query matrix (:func:`covbook.prior_work.softmax_head`,
    stream ``softmax-init``) on fresh uniform tasks (stream ``softmax-train``).

    Measures ``prior_vo_softmax_worse_than_gd`` (the paired mean gap of its ½ squared errors to the
    tuned GD step's) and ``prior_vo_softmax_is_best_gd_head``: the signed relative gap L / L*_s − 1
    with L*_s the loss of the best softmax GD head of the trained head's sign s of η_a, both on the
    first :data:`HEAD_REF_TASKS` test tasks (η_a on :data:`HEAD_SCALES`, refined by a factor
    :data:`HEAD_REFINE` about the best of the sign, c fitted, :func:`covbook.icl.construction_risk_curve`),
    with the paired ratio SE sd(a_i − (1 + gap) b_i) / (√n b̄) of the per-task losses a (head), b (GD head),
    against the alternative gap :data:`HEAD_GAP_ALTERNATIVE`.
    """
    step = _check_step(step)
    test = step.test
    _check_training(steps, batch, lr)
    dev = resolve_device(device)
    soft = pw.softmax_head(VO_D, init_scale=0.1, seed=streams.seed_for("softmax-init"))
    log = pw.train_on_tasks(soft, n_examples=VO_N, steps=steps, batch=batch, lr=lr, x_law="uniform",
                            cov_x=_cov_vo(), seed=streams.seed_for("softmax-train"))
    with torch.no_grad():
        pred = soft.to(dev).predict(test).double()  # (B,), the model casts the tokens
    soft = soft.cpu()
    sq = _half_sq(pred, test)
    loss, _ = mean_with_se(sq)
    diff, se_diff = mean_with_se(sq - step.sq)  # paired: same test tasks
    align = icl.construction_alignment(*icl.bilinear_forms(soft)[0].values())
    # the best softmax GD head of each sign of the logit scale, on a subset of the same test tasks
    n_ref = min(len(test), HEAD_REF_TASKS)
    eta_grid = np.r_[-HEAD_SCALES[::-1], HEAD_SCALES]
    c_risk, _ = icl.construction_risk_curve(test[:n_ref], eta_grid)  # (n_grid,) risk / d
    c_loss = c_risk * VO_D / 2  # ½·MSE
    sign = float(np.sign(align["eta_attn"]))
    same = np.flatnonzero(np.sign(eta_grid) == sign)
    eta_s = float(eta_grid[same[np.argmin(c_loss[same])]])  # best grid scale of the sign
    fine = eta_s * np.geomspace(1 / HEAD_REFINE, HEAD_REFINE, 2 * HEAD_REFINE_POINTS + 1)  # (n_fine,)
    f_risk, f_c = icl.construction_risk_curve(test[:n_ref], fine)  # (n_fine,) each
    j = int(np.argmin(f_risk))
    ref = test[:n_ref]
    sq_gd = _half_sq(icl.construction_predict(ref, float(fine[j]), float(f_c[j])).double(), ref)  # (n_ref,)
    a, b = sq[:n_ref], sq_gd
    ratio = float(a.mean() / b.mean())
    gap_best, se_best = ratio - 1, float((a - ratio * b).std(ddof=1) / (np.sqrt(n_ref) * b.mean()))
    out = VOSoftmaxHead(model=soft, log=log, sq=sq, align=align, eta_grid=eta_grid, c_loss=c_loss)
    for key in ("cos_identity", "y_key_weight", "v_y_other", "eta_attn", "eta_eff"):
        out.glue(f"soft_{key}", align[key])
    for name, value in (("soft_steps", steps), ("soft_batch", batch), ("loss_soft", loss), ("mse_soft", 2 * loss),
                        ("best_head_neg", float(c_loss[eta_grid < 0].min())),
                        ("best_head_pos", float(c_loss[eta_grid > 0].min()))):
        out.glue(name, value)
    out.measure("prior_vo_softmax_worse_than_gd", diff, prediction=0.0, se=se_diff, n_eval=len(test))
    out.measure("prior_vo_softmax_is_best_gd_head", gap_best, prediction=HEAD_GAP_ALTERNATIVE, se=se_best, n_ref=n_ref)
    return out


@dataclass
class SoftmaxLimit(Result):
    """The trained head along growing contexts: ``paths`` (M, n_checkpoints) its outputs, ``lim_exact``
    and ``lim_t2`` (M,) the cube's tilted mean and the covariance readout, ``mse_exact``, ``mse_t2``
    (n_checkpoints,) the mean squared distances to them, ``gap2`` the mean squared gap of the limits."""

    checkpoints: np.ndarray
    paths: torch.Tensor = field(repr=False)
    lim_exact: torch.Tensor = field(repr=False)
    lim_t2: torch.Tensor = field(repr=False)
    mse_exact: np.ndarray
    mse_t2: np.ndarray
    gap2: float

    def plot(self, ax: plt.Axes) -> None:
        """Mean squared distance to either limit against the context length (log-log)."""
        ax.loglog(self.checkpoints, self.mse_exact, "o-", ms=4, label="to the cube's tilted mean (exact limit)")
        ax.loglog(self.checkpoints, self.mse_t2, "s-", ms=4, label="to the covariance readout (population step)")
        ax.axhline(self.gap2, color="k", ls=":", lw=1, label="squared gap between the two limits")
        ax.set(xlabel="context length $N$", ylabel="mean squared distance",
               title="Trained softmax head, uniform inputs: which limit?")
        ax.legend()


def softmax_limit(head: VOSoftmaxHead, step: VOTunedStep, *, n_head_tasks: int, n_head_max: int,
                  streams: RandomStreams, device: str | torch.device = "cpu") -> SoftmaxLimit:
    r"""Follow the trained head on the first ``n_head_tasks`` test tasks along fresh uniform contexts
    (stream ``head-paths``) up to ``n_head_max`` examples, against its two candidate limits.

    Exact: ŷ_∞ = −vᵀE_a[x], the cube's tilted mean; covariance readout: −vᵀΣ_x a
    (:func:`covbook.prior_work.head_limit`).  Regressing the head at the longest context y_N on the
    readout ℓ gives ρ = Σ y_N ℓ / Σ ℓ², with the sandwich SE √(Σ ℓ²(y_N − ℓ_exact)²) / Σ ℓ².
    Measures ``prior_vo_softmax_limit_exact`` (ρ against ρ_exact, the exact limit's slope) and
    ``prior_vo_softmax_not_population_step`` (1 − ρ).
    """
    if not isinstance(head, VOSoftmaxHead):
        raise ValueError(f"head must be the VOSoftmaxHead of vo_softmax_head(), got {type(head).__name__}")
    test = _check_step(step).test
    m = check_positive_int(n_head_tasks, "n_head_tasks")
    n_max = check_positive_int(n_head_max, "n_head_max")
    if n_max < VO_N:
        raise ValueError(f"n_head_max must be at least the training context, {VO_N}, got {n_max}")
    soft, cov = head.model, _cov_vo()
    w_h, xq_h = test.w[:m].cpu(), test.x_query[:m].cpu()
    lim_exact = pw.head_limit(soft, w_h, xq_h, x_law="uniform", cov_x=cov)  # (M,) the cube's tilted mean
    lim_t2 = pw.head_limit(soft, w_h, xq_h, x_law="gaussian", cov_x=cov)  # (M,) covariance readout
    checkpoints = np.unique(np.geomspace(VO_N, n_max, 9).astype(int))
    paths = pw.head_paths(soft, w_h, xq_h, checkpoints, x_law="uniform", cov_x=cov,
                          seed=streams.seed_for("head-paths"), device=resolve_device(device))  # (M, n_checkpoints)
    mse_exact = ((paths - lim_exact[:, None]) ** 2).mean(0).numpy()
    mse_t2 = ((paths - lim_t2[:, None]) ** 2).mean(0).numpy()
    gap2 = float(((lim_exact - lim_t2) ** 2).mean())
    y_h = test.y_query[:m].cpu()
    out = SoftmaxLimit(checkpoints=checkpoints, paths=paths, lim_exact=lim_exact, lim_t2=lim_t2,
                       mse_exact=mse_exact, mse_t2=mse_t2, gap2=gap2)
    out.glue("n_head_tasks", m)
    out.glue("n_head_max", int(checkpoints[-1]))
    out.glue("loss_limit_t2", float((0.5 * (lim_t2 - y_h) ** 2).mean()))
    out.glue("loss_limit_exact", float((0.5 * (lim_exact - y_h) ** 2).mean()))
    out.glue("dist_n10_t2", float(mse_t2[0]))
    out.glue("dist_n10_exact", float(mse_exact[0]))
    out.glue("rel_gap_limits", np.sqrt(gap2 / float((lim_t2**2).mean())))
    y_n = paths[:, -1]  # (M,) head at the longest context
    sxx = float((lim_t2**2).sum())
    rho = float((y_n * lim_t2).sum()) / sxx  # head regressed on the population step
    rho_exact = float((lim_exact * lim_t2).sum()) / sxx  # the same for the exact limit
    se_rho = float(torch.sqrt((lim_t2**2 * (y_n - lim_exact) ** 2).sum())) / sxx  # fluctuation about the limit
    out.glue("rho_exact", rho_exact)
    out.measure("prior_vo_softmax_limit_exact", rho, prediction=rho_exact, se=se_rho, n_head_tasks=m)
    out.measure("prior_vo_softmax_not_population_step", 1 - rho, prediction=0.0, se=se_rho, n_head_tasks=m)
    return out


#: The learners of :func:`garg_curves` and their legend labels.
GARG_LABELS = {"ols": "least squares", "averaging": "averaging", "gd_opt": r"one GD step, best $\eta$ (covbook)"}


@dataclass
class GargCurves(Result):
    """Error per dimension against k in the Garg et al. setting: ``meas[name]`` (n_k, 2) the mean and
    SE per k, ``closed[name]`` (n_k,) the closed forms, ``per_task_key[(name, k)]`` the per-task
    errors at the published k."""

    ks: np.ndarray
    meas: dict[str, np.ndarray]
    closed: dict[str, np.ndarray]
    per_task_key: dict[tuple[str, int], np.ndarray] = field(repr=False)

    def plot(self, ax: plt.Axes) -> None:
        """Measured points (±2 SE) on their closed-form lines, with crosses at the published values."""
        for j, name in enumerate(self.meas):
            ax.errorbar(self.ks, self.meas[name][:, 0], yerr=2 * self.meas[name][:, 1], fmt="o", ms=3,
                        color=f"C{j}", label=GARG_LABELS[name])
            ax.plot(self.ks, self.closed[name], "-", color=f"C{j}", lw=1)
        ax.plot([10, 10], [0.5, 2.1], "kx", ms=9, mew=2, label="published key values at $k = 10$")
        ax.plot([20], [0.0], "kx", ms=9, mew=2)
        ax.axhline(1.0, color="k", ls=":", lw=0.8)
        ax.axvline(GARG_D, color="grey", ls="--", lw=0.8)
        ax.set(ylim=(-0.05, 2.5), xlabel="in-context examples $k$", ylabel="squared error / d",
               title="Garg et al. setting: d = 20 (points: measured, lines: closed forms)")
        ax.legend()


GARG_CHUNK = 8192
"""Tasks per call of the estimators of :func:`garg_curves`: a batched pseudo-inverse's workspace grows with
the batch (at full, this computation's cell asked a GPU for one allocation of 122 GiB), a chunk's stays fixed."""


def _garg_estimates(x: torch.Tensor, y: torch.Tensor, eta_opt: float,
                    chunk: int | None = None) -> dict[str, torch.Tensor]:
    r"""Least squares ŵ = (XᵀX)⁺Xᵀy (an LU solve where X is square), averaging ŵ = (1/k)Xᵀy and one GD
    step (η/k)Xᵀy per task, ``chunk`` tasks at a time (x (B, k, d), y (B, k) -> (B, d) each; the same
    numbers as one call: each task's own)."""
    chunk = GARG_CHUNK if chunk is None else check_positive_int(chunk, "chunk")
    parts: dict[str, list[torch.Tensor]] = {name: [] for name in GARG_LABELS}
    for s in range(0, x.shape[0], chunk):
        xs, ys = x[s:s + chunk], y[s:s + chunk]  # (c, k, d), (c, k)
        # a square system (k = d): an LU solve has forward error ∝ eps·cond(X), the Gram route's ∝ eps·cond(X)²
        parts["ols"].append(torch.linalg.solve(xs, ys) if xs.shape[-2] == xs.shape[-1] else icl.ols(xs, ys))
        parts["averaging"].append(icl.empirical_gd(xs, ys, 1.0)[-1])
        parts["gd_opt"].append(icl.empirical_gd(xs, ys, eta_opt)[-1])
    return {name: torch.cat(p) for name, p in parts.items()}


def garg_curves(*, garg_tasks: int, garg_tasks_key: int, streams: RandomStreams,
                device: str | torch.device = "cpu") -> GargCurves:
    r"""Least squares, averaging ŵ = (1/k)Xᵀy and one GD step with η*(k) for k = 1, …, 2d (d = 20).

    ``garg_tasks`` tasks per k (``garg_tasks_key`` at k ∈ :data:`GARG_KEY_KS`; stream ``garg``,
    replicate i for the i-th k); the query is averaged exactly, e = |ŵ − w|²/d.  Closed forms:
    (d−k)⁺/d, (d+1)/k, (d+1)/(k+d+1).  Measures ``prior_garg_ls_k10`` (0.5), ``prior_garg_avg_k10``
    (2.1), ``prior_garg_ls_k20`` (0) and ``prior_garg_gd_step_k10`` (21/31).
    """
    n_t, n_key = check_positive_int(garg_tasks, "garg_tasks"), check_positive_int(garg_tasks_key, "garg_tasks_key")
    if min(n_t, n_key) < 2:
        raise ValueError(f"garg_tasks and garg_tasks_key must be at least 2 (for standard errors), got {n_t}, {n_key}")
    dev, d = resolve_device(device), GARG_D
    ks = np.arange(1, 2 * d + 1)
    meas: dict[str, list[tuple[float, float]]] = {k: [] for k in GARG_LABELS}
    per_task_key = {}
    for i, k in enumerate(ks):
        t = icl.make_regression_tasks(n_key if k in GARG_KEY_KS else n_t, int(k), d,
                                      seed=streams.seed_for("garg", replicate=i), device=dev)
        est = _garg_estimates(t.x, t.y, float(icl.gd_optimal_step(k, d)))  # (tasks, d) each
        if k == d:  # the rounding bound of a backward-stable solve, |ŵ − w| ≤ d·eps·cond(X)·|w|, per task
            eps = torch.finfo(t.x.dtype).eps
            cond = torch.cat([torch.linalg.cond(t.x[s:s + GARG_CHUNK]) for s in range(0, t.x.shape[0], GARG_CHUNK)])
            ls_bound = float(((d * eps * cond * t.w.norm(dim=-1)) ** 2 / d).mean())
        for name, v in est.items():
            err = (((v - t.w) ** 2).sum(-1) / d).cpu().numpy()  # (tasks,)
            meas[name].append(mean_with_se(err))
            if k in GARG_KEY_KS:
                per_task_key[(name, int(k))] = err
    closed = {"ols": icl.ols_risk(ks, d), "averaging": icl.averaging_risk(ks, d), "gd_opt": icl.gd_optimal_risk(ks, d)}
    out = GargCurves(ks=ks, meas={k: np.array(v) for k, v in meas.items()}, closed=closed, per_task_key=per_task_key)
    out.glue("garg_tasks", n_t)
    out.glue("garg_tasks_key", n_key)
    ls10, ls10_se = mean_with_se(per_task_key[("ols", 10)])
    avg10, avg10_se = mean_with_se(per_task_key[("averaging", 10)])
    gd10, gd10_se = mean_with_se(per_task_key[("gd_opt", 10)])
    out.measure("prior_garg_ls_k10", ls10, prediction=0.5, se=ls10_se, garg_tasks_key=n_key)
    out.measure("prior_garg_avg_k10", avg10, prediction=2.1, se=avg10_se, garg_tasks_key=n_key)
    out.measure("prior_garg_ls_k20", float(per_task_key[("ols", 20)].mean()), prediction=0.0, lower=0.0,
                upper=ls_bound)
    out.measure("prior_garg_gd_step_k10", gd10, prediction=float(icl.gd_optimal_risk(10, d)), se=gd10_se,
                garg_tasks_key=n_key)
    return out


_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def table_number(x: float | None) -> str:
    """One format for the table's numbers: three significant digits, and ``m × 10ⁿ`` outside [10⁻³, 10⁵).

    Examples
    --------
    >>> table_number(0.20876), table_number(1.958e-09), table_number(0.0), table_number(None)
    ('0.209', '1.96 × 10⁻⁹', '0', '—')
    """
    if x is None:
        return "—"
    if not math.isfinite(x):
        return str(x)
    if x == 0 or 1e-3 <= abs(x) < 1e5:
        return f"{x:.3g}"
    mantissa, exponent = f"{x:.2e}".split("e")
    return f"{mantissa} × 10{str(int(exponent)).translate(_SUPERSCRIPT)}"


def _window_text(c: Claim) -> str:
    """The claim's window in :func:`table_number`'s format: ``centre ± half-width`` or ``[lower, upper]``."""
    if c.expected is not None and c.tolerance is not None:
        return f"{table_number(c.expected)} ± {table_number(c.tolerance)}"
    lo = "−∞" if c.lower is None else table_number(c.lower)
    hi = "∞" if c.upper is None else table_number(c.upper)
    return f"[{lo}, {hi}]"


def summary_table(judged: Mapping[str, Claim]) -> Styler:
    """The published values against covbook's judged claims (``{id: Claim}`` from ``claims.record``),
    one row per :data:`TABLE` entry, and the trained transformer of Garg et al. (not attempted)."""
    if not isinstance(judged, Mapping):
        raise ValueError(f"judged must map claim ids to judged claims, got {type(judged).__name__}")
    missing = [cid for cid, *_ in TABLE if cid not in judged]
    if missing:
        raise ValueError(f"judged lacks the claims {missing} of the table: record every experiment first")
    rows = [{"quantity": q, "published": pub, "source": src, "covbook measured": table_number(judged[cid].measured),
             "covbook expected": _window_text(judged[cid]),
             "verdict": "✓ pass" if judged[cid].passed else "✗ fail"}
            for cid, q, pub, src in TABLE]
    rows.append({"quantity": "trained transformer (12 layers), k = 10 (d = 20)", "published": "≈ 0.5 (≈ least squares)",
                 "source": "Garg et al. (2022)", "covbook measured": "not attempted", "covbook expected": "—",
                 "verdict": "— not reproduced"})
    return pd.DataFrame(rows).style.hide(axis="index")
