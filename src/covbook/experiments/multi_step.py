r"""Chapter 06's experiments: stacked GD heads with residual connections iterate gradient descent.

Serves ``notebooks/06_icl_multi_step.md`` and its {prf:ref}`thm-06-stacked`: (1) the K-layer model is
exactly :math:`Y^{(K)} = (I - A)^K (y_1, \dots, y_N, 0)^\top` at every N; (2) as :math:`N \to \infty` at
fixed K it tends to :math:`x_q^\top w_K`, :math:`w_K = (I - (I - \eta\Sigma_x)^K)w` (preconditioned:
:math:`(I - (I - \eta\Gamma\Sigma_x)^K)w`); (3) :math:`w_K \to w` iff :math:`0 < \eta < 2/\lambda_{\max}`; and,
at a fixed N, :math:`(I - A)^K \to 0`: depth first helps, then forgets the labels.

Random streams (of the chapter's :class:`~covbook.streams.Streams`): ``configs`` (the rotation of
:math:`\Sigma_x`, then :math:`w`, by :func:`setting`), ``unroll`` (replicate: step size), ``track``
(the tracking contexts, shared by every N), ``bootstrap-plain-k1``, ``bootstrap-plain-k2``,
``bootstrap-plain-kmax``, ``bootstrap-newton-k2``, ``convergence``, ``unstable`` and ``depth`` (the
contexts of the longest length, whose prefixes the shorter ones are).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import torch

from covbook import icl
from covbook._validate import check_positive_float, check_positive_int, resolve_device
from covbook.experiments.regression import RegressionProblem
from covbook.experiments.result import RandomStreams, Result
from covbook.plotting import loglog_with_fit
from covbook.stats import mean_with_se, slope_with_se

__all__ = ["CHAPTER", "NOISE", "setting", "identity", "Tracking", "tracking", "Convergence", "convergence",
           "unstable", "Depth", "depth", "predictions_by_depth", "identity_by_depth", "UNROLL_STEPS",
           "CONVERGENCE_ETAS", "K_CONV", "ETA_UNSTABLE", "K_UNSTABLE", "ETA_DEPTH", "TRACK_N_MIN", "TRACK_S",
           "at_logit_variance", "relative_error_with_se"]

CHAPTER = "06"
#: Step sizes of the identity check (the last one with the Newton preconditioner Γ = Σ_x⁻¹).
UNROLL_STEPS = ((0.5, False), (1.5, False), (3.0, False), (0.5, True))
#: Step sizes and depth of the convergence experiment (2/λ_max = 2 for the chapter's Σ_x).
CONVERGENCE_ETAS = (0.5, 1.0, 1.8, 2.2)
K_CONV = 12
#: The unstable step and depth of experiment 3b, and the step of the depth experiment.
ETA_UNSTABLE, K_UNSTABLE = 2.2, 3
ETA_DEPTH = 0.5
#: The tracking experiment's shortest context (below it the terms of order 1/N² still bend the curves),
#: and the logit variance ``TRACK_S`` every query is scaled to for the head that reads it.
TRACK_N_MIN, TRACK_S = 64, 0.5
#: The label noise σ of every task of the chapter.
NOISE = 0.1
_F64 = torch.float64


def setting(d: int, *, eta: float, streams: RandomStreams) -> RegressionProblem:
    r"""Draw :math:`\Sigma_x = Q\,\mathrm{diag}(1, \tfrac12, \tfrac14, \dots)Q^\top` and :math:`w` (stream ``configs``).

    Q is the Q factor of a standard normal (d, d) matrix, drawn first, then w (d,); label noise ``NOISE``.
    Glues ``eta_crit`` (:math:`2/\lambda_{\max}`) and ``eta``.
    """
    d = check_positive_int(d, "d")
    eta = check_positive_float(eta, "eta")
    gen = streams.torch_generator("configs")
    q_rot, _ = torch.linalg.qr(torch.randn(d, d, generator=gen, dtype=_F64))  # (d, d)
    lam = torch.tensor([1.0, 0.5, 0.25][:d] + [0.25] * max(0, d - 3), dtype=_F64)  # (d,)
    cov_x = q_rot @ torch.diag(lam) @ q_rot.T  # (d, d) eigenvalues 1, 1/2, 1/4
    w = torch.randn(d, generator=gen, dtype=_F64)  # (d,)
    out = RegressionProblem(d, eta, NOISE, cov_x, w)
    out.glue("eta_crit", out.eta_crit)
    out.glue("eta", eta)
    return out


def _in_batches(fn: Callable[[icl.RegressionTasks], torch.Tensor], tasks: icl.RegressionTasks,
                batch: int = 16) -> torch.Tensor:
    """``fn(tasks) -> (K+1, b)`` over batches of tasks (the attention matrix is (T, T) per task), on the CPU."""
    with torch.no_grad():
        return torch.cat([fn(tasks[i: i + batch]).cpu() for i in range(0, len(tasks), batch)], 1)


def predictions_by_depth(model: icl.ICLTransformer, tasks: icl.RegressionTasks) -> torch.Tensor:
    """The literal model's predictions after 0..K layers, shape (K+1, B)."""
    return _in_batches(model.to(tasks.tokens.device).predict_by_depth, tasks)


