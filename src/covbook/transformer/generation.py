r"""Autoregressive generation: greedy decoding and temperature sampling (book chapters 09-10).

.. math:: x_{t+1} \sim \mathrm{softmax}(\ell_t / \tau),\qquad \ell_t = \text{the model's logits after } x_{1:t},

with :math:`\tau = 0` meaning greedy decoding (argmax; ties go to the lowest token id).  This is
the one implementation of generation in covbook: :func:`covbook.markov.greedy_decode` and
:func:`covbook.markov.sample` call it.  A :class:`~covbook.transformer.CausalTransformer`
decodes with its KV cache; any other model (a module mapping long tokens (B, T) to logits
(B, T, V) with a ``vocab_size``) reruns its forward pass on the whole prefix.
"""

from __future__ import annotations

import torch

from covbook._validate import check_nonnegative_float, check_positive_int
from covbook.transformer.model import CausalTransformer

__all__ = ["generate"]


def _check_prompt(model: torch.nn.Module, prompt: object, vocab_size: int) -> torch.Tensor:
    if isinstance(model, CausalTransformer):
        return model._check_input(prompt)  # (B, T0), validated ids
    if not isinstance(prompt, torch.Tensor) or prompt.ndim != 2 or prompt.dtype not in (torch.int64, torch.int32):
        raise ValueError("prompt must be an integer tensor of token ids with shape (B, T0)")
    if prompt.numel() and (int(prompt.min()) < 0 or int(prompt.max()) >= vocab_size):
        raise ValueError(f"prompt ids must lie in [0, {vocab_size})")
    return prompt.long()


def tempered_softmax(logits: torch.Tensor, tau: float) -> torch.Tensor:
    r"""The next-token law at temperature τ > 0: softmax(ℓ/τ) over the last axis.

    Computed as softmax((ℓ − max ℓ)/τ), which is the same law (softmax is shift-invariant)
    but stays finite at a tiny τ, where ℓ/τ itself overflows to ±inf and inf − inf is NaN;
    the maximal logits stay at 0 even where τ rounds to 0 in the logits' precision.

    >>> tempered_softmax(torch.tensor([0.0, 1.0, 1.0]), 1e-310).tolist()
    [0.0, 0.5, 0.5]
    """
    shifted = logits - logits.amax(-1, keepdim=True)  # (..., V), <= 0
    return torch.softmax(torch.where(shifted == 0, shifted, shifted / tau), dim=-1)


def generate(model: torch.nn.Module, prompt: torch.Tensor, steps: int, *, temperature: float = 1.0,
             generator: torch.Generator | None = None,
             return_probs: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    r"""Continue token sequences by sampling x_{t+1} ~ softmax(logits_t / τ).

    ``temperature=0`` is greedy decoding (argmax; ties go to the lowest token id).

    Parameters
    ----------
    model : CausalTransformer with vocab_size, a :class:`~covbook.transformer.ModelBatch`, or any module with
        ``vocab_size`` mapping (B, T) -> (B, T, V)
    prompt : LongTensor (B, T0), T0 >= 1
    steps : int, number of new tokens
    temperature : float >= 0
    generator : torch.Generator on the model's device, optional (for reproducible sampling)
    return_probs : bool
        Also return the next-token laws p(· | x_{1:t}) at temperature τ (one-hot for greedy)
        that produced each new token: shape (B, steps, V).

    Returns
    -------
    LongTensor (B, T0 + steps) [, probs (B, steps, V)]

    Examples
    --------
    >>> m = CausalTransformer(vocab_size=4, d_model=8, n_layers=2, seed=0)
    >>> generate(m, torch.tensor([[1, 2]]), 5, temperature=0).shape
    torch.Size([1, 7])
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    vocab = getattr(model, "vocab_size", None)
    if vocab is None:
        raise ValueError("generate needs a model built with vocab_size (discrete tokens)")
    steps = check_positive_int(steps, "steps")
    tau = check_nonnegative_float(temperature, "temperature")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    prompt = _check_prompt(model, prompt, vocab)
    if prompt.shape[1] == 0:
        raise ValueError("prompt must contain at least one token")
    # a CausalTransformer, or a module that declares the same cached call (covbook.transformer.ModelBatch)
    cached = isinstance(model, CausalTransformer) or getattr(model, "kv_cache", False) is True
    dev = next(iter(model.parameters())).device if any(True for _ in model.parameters()) else prompt.device
    prompt = prompt.to(dev)
    caches: list[dict] | None = [{} for _ in range(model.n_layers)] if cached else None
    seq, probs = [prompt], []
    with torch.no_grad():
        if cached:
            logits = model(prompt, caches=caches, start=0)[:, -1]  # (B, V)
        else:
            logits = model(prompt)[:, -1].to(torch.float64)  # (B, V)
        pos = prompt.shape[1]
        for i in range(steps):
            if tau == 0:
                nxt = logits.argmax(-1)  # (B,)
                p = torch.nn.functional.one_hot(nxt, vocab).to(logits.dtype)  # (B, V)
            else:
                p = tempered_softmax(logits, tau)  # (B, V)
                nxt = torch.multinomial(p, 1, generator=generator)[:, 0]  # (B,)
            seq.append(nxt[:, None])
            probs.append(p)
            if i + 1 < steps:
                if cached:
                    logits = model(nxt[:, None], caches=caches, start=pos)[:, -1]  # (B, V)
                else:
                    logits = model(torch.cat(seq, dim=1))[:, -1].to(torch.float64)  # (B, V)
                pos += 1
    out = torch.cat(seq, dim=1)  # (B, T0 + steps)
    return (out, torch.stack(probs, dim=1)) if return_probs else out
