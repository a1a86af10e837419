r"""Training the character-level language model, and its checkpoints (book chapter 10).

:func:`train_language_model` minimises the next-token cross-entropy

.. math:: \mathcal L = -\frac{1}{BT}\sum_{b,t} \log p_\theta(x_{b,t+1} \mid x_{b,1:t})

with AdamW over random windows of a token stream; :func:`evaluate_loss` is the same loss on
held-out windows.  A checkpoint is identified by :func:`checkpoint_fingerprint` (the model's
configuration, the data and the training arguments); :func:`load_checkpoint` is the one place
a checkpoint file is read and validated.
"""

from __future__ import annotations

import hashlib
import math
import os
import pickle
import sys
import time
import zipfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from covbook._jsonio import atomic_write
from covbook._validate import check_nonnegative_float, check_positive_float, check_positive_int, check_seed
from covbook.transformer.model import CausalTransformer

__all__ = ["TrainResult", "evaluate_loss", "window_losses", "train_language_model", "training_arguments",
           "checkpoint_fingerprint", "load_checkpoint"]


@dataclass
class TrainResult:
    """Losses of :func:`train_language_model` (natural log, per character)."""

    steps: list[int] = field(default_factory=list)
    train_loss: list[float] = field(default_factory=list)
    val_steps: list[int] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)
    seconds: float = 0.0
    resumed_from: int = 0

    @property
    def final_val_loss(self) -> float:
        return self.val_loss[-1] if self.val_loss else float("nan")


def _check_lm(model: object, what: str) -> CausalTransformer:
    if not isinstance(model, CausalTransformer):
        raise TypeError(f"model must be a CausalTransformer, got {type(model).__name__}")
    if model.vocab_size is None:
        raise ValueError(f"{what} needs a model built with vocab_size")
    return model


def _check_tokens(tokens: object, vocab_size: int) -> torch.Tensor:
    if not isinstance(tokens, torch.Tensor):
        try:
            tokens = torch.as_tensor(np.asarray(tokens))
        except (TypeError, ValueError) as err:
            raise ValueError(f"tokens must be a 1-d integer tensor, got {type(tokens).__name__}") from err
    if tokens.ndim != 1 or tokens.is_floating_point() or tokens.is_complex() or tokens.dtype == torch.bool:
        raise ValueError(f"tokens must be a 1-d integer tensor, got {tokens.dtype} {tuple(tokens.shape)}")
    if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= vocab_size):
        raise ValueError(f"tokens must lie in [0, {vocab_size})")
    return tokens.long()


def window_losses(model: CausalTransformer, tokens: torch.Tensor, seq_len: int, *, max_windows: int = 64,
                  batch_size: int = 16) -> torch.Tensor:
    r"""Mean next-token cross-entropy (nats) of each of evenly spaced windows of ``tokens``.

    .. math:: \ell_w = -\frac{1}{T}\sum_{t=1}^{T} \log p(x_{s_w+t+1}\mid x_{s_w+1:s_w+t}),

    T = ``seq_len``, n = min(``max_windows``, ⌊(len − 1)/T⌋) windows with starts s_w evenly spaced
    over ``tokens``.  Returns a float64 tensor of shape (n,): per-window losses, e.g. to compare two
    models on the same held-out windows with a paired standard error.
    """
    model = _check_lm(model, "window_losses")
    seq_len = check_positive_int(seq_len, "seq_len")
    max_windows = check_positive_int(max_windows, "max_windows")
    batch_size = check_positive_int(batch_size, "batch_size")
    tokens = _check_tokens(tokens, model.vocab_size)
    n_win = min(max_windows, (len(tokens) - 1) // seq_len)
    if n_win < 1:
        raise ValueError(f"need more than seq_len={seq_len} tokens to evaluate, got {len(tokens)}")
    starts = np.linspace(0, len(tokens) - seq_len - 1, n_win).astype(int)
    out = []
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for i in range(0, n_win, batch_size):
            s = torch.as_tensor(starts[i:i + batch_size])
            idx = s[:, None] + torch.arange(seq_len + 1)[None]  # (b, seq_len+1)
            win = tokens[idx].to(model.device)
            logits = model(win[:, :-1])  # (b, seq_len, V)
            loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), win[:, 1:], reduction="none")  # (b, T)
            out.append(loss.to(torch.float64).mean(1).cpu())
    model.train(was_training)
    return torch.cat(out)  # (n,)


def evaluate_loss(model: CausalTransformer, tokens: torch.Tensor, seq_len: int, *, max_windows: int = 64,
                  batch_size: int = 16) -> float:
    """Mean next-token cross-entropy (nats) over the windows of :func:`window_losses`."""
    return float(window_losses(model, tokens, seq_len, max_windows=max_windows, batch_size=batch_size).mean())