def identity_by_depth(tasks: icl.RegressionTasks, eta: float, layers: int) -> torch.Tensor:
    """The same through the identity Y^{(K)} = (I − A)^K (y, 0), shape (K+1, B)."""
    return _in_batches(lambda t: icl.power_identity_predictions(t, eta, layers), tasks)


def _tasks(problem: RegressionProblem, n_tasks: int, n: int, drawn: int, device: torch.device) -> icl.RegressionTasks:
    """``n_tasks`` contexts of ``n`` examples for the chapter's fixed task w (label noise σ)."""
    return icl.make_regression_tasks(n_tasks, int(n), problem.d, cov_x=problem.cov_x, w=problem.w, noise=problem.noise,
                                     seed=drawn, device=device)


def identity(problem: RegressionProblem, *, streams: RandomStreams) -> Result:
    r"""Largest relative difference :math:`|\hat y^{\rm lit} - \hat y^{\rm id}|/(1 + |\hat y^{\rm id}|)`.

    Between the literal 10-layer model and the identity :math:`(I - A)^K`, over 8 random tasks
    (w ~ N(0, I)) of 64 examples for each step of ``UNROLL_STEPS``. Measures ``identity_max_error``.
    """
    worst = 0.0
    for i, (eta_i, newton) in enumerate(UNROLL_STEPS):
        pre = problem.gamma if newton else None
        tasks = icl.make_regression_tasks(8, 64, problem.d, cov_x=problem.cov_x, noise=problem.noise,
                                          seed=streams.seed_for("unroll", replicate=i))
        model = icl.stacked_gd_transformer(problem.d, eta_i, 10, precondition=pre)
        literal = predictions_by_depth(model, tasks)  # (11, 8)
        ident = icl.power_identity_predictions(tasks, eta_i, 10, precondition=pre)  # (11, 8)
        worst = max(worst, ((literal - ident).abs() / (1 + ident.abs())).max().item())
    out = Result()
    out.measure("identity_max_error", worst)
    return out


@dataclass
class Tracking(Result):
    """Squared errors of the K-layer model to x_qᵀw_K against N, plain and preconditioned."""

    ns: np.ndarray  # (n_points,)
    sq: dict[str, np.ndarray]  # "plain"/"newton" → (B, n_points, K+1)
    k_track: int

    def plot(self, ax: plt.Axes) -> None:
        """Log-log error against N for K = 1, 2, k_track and the preconditioned K = 2 (its three longest
        contexts, the range of its claim), with fitted slopes."""
        for i, k in enumerate([1, 2, self.k_track]):
            loglog_with_fit(ax, self.ns, self.sq["plain"][:, :, k].mean(0), label=f"K = {k}", color=f"C{i}")
        loglog_with_fit(ax, self.ns[-3:], self.sq["newton"][:, -3:, 2].mean(0), label="K = 2, preconditioned",
                        color="C3", marker="s")
        ax.set(xlabel="examples $N$", ylabel=r"$\mathbb{E}(\hat y_K - x_q^\top w_K)^2$",
               title="The K-layer model tracks K steps of population GD")
        ax.legend()


