"""Chapter 08, depth collapse: the terminal state of a NoPE transformer forgets the context.

The experiments of ``notebooks/08_depth_collapse.md``, serving the book's theorems
``thm-08-depth-collapse`` (E|h^(L)_t − F_L(x_t)|² = O(1/t) for the mean-field map F_L of the
recursion F_{l+1}(x) = F_l(x) + Θ_V E_μ[F_l(X) e^{a_l(x)ᵀF_l(X)}] / E_μ[e^{a_l(x)ᵀF_l(X)}]) and
``thm-08-gaussian-recursion`` (for Gaussian tokens and attention only, F_l(x) = M_l x with
M_{l+1} = M_l + Θ_V M_lΣM_lᵀΘ_KᵀΘ_Q M_l): result T4 of the book's theorem index.

The chapter fixes its :class:`ContextLaws` (sizes, checkpoints, and how a context law and its
contexts are drawn) and runs :func:`recursion`, :func:`gaussian` (Experiment 1), :func:`tail` (2),
:func:`models` (3), :func:`positions` (4) and :func:`markov` (5).  One *pair* of a family is a
context law (a covariance Σ or a token law π), a model and two contexts of that law sharing their
checkpoint tokens, all drawn for that pair alone (the law and the contexts from the family's stream
``(family, k)``, the weights from a seed ``(name, k)`` of the family's models): the pairs are
independent and identically distributed, so a standard error over them is unconditional on any
single draw of a law or a model.  Experiment 5 does the same per chain (a kernel, a path and a model
per depth); Experiment 2 and the constant of Experiment 5 are claims about one law and one model.
Every experiment draws only from streams named for it, so each one run alone gives the numbers it
gives in the chapter, in any order.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.ticker import NullFormatter

from covbook._validate import check_nonnegative_float, check_positive_int, resolve_device
from covbook.attention import readout_paths
from covbook.experiments._common import log_checkpoints
from covbook.experiments.result import RandomStreams, Result
from covbook.markov import asymptotic_covariance, sample_markov_chain, stationary_distribution
from covbook.plotting import loglog_with_fit, sparse_log_ticks
from covbook.processes import GaussianIID
from covbook.rules import Z
from covbook.stats import (
    inverse_t_intercept_weights,
    loglog_slope,
    mean_loglog_slope,
    slope_with_checkpoint_se,
    slope_with_se,
)
from covbook.theory import reach_allowance
from covbook.token_laws import flat_dirichlet
from covbook.transformer import (
    CausalTransformer,
    collapse_constant,
    collapse_readout_sd,
    early_attention_ratio,
    gauss_hermite_rule,
    gaussian_logit_variances,
    gaussian_polar_rule,
    gaussian_tail_exponents,
    mean_field,
    mean_field_discrete,
    mean_field_gaussian,
    mean_field_jacobian,
    mean_field_logit_variances,
    mean_field_with_logit_variances,
    sink_free_logit_scale,
    states_before_last_block,
    tail_safe_logit_scale,
)

__all__ = [
    "CHAPTER", "SCALES", "ContextLaws", "Recursion", "Depths", "Tail", "Models", "Positions", "Markov",
    "context_laws", "recursion", "recursion_error", "gaussian", "tail", "models", "positions", "markov",
    "markov_kernel", "paired", "group_means", "rate_slope", "squared_gaps", "states_at", "reach_of", "context_variance",
]

CHAPTER = "08"

#: The grid of logit scales from which the models' scales are selected (the small ones serve the rare
#: draws whose mean field grows fast with depth: no scale from 0.1 up keeps every κ_l ≥ 2 for them).
SCALES = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.7, 1.0)

#: The Markov constant is read on this many times n_streams chains of its own (its SE sets its power).
CONSTANT_CHAINS = 1

#: Contexts per model (four pairs sharing their checkpoint tokens): the model's mean squared gap over them
#: estimates E|h_t − F_L(x_t)|² at fixed weights, the quantity of the depth-collapse theorem.
CONTEXTS_PER_MODEL = 8

#: Paths per Markov kernel (and model): n_streams / MARKOV_PATHS kernels read the Markov slopes.
MARKOV_PATHS = 4

#: Queries per chunk of the models' causal attention: a chunk attends only to its prefix, which skips the
#: masked half of the T × T logits (the same softmax to rounding, about four times faster at T = 1024).
ATTN_CHUNK = 64

#: Pilot contexts on which each attention-only discrete model's early-attention ratio selects its scale.
PILOT_CONTEXTS = 4

#: Depth at which the tail exponents must stay for the Gaussian models (a margin of two over κ > 1).
KAPPA_MIN = 2.0


_F = TypeVar("_F", bound=Callable)


def _one_thread(fn: _F) -> _F:
    """Run ``fn`` on one intra-op thread: the chapter's tensors are small (a chunk of 64 queries of a few
    contexts, a block of streams), and a second thread only adds synchronisation, which a loaded machine
    makes expensive (the streaming readout of Experiment 2 took 2.3 times the CPU on two threads); on one
    thread the numbers do not depend on the runner's thread count either."""
    @functools.wraps(fn)
    def run(*args: object, **kwargs: object) -> object:
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return fn(*args, **kwargs)
        finally:
            torch.set_num_threads(threads)
    return run  # type: ignore[return-value]


# --------------------------------------------------------------------------- the context laws


