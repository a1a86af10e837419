"""Stand-in models for the tests of covbook.markov (tests/test_markov_*.py).

A tiny NoPE transformer with its exact discrete mean field, written here from the
definitions so that the markov functions are tested independently of
covbook.transformer; a lookup model whose mean field is designed by hand; an i.i.d.
token source.  The fixtures are imported by the test modules under private names
(``from markov_models import _one_layer``), so pytest registers them as ``one_layer``.
"""

from __future__ import annotations

import math

import pytest
import torch


class TinyNoPE(torch.nn.Module):
    """Causal single-head attention layers with residuals; optional learned positions."""

    def __init__(self, vocab_size: int, d: int, n_layers: int, seed: int, scale: float = 1.5,
                 positions: int = 0) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.vocab_size = vocab_size

        def rnd(*shape: int, s: float = 1.0) -> torch.nn.Parameter:
            return torch.nn.Parameter(s * torch.randn(*shape, generator=g, dtype=torch.float64) / math.sqrt(shape[-1]))

        self.embed = rnd(vocab_size, d, s=math.sqrt(d))
        self.wq = torch.nn.ParameterList([rnd(d, d, s=scale) for _ in range(n_layers)])
        self.wk = torch.nn.ParameterList([rnd(d, d, s=scale) for _ in range(n_layers)])
        self.wv = torch.nn.ParameterList([rnd(d, d) for _ in range(n_layers)])
        self.w_out = rnd(vocab_size, d, s=3.0)
        self.pos = rnd(positions, d) if positions else None

    def logits_from_hidden(self, h: torch.Tensor) -> torch.Tensor:
        return h @ self.w_out.T

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed[tokens]  # (B, T, d)
        if self.pos is not None:
            h = h + self.pos[: tokens.shape[1]]
        t = tokens.shape[1]
        mask = torch.ones(t, t, dtype=torch.bool).triu(1)
        for wq, wk, wv in zip(self.wq, self.wk, self.wv, strict=True):
            logits = (h @ wq.T) @ (h @ wk.T).transpose(1, 2)  # (B, T, T)
            att = torch.softmax(logits.masked_fill(mask, float("-inf")), dim=-1)
            h = h + att @ (h @ wv.T)
        return self.logits_from_hidden(h)


def tiny_mean_field(model: TinyNoPE, freqs: torch.Tensor) -> torch.Tensor:
    """F_{l+1}(x) = F_l(x) + Σ_y π(y) e^{q(x)·k(y)} v(y) / Σ_y π(y) e^{q(x)·k(y)} (Xu & Fang 2026, T4).

    ``freqs`` (..., V) gives (..., V, d): one law, or a batch of laws, each computed on its own.
    """
    if freqs.ndim > 1:
        return torch.stack([tiny_mean_field(model, p) for p in freqs.reshape(-1, freqs.shape[-1])]).reshape(
            *freqs.shape, -1)
    f = model.embed.detach().clone()  # (V, d)
    for wq, wk, wv in zip(model.wq, model.wk, model.wv, strict=True):
        logits = (f @ wq.T) @ (f @ wk.T).T  # (V, V)
        w = freqs[None, :] * torch.exp(logits - logits.max(-1, keepdim=True).values)
        f = f + (w / w.sum(-1, keepdim=True)) @ (f @ wv.T)
    return f


V = 5


@pytest.fixture(scope="module", autouse=True, name="one_thread")
def _one_thread():
    """The models here are tiny: one thread avoids contention overhead; restored afterwards."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module", name="one_layer")
def _one_layer() -> TinyNoPE:
    return TinyNoPE(V, 8, 1, seed=1)


@pytest.fixture(scope="module", name="two_layer")
def _two_layer() -> TinyNoPE:
    return TinyNoPE(V, 8, 2, seed=2, scale=1.0)


def iid_tokens(batch: int, t: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    probs = torch.tensor([0.4, 0.25, 0.15, 0.12, 0.08], dtype=torch.float64)
    return torch.multinomial(probs.expand(batch, V), t, replacement=True, generator=g)  # (B, T)


class LookupModel(torch.nn.Module):
    """A stand-in whose mean field is F_π(x) = e_{f(x)} + c A π and whose read-out is the identity."""

    def __init__(self, f: list[int], c: float, a: torch.Tensor | None = None) -> None:
        super().__init__()
        self.vocab_size, self.f, self.c = len(f), f, c
        self.a = torch.eye(len(f), dtype=torch.float64) if a is None else a

    def logits_from_hidden(self, h: torch.Tensor) -> torch.Tensor:
        return h


def lookup_mean_field(model: LookupModel, freqs: torch.Tensor) -> torch.Tensor:
    """F_π(x) = e_{f(x)} + c A π for laws ``freqs`` (..., V): shape (..., V, V)."""
    shift = model.c * (freqs @ model.a.T)  # (..., V): c A π
    return torch.eye(model.vocab_size, dtype=torch.float64)[model.f] + shift[..., None, :]