def at_logit_variance(x_query: torch.Tensor, metric: torch.Tensor, eta: float, s: float) -> torch.Tensor:
    r"""Each query scaled along its own direction to the logit variance :math:`s = \eta^2 x_q^\top M x_q`.

    For the plain head the logits :math:`\eta\,x_i^\top x_q` of Gaussian tokens have variance
    :math:`\eta^2 x_q^\top\Sigma_x x_q` (:math:`M = \Sigma_x`); for the preconditioned head
    :math:`\eta\,x_i^\top\Gamma x_q`, so :math:`M = \Gamma\Sigma_x\Gamma`. Shape (B, d) → (B, d).

    Examples
    --------
    >>> q = at_logit_variance(torch.tensor([[2.0, 0.0], [0.0, 3.0]]), torch.eye(2), 0.5, 0.25)
    >>> q.tolist()
    [[1.0, 0.0], [0.0, 1.0]]
    """
    eta, s = check_positive_float(eta, "eta"), check_positive_float(s, "s")
    quad = ((x_query @ metric) * x_query).sum(-1)  # (B,)
    if bool((quad <= 0).any()):
        raise ValueError("x_query must have no zero row and metric must be positive definite")
    return x_query * (s / (eta**2 * quad)).sqrt()[:, None]  # (B, d)


def tracking(problem: RegressionProblem, *, n_tasks: int, n_max: int, k_track: int, streams: RandomStreams,
             device: str | torch.device = "cpu", n_min: int = TRACK_N_MIN) -> Tracking:
    r""":math:`\mathbb E(\hat y_K - x_q^\top w_K)^2` of the literal model, K ≤ ``k_track``, N ``n_min``…``n_max``.

    ``n_tasks`` contexts of ``n_max`` examples; the model at N reads the first N examples of each (the same
    contexts and queries at every N, so the task-to-task spread largely cancels in the slope). N runs from
    ``n_max`` down to ``n_min`` (``TRACK_N_MIN``), halving. Each query's direction is drawn from the chapter's law
    and its length set so that the head's logits have variance ``TRACK_S`` (:func:`at_logit_variance`):
    the theorem is a statement at every query, and a Gaussian query's squared error has no finite variance
    (its constant grows like :math:`e^{s}`), which no standard error over tasks could describe. The plain
    model against :math:`w_K = (I - (I - \eta\Sigma_x)^K)w`, the preconditioned (Γ = Σ_x⁻¹) against its own
    iterates. Measures the log-log slopes (bootstrap SE over tasks, resampled jointly at every N) of plain
    K = 1, 2 and ``k_track`` from ``n_min``, and of the preconditioned K = 2 over the three longest contexts
    (from ``n_max / 4``: at shorter ones its curve is still flatter than 1/N).
    """
    n_tasks, n_max = check_positive_int(n_tasks, "n_tasks"), check_positive_int(n_max, "n_max")
    k_track = check_positive_int(k_track, "k_track")
    if k_track < 3:
        raise ValueError(f"k_track must be at least 3 (the curves K = 1, 2 are measured besides it), got {k_track}")
    n_min = check_positive_int(n_min, "n_min")
    if n_max < 4 * n_min or n_tasks < 2:
        raise ValueError(f"n_max must be at least 4 n_min = {4 * n_min} (three context lengths) and n_tasks at "
                         f"least 2, got n_max = {n_max} and n_tasks = {n_tasks}")
    dev = resolve_device(device)
    cov_x, w, eta, gamma = problem.cov_x, problem.w, problem.eta, problem.gamma
    ns = n_max // 2 ** np.arange(int(np.log2(n_max / n_min)), -1, -1)  # (n_points,) halving from n_max, ≥ n_min
    targets = {"plain": icl.population_gd(cov_x, w, eta, k_track, check_stable=True),  # (K+1, d)
               "newton": icl.population_gd(cov_x, w, eta, k_track, precondition=gamma, check_stable=True)}
    metrics = {"plain": cov_x, "newton": gamma @ cov_x @ gamma}  # (d, d) the logit variance of each head
    drawn = _tasks(problem, n_tasks, n_max, streams.seed_for("track"), dev)
    sq = {key: np.zeros((n_tasks, len(ns), k_track + 1)) for key in targets}
    for key, pre in (("plain", None), ("newton", gamma)):
        tasks = drawn.with_query(at_logit_variance(drawn.x_query, metrics[key].to(dev), eta, TRACK_S))
        model = icl.stacked_gd_transformer(problem.d, eta, k_track, pre)
        target = targets[key] @ tasks.x_query.cpu().T  # (K+1, B)
        for j, n in enumerate(ns):
            first = icl.RegressionTasks(tasks.tokens[:, :n], tasks.query, tasks.y_query, tasks.w)  # N = n
            sq[key][:, j] = ((predictions_by_depth(model, first) - target) ** 2).T.numpy()  # (B, K+1)
    out = Tracking(ns, sq, k_track)
    for name, value in (("n_min_track", int(ns[0])), ("n_tasks", n_tasks), ("k_track", k_track), ("n_max", n_max),
                        ("track_s", TRACK_S)):
        out.glue(name, value)
    out.glue("n_min_newton", int(ns[-3]))
    for cid, key, k, first, boot in (("track_slope_plain_k1", "plain", 1, 0, "bootstrap-plain-k1"),
                                     ("track_slope_plain_k2", "plain", 2, 0, "bootstrap-plain-k2"),
                                     ("track_slope_plain_kmax", "plain", k_track, 0, "bootstrap-plain-kmax"),
                                     ("track_slope_newton_k2", "newton", 2, len(ns) - 3, "bootstrap-newton-k2")):
        slope, se = slope_with_se(ns[first:], sq[key][:, first:, k], seed=streams.seed_for(boot))
        out.measure(cid, slope, prediction=-1.0, se=se, key=key, k=k, n_tasks=n_tasks, n_min=int(ns[first]),
                    n_max=n_max, s=TRACK_S)
    return out