def training_arguments(*, steps: int, batch_size: int, seq_len: int, lr: float, seed: int,
                       val_fraction: float = 0.1, eval_every: int | None = None, eval_windows: int = 64,
                       weight_decay: float = 0.01, grad_clip: float = 1.0) -> dict[str, object]:
    """The validated arguments of :func:`train_language_model` that determine its result.

    ``eval_every`` defaults to steps // 10 (at least 1).  The returned dict is what the
    checkpoint fingerprint hashes.
    """
    steps = check_positive_int(steps, "steps")
    val_fraction = check_positive_float(val_fraction, "val_fraction")
    if not val_fraction < 1:
        raise ValueError(f"val_fraction must lie in (0, 1), got {val_fraction!r}")
    return {"steps": steps, "batch_size": check_positive_int(batch_size, "batch_size"),
            "seq_len": check_positive_int(seq_len, "seq_len"), "lr": check_positive_float(lr, "lr"),
            "seed": check_seed(seed), "val_fraction": val_fraction,
            "eval_every": check_positive_int(eval_every if eval_every is not None else max(1, steps // 10),
                                             "eval_every"),
            "weight_decay": check_nonnegative_float(weight_decay, "weight_decay"),
            "grad_clip": check_nonnegative_float(grad_clip, "grad_clip"),
            "eval_windows": check_positive_int(eval_windows, "eval_windows")}


def checkpoint_fingerprint(model: CausalTransformer, tokens: torch.Tensor, **train_kwargs: object) -> str:
    """A 16-hex-digit key of (model configuration, tokens, training arguments).

    ``train_kwargs`` are the keyword arguments of :func:`train_language_model` that determine its
    result (see :func:`training_arguments`); the checkpoint written by training with them
    carries this key, and a checkpoint with another key is refused.  Use it to name checkpoint
    files, so that a change of any setting (or of a library default) starts a new file.
    """
    model = _check_lm(model, "checkpoint_fingerprint")
    tokens = _check_tokens(tokens, model.vocab_size)
    args = training_arguments(**train_kwargs)  # type: ignore[arg-type]
    h = hashlib.sha256(repr((model.config(), sorted(args.items()))).encode())
    h.update(tokens.cpu().numpy().astype(np.int64).tobytes())
    return h.hexdigest()[:16]


_CHECKPOINT_KEYS = ("fingerprint", "model", "optimizer", "generator", "result", "step")


def load_checkpoint(path: str | os.PathLike, *, fingerprint: str | None = None,
                    map_location: str | torch.device = "cpu") -> dict[str, object]:
    """Read a checkpoint of :func:`train_language_model`, or raise a ``ValueError`` naming the file.

    The file must be a torch checkpoint holding the keys fingerprint, model, optimizer, generator,
    result and step; with ``fingerprint``, it must carry that key (else it was made with another
    model, data or settings).  A damaged or foreign file is reported, never unpickled into a
    traceback.
    """
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"checkpoint {p} does not exist or is not a file")
    try:
        state = torch.load(p, map_location=map_location, weights_only=False)
    except (pickle.UnpicklingError, zipfile.BadZipFile, EOFError, RuntimeError, ValueError, OSError,
            AttributeError, ModuleNotFoundError, UnicodeDecodeError) as err:
        raise ValueError(f"checkpoint {p} is damaged or not a covbook checkpoint ({type(err).__name__}); "
                         f"delete it to retrain") from err
    if not isinstance(state, dict) or any(k not in state for k in _CHECKPOINT_KEYS):
        raise ValueError(f"checkpoint {p} is not a covbook training checkpoint (missing keys); delete it to retrain")
    if fingerprint is not None and state["fingerprint"] != fingerprint:
        raise ValueError(f"checkpoint {p} was made with another model, data or settings; delete it to retrain")
    return state


def _atomic_save(obj: object, path: Path) -> None:
    atomic_write(path, lambda tmp: torch.save(obj, tmp))