@dataclass
class ContextLaws(Result):
    """The chapter's sizes and checkpoints, and the draw of a context law with its contexts.

    A Gaussian context law is N(0, Σ) with Σ = A Aᵀ/d_in + 0.3 I (A with standard normal entries),
    a discrete one iid tokens with a token law π ~ Dirichlet(1, ..., 1) (:func:`flat_dirichlet`);
    each model k of a family draws its own law and then its contexts from one generator, the
    stream ``(name, k)`` (:meth:`gaussian_group`, :meth:`discrete_group`): :data:`CONTEXTS_PER_MODEL`
    contexts per model in the depth families, so ``n_streams`` contexts make ``n_models`` models.
    ``checkpoints`` are 24 log-spaced positions from 16 to ``t_max`` and ``fit`` those of the last decade.
    """

    d_in: int
    d_model: int
    n_layers: int
    vocab: int
    t_max: int
    n_streams: int
    quad_nodes: int
    checkpoints: np.ndarray = field(repr=False)  # (n_t,)
    streams: RandomStreams = field(repr=False)
    device: torch.device = field(repr=False)
    n_boot: int = 400

    @property
    def n_models(self) -> int:
        """The number of models (and context laws) of a depth family, ``n_streams / CONTEXTS_PER_MODEL``."""
        return self.n_streams // CONTEXTS_PER_MODEL

    @property
    def fit(self) -> np.ndarray:
        """The checkpoints the slopes are fitted over, t ≥ t_max/10: a mask of shape (n_t,)."""
        return self.checkpoints >= self.t_max / 10

    @property
    def t_fit(self) -> np.ndarray:
        """The fitted checkpoints, shape (n_fit,)."""
        return self.checkpoints[self.fit]

    @property
    def shape(self) -> dict[str, int]:
        """The sizes of the Gaussian models (``CausalTransformer`` keywords)."""
        return dict(d_in=self.d_in, d_model=self.d_model, n_layers=self.n_layers)

    def covariance(self, generator: torch.Generator) -> torch.Tensor:
        """A Gaussian context law's covariance Σ = A Aᵀ/d_in + 0.3 I, shape (d_in, d_in)."""
        a = torch.randn(self.d_in, self.d_in, generator=generator, dtype=torch.float64)  # (d_in, d_in)
        return a @ a.T / self.d_in + 0.3 * torch.eye(self.d_in, dtype=torch.float64)

    def gaussian_group(self, name: str, k: int,
                       n_contexts: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Model k of family ``name``: its Σ (d_in, d_in) and ``n_contexts`` N(0, Σ) contexts (n, T, d_in).

        Both from the stream ``(name, k)``, on the device; contexts 2i and 2i+1 share their checkpoint
        tokens (:func:`paired`).
        """
        n_contexts = CONTEXTS_PER_MODEL if n_contexts is None else n_contexts
        g = self.streams.torch_generator(name, k)
        cov = self.covariance(g)  # (d_in, d_in)
        z = torch.randn(n_contexts, self.t_max, self.d_in, generator=g, dtype=torch.float64)  # (n, T, d_in)
        return cov, paired(z @ torch.linalg.cholesky(cov).T, self.checkpoints).to(self.device)

    def discrete_group(self, name: str, k: int, n_contexts: int | None = None,
                       n_pilot: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Model k of family ``name``: its token law π (V,), ``n_contexts`` iid contexts (n, T), ``n_pilot`` more.

        All from the stream ``(name, k)``, on the device; contexts 2i and 2i+1 share their checkpoint
        tokens (:func:`paired`), the pilot contexts (n_pilot, T) (for a choice of scale, apart from the
        measured ones) do not.
        """
        n_contexts = CONTEXTS_PER_MODEL if n_contexts is None else n_contexts
        g = self.streams.torch_generator(name, k)
        freqs = flat_dirichlet(self.vocab, g)  # (V,)
        n = n_contexts + n_pilot
        x = torch.multinomial(freqs, n * self.t_max, replacement=True, generator=g).view(n, self.t_max)  # (n, T)
        group = paired(x[:n_contexts], self.checkpoints)  # (n_contexts, T)
        return freqs.to(self.device), group.to(self.device), x[n_contexts:].to(self.device)


def context_laws(*, d_in: int, d_model: int, n_layers: int, vocab: int, t_max: int, n_streams: int,
                 quad_nodes: int, streams: RandomStreams, device: str | torch.device = "cpu",
                 n_boot: int = 400) -> ContextLaws:
    """The chapter's sizes and checkpoints (no draw is made here).

    Glues ``t_max``, ``n_streams``, ``n_models``, ``contexts_per_model``, ``vocab``, ``d_model`` and
    ``fit_from`` (the first fitted checkpoint).  ``n_boot`` is the number of bootstrap resamples of a
    bootstrapped standard error (the chapter keeps the default of :mod:`covbook.stats`).

    Raises ``ValueError`` for a non-positive size, an ``n_streams`` that is not a multiple of
    :data:`CONTEXTS_PER_MODEL` or gives fewer than two models, ``t_max`` below 32 or a ``vocab`` below 2.
    """
    sizes = {k: check_positive_int(v, k) for k, v in dict(
        d_in=d_in, d_model=d_model, n_layers=n_layers, vocab=vocab, t_max=t_max,
        n_streams=n_streams, quad_nodes=quad_nodes, n_boot=n_boot).items()}
    m = CONTEXTS_PER_MODEL
    if sizes["n_streams"] % m or sizes["n_streams"] < 2 * m:
        raise ValueError(f"n_streams must be a multiple of {m} (contexts per model) and at least {2 * m} "
                         f"(two models), got {n_streams}")
    if sizes["t_max"] < 32:
        raise ValueError(f"t_max must be at least 32 (checkpoints from 16 to t_max), got {t_max}")
    if sizes["vocab"] < 2:
        raise ValueError(f"vocab must be at least 2, got {vocab}")
    dev = resolve_device(device)
    checkpoints = log_checkpoints(t_max, 24, start=16)  # (n_t,)
    s = ContextLaws(**sizes, checkpoints=checkpoints, streams=streams, device=dev)
    for name, value in dict(t_max=t_max, n_streams=n_streams, n_models=s.n_models, contexts_per_model=m,
                            vocab=vocab, d_model=d_model, fit_from=int(s.t_fit[0])).items():
        s.glue(name, value)
    return s


# --------------------------------------------------------------------------- shared steps


def paired(x: torch.Tensor, checkpoints: np.ndarray) -> torch.Tensor:
    """Streams 2k and 2k+1 share the tokens at the checkpoints (a copy of ``x``, shape (R, T, ...)).

    Raises ``ValueError`` for an odd number of streams.
    """
    if x.shape[0] % 2:
        raise ValueError(f"x must hold an even number of streams (pairs), got {x.shape[0]}")
    x = x.clone()
    x[1::2, checkpoints - 1] = x[0::2, checkpoints - 1]
    return x


def squared_gaps(model: CausalTransformer, x: torch.Tensor, F: torch.Tensor, checkpoints: np.ndarray, *,
                 hidden: list[torch.Tensor] | None = None) -> tuple[np.ndarray, torch.Tensor]:
    """|h^(l)_t − F_l(x_t)|² at the checkpoints, shape (L+1, R, n_t), and the states h (L+1, R, n_t, d).

    ``F`` holds F_l(x_t) at the checkpoints, shape (L+1, R, n_t, d); the states are :func:`states_at`'s
    (``hidden`` as there).
    """
    hs = states_at(model, x, checkpoints, hidden=hidden)  # (L+1, R, n_t, d)
    return ((hs - F) ** 2).sum(-1).cpu().numpy(), hs


def states_at(model: CausalTransformer, x: torch.Tensor, checkpoints: np.ndarray, *,
              hidden: list[torch.Tensor] | None = None, batch: int = CONTEXTS_PER_MODEL) -> torch.Tensor:
    """The states h^(0)_t, ..., h^(L)_t at the 1-based ``checkpoints``: shape (L+1, R, n_t, d).

    Those of :func:`covbook.transformer.hidden_states_at`, to rounding: the last block runs for the
    checkpoints' queries only (the query at t attends to the keys s ≤ t), since no layer reads the other
    positions' last states; the earlier blocks run for every position (:func:`states_before_last_block`,
    in batches of ``batch`` contexts as :func:`covbook.transformer.hidden_states_at` runs them, or
    ``hidden``, their states on ``x`` where the caller has them: a model's squared gaps and its
    early-attention ratio share one forward).
    """
    if hidden is not None:
        return _states_at(model, hidden, checkpoints)
    return torch.cat([_states_at(model, states_before_last_block(model, x[i:i + batch]), checkpoints)
                      for i in range(0, x.shape[0], batch)], dim=1)


def _states_at(model: CausalTransformer, hidden: list[torch.Tensor], checkpoints: np.ndarray) -> torch.Tensor:
    """:func:`states_at` from the states [h^(0), ..., h^(L−1)] (each (R, T, d)): shape (L+1, R, n_t, d)."""
    at = [int(t) - 1 for t in np.asarray(checkpoints)]  # 0-based indices of the checkpoints
    h = hidden[-1]  # h^(L−1): (R, T, d)
    with torch.no_grad():  # the last block at the checkpoints' queries alone, each over the keys s ≤ t
        last = model.blocks[-1](h, torch.arange(h.shape[1], device=h.device), None, model.attn_chunk, at)
    return torch.stack([s[:, at] for s in hidden] + [last])  # (L+1, R, n_t, d)


def _logit_variances(model: CausalTransformer, support: torch.Tensor, weights: torch.Tensor,
                     queries: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Mean-field logit variances s_l(x) of the queries, shape (L, m)."""
    return mean_field_logit_variances(model, support.to(device), weights.to(device), queries)


def reach_of(s_layers: torch.Tensor, t_fit: np.ndarray) -> list[float]:
    """Pre-asymptotic allowance b per depth from the logit variances (L, m) of the queries.

    b_L is the slope over ``t_fit`` of the reach ρ(s, t) (:func:`covbook.theory.reach_allowance`)
    at s = max_{l ≤ L} s_l(x): the deepest-reaching layer at or below each depth counts.
    """
    s_max = torch.cummax(s_layers, dim=0).values.cpu().numpy()  # (L, m)
    return [reach_allowance(s_max[l], t_fit)[0] for l in range(s_max.shape[0])]


def group_means(sq: np.ndarray, m: int | None = None) -> np.ndarray:
    """The mean of each model's ``m`` consecutive streams' gaps (R, n_t): shape (R/m, n_t).

    Rows m k, ..., m k + m − 1 are model k's contexts: the mean estimates E|h_t − F_L(x_t)|² at its weights.
    """
    m = CONTEXTS_PER_MODEL if m is None else m
    if sq.shape[0] % m:
        raise ValueError(f"sq must hold a multiple of m={m} streams, got {sq.shape[0]}")
    return sq.reshape(sq.shape[0] // m, m, *sq.shape[1:]).mean(1)


def rate_slope(t_fit: np.ndarray, sq: np.ndarray, m: int | None = None) -> tuple[float, float, int, np.ndarray]:
    r"""The rate of the mean squared gap: the mean over models of each model's log-log slope, its SE and dof.

    Model k's mean squared gap over its m contexts, :math:`\hat G_k(t) = \frac1m\sum_i |h_t^{(i)} - F(x_t^{(i)})|^2`
    (rows of ``sq``, shape (R, n_fit), m per model), estimates E|h_t − F_L(x_t)|² at its weights; its
    least-squares slope b_k = Σ_j w_j log Ĝ_k(t_j) against log t, averaged over the R/m independent
    models, is the claim (:func:`covbook.stats.mean_loglog_slope`), with the SE of a mean over the models
    and R/m − 1 degrees of freedom.  Returns (b̄, SE, dof, b).
    """
    b, se, per = mean_loglog_slope(t_fit, group_means(sq, m))
    return b, se, per.size - 1, per


def context_variance(hs: torch.Tensor) -> np.ndarray:
    """Half the mean squared difference within pairs at the last layer, shape (R/2, n_t).

    ½ |h^(L)_t(2k) − h^(L)_t(2k+1)|² estimates E Var(h^(L)_t | x_t, t): the two streams of a
    pair share their checkpoint tokens.
    """
    h = hs[-1]  # (R, n_t, d)
    return (((h[0::2] - h[1::2]) ** 2).sum(-1) / 2).cpu().numpy()


# --------------------------------------------------------------------------- the recursion check


@dataclass
class Recursion(Result):
    """The closed-form Gaussian recursion against the tilted means by quadrature."""

    logit_scale: float
    rel: float


def recursion_error(s: ContextLaws, cov: torch.Tensor, seed: int,
                    queries: torch.Tensor) -> tuple[float, float]:
    """The probe of ``seed`` under the Gaussian law N(0, ``cov``): its scale and max |F_quad − M_l x| / |M_l x|.

    The probe is the attention-only model of weights ``seed`` at the largest scale of :data:`SCALES`
    with every κ_l ≥ 2 (:func:`tail_safe_logit_scale`, which refuses a model for which none is);
    M_l x (:func:`mean_field_gaussian`) is compared with :func:`mean_field` on the Gauss–Hermite rule
    of ``s.quad_nodes`` nodes per coordinate at the ``queries`` (m, d_in), over every depth.
    """
    dev = s.device
    pts, wts = gauss_hermite_rule(cov, s.quad_nodes)  # (n^d_in, d_in), (n^d_in,)
    scale = tail_safe_logit_scale(cov, list(SCALES), kappa_min=KAPPA_MIN, **s.shape, seed=seed)
    probe = CausalTransformer(**s.shape, logit_scale=scale, seed=seed).to(dev)
    F_quad = mean_field(probe, pts.to(dev), wts.to(dev), queries.to(dev))  # (L+1, m, d)
    F_closed = torch.stack([queries.to(dev) @ M.T for M in mean_field_gaussian(probe, cov)])  # (L+1, m, d)
    return scale, ((F_quad - F_closed).norm(dim=-1) / F_closed.norm(dim=-1)).max().item()


@_one_thread
def recursion(s: ContextLaws) -> Recursion:
    """The largest relative difference max |F_quad − M_l x| / |M_l x| over depths and 64 queries.

    M_{l+1} = M_l + Θ_V M_lΣM_lᵀΘ_KᵀΘ_Q M_l against the tilted means by quadrature
    (:func:`recursion_error`) for the ``"probe"`` model, with Σ and the 64 queries x ~ N(0, Σ)
    from the ``"recursion"`` stream.  Measures ``recursion_vs_quadrature``; glues ``gh_nodes_sq``.
    """
    g = s.streams.torch_generator("recursion")
    cov = s.covariance(g)  # (d_in, d_in)
    xq = torch.randn(64, s.d_in, generator=g, dtype=torch.float64) @ torch.linalg.cholesky(cov).T  # (64, d_in)
    scale, rel = recursion_error(s, cov, s.streams.seed_for("probe"), xq)
    r = Recursion(logit_scale=scale, rel=rel)
    r.glue("gh_nodes_sq", s.quad_nodes**s.d_in)
    r.measure("recursion_vs_quadrature", rel)
    return r


# --------------------------------------------------------------------------- the gap at every depth


@dataclass
class Depths(Result):
    """One model read at every depth: the squared gaps to the mean field and their fitted slopes."""

    tag: str
    title: str
    checkpoints: np.ndarray = field(repr=False)  # (n_t,)
    fit: np.ndarray = field(repr=False)  # (n_t,) mask
    sq: np.ndarray = field(repr=False)  # (L+1, R, n_t)
    hs: torch.Tensor = field(repr=False)  # (L+1, R, n_t, d)
    reach: list[float] = field(default_factory=list)  # (L,) allowances b
    slopes: list[float] = field(default_factory=list)  # (L,)
    chi: float | None = None  # the largest early-attention ratio of the models on their contexts
    scales: list[float] = field(default_factory=list)  # (R/m,) the logit scale of each model, where chosen

    def plot(self, ax: plt.Axes) -> None:
        """Every checkpoint's geometric mean over the models of their mean squared gap, per depth, with the fit.

        The slope of the geometric mean over models is the mean of the models' slopes, the slope the claim records.
        """
        tf = self.checkpoints[self.fit]
        for l in range(1, self.sq.shape[0]):
            y = np.exp(np.log(group_means(self.sq[l])).mean(0))  # (n_t,): geometric mean over the models
            slope, icpt = loglog_slope(tf, y[self.fit])  # = the claim's mean of the pairs' slopes
            (line,) = ax.loglog(self.checkpoints, y, "o", color=f"C{l - 1}", ms=4,
                                label=f"L = {l} (slope {slope:.2f})")
            ax.loglog(tf, np.exp(icpt) * tf**slope, "-", color=line.get_color(), lw=1)
        ax.set(xlabel="context length $t$",
               ylabel=r"$\mathbb{E}\,|h^{(L)}_t - F_L(x_t)|^2$ per model (geometric mean)", title=self.title)
        ax.xaxis.set_minor_formatter(NullFormatter())  # a decade or less: labelled minor ticks collide
        ax.legend()


def _depths(s: ContextLaws, tag: str, title: str, statement: str, sq: np.ndarray, hs: torch.Tensor,
            reach: list[float]) -> Depths:
    """Measure ``slope_<tag>_L1`` ... ``slope_<tag>_L<n_layers>`` and ``mean_gap_slope_<tag>``.

    Each slope is the rate of the mean squared gap E|h_t − F_L(x_t)|² at each model's weights
    (:func:`rate_slope`: the mean over the R/m models of the log-log slope of the model's mean over its
    m contexts, theorem ``thm-08-gap-rate``), with its Student-t SE over the models.  The prediction is
    −1 + b/2 with allowance b/2, b = ``reach[L − 1]``.  ``mean_gap_slope_<tag>`` is the log-log slope
    of the gap's arithmetic mean over every context of every model at depth L (a mixture over random
    models, whose slowest members set it), a finding judged for its direction only.
    """
    d = Depths(tag=tag, title=title, checkpoints=s.checkpoints, fit=s.fit, sq=sq, hs=hs, reach=reach)
    for l in range(1, s.n_layers + 1):
        slope, se, dof, _ = rate_slope(s.t_fit, sq[l][:, s.fit])
        b = reach[l - 1]
        d.measure(f"slope_{tag}_L{l}", slope, prediction=-1.0 + b / 2, se=se, dof=dof,
                  allowance=b / 2, statement=statement, l=l, n_models=dof + 1)
        d.slopes.append(slope)
    mean_slope, _ = loglog_slope(s.t_fit, sq[-1][:, s.fit].mean(0))
    d.measure(f"mean_gap_slope_{tag}", mean_slope, statement=statement, l=s.n_layers,
              per_model=d.slopes[-1], n_models=s.n_models)
    return d


def _range_text(values: list[float]) -> str:
    """The range of the models' logit scales as text: "0.3" or "0.2–0.5"."""
    lo, hi = min(values), max(values)
    return f"{lo:g}" if lo == hi else f"{lo:g}–{hi:g}"


@_one_thread
def gaussian(s: ContextLaws) -> Depths:
    """Experiment 1: Gaussian contexts through attention-only models, F_L(x) = M_L x, a law and a model each.

    Model k draws its Σ and its :data:`CONTEXTS_PER_MODEL` contexts from the stream ``("gauss", k)``
    (:meth:`ContextLaws.gaussian_group`) and has the ``("gauss-model", k)`` weights at the largest logit scale of
    :data:`SCALES` with every tail exponent κ_l ≥ 2 under its Σ, so the models are independent replicates
    of law, weights and contexts and the SE over them includes the spread between them.  The logit
    variances of the reach are the closed form xᵀB_l x (:func:`gaussian_logit_variances`).  Measures
    ``slope_gauss_L1`` ... and ``mean_gap_slope_gauss`` (see :func:`_depths`); glues ``n_layers_text``,
    ``scale_g`` (the range of the models' scales), ``kappa_g`` (the smallest κ_l of any model) and
    ``chi_gauss`` (the largest early-attention ratio of the models on their contexts at t_max).
    """
    streams, dev, cp = s.streams, s.device, s.checkpoints
    sqs, hss, svs, scales, kappas, chis = [], [], [], [], [], []
    for k in range(s.n_models):
        cov, x = s.gaussian_group("gauss", k)  # (d_in, d_in), (m, T, d_in)
        seed = streams.seed_for("gauss-model", k)
        scale = tail_safe_logit_scale(cov, list(SCALES), kappa_min=KAPPA_MIN, **s.shape, seed=seed)
        model = CausalTransformer(**s.shape, logit_scale=scale, seed=seed, attn_chunk=ATTN_CHUNK).to(dev)
        xt = x[:, cp - 1]  # (m, n_t, d_in)
        F = torch.stack([xt @ M.T for M in mean_field_gaussian(model, cov)])  # (L+1, m, n_t, d)
        hidden = states_before_last_block(model, x)  # L of (m, T, d)
        sq, hs = squared_gaps(model, x, F, cp, hidden=hidden)
        sqs.append(sq)
        hss.append(hs)
        svs.append(gaussian_logit_variances(model, cov, xt.reshape(-1, s.d_in)))  # (L, m n_t)
        scales.append(scale)
        kappas.append(float(min(gaussian_tail_exponents(model, cov))))
        chis.append(float(early_attention_ratio(model, x, hidden=hidden).max()))
    d = _depths(s, "gauss", "Gaussian, attention only",
                "Gaussian context, attention only, F_L(x) = M_L x, a context law and a model per group of "
                f"{CONTEXTS_PER_MODEL} contexts.",
                np.concatenate(sqs, 1), torch.cat(hss, 1), reach_of(torch.cat(svs, 1), s.t_fit))
    d.chi, d.scales = max(chis), scales
    d.glue("n_layers_text", s.n_layers)
    d.glue("scale_g", _range_text(scales))
    d.glue("kappa_g", min(kappas))
    d.glue("chi_gauss", d.chi)
    return d


# --------------------------------------------------------------------------- Experiment 2


@dataclass
class Tail(Result):
    """One layer on long streams with Gaussian queries: the query-averaged error for two κ."""

    t_stream: np.ndarray = field(repr=False)  # (n_t,)
    kappa: dict[str, float] = field(default_factory=dict)
    scale: dict[str, float] = field(default_factory=dict)
    sq: dict[str, np.ndarray] = field(default_factory=dict, repr=False)  # name → (n_tail, n_t)
    slope: dict[str, float] = field(default_factory=dict)
    se: dict[str, float] = field(default_factory=dict)

    def plot(self, ax: plt.Axes) -> None:
        """The mean squared error over the queries against t, one fitted line per κ."""
        for i, name in enumerate(self.sq):
            loglog_with_fit(ax, self.t_stream, self.sq[name].mean(0), label=f"κ = {self.kappa[name]:.2f}",
                            color=f"C{i}")
        ax.set(xlabel="$t$", ylabel="MSE over random Gaussian queries",
               title="One layer: the query's tail sets the rate")
        ax.legend()


@_one_thread
def tail(s: ContextLaws, *, t_tail: int, n_tail: int) -> Tail:
    """Experiment 2: the streaming one-layer readout for a moderate (κ₀ = 5/2) and a large (κ₀ = 2/5) scale.

    One Gaussian law (Σ from the ``"tail-law"`` stream) and one model (the ``"tail"`` weights) at two
    scales: the claims are about that model, whose κ₀ the scale sets exactly.  κ₀ ∝ 1/scale², so
    scale = sqrt(κ₀(1)/κ₀) from the κ₀ of the unit-scale model.  Each of
    ``n_tail`` streams has its own query x ~ N(0, Σ) (the ``"tail-queries"`` stream, the same
    queries at both scales); the error is |h_t − (M_1 − E) x|² at 10 log-spaced t from 100 to
    ``t_tail``.  Measures ``tail_moderate_slope`` (between −1 and −1 + b, b the reach allowance
    :func:`reach_of` at the moderate model's mean-field logit variances of the queries) and
    ``tail_large_slope`` (window from −1 + Z·SE to −κ + 1/ln(t_c) + Z·SE, t_c the geometric centre
    of the t); glues ``kappa_moderate``, ``kappa_large``, ``t_tail``, ``n_tail``, ``tail_reach`` (b),
    ``log_allow``, ``kappa_large_neg``.

    Raises ``ValueError`` for ``t_tail`` ≤ 100 or ``n_tail`` < 2.
    """
    check_positive_int(t_tail, "t_tail")
    if t_tail <= 100:
        raise ValueError(f"t_tail must exceed 100 (checkpoints from 100 to t_tail), got {t_tail}")
    if check_positive_int(n_tail, "n_tail") < 2:
        raise ValueError(f"n_tail must be at least 2 streams, got {n_tail}")
    streams, d_in, d_model = s.streams, s.d_in, s.d_model
    cov = s.covariance(streams.torch_generator("tail-law"))  # (d_in, d_in)
    t_stream = log_checkpoints(t_tail, 10)  # (n_t,)
    unit = CausalTransformer(d_in=d_in, d_model=d_model, n_layers=1, logit_scale=1.0,
                             seed=streams.seed_for("tail"))
    kappa_unit = gaussian_tail_exponents(unit, cov)[0]  # κ at logit scale 1
    chosen = [("moderate", float(np.sqrt(kappa_unit / 2.5))), ("large", float(np.sqrt(kappa_unit / 0.4)))]
    r = Tail(t_stream=t_stream)
    for name, scale in chosen:
        one = CausalTransformer(d_in=d_in, d_model=d_model, n_layers=1, logit_scale=scale,
                                seed=streams.seed_for("tail"))
        ((tq, tk, tv),) = one.head_matrices(0)
        E = one.embed.weight.detach()  # (d, d_in)
        proc = GaussianIID(cov)
        qs = proc.sampler(streams.torch_generator("tail-queries"), n_tail)(1)  # (R, 1, d_in)
        out = readout_paths(proc, qs, tq @ E, tk @ E, tv @ E, t_stream, streams=n_tail,
                            seed=streams.seed_for("tail-streams"), device=s.device,
                            query_is_key=True)[:, :, 0].cpu()  # (R, n_t, d)
        limit = qs[:, 0] @ (mean_field_gaussian(one, cov)[1] - E).T  # (R, d): the head's limit
        sq = ((out - limit[:, None]) ** 2).sum(-1).numpy()  # (R, n_t)
        slope, se = slope_with_se(t_stream, sq, n_boot=s.n_boot, seed=streams.seed_for(f"bootstrap-tail-{name}"))
        r.kappa[name], r.scale[name] = gaussian_tail_exponents(one, cov)[0], scale
        r.sq[name], r.slope[name], r.se[name] = sq, slope, se
        r.glue(f"kappa_{name}", float(r.kappa[name]))
        if name == "moderate":
            moderate, moderate_queries = one, qs[:, 0]  # (R, d_in)
    r.glue("t_tail", f"{t_tail:,}")
    r.glue("n_tail", n_tail)
    # the moderate model's queries with a large logit variance s(x) are still pre-asymptotic at small t: the
    # slope lies between −1 and −1 + b (the reach allowance at the queries' s, as for the depth models' slopes)
    rule = gauss_hermite_rule(cov, s.quad_nodes)  # (n^d_in, d_in), (n^d_in,)
    b = reach_of(_logit_variances(moderate, *rule, moderate_queries, s.device), t_stream)[0]
    r.glue("tail_reach", float(b))
    r.measure("tail_moderate_slope", r.slope["moderate"], prediction=-1.0 + b / 2, se=r.se["moderate"],
              allowance=b / 2, n_tail=n_tail)
    log_allow = 1.0 / np.log(np.sqrt(t_stream[0] * t_stream[-1]))
    r.glue("log_allow", float(log_allow))
    r.glue("kappa_large_neg", -float(r.kappa["large"]))
    se = r.se["large"]
    r.measure("tail_large_slope", r.slope["large"], lower=-1.0 + Z * se,
              upper=-r.kappa["large"] + log_allow + Z * se, n_tail=n_tail)
    return r


# --------------------------------------------------------------------------- Experiment 3


@dataclass
class Models(Result):
    """Three more families read at every depth, and the attention-only family's discrete contexts."""

    gmlp: Depths
    dattn: Depths
    dmlp: Depths
    contexts: torch.Tensor = field(repr=False)  # (R, T) discrete tokens

    def plot(self, axes: np.ndarray) -> None:
        """The three models' gaps in three panels of a 2 × 2 grid (the fourth is removed)."""
        axes = np.asarray(axes).ravel()
        if axes.size != 4:
            raise ValueError(f"axes must be a 2 x 2 grid of axes, got {axes.size}")
        axes[3].remove()
        for ax, d in zip(axes, (self.gmlp, self.dattn, self.dmlp), strict=False):
            d.plot(ax)


def _gaussian_mlp(s: ContextLaws) -> tuple[Depths, float]:
    """Gaussian contexts through blocks with MLP and layer norm, F_L on the polar rule, a law and a model each.

    Model k draws its Σ and its contexts from the stream ``("gmlp", k)`` and has the ``("full-model", k)``
    weights: a model's finite-t slope departs from −1 by an amount of its own, larger for deeper layers,
    so the SE over the models includes the spread between laws and models.  Returns the depths and the
    rule's check max_l mean |F_l − F_l^coarse|² against a rule with three quarters of the nodes per
    coordinate, for the first model: the rule converges geometrically, so this bounds the error of the
    coarse rule and hence of the rule used (a finer rule would cost more than the experiment: the cost
    grows as the square of the N nodes, the fourth power of the nodes per coordinate).
    """
    dev, cp, n, m = s.device, s.checkpoints, s.quad_nodes, CONTEXTS_PER_MODEL
    sqs, hss, svs, polar_err = [], [], [], float("nan")
    for k in range(s.n_models):
        cov, x = s.gaussian_group("gmlp", k)  # (d_in, d_in), (m, T, d_in)
        model = CausalTransformer(**s.shape, mlp=True, layer_norm=True, attn_chunk=ATTN_CHUNK,
                                  seed=s.streams.seed_for("full-model", k)).to(dev)
        polar = [p.to(dev) for p in gaussian_polar_rule(cov, n, n)]
        queries = x[:, cp - 1].reshape(-1, s.d_in)  # (m n_t, d_in)
        F, sv = mean_field_with_logit_variances(model, *polar, queries)  # (L+1, m n_t, d), (L, m n_t)
        if k == 0:  # the rule's check, on the first model
            coarse = [p.to(dev) for p in gaussian_polar_rule(cov, 3 * n // 4, 3 * n // 4)]
            F_coarse = mean_field(model, *coarse, queries)  # (L+1, m n_t, d)
            polar_err = ((F - F_coarse) ** 2).sum(-1).mean(-1).max().item()
        sq, hs = squared_gaps(model, x, F.view(s.n_layers + 1, m, len(cp), s.d_model), cp)
        sqs.append(sq)
        hss.append(hs)
        svs.append(sv)
    reach = reach_of(torch.cat(svs, 1), s.t_fit)
    d = _depths(s, "gmlp", "Gaussian, MLP + layer norm",
                "Gaussian context, MLP and layer norm, F_L by quadrature, a context law and a model per group of "
                f"{CONTEXTS_PER_MODEL} contexts.",
                np.concatenate(sqs, 1), torch.cat(hss, 1), reach)
    return d, polar_err


def _discrete_mlp(s: ContextLaws, name: str, k: object = (), **kw: object) -> CausalTransformer:
    """The discrete model with two heads, MLP and layer norm, weights from the ``(name, k)`` seed.

    ``kw`` (e.g. ``pos``, ``max_len``) goes to :class:`CausalTransformer`.
    """
    return CausalTransformer(vocab_size=s.vocab, d_model=s.d_model, n_layers=s.n_layers, n_heads=2,
                             mlp=True, layer_norm=True, attn_chunk=ATTN_CHUNK, seed=s.streams.seed_for(name, k),
                             **kw).to(s.device)


def _discrete(s: ContextLaws, model: CausalTransformer, freqs: torch.Tensor, x: torch.Tensor,
              hidden: list[torch.Tensor] | None = None) -> tuple[torch.Tensor, np.ndarray, torch.Tensor, torch.Tensor]:
    """The exact discrete mean field F (L+1, V, d) of token law ``freqs``, the gaps (L+1, R, n_t), states, variances.

    The last are the mean-field logit variances (L, R n_t) of the contexts' tokens at the checkpoints;
    ``hidden`` the states of :func:`states_before_last_block` on ``x``, where the caller has them.
    """
    dev, cp = s.device, s.checkpoints
    tokens = torch.arange(s.vocab, device=dev)  # (V,)
    F = mean_field(model, tokens, freqs, tokens)  # (L+1, V, d)
    sq, hs = squared_gaps(model, x, F[:, x[:, cp - 1]], cp, hidden=hidden)
    sv = _logit_variances(model, torch.arange(s.vocab), freqs, x[:, cp - 1].reshape(-1), dev)  # (L, R n_t)
    return F, sq, hs, sv


@_one_thread
def discrete_attention(s: ContextLaws) -> tuple[Depths, dict[str, object]]:
    """Discrete contexts through attention-only models, each at its own sink-free scale (Experiment 3).

    Model k draws its token law, its :data:`CONTEXTS_PER_MODEL` contexts and :data:`PILOT_CONTEXTS` pilot
    contexts from the stream ``("dattn", k)`` and has the ``("discrete", k)`` weights at the largest scale
    of :data:`SCALES` with early-attention ratio χ_l ≤ 2 at every layer on the pilot contexts.  Returns the
    depths (``slope_dattn_L*``, ``mean_gap_slope_dattn``) and the numbers to glue.
    """
    dev = s.device
    sqs, hss, svs, scales, chis_pilot, chis_start, chis_end, xs = [], [], [], [], [], [], [], []
    for k in range(s.n_models):  # a law and a model each, each model at its own sink-free scale
        freqs, x, pilot = s.discrete_group("dattn", k, n_pilot=PILOT_CONTEXTS)  # (V,), (m, T), (n_pilot, T)
        d_shape = dict(vocab_size=s.vocab, d_model=s.d_model, n_layers=s.n_layers,
                       seed=s.streams.seed_for("discrete", k), attn_chunk=ATTN_CHUNK)
        scale, chi = sink_free_logit_scale(list(SCALES), pilot, **d_shape)
        d_attn = CausalTransformer(**d_shape, logit_scale=scale).to(dev)
        hidden = states_before_last_block(d_attn, x)  # L of (m, T, d)
        _, sq, hs, sv = _discrete(s, d_attn, freqs, x, hidden)
        sqs.append(sq)
        hss.append(hs)
        svs.append(sv)
        xs.append(x)
        scales.append(scale)
        chis_pilot.append(chi)
        start = s.t_fit[0]  # a causal model's states on a prefix are its states at the prefix's positions
        prefix = [h[:, :start] for h in hidden]  # L of (m, start, d)
        chis_start.append(float(early_attention_ratio(d_attn, x[:, :start], hidden=prefix).max()))
        chis_end.append(float(early_attention_ratio(d_attn, x, hidden=hidden).max()))
    chi_pilot = max(chis_pilot)
    dattn = _depths(s, "dattn", "discrete, attention only",
                    "Discrete context, attention only, exact F_L, a context law and a model per group of "
                    f"{CONTEXTS_PER_MODEL} contexts, each model at a logit scale without an early-position "
                    "attention sink (χ ≤ 2 on pilot contexts).",
                    np.concatenate(sqs, 1), torch.cat(hss, 1), reach_of(torch.cat(svs, 1), s.t_fit))
    dattn.scales = scales
    verdict = "within the bound" if chi_pilot <= 2 else "above the bound: no scale of the grid is, for some model"
    glue = dict(n_pilot=PILOT_CONTEXTS, scale_d=_range_text(scales), chi_pilot=chi_pilot, chi_verdict=verdict,
                chi_run_start=max(chis_start), chi_run_end=max(chis_end), contexts=torch.cat(xs))
    return dattn, glue


@_one_thread
def discrete_mlp(s: ContextLaws) -> Depths:
    """Discrete contexts through two-head models with MLP and layer norm (Experiment 3).

    Model k draws its token law and contexts from the stream ``("dmlp", k)`` and has the ``("dmlp-model", k)``
    weights; F_L is exact (a finite sum), checked against :func:`mean_field_discrete`.  Measures
    ``slope_dmlp_L*`` and ``mean_gap_slope_dmlp``.
    """
    sqs, hss, svs = [], [], []
    for k in range(s.n_models):  # a law and a model each, as for the Gaussian MLP model
        freqs, x, _ = s.discrete_group("dmlp", k)  # (V,), (m, T)
        d_mlp = _discrete_mlp(s, "dmlp-model", k)
        F_mlp, sq, hs, sv = _discrete(s, d_mlp, freqs, x)
        exact = mean_field_discrete(d_mlp, freqs)  # (V, d)
        if not torch.allclose(F_mlp[-1], exact, rtol=1e-7, atol=1e-7):  # the two routes to F_L agree
            raise RuntimeError("mean_field and mean_field_discrete disagree for the discrete MLP model")
        sqs.append(sq)
        hss.append(hs)
        svs.append(sv)
    return _depths(s, "dmlp", "discrete, 2 heads, MLP + layer norm",
                   "Discrete context, two heads, MLP and layer norm, exact F_L, a context law and a model per "
                   f"group of {CONTEXTS_PER_MODEL} contexts.",
                   np.concatenate(sqs, 1), torch.cat(hss, 1), reach_of(torch.cat(svs, 1), s.t_fit))


@_one_thread
def models(s: ContextLaws) -> Models:
    """Experiment 3: Gaussian contexts with MLP and layer norm; discrete contexts, attention only and MLP.

    Every family draws for each model k a context law and its contexts of its own (the streams
    ``("gmlp", k)``, ``("dattn", k)`` and ``("dmlp", k)``) and weights of its own
    (:func:`_gaussian_mlp`, :func:`discrete_attention`, :func:`discrete_mlp`).
    Measures ``slope_gmlp_L*``, ``slope_dattn_L*``, ``slope_dmlp_L*`` and their ``mean_gap_slope_*``;
    glues ``polar_err``, ``n_pilot``, ``scale_d`` (the range of the scales), ``chi_pilot``,
    ``chi_verdict``, ``chi_run_start`` and ``chi_run_end`` (largest over the models, at the fit's start
    and at t_max).
    """
    gmlp, polar_err = _gaussian_mlp(s)
    dattn, glue = discrete_attention(s)
    dmlp = discrete_mlp(s)
    r = Models(gmlp=gmlp, dattn=dattn, dmlp=dmlp, contexts=glue.pop("contexts"))
    for d in (gmlp, dattn, dmlp):
        r.merge(d)
    for name, value in dict(polar_err=polar_err, **glue).items():
        r.glue(name, value)
    return r


# --------------------------------------------------------------------------- Experiment 4


@dataclass
class Positions(Result):
    """The discrete MLP model without, with learned and with rotary positions, at depth L."""

    n_layers: int
    checkpoints: np.ndarray = field(repr=False)  # (n_t,)
    variance: dict[str, np.ndarray] = field(default_factory=dict, repr=False)  # pos → (R/2, n_t)
    gap: dict[str, np.ndarray] = field(default_factory=dict, repr=False)  # pos → (R, n_t), layer L

    def plot(self, axes: np.ndarray) -> None:
        """Context variance (left) and gap to the no-position mean field (right) against t."""
        ax_v, ax_g = np.asarray(axes).ravel()
        for i, pos in enumerate(self.variance):
            loglog_with_fit(ax_v, self.checkpoints, self.variance[pos].mean(0), label=f"pos = {pos}",
                            color=f"C{i}")
            ax_g.loglog(self.checkpoints, self.gap[pos].mean(0), "o-", ms=4, color=f"C{i}",
                        label=f"pos = {pos}")
        sparse_log_ticks(ax_g)  # the default labels 2, 3, 4, 6 × 10^k, which collide
        ax_v.set(xlabel="$t$", ylabel=r"$\mathbb{E}\,\mathrm{Var}(h^{(L)}_t \mid x_t, t)$",
                 title=f"Context variance at depth {self.n_layers}")
        ax_g.set(xlabel="$t$", ylabel=r"$\mathbb{E}\,|h^{(L)}_t - F_L(x_t)|^2$",
                 title="Gap to the no-position mean field")
        ax_v.legend()
        ax_g.legend()


def _bias_slope_learned(t_fit: np.ndarray, bias: np.ndarray, n_boot: int,
                        streams: RandomStreams) -> tuple[float, float, int | None]:
    """The slope of the bias part (R/2, n_fit), checkpoints as replicates; NaN where a resample is ≤ 0."""
    try:
        return slope_with_checkpoint_se(t_fit, bias, n_boot=n_boot, seed=streams.seed_for("bootstrap-bias-learned"))
    except ValueError:  # an unbiased estimate of a squared bias can be ≤ 0 in a resample
        return np.nan, 0.0, None


def _bias_slope_groups(t_fit: np.ndarray, bias: np.ndarray) -> tuple[float, float, int]:
    r"""The slope of the bias part over the means of 4 groups of consecutive checkpoints, its SE and dof.

    t_g is the geometric mean of each group's t; the groups' means m_g over the pairs of ``bias``
    (R/2, n_fit) are fitted, b = Σ_g w_g log m_g with w_g = (log t_g − mean)/Σ(log t_g − mean)².  The
    SE is the delta method's over the pairs, the SD of the pairs' influences Σ_g w_g bias_kg/m_g over
    √(R/2), with R/2 − 1 dof: it needs only the means to be positive, not every resample's (a pair's
    estimate of a squared bias can be ≤ 0).  NaN (SE 0) where a group's mean is ≤ 0.
    """
    groups = np.array_split(np.arange(len(t_fit)), 4)
    t_g = np.array([np.exp(np.log(t_fit[g]).mean()) for g in groups])  # (4,)
    bias_g = np.stack([bias[:, g].mean(1) for g in groups], 1)  # (R/2, 4)
    m = bias_g.mean(0)  # (4,)
    n = bias_g.shape[0]
    if np.any(m <= 0):
        return np.nan, 0.0, n - 1
    x = np.log(t_g) - np.log(t_g).mean()
    w = x / (x**2).sum()  # (4,)
    influence = (bias_g / m) @ w  # (R/2,)
    return float(w @ np.log(m)), float(influence.std(ddof=1) / np.sqrt(n)), n - 1


@_one_thread
def positions(s: ContextLaws, *, n_streams: int | None = None) -> Positions:
    """Experiment 4: a discrete MLP model without, with learned and with rotary positions.

    The context variance E Var(h^(L)_t | x_t, t) (:func:`context_variance`) and the gap
    E|h^(L)_t − F_L(x_t)|² to the no-position mean field, on ``n_streams`` (an even number; default the
    laws') paired discrete contexts: pair k draws its token law and its two contexts from the stream
    ``("positions", k)`` and goes through a model of its own with two heads, MLP and layer norm (the
    ``("positions-model", k)`` weights), read without positions and with each kind of position, the other
    weights kept.  The bias part is gap − variance.  The context-variance slopes without and with rotary
    positions are the mean of the pairs' log-log slopes (Student-t SE over the pairs).
    Measures ``context_variance_none`` (prediction −1 + b/2, b the no-position models' depth-L reach),
    ``context_variance_learned`` (−1, checkpoints as replicates), ``context_variance_rotary``
    (below 0), ``gap_plateau_learned`` (0) and ``gap_plateau_rotary`` (−1); glues ``gap_ratio_learned``,
    ``gap_ratio_rotary`` (the gap at t_max over the gap at the fit's start), ``t_span_text`` and
    ``n_pairs_positions``.
    """
    n = s.n_streams if n_streams is None else check_positive_int(n_streams, "n_streams")
    if n % 2:
        raise ValueError(f"n_streams must be an even number (pairs of streams), got {n_streams}")
    streams, cp, fit, tf, n_pairs = s.streams, s.checkpoints, s.fit, s.t_fit, n // 2
    parts: dict[str, list[tuple[np.ndarray, torch.Tensor]]] = {"none": [], "learned": [], "rotary": []}
    svs = []
    for k in range(n_pairs):  # a law and a model per pair: the ("positions", k) weights without and with positions
        freqs, x, _ = s.discrete_group("positions", k, n_contexts=2)  # (V,), (2, T)
        base = _discrete_mlp(s, "positions-model", k)
        F, sq, hs, sv = _discrete(s, base, freqs, x)
        parts["none"].append((sq, hs))
        svs.append(sv)  # (L, 2 n_t)
        for pos in ("learned", "rotary"):
            model = _discrete_mlp(s, "positions-model", k, pos=pos, max_len=s.t_max)  # the same weights, with positions
            parts[pos].append(squared_gaps(model, x, F[:, x[:, cp - 1]], cp))
    reach = reach_of(torch.cat(svs, 1), tf)
    r = Positions(n_layers=s.n_layers, checkpoints=cp)
    for pos, ps in parts.items():
        hs = torch.cat([h for _, h in ps], 1)  # (L+1, n, n_t, d)
        r.variance[pos], r.gap[pos] = context_variance(hs), np.concatenate([sq for sq, _ in ps], 1)[-1]

    # the typical context variance: the mean of the pairs' log-log slopes (as the depth slopes)
    slope, se, _ = mean_loglog_slope(tf, r.variance["none"][:, fit])
    b = reach[-1]
    r.measure("context_variance_none", slope, prediction=-1.0 + b / 2, se=se, dof=n_pairs - 1,
              allowance=b / 2, n_pairs=n_pairs)
    slope, se, dof = slope_with_checkpoint_se(tf, r.variance["learned"][:, fit], n_boot=s.n_boot,
                                              seed=streams.seed_for("bootstrap-learned"))
    r.measure("context_variance_learned", slope, prediction=-1.0, se=se, dof=dof, n_pairs=n_pairs)
    slope, se, _ = mean_loglog_slope(tf, r.variance["rotary"][:, fit])
    r.measure("context_variance_rotary", slope, prediction=0.0, se=se, dof=n_pairs - 1, n_pairs=n_pairs)

    reason = "the bias part is not positive at every checkpoint in a resample"
    for pos in ("learned", "rotary"):
        sq = r.gap[pos]  # (R, n_t)
        r.glue(f"gap_ratio_{pos}", float(sq[:, -1].mean() / sq[:, fit][:, 0].mean()))
    bias = {pos: group_means(r.gap[pos], 2) - r.variance[pos]  # (R/2, n_t)
            for pos in ("learned", "rotary")}
    # E[h_t | x_t, t] → G(x_t, p_t) with p_t ~ N(0, I): a plateau
    slope, se, dof = _bias_slope_learned(tf, bias["learned"][:, fit], s.n_boot, streams)
    r.measure("gap_plateau_learned", slope, prediction=0.0, se=se, dof=dof,
              reason=reason if np.isnan(slope) else None, n_pairs=n_pairs)
    # the lag average of the slowest rotary frequency still moves at these t: no plateau predicted yet
    slope, se, dof = _bias_slope_groups(tf, bias["rotary"][:, fit])
    r.measure("gap_plateau_rotary", slope, prediction=-1.0, se=se, dof=dof,
              reason="the bias part's mean is not positive in every group" if np.isnan(slope) else None,
              n_pairs=n_pairs)
    r.glue("t_span_text", f"{int(tf[0])}–{s.t_max} tokens")
    r.glue("n_pairs_positions", n_pairs)
    return r


# --------------------------------------------------------------------------- Experiment 5


@dataclass
class Markov(Result):
    """Markov contexts at depths one and two: the rate, and the constant of the one-layer rate."""

    checkpoints: np.ndarray = field(repr=False)  # (n_t,)
    sq: dict[int, np.ndarray] = field(default_factory=dict, repr=False)  # depth → (R, n_t), per-chain kernels
    sq_constant: np.ndarray = field(default=None, repr=False)  # (R_c, n_t): the constant's kernel and model
    c_markov: float = 0.0
    c_iid: float = 0.0

    def plot(self, ax: plt.Axes) -> None:
        """t times the mean gap against t: the constant's model with its predicted constants, and the slopes' chains."""
        ax.loglog(self.checkpoints, self.checkpoints * self.sq_constant.mean(0), "o-", ms=4, color="C0",
                  label="L = 1, the constant's kernel and model")
        ax.axhline(self.c_markov, color="C0", ls="--", lw=1, label="its predicted constant, Markov CLT")
        ax.axhline(self.c_iid, color="k", ls=":", lw=1, label="the same with the iid variance")
        for depth, c in ((1, "C1"), (2, "C2")):
            ax.loglog(self.checkpoints, self.checkpoints * self.sq[depth].mean(0), "s:", ms=3, color=c,
                      label=f"L = {depth}, a kernel and a model per chain")
        ax.set(xlabel="context length $t$", ylabel=r"$t\,\mathbb{E}\,|h^{(L)}_t - F_L(x_t)|^2$",
               title="Markov context: the rate and its constant")
        sparse_log_ticks(ax)  # the default labels 2, 3, 4, 6 × 10^k, which collide
        ax.legend()


def markov_kernel(V: int, stickiness: float, generator: torch.Generator) -> torch.Tensor:
    """P = ρI + (1 − ρ)Q, ρ = ``stickiness``, Q with rows drawn from the flat Dirichlet law: shape (V, V)."""
    return stickiness * torch.eye(V, dtype=torch.float64) + (1 - stickiness) * flat_dirichlet((V, V), generator)


def _markov_model(s: ContextLaws, depth: int, seed: int) -> CausalTransformer:
    """A discrete model of ``depth`` layers with two heads, MLP and layer norm, weights from ``seed``."""
    return CausalTransformer(vocab_size=s.vocab, d_model=s.d_model, n_layers=depth, n_heads=2, mlp=True,
                             layer_norm=True, seed=seed, attn_chunk=ATTN_CHUNK).to(s.device)


@_one_thread
def markov(s: ContextLaws, *, stickiness: float) -> Markov:
    """Experiment 5: stationary Markov contexts P = ρI + (1 − ρ)Q, the rate and the constant of the rate.

    The slopes: kernel k (:func:`markov_kernel`) and its :data:`MARKOV_PATHS` stationary paths come
    from the stream ``("markov", k)``, and they go through a model of their own at each depth (the
    ``("markov-models", (depth, k))`` weights), so the n_streams / :data:`MARKOV_PATHS` kernels are
    independent replicates of kernel, model and paths; each slope is the rate of the mean squared gap
    (:func:`rate_slope`: the mean over kernels of the log-log slope of the kernel's mean over its paths,
    Student-t SE over the kernels), as for the iid families.  The constant is a property of one
    kernel and one model: for one layer t E|h_t − F_1(x_t)|² → C = Σ_x π(x) tr(J_x Σ J_xᵀ), Σ the
    Markov-chain variance D_π Z + Zᵀ D_π − D_π − ππᵀ (:func:`collapse_constant`); the iid variance
    D_π − ππᵀ gives the alternative.  Its kernel and :data:`CONSTANT_CHAINS` × R paths come from the
    ``"markov-constant"`` stream and its model from the ``"markov-constant-model"`` weights; C is read as the
    mean over paths of the intercept of t·gap = c + a/t at the checkpoints t ≥ t_max/8
    (:func:`covbook.stats.inverse_t_intercept_weights`: the delta method's remainder is O(1/t)), with
    the SD the delta-method Gaussian limit predicts for it (:func:`collapse_readout_sd`).
    Measures ``t4_markov_slope_L1``, ``t4_markov_slope_L2``, ``t4_markov_constant`` and
    ``t4_markov_not_iid``; glues ``stickiness``, ``n_kernels``, ``markov_paths``, ``c_markov``, ``c_iid``,
    ``c_ratio``, ``late_from``.

    Raises ``ValueError`` unless 0 ≤ ``stickiness`` < 1.
    """
    if check_nonnegative_float(stickiness, "stickiness") >= 1:
        raise ValueError(f"stickiness must lie in [0, 1), got {stickiness!r}")
    streams, dev, cp, V = s.streams, s.device, s.checkpoints, s.vocab
    r = Markov(checkpoints=cp)
    sqs: dict[int, list[np.ndarray]] = {1: [], 2: []}
    svs: dict[int, list[np.ndarray]] = {1: [], 2: []}
    for k in range(s.n_streams // MARKOV_PATHS):  # a kernel, its paths and a model per depth
        g = streams.torch_generator("markov", k)
        P = markov_kernel(V, stickiness, g)  # (V, V)
        pi_P = stationary_distribution(P).to(dev)  # (V,)
        xm = sample_markov_chain(P, MARKOV_PATHS, s.t_max, generator=g).to(dev)  # (m, T)
        x_at = xm[:, cp - 1]  # (m, n_t)
        for depth in (1, 2):
            model = _markov_model(s, depth, streams.seed_for("markov-models", (depth, k)))
            h = states_at(model, xm, cp)[-1]  # (m, n_t, d)
            sqs[depth].append(((h - mean_field_discrete(model, pi_P)[x_at]) ** 2).sum(-1).cpu().numpy())
            s_m = _logit_variances(model, torch.arange(V), pi_P, x_at.reshape(-1), dev)  # (L, n_t)
            svs[depth].append(torch.cummax(s_m, dim=0).values[-1].cpu().numpy())  # (m n_t,)
    reach = {depth: reach_allowance(np.concatenate(svs[depth]), s.t_fit)[0] for depth in (1, 2)}
    r.sq = {depth: np.concatenate(sqs[depth]) for depth in (1, 2)}  # (R, n_t)

    g = streams.torch_generator("markov-constant")
    P = markov_kernel(V, stickiness, g)  # (V, V)
    pi_P = stationary_distribution(P)  # (V,)
    sigma_markov = asymptotic_covariance(P)  # (V, V)
    sigma_iid = torch.diag(pi_P) - torch.outer(pi_P, pi_P)  # (V, V)
    one_layer = _markov_model(s, 1, streams.seed_for("markov-constant-model"))
    jac = mean_field_jacobian(one_layer, pi_P.to(dev))  # (V, d, V): once for the constants and the SD
    r.c_markov = collapse_constant(one_layer, pi_P.to(dev), sigma_markov, jacobian=jac)
    r.c_iid = collapse_constant(one_layer, pi_P.to(dev), sigma_iid, jacobian=jac)
    late = cp >= s.t_max / 8  # the constant's checkpoints
    w = inverse_t_intercept_weights(cp[late])  # (n_late,): the intercept of c + a/t
    n_const = CONSTANT_CHAINS * s.n_streams  # the constant's own chains: its SE is the claim's power
    xc = sample_markov_chain(P, n_const, s.t_max, generator=g).to(dev)  # (R_c, T)
    h_c = states_at(one_layer, xc, cp)[-1]  # (R_c, n_t, d)
    F_1 = mean_field_discrete(one_layer, pi_P.to(dev))  # (V, d)
    r.sq_constant = ((h_c - F_1[xc[:, cp - 1]]) ** 2).sum(-1).cpu().numpy()  # (R_c, n_t)
    c_meas = float(((r.sq_constant[:, late] * cp[late]) @ w).mean())  # mean over chains of each chain's intercept
    c_se = collapse_readout_sd(one_layer, pi_P.to(dev), sigma_markov, cp[late], w, jacobian=jac) / np.sqrt(n_const)
    for name, value in dict(stickiness=stickiness, n_kernels=s.n_streams // MARKOV_PATHS, markov_paths=MARKOV_PATHS,
                            c_markov=r.c_markov, c_iid=r.c_iid,
                            c_ratio=r.c_markov / r.c_iid, late_from=int(cp[late][0])).items():
        r.glue(name, value)
    for cid, depth in (("t4_markov_slope_L1", 1), ("t4_markov_slope_L2", 2)):
        slope, se, dof, _ = rate_slope(s.t_fit, r.sq[depth][:, s.fit], MARKOV_PATHS)
        b = reach[depth]
        r.measure(cid, slope, prediction=-1.0 + b / 2, se=se, dof=dof, allowance=b / 2, depth=depth,
                  n_models=dof + 1, n_streams=s.n_streams)
    r.measure("t4_markov_constant", c_meas, prediction=r.c_markov, se=c_se, n_streams=n_const)
    r.measure("t4_markov_not_iid", c_meas, prediction=r.c_iid, se=c_se, n_streams=n_const)
    return r