@dataclass
class Convergence(Result):
    """Relative errors against K of population GD and of the model at N = ``n_max``, per step size."""

    conv: dict[float, dict[str, np.ndarray]]  # η → "pop", "model", "pop_mean" (w ~ N(0, I)): (K_CONV+1,)
    eta_crit: float
    n_max: int

    def plot(self, axes: np.ndarray) -> None:
        """Left: population GD (dotted: over w ~ N(0, I)); right: the model at the longest context (log scale)."""
        ks = range(K_CONV + 1)
        for i, (e, c) in enumerate(self.conv.items()):
            lab = f"η = {e}" + (" (unstable)" if e >= self.eta_crit else "")
            axes[0].semilogy(ks, c["pop"], "-", color=f"C{i}", label=lab)
            axes[0].semilogy(ks, c["pop_mean"], ":", color=f"C{i}")
            axes[1].semilogy(ks, c["model"], "o-", ms=3, color=f"C{i}", label=lab)
        axes[0].set(xlabel="steps $K$", ylabel=r"$\mathbb{E}(x_q^\top(w_K - w))^2 / \mathbb{E}(x_q^\top w)^2$",
                    title="Population GD")
        axes[1].set(xlabel="layers $K$", ylabel=r"$\mathbb{E}(\hat y_K - x_q^\top w)^2 / \mathbb{E}(x_q^\top w)^2$",
                    title=f"The model at N = {self.n_max}")
        axes[0].legend()
        axes[1].legend()


