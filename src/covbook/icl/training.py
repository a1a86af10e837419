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

__all__ = ["TrainLog", "train_icl"]


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
    dtype = model.theta_q[0].dtype
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    frac = float(final_lr_fraction)
    if not 0 < frac <= 1:
        raise ValueError(f"final_lr_fraction must be in (0, 1], got {final_lr_fraction!r}")
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: 1.0 - (1.0 - frac) * k / max(1, steps - 1))
    gen_seed = np.random.SeedSequence(int(seed)).generate_state(1)[0]
    log_steps, log_loss = [], []
    bar = tqdm(range(steps), file=sys.stdout, disable=not progress, mininterval=2.0, ncols=80)
    pool, per_draw = None, 64  # tasks are drawn for 64 steps at a time (fewer small calls)
    for k in bar:
        if k % per_draw == 0:
            pool = make_regression_tasks(batch * per_draw, n, model.d, cov_x=cov_x, noise=noise,
                                         seed=int(gen_seed) + k, device=dev, dtype=dtype)
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
