r"""Training stacked softmax heads on in-context regression (Xu & Fang 2026, Sec. 4.3; chapter 7)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from tqdm import tqdm

from covbook._seeds import derive_seed
from covbook._validate import check_positive_int, resolve_device
from covbook.icl._common import _check_eta
from covbook.icl.model import ICLTransformer, random_icl_transformer  # noqa: F401  (doctest)
from covbook.icl.tasks import make_regression_tasks

__all__ = ["TrainLog", "train_icl", "adam_on_tasks", "RestartResult", "train_icl_restarts"]


@dataclass
class TrainLog:
    """Training record: the step numbers and the batch loss (mean squared error) at each."""

    steps: np.ndarray
    loss: np.ndarray


def train_icl(model: ICLTransformer, *, n_examples: int, steps: int, batch: int = 256, lr: float = 1e-2,
              noise: float = 0.0, cov_x: object | None = None, seed: int = 0,
              device: str | torch.device = "cpu", progress: bool = False, log_every: int = 10,
              final_lr_fraction: float = 0.1) -> TrainLog:
    """Train ``model`` with Adam on fresh in-context regression tasks every step.

    Loss: mean of (ŷ − y_q)² over a batch of ``batch`` tasks with N = ``n_examples``
    Gaussian examples, w ~ N(0, I_d).  The learning rate decays linearly from ``lr`` to
    ``final_lr_fraction · lr``.  Deterministic given ``seed`` on the CPU (task draws come
    from their own generator).  ``progress`` shows a plain ``tqdm`` bar on stdout.
    """
    if not isinstance(model, ICLTransformer):
        raise ValueError(f"model must be an ICLTransformer, got {type(model).__name__}")
    n, steps = check_positive_int(n_examples, "n_examples"), check_positive_int(steps, "steps")
    batch, log_every = check_positive_int(batch, "batch"), check_positive_int(log_every, "log_every")
    lr = _check_eta(lr, "lr")
    dev = resolve_device(device)
    model.to(dev)
    threads = torch.get_num_threads()
    if dev.type == "cpu":  # per-step tensors are tiny: intra-op threads only add overhead
        torch.set_num_threads(1)
    try:
        return _train_loop(model, n, steps, batch, lr, noise, cov_x, int(seed), dev, progress, log_every,
                           final_lr_fraction)
    finally:
        torch.set_num_threads(threads)


def _train_loop(model: ICLTransformer, n: int, steps: int, batch: int, lr: float, noise: float,
                cov_x: object | None, seed: int, dev: torch.device, progress: bool, log_every: int,
                final_lr_fraction: float) -> TrainLog:
    frac = float(final_lr_fraction)
    if not 0 < frac <= 1:
        raise ValueError(f"final_lr_fraction must be in (0, 1], got {final_lr_fraction!r}")
    return adam_on_tasks(model, n_examples=n, steps=steps, batch=batch, lr=lr, noise=noise, cov_x=cov_x,
                         seed=seed, device=dev, dtype=model.theta_q[0].dtype, progress=progress,
                         log_every=log_every, final_lr_fraction=frac, per_draw=64)


def adam_on_tasks(model: torch.nn.Module, *, n_examples: int, steps: int, batch: int, lr: float,
                  noise: float = 0.0, x_law: str = "gaussian", cov_x: object | None = None, seed: int = 0,
                  device: str | torch.device = "cpu", dtype: torch.dtype = torch.float64,
                  progress: bool = False, log_every: int = 10, final_lr_fraction: float = 0.1,
                  per_draw: int = 64) -> TrainLog:
    r"""The one training loop: Adam on fresh in-context regression tasks at every step.

    Minimises the batch mean of :math:`(\hat y - y_q)^2` over ``batch`` tasks of
    ``n_examples`` examples (inputs of law ``x_law``, w ~ N(0, I_d)) with a learning rate
    decaying linearly from ``lr`` to ``final_lr_fraction · lr``.  Tasks are drawn
    ``per_draw`` steps at a time (all ``steps`` at once when fewer: a rehearsal's two steps do not
    draw 64 steps of tasks), chunk k from ``derive_seed(seed, k)``, so a run is deterministic
    on the CPU.  ``model`` needs a ``predict(tasks)`` method and an attribute ``d``; only
    parameters that require gradients are trained.  Arguments are validated by the callers
    (:func:`train_icl`, :func:`covbook.prior_work.train_on_tasks`).
    """
    run = _AdamRun(model, n_examples=n_examples, steps=steps, batch=batch, lr=lr, noise=noise, x_law=x_law,
                   cov_x=cov_x, seed=seed, device=device, dtype=dtype, progress=progress, log_every=log_every,
                   final_lr_fraction=final_lr_fraction, per_draw=per_draw)
    run.advance(steps)
    return run.log()


class _AdamRun:
    """The state of one run of :func:`adam_on_tasks`, advanced in pieces.

    Advancing to ``a`` and then to ``b`` gives exactly the run advanced to ``b`` at once
    (the learning-rate schedule is set for ``steps`` from the start), so a run can be paused,
    compared with others and resumed (:func:`train_icl_restarts`).
    """

    def __init__(self, model: torch.nn.Module, *, n_examples: int, steps: int, batch: int, lr: float,
                 noise: float, x_law: str, cov_x: object | None, seed: int, device: str | torch.device,
                 dtype: torch.dtype, progress: bool, log_every: int, final_lr_fraction: float,
                 per_draw: int) -> None:
        self.model, self.n, self.steps, self.batch = model, n_examples, steps, batch
        self.noise, self.x_law, self.cov_x, self.device, self.dtype = noise, x_law, cov_x, device, dtype
        self.log_every, self.per_draw = log_every, min(per_draw, steps)
        self.opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=lr)
        frac = final_lr_fraction
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt,
                                                       lambda k: 1.0 - (1.0 - frac) * k / max(1, steps - 1))
        self.seed = int(seed)
        self.k = 0
        self.pool = None
        self.log_steps: list[int] = []
        self.log_loss: list[float] = []
        self.window = (0, 0)  # steps [a, b) whose losses are summed into window_sum
        self.window_sum = torch.zeros((), dtype=torch.float64)
        self.bar = tqdm(total=steps, file=sys.stdout, disable=not progress, mininterval=2.0, ncols=80)

    def advance(self, until: int, window: tuple[int, int] = (0, 0)) -> None:
        """Train up to step ``until`` (exclusive), summing the batch losses of steps in ``window``."""
        self.window, self.window_sum = window, torch.zeros((), dtype=torch.float64)
        for k in range(self.k, min(until, self.steps)):
            if k % self.per_draw == 0:  # tasks for per_draw steps at a time (fewer small calls)
                self.pool = make_regression_tasks(self.batch * self.per_draw, self.n, self.model.d,
                                                  x_law=self.x_law, cov_x=self.cov_x, noise=self.noise,
                                                  seed=derive_seed(self.seed, k), device=self.device, dtype=self.dtype)
            j = (k % self.per_draw) * self.batch
            tasks = self.pool[j:j + self.batch]
            loss = ((self.model.predict(tasks) - tasks.y_query) ** 2).mean()
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            self.opt.step()
            self.sched.step()
            if window[0] <= k < window[1]:
                self.window_sum += loss.detach().double().cpu()
            if k % self.log_every == 0 or k == self.steps - 1:
                self.log_steps.append(k)
                self.log_loss.append(loss.item())
                self.bar.set_postfix(loss=f"{self.log_loss[-1]:.3f}", refresh=False)
            self.bar.update(1)
            self.k = k + 1
        if self.k >= self.steps:
            self.bar.close()

    def log(self) -> TrainLog:
        return TrainLog(np.asarray(self.log_steps), np.asarray(self.log_loss))


@dataclass
class RestartResult:
    """What :func:`train_icl_restarts` kept, and what its selection saw.

    ``model`` and ``log`` are the kept run (trained to the end); ``chosen`` its index;
    ``select_loss`` (restarts,) the mean training loss of every run over the selection
    window; ``logs`` every run's log (the others stop at the selection step).
    """

    model: ICLTransformer
    log: TrainLog
    chosen: int
    select_loss: np.ndarray
    logs: list[TrainLog]


def train_icl_restarts(models: Sequence[ICLTransformer], seeds: Sequence[int], *, n_examples: int, steps: int,
                       select_steps: int, batch: int = 256, lr: float = 1e-2, noise: float = 0.0,
                       device: str | torch.device = "cpu", log_every: int = 10,
                       final_lr_fraction: float = 0.1) -> RestartResult:
    r"""Train several initialisations, keep the one with the lowest training loss, finish it.

    Each of the R = ``len(models)`` runs is :func:`train_icl` with its own ``seeds[r]``
    (initialisation and task stream); all are trained for the first ``select_steps``
    steps, and the run with the smallest mean batch loss over steps
    [``select_steps``/2, ``select_steps``) is trained on to ``steps``:

    .. math:: r^* = \arg\min_r \frac{1}{|W|} \sum_{k \in W} \ell_r(k),
              \qquad W = [\lfloor s/2 \rfloor, s), \; s = \texttt{select\_steps}.

    The losses are on fresh tasks at every step, so the selection never sees test data.
    The kept run is exactly ``train_icl(models[r*], seed=seeds[r*], steps=steps, ...)``
    (its learning-rate schedule is set for ``steps`` from the start).  Restarts guard a
    claim about "the trained model" against a run that lands in a worse basin (book
    chapter 7).

    Examples
    --------
    >>> ms = [random_icl_transformer(2, 1, seed=s) for s in (1, 2)]
    >>> res = train_icl_restarts(ms, [1, 2], n_examples=8, steps=20, select_steps=10, batch=16)
    >>> res.chosen in (0, 1), len(res.log.steps) == len(res.logs[res.chosen].steps)
    (True, True)
    """
    if (not isinstance(models, Sequence) or len(models) == 0
            or not all(isinstance(m, ICLTransformer) for m in models)):
        raise ValueError(f"models must be a non-empty sequence of ICLTransformer, got {models!r:.60}")
    if (not isinstance(seeds, Sequence) or len(seeds) != len(models)
            or not all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) for s in seeds)):
        raise ValueError(f"seeds must be a sequence of {len(models)} integers (one per model), got {seeds!r:.60}")
    if len({id(m) for m in models}) != len(models):
        raise ValueError("models must be distinct objects (each run trains its own model)")
    n, steps = check_positive_int(n_examples, "n_examples"), check_positive_int(steps, "steps")
    select_steps = check_positive_int(select_steps, "select_steps")
    if not 2 <= select_steps <= steps:
        raise ValueError(f"select_steps must be in [2, steps={steps}], got {select_steps}")
    batch, log_every = check_positive_int(batch, "batch"), check_positive_int(log_every, "log_every")
    lr = _check_eta(lr, "lr")
    frac = float(final_lr_fraction)
    if not 0 < frac <= 1:
        raise ValueError(f"final_lr_fraction must be in (0, 1], got {final_lr_fraction!r}")
    dev = resolve_device(device)
    threads = torch.get_num_threads()
    if dev.type == "cpu":  # per-step tensors are tiny: intra-op threads only add overhead
        torch.set_num_threads(1)
    try:
        runs = [_AdamRun(m.to(dev), n_examples=n, steps=steps, batch=batch, lr=lr, noise=noise, x_law="gaussian",
                         cov_x=None, seed=int(s), device=dev, dtype=m.theta_q[0].dtype, progress=False,
                         log_every=log_every, final_lr_fraction=frac, per_draw=64)
                for m, s in zip(models, seeds, strict=True)]
        window = (select_steps // 2, select_steps)
        select_loss = np.empty(len(runs))
        for r, run in enumerate(runs):
            run.advance(select_steps, window)
            select_loss[r] = run.window_sum.item() / (window[1] - window[0])
        chosen = int(np.argmin(select_loss))
        runs[chosen].advance(steps)
    finally:
        torch.set_num_threads(threads)
    return RestartResult(runs[chosen].model, runs[chosen].log(), chosen, select_loss,  # type: ignore[arg-type]
                         [run.log() for run in runs])