def convergence(problem: RegressionProblem, *, n_tasks: int, n_max: int, streams: RandomStreams,
                device: str | torch.device = "cpu") -> Convergence:
    r"""Relative errors :math:`\mathbb E(x_q^\top(w_K - w))^2/\mathbb E(x_q^\top w)^2` and the model's, K ≤ ``K_CONV``.

    For each η of ``CONVERGENCE_ETAS``, on ``n_tasks`` contexts of ``n_max`` examples for the chapter's w
    (the model through the identity), and in closed form over :math:`w \sim \mathcal N(0, I)` (``pop_mean``).
    Measures ``pop_converges`` (η = 1.8, the chapter's w), ``pop_diverges`` (η = 2.2, last over first step
    of the closed form: the growth of one w depends on its weight along the top eigenvector, the
    average's does not) and ``model_converges`` (η = 0.5: the share of tasks whose squared error after
    ``K_CONV`` layers is below one layer's, a sign test against 1/2 with the binomial SE 1/(2√n): the mean
    over tasks is carried by the few large queries, where the logits are large and the error compounds).
    """
    n_tasks, n_max = check_positive_int(n_tasks, "n_tasks"), check_positive_int(n_max, "n_max")
    dev = resolve_device(device)
    cov_x, w = problem.cov_x, problem.w
    tasks = _tasks(problem, n_tasks, n_max, streams.seed_for("convergence"), dev)
    x_query, clean = tasks.x_query.cpu(), tasks.clean_target.cpu()  # (B, d), (B,)
    norm_q = (clean**2).mean()
    conv, model_median, sq_by_eta = {}, {}, {}
    for e in CONVERGENCE_ETAS:
        it = icl.population_gd(cov_x, w, e, K_CONV)  # (K+1, d)
        pop_err = (((it - w) @ x_query.T) ** 2).mean(1) / norm_q  # (K+1,)
        model_pred = identity_by_depth(tasks, e, K_CONV)  # (K+1, B), = the literal model
        model_sq = (model_pred - clean) ** 2  # (K+1, B)
        model_median[e], sq_by_eta[e] = model_sq.median(1).values.numpy(), model_sq  # (K+1,), (K+1, B)
        conv[e] = dict(pop=pop_err.numpy(), model=(model_sq.mean(1) / norm_q).numpy(),
                       pop_mean=_population_error(cov_x, e, K_CONV))
    out = Convergence(conv, problem.eta_crit, n_max)
    out.measure("pop_converges", conv[1.8]["pop"][-1], eta_crit=problem.eta_crit, k_conv=K_CONV)
    out.measure("pop_diverges", conv[2.2]["pop_mean"][-1] / conv[2.2]["pop_mean"][1], k_conv=K_CONV)
    fell = float((sq_by_eta[0.5][-1] < sq_by_eta[0.5][1]).double().mean())  # tasks whose error fell (sign test)
    out.measure("model_converges", fell, prediction=0.5, se=0.5 / n_tasks**0.5, n_max=n_max, k_conv=K_CONV,
                n_tasks=n_tasks, median_ratio=model_median[0.5][-1] / model_median[0.5][1])
    out.glue("model_unstable_last", conv[2.2]["model"][-1])
    out.glue("pop_unstable_last", conv[2.2]["pop_mean"][-1])
    return out


def unstable(problem: RegressionProblem, *, n_tasks: int, n_max: int, streams: RandomStreams,
             device: str | torch.device = "cpu") -> Result:
    r"""The model at the unstable step η = ``ETA_UNSTABLE``, task :math:`w = v_{\max}`, query :math:`0.15\,v_{\max}`.

    The task is the top eigenvector, the only direction in which η = 2.2 is unstable (the chapter's
    drawn w may have almost no weight along it, and then neither model diverges: nothing to test).
    The population-step model's relative error :math:`((x_q^\top w_K - x_q^\top w)/x_q^\top w)^2` against
    :math:`(1 - \eta)^{2K}` (:math:`\lambda_{\max} = 1`), the literal layer 1 against :math:`x_q^\top w_1`, and
    the gap :math:`|\bar{\hat y}_K - x_q^\top w_K|/\mathrm{SE}` after K = ``K_UNSTABLE`` layers.
    """
    n_tasks, n_max = check_positive_int(n_tasks, "n_tasks"), check_positive_int(n_max, "n_max")
    if n_tasks < 2:
        raise ValueError(f"n_tasks must be at least 2 (standard errors), got {n_tasks}")
    dev = resolve_device(device)
    cov_x, eta_u, k_u = problem.cov_x, ETA_UNSTABLE, K_UNSTABLE
    _, vec_all = torch.linalg.eigh(cov_x)
    w = vec_all[:, -1]  # (d,) the top eigenvector, λ_max = 1
    xq_u = 0.15 * w  # (d,) the query along it
    tasks_u = icl.make_regression_tasks(n_tasks, n_max, problem.d, cov_x=cov_x, w=w, noise=problem.noise,
                                        seed=streams.seed_for("unstable"), device=dev).with_query(xq_u)
    pred_u = identity_by_depth(tasks_u, eta_u, k_u)  # (K+1, B), = the literal model
    pop_u = icl.population_gd(cov_x, w, eta_u, k_u) @ xq_u  # (K+1,) the N = ∞ model
    rel_pop = ((pop_u - xq_u @ w) / (xq_u @ w)) ** 2  # (K+1,) relative error of the N = ∞ model
    out = Result()
    out.measure("t3_population_model_diverges", float(rel_pop[k_u]), prediction=float((1 - eta_u) ** (2 * k_u)),
                eta_u=eta_u, k_u=k_u, v_1_eta_u_2_k_u=(1 - eta_u) ** (2 * k_u))
    m1, se1 = mean_with_se(pred_u[1].numpy())
    out.measure("t3_model_layer1_tracks", m1, prediction=float(pop_u[1]), se=se1, eta_u=eta_u, n_max=n_max,
                n_tasks=n_tasks)
    mk, sek = mean_with_se(pred_u[k_u].numpy())
    out.measure("t3_model_not_yet_diverged", abs(mk - float(pop_u[k_u])) / sek, prediction=0.0, se=1.0,
                dof=n_tasks - 1, n_max=n_max, k_u=k_u, n_tasks_1=n_tasks - 1, n_tasks=n_tasks)
    out.glue("t3_pop_k", float(pop_u[k_u]))
    out.glue("t3_model_k", mk)
    out.glue("k_u", k_u)
    return out


