"""Greedy decoding and temperature sampling of a model's continuation.

Xu & Fang (2026), Section 6 (book chapters 09-10).  The generation whose Markov
reduction chapter 09 tests: thin, validating wrappers around
:func:`covbook.transformer.generate` (the one implementation of generation in covbook).
"""

from __future__ import annotations

import torch

from covbook.markov._checks import _temperature, _tokens_torch, _vocab_size

__all__ = [
    "greedy_decode",
    "sample",
]


def _generate(model: torch.nn.Module, prompt: object, steps: int, temperature: float,
              generator: torch.Generator | None) -> torch.Tensor:
    """Validate a (T0,) or (B, T0) prompt and continue it with :func:`covbook.transformer.generate`."""
    from covbook.transformer.generation import generate

    x, single = _tokens_torch(prompt, _vocab_size(model), "prompt")
    seq = generate(model, x, steps, temperature=temperature, generator=generator)
    return seq[0] if single else seq


def greedy_decode(model: torch.nn.Module, prompt: object, steps: int) -> torch.Tensor:
    """Greedy continuation x_{t+1} = argmax p(· | x_{1:t}) (ties: smallest id).

    Calls :func:`covbook.transformer.generate` (temperature 0): a
    :class:`covbook.transformer.CausalTransformer` decodes with its KV cache, any
    other model reruns its forward pass.

    Parameters
    ----------
    prompt : long, shape (T0,) or (B, T0)
    steps : int, tokens to append

    Returns
    -------
    long tensor, shape (T0 + steps,) or (B, T0 + steps): prompt then continuation.
    """
    return _generate(model, prompt, steps, 0.0, None)


def sample(
    model: torch.nn.Module,
    prompt: object,
    steps: int,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    r"""Ancestral sampling at temperature τ: x_{t+1} ~ softmax(logits_t / τ).

    Parameters
    ----------
    prompt : long, shape (T0,) or (B, T0)
    steps : int
    temperature : float, τ > 0
    generator : torch.Generator on the model's device, optional

    Returns
    -------
    long tensor, shape (T0 + steps,) or (B, T0 + steps).
    """
    return _generate(model, prompt, steps, _temperature(temperature), generator)
