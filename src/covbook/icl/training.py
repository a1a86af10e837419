r"""Training stacked softmax heads on in-context regression (Xu & Fang 2026, Sec. 4.3; chapter 7)."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np
import torch
from tqdm import tqdm

from covbook._validate import check_positive_int, resolve_device
from covbook.icl._common import _check_eta
from covbook.icl.model import ICLTransformer
from covbook.icl.tasks import make_regression_tasks

__all__ = ["TrainLog", "train_icl", "adam_on_tasks"]


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
    ``per_draw`` steps at a time from seeds derived from ``seed``, so a run is deterministic
    on the CPU.  ``model`` needs a ``predict(tasks)`` method and an attribute ``d``; only
    parameters that require gradients are trained.  Arguments are validated by the callers
    (:func:`train_icl`, :func:`covbook.prior_work.train_on_tasks`).
    """
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=lr)
    frac = final_lr_fraction
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: 1.0 - (1.0 - frac) * k / max(1, steps - 1))
    gen_seed = int(np.random.SeedSequence(int(seed)).generate_state(1)[0])
    log_steps, log_loss = [], []
    bar = tqdm(range(steps), file=sys.stdout, disable=not progress, mininterval=2.0, ncols=80)
    pool = None
    for k in bar:
        if k % per_draw == 0:  # tasks for per_draw steps at a time (fewer small calls)
            pool = make_regression_tasks(batch * per_draw, n_examples, model.d, x_law=x_law, cov_x=cov_x,
                                         noise=noise, seed=gen_seed + k, device=device, dtype=dtype)
        j = (k % per_draw) * batch
        tasks = pool[j:j + batch]
        loss = ((model.predict(tasks) - tasks.y_query) ** 2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        if k % log_every == 0 or k == steps - 1:
            log_steps.append(k)
            log_loss.append(loss.item())
            bar.set_postfix(loss=f"{log_loss[-1]:.3f}", refresh=False)
    bar.close()
    return TrainLog(np.asarray(log_steps), np.asarray(log_loss))