@dataclass
class Depth(Result):
    """Relative error to the truth against depth K ≤ k_max at several N, with population GD (N = ∞)."""

    depth: dict[int, np.ndarray]  # N → (k_max+1,)
    pop_err: np.ndarray  # (k_max+1,)
    k_max: int

    def plot(self, ax: plt.Axes) -> None:
        """The error against K (log-log) for every N, and population GD dashed."""
        ks = np.arange(1, self.k_max + 1)
        for i, (n, err) in enumerate(self.depth.items()):
            ax.semilogx(ks, err[1:], "-", color=f"C{i}", label=f"N = {n}")
        ax.semilogx(ks, self.pop_err[1:], "k--", lw=1, label=r"population GD ($N = \infty$)")
        ax.set(xlabel="layers $K$", ylabel=r"$\mathbb{E}(\hat y_K - x_q^\top w)^2 / \mathbb{E}(x_q^\top w)^2$",
               ylim=(1e-3, 2), yscale="log", title=f"Depth helps, then hurts: η = {ETA_DEPTH}")
        ax.legend()


def _population_error(cov_x: torch.Tensor, eta: float, k_max: int) -> np.ndarray:
    r"""Relative error of population GD for :math:`w \sim \mathcal N(0, I)`, :math:`x_q \sim \mathcal N(0, \Sigma_x)`.

    :math:`\mathbb E(x_q^\top(w_K - w))^2/\mathbb E(x_q^\top w)^2
    = \operatorname{tr}((P_K - I)^\top\Sigma_x(P_K - I))/\operatorname{tr}\Sigma_x
    = \sum_i\lambda_i(1 - \eta\lambda_i)^{2K}/\sum_i\lambda_i` with :math:`P_K = I - (I - \eta\Sigma_x)^K`, for
    K = 0..k_max; shape (k_max+1,). It depends on Σ_x only through its eigenvalues, so not on the drawn
    rotation or w.
    """
    d = cov_x.shape[0]
    eye = torch.eye(d, dtype=_F64)
    pop = icl.population_gd(cov_x, eye, eta, k_max)  # (K+1, d, d) = I − (I−ηΣ)^K
    return np.array([torch.trace((p - eye).T @ cov_x @ (p - eye)).item() / torch.trace(cov_x).item() for p in pop])


