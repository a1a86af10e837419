"""Mutants of chapter 08's key claims (T4): a terminal state that keeps a dependence on the context must fail them.

Each T4 key claim (the rate of the mean squared gap E|h_t − F_L(x_t)|² in every family, and the Markov slopes)
is run through the chapter's own experiment, statistic and rule at the quick profile's replicates and context
length, with the model's terminal state replaced by

    h'_t = h_t + c · t^γ · D_t,     D_t = (2/t) Σ_{s ≤ t/2} (E x_{2s} − E x_{2s−1}),

E the model's embedding.  D_t has mean zero under any stationary context law (iid or Markov) and is of order
t^(−1/2), so with γ = 1/4 the squared gap falls like t^(−1/2) (the alternative "t^(−1/2)" of every rate claim)
and with γ = 1/2 it does not decay.  The mean field F_L is the chapter's, untouched: the mutant is a theory
whose terminal state does not forget the context at the rate 1/t, and the claim must fail under it.
The Gaussian MLP family runs its mean field on the smoke profile's quadrature (32 nodes per coordinate): the
rule's error is far below the mutant's gap, and the claim's power comes from the models, contexts and
lengths, which are quick's.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from covbook.experiments import depth
from covbook.rules import Measurement, judge, load_rules
from covbook.streams import Streams
from helpers import ROOT

RULES = load_rules(ROOT / "notebooks" / "rules" / "08_depth_collapse.yml")
#: The quick profile's sizes (notebooks/08_depth_collapse.md defaults).
QUICK = dict(d_in=2, d_model=8, n_layers=4, vocab=16, t_max=1024, n_streams=192, quad_nodes=64)
#: Each T4 key claim and the experiment that measures it at quick's sizes.
FAMILIES = {
    "slope_gauss_L4": depth.gaussian,
    "slope_gmlp_L4": lambda s: depth._gaussian_mlp(dataclasses.replace(s, quad_nodes=32))[0],
    "slope_dattn_L4": lambda s: depth.discrete_attention(s)[0],
    "slope_dmlp_L4": depth.discrete_mlp,
}
MARKOV = ("t4_markov_slope_L1", "t4_markov_slope_L2")


def _laws(seed: int = 0) -> depth.ContextLaws:
    return depth.context_laws(**QUICK, streams=Streams(seed, depth.CHAPTER), device="cpu")


def context_drift(model: depth.CausalTransformer, x: torch.Tensor, positions: np.ndarray) -> torch.Tensor:
    """D_t = (2/t) Σ_{s ≤ t/2} (E x_{2s} − E x_{2s−1}) at the 1-based ``positions``, shape (R, n, d)."""
    with torch.no_grad():
        e = model.embed_tokens(x)  # (R, T, d)
    n_pairs = e.shape[1] // 2
    diff = e[:, 1:2 * n_pairs:2] - e[:, 0:2 * n_pairs:2]  # (R, T/2, d): E x_{2s} − E x_{2s−1}
    csum = torch.cat([torch.zeros_like(diff[:, :1]), diff.cumsum(1)], 1)  # (R, T/2 + 1, d)
    t = torch.as_tensor(np.asarray(positions), device=e.device)
    return csum[:, t // 2] * (2.0 / t.to(e.dtype))[None, :, None]


@pytest.fixture
def mutant(monkeypatch):
    """Install the mutant terminal state h + c t^γ D_t in the chapter's forward passes."""
    real = depth.states_at

    def install(gamma: float, c: float = 3.0) -> None:
        def mutated(model, x, positions, **kw):
            hs = real(model, x, positions, **kw).clone()  # (L+1, R, n, d)
            t = torch.as_tensor(np.asarray(positions), dtype=hs.dtype, device=hs.device)
            hs[-1] += c * t[None, :, None] ** gamma * context_drift(model, x, positions)
            return hs
        monkeypatch.setattr(depth, "states_at", mutated)
    return install


def _claim(result, cid: str):
    raw = dict(result.measurements[cid])
    known = {f.name for f in dataclasses.fields(Measurement)} - {"id", "notebook", "extra"}
    kw = {k: raw.pop(k) for k in list(raw) if k in known}
    return judge(RULES[cid], Measurement(cid, "08_depth_collapse", extra=raw, **kw), profile="quick")


def test_context_drift_is_the_centred_running_difference() -> None:
    m = depth.CausalTransformer(vocab_size=3, d_model=2, n_layers=1, seed=0)
    x = torch.tensor([[0, 1, 0, 1, 2, 2]])  # pairs (0,1), (0,1), (2,2)
    e = m.embed_tokens(x)[0]  # (6, 2)
    d = context_drift(m, x, np.array([2, 4, 6]))  # (1, 3, 2)
    assert torch.allclose(d[0, 0], (e[1] - e[0]) * 2 / 2)
    assert torch.allclose(d[0, 2], ((e[1] - e[0]) * 2 + 0) * 2 / 6)


@pytest.mark.parametrize("cid", list(FAMILIES))
def test_a_context_dependence_of_order_t_to_the_minus_quarter_fails_the_rate(mutant, cid) -> None:
    """The squared gap falls like t^(−1/2): each family's depth-4 rate claim fails at quick's sizes."""
    mutant(0.25)
    c = _claim(FAMILIES[cid](_laws()), cid)
    assert not c.passed, c.verdict_line()


@pytest.mark.parametrize("cid", MARKOV)
def test_markov_slopes_fail_under_the_mutant(mutant, cid) -> None:
    mutant(0.25)
    c = _claim(depth.markov(_laws(), stickiness=0.75), cid)
    assert not c.passed, c.verdict_line()


def test_no_decay_fails_and_the_unmutated_model_passes(mutant) -> None:
    """The control: the Gaussian family's rate passes with the chapter's model and fails with no decay."""
    s = _laws()
    assert _claim(depth.gaussian(s), "slope_gauss_L4").passed
    mutant(0.5)
    assert not _claim(depth.gaussian(s), "slope_gauss_L4").passed