def train_language_model(
    model: CausalTransformer,
    tokens: torch.Tensor,
    *,
    steps: int,
    batch_size: int,
    seq_len: int,
    lr: float,
    seed: int,
    checkpoint: str | os.PathLike | None = None,
    progress: bool = False,
    val_fraction: float = 0.1,
    eval_every: int | None = None,
    eval_windows: int = 64,
    checkpoint_every: int = 100,
    weight_decay: float = 0.01,
    grad_clip: float = 1.0,
    on_eval: Callable[[int, float, CausalTransformer], bool | None] | None = None,
) -> TrainResult:
    r"""Train ``model`` as a next-token predictor on ``tokens`` with AdamW; returns the losses.

    Minimises the mean cross-entropy :math:`-\frac1{BT}\sum \log p(x_{t+1}\mid x_{1:t})` over random
    windows of ``seq_len + 1`` tokens from the first ``1 - val_fraction`` of ``tokens``; the
    validation loss is :func:`evaluate_loss` on the last ``val_fraction``.  The learning rate warms
    up linearly over the first 5% of the steps, then follows a cosine down to lr/10.
    ``grad_clip = 0`` disables clipping.

    Deterministic given ``seed`` on CPU (the windows come from a generator seeded with it).  With
    ``checkpoint``, the model, optimiser, generator and losses are saved atomically every
    ``checkpoint_every`` steps and at the end; an existing checkpoint (of the same model
    configuration, data and arguments: :func:`checkpoint_fingerprint`) is resumed, and a finished
    one is just loaded.  A checkpoint made with different settings, or a damaged file, is an
    error.  A run whose loss or weights become non-finite stops with a ``ValueError`` that names
    the step (lower ``lr`` or ``grad_clip``).  ``progress`` shows a plain ``tqdm`` bar on stdout.
    ``on_eval(step, val_loss, model)``, if given, is called after each validation (e.g. to keep the
    weights at a chosen loss); it sees only the evaluations this call makes, not those of a resumed
    or loaded checkpoint, and must not change the model.  When it returns ``True`` training stops
    there (the checkpoint is saved at that step and the result holds the losses so far); calling
    again with the same checkpoint resumes from that step, so a caller that stops early keeps its
    own record that it has.
    """
    model = _check_lm(model, "train_language_model")
    tokens = _check_tokens(tokens, model.vocab_size)
    args = training_arguments(steps=steps, batch_size=batch_size, seq_len=seq_len, lr=lr, seed=seed,
                              val_fraction=val_fraction, eval_every=eval_every, eval_windows=eval_windows,
                              weight_decay=weight_decay, grad_clip=grad_clip)
    checkpoint_every = check_positive_int(checkpoint_every, "checkpoint_every")
    steps, batch_size, seq_len = args["steps"], args["batch_size"], args["seq_len"]
    lr, eval_every, grad_clip = args["lr"], args["eval_every"], args["grad_clip"]
    val_fraction = args["val_fraction"]
    n_val = int(len(tokens) * val_fraction)
    train, val = tokens[: len(tokens) - n_val], tokens[len(tokens) - n_val:]
    if len(train) <= seq_len + 1 or len(val) <= seq_len + 1:
        raise ValueError(f"too few tokens ({len(tokens)}) for seq_len={seq_len} and val_fraction={val_fraction}")
    if model.pos == "learned" and seq_len > model.max_len:
        raise ValueError(f"seq_len={seq_len} exceeds the model's max_len={model.max_len}")

    fp = checkpoint_fingerprint(model, tokens, **args)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.99), weight_decay=args["weight_decay"])
    warm = max(1, steps // 20)

    def lr_at(step: int) -> float:
        if step < warm:
            return lr * (step + 1) / warm
        frac = (step - warm) / max(1, steps - warm)
        return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))

    gen = torch.Generator().manual_seed(args["seed"])
    res, start = TrainResult(), 0
    path = Path(checkpoint) if checkpoint is not None else None
    if path is not None and path.exists():
        state = load_checkpoint(path, fingerprint=fp, map_location=model.device)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        gen.set_state(state["generator"].cpu())  # a CPU generator: map_location moved its state to the model's device
        res = TrainResult(**state["result"])
        start = res.resumed_from = state["step"]

    def save(step: int) -> None:
        if path is not None:
            _atomic_save({"fingerprint": fp, "model": model.state_dict(), "optimizer": opt.state_dict(),
                          "generator": gen.get_state(), "result": asdict(res), "step": step,
                          "config": model.config()}, path)

    def diverged(step: int, what: str) -> ValueError:
        return ValueError(f"training diverged at step {step + 1}: {what} became non-finite; lower lr "
                          f"(got {lr:g}) or grad_clip (got {grad_clip:g})")

    t0 = time.perf_counter()
    model.train()
    bar = None
    if progress and start < steps:
        from tqdm import tqdm

        bar = tqdm(total=steps, initial=start, file=sys.stdout, desc="training", mininterval=2.0)
    params = list(model.parameters())
    for step in range(start, steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        s = torch.randint(0, len(train) - seq_len - 1, (batch_size,), generator=gen)  # (B,)
        win = train[s[:, None] + torch.arange(seq_len + 1)[None]].to(model.device)  # (B, seq_len+1)
        try:
            logits = model(win[:, :-1])  # (B, seq_len, V)
        except ValueError as err:  # the ids are valid, so only non-finite activations get here
            raise diverged(step, "the activations") from err
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), win[:, 1:].reshape(-1))
        if not math.isfinite(float(loss.detach())):
            raise diverged(step, "the loss")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(params, grad_clip)
        opt.step()
        if not bool(torch.stack([p.detach().abs().max() for p in params]).isfinite().all()):
            raise diverged(step, "the weights")
        res.steps.append(step + 1)
        res.train_loss.append(float(loss.detach()))
        if (step + 1) % eval_every == 0 or step + 1 == steps:
            res.val_steps.append(step + 1)
            res.val_loss.append(evaluate_loss(model, val, seq_len, max_windows=args["eval_windows"]))
            stop = bool(on_eval(step + 1, res.val_loss[-1], model)) if on_eval is not None else False
        else:
            stop = False
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{float(loss):.3f}", refresh=False)
        if (step + 1) % checkpoint_every == 0 or step + 1 == steps or stop:
            res.seconds += time.perf_counter() - t0
            t0 = time.perf_counter()
            save(step + 1)
        if stop:
            break
    if bar is not None:
        bar.close()
    model.eval()
    return res