def depth(problem: RegressionProblem, *, n_tasks: int, n_depth: Sequence[int], k_max: int, streams: RandomStreams,
          device: str | torch.device = "cpu") -> Depth:
    r""":math:`\mathbb E(\hat y_K - x_q^\top w)^2/\mathbb E(x_q^\top w)^2` for K ≤ ``k_max`` at η = ``ETA_DEPTH``.

    For each N of ``n_depth``, ``n_tasks`` random tasks (w ~ N(0, I)), through the identity. Measures, at
    the first N, the rise of the relative squared error from depth ``K_CONV`` (fixed before the run, not the
    data's best depth) to ``k_max``, paired over tasks (``depth_tradeoff``), and the relative error at
    ``k_max`` against population GD's (``depth_forgets``), each with its delta-method SE; and the share of
    tasks whose error at depth ``K_CONV`` is smaller at the last N than at the first (``depth_larger_n_better``,
    a sign test against 1/2: each N reads the first N examples of the same contexts).
    """
    n_tasks, k_max = check_positive_int(n_tasks, "n_tasks"), check_positive_int(k_max, "k_max")
    ns = [check_positive_int(n, "n_depth") for n in n_depth]
    if len(ns) < 2:
        raise ValueError(f"n_depth must hold at least two context lengths, got {list(n_depth)}")
    dev = resolve_device(device)
    errs, sq, norm = {}, {}, {}
    drawn = icl.make_regression_tasks(n_tasks, max(ns), problem.d, cov_x=problem.cov_x, noise=problem.noise,
                                      seed=streams.seed_for("depth"), device=dev)
    for n in ns:  # the model at N reads the first N examples of the same contexts: paired over tasks
        tasks = icl.RegressionTasks(drawn.tokens[:, :n], drawn.query, drawn.y_query, drawn.w)
        pred = identity_by_depth(tasks, ETA_DEPTH, k_max)  # (K+1, B)
        clean = tasks.clean_target.cpu()  # (B,)
        sq[n], norm[n] = ((pred - clean) ** 2).numpy(), (clean**2).numpy()  # (K+1, B), (B,)
        errs[n] = sq[n].mean(1) / norm[n].mean()  # (K+1,)
    pop = _population_error(problem.cov_x, ETA_DEPTH, k_max)
    out = Depth(errs, pop, k_max)
    n0, n1, k_ref = ns[0], ns[-1], min(K_CONV, k_max)
    out.glue("k_best", int(np.argmin(errs[n0])))
    out.glue("k_max", k_max)
    out.glue("n_depth_0", n0)
    rise, se_rise = relative_error_with_se(sq[n0][-1] - sq[n0][k_ref], norm[n0])  # paired over tasks
    out.measure("depth_tradeoff", rise, prediction=0.0, se=se_rise, dof=n_tasks - 1, n0=n0, k_max=k_max,
                k_ref=k_ref, n_tasks=n_tasks, n_tasks_1=n_tasks - 1)
    forget, se_forget = relative_error_with_se(sq[n0][-1], norm[n0])
    out.measure("depth_forgets", forget, prediction=float(pop[-1]), se=se_forget, dof=n_tasks - 1, n0=n0,
                k_max=k_max, n_tasks=n_tasks, n_tasks_1=n_tasks - 1)
    better = float((sq[n1][k_ref] < sq[n0][k_ref]).mean())  # tasks whose error is smaller at n1 (sign test)
    out.measure("depth_larger_n_better", better, prediction=0.5, se=0.5 / n_tasks**0.5, n1=n1, n0=n0, k_ref=k_ref,
                n_tasks=n_tasks)
    return out


def relative_error_with_se(sq: np.ndarray, norm: np.ndarray) -> tuple[float, float]:
    r"""The relative error :math:`r = \bar e/\bar c` over tasks and its delta-method SE
    :math:`\operatorname{sd}(e_i - r c_i)/(\sqrt n\,\bar c)`; ``sq`` the squared errors (B,) (or a paired
    difference of two depths' squared errors: then ``r`` is the change of the relative error), ``norm`` the
    squared clean targets (B,).

    >>> r, se = relative_error_with_se(np.array([1.0, 3.0]), np.array([2.0, 2.0]))
    >>> r, round(se, 6)
    (1.0, 0.5)
    """
    r = float(sq.mean() / norm.mean())
    return r, float((sq - r * norm).std(ddof=1) / (np.sqrt(sq.size) * norm.mean()))
