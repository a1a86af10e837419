r"""Chapter 10, a trained character-level language model on real text (the theorem of chapter 09, ``thm-09-markov``).

Two small :class:`~covbook.transformer.CausalTransformer` s, one without positional encoding (NoPE)
and one with rotary positions, are trained on the Python Language Reference
(:func:`covbook.transformer.python_reference_text`), and the predictions of the Markov reduction
(Xu & Fang 2026, Section 6) are measured on them:

* :func:`corpus`: the text, its tokenizer and split, the unigram and bigram baselines;
* :func:`train_models`: the two models (checkpointed), their losses, NoPE minus rotary, and the
  rotary model's weights where its validation loss matches NoPE's (the contrasts' rotary model);
* :func:`contexts`: disjoint validation windows and prompts, from the stream ``prompts``, and
  stationary surrogate contexts built from the text (:data:`SURROGATES`);
* :func:`order_dependence`: the shuffle test :math:`\mathrm{TV}(p(\cdot\mid x_{1:t}), p(\cdot\mid
  \sigma(x_{1:t-1}), x_t))` and the Markov gap :math:`\mathrm{TV}(p, K_{\hat\pi_t}(x_t,\cdot))`, both
  predicted :math:`O_P(t^{-1/2})` for NoPE on a stationary context: on real text, on the surrogates
  (where the prediction applies) and on the models' samples;
* :func:`greedy_cycles`: greedy runs end in cycles, more often without positions than with them
  (McNemar's exact test on the same prompts);
* :func:`temperature_sweep`: repetition, diversity and attractors against the temperature;
* :func:`rep_excess`: rep/ℓ of the models' predictions against the text's own.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from scipy.special import bdtrc  # P(B > k), B ~ Bin(n, p), as scipy.stats.binom.sf (whose import costs ~1.3 s)

from covbook._jsonio import atomic_write
from covbook._validate import check_positive_float, check_positive_int, check_positive_ints
from covbook.experiments.repetition import counted, measure_above
from covbook.experiments.result import RandomStreams, Result
from covbook.markov import (
    CycleRecord,
    attractor_contrast,
    cycle_records,
    markov_gap,
    next_token_probs,
    rep_l,
    repetition_metrics,
    sample_markov_chain,
    shuffle_test,
)
from covbook.rules import LEVEL, quantile
from covbook.stats import mean_with_se, slope_with_se
from covbook.transformer import (
    CausalTransformer,
    CharTokenizer,
    TrainResult,
    checkpoint_fingerprint,
    generate,
    python_reference_text,
    spaced_windows,
    train_language_model,
    window_losses,
)

__all__ = ["CHAPTER", "Corpus", "corpus", "Training", "train_models", "Contexts", "contexts", "OrderDependence",
           "order_dependence", "GreedyCycles", "greedy_cycles", "TemperatureSweep", "temperature_sweep",
           "RepExcess", "rep_excess", "POSITIONS", "distinct_cycles", "LOSS_BLOCKS", "SURROGATES", "block_means",
           "surrogate_windows", "measure_rate"]

CHAPTER = "10"

#: The two models: name → positional encoding of :class:`~covbook.transformer.CausalTransformer`.
POSITIONS = {"nope": None, "rotary": "rotary"}
#: Contiguous blocks of held-out windows for every SE over windows (neighbouring windows share a topic):
#: the held-out text is cut into this many stretches, and a statistic's replicates are the stretches.
LOSS_BLOCKS = 16
#: Stationary contexts built from the training text: iid draws from its character frequencies, and
#: paths of its bigram chain started from the chain's stationary law (both add-one, as the baselines).
SURROGATES = ("unigram", "bigram")
#: Validation evaluations per training run (the matched rotary checkpoint is chosen among them).
N_EVALS = 20
#: Floor of the total variations before log-log fits (a context of one repeated character is unchanged
#: by shuffling: an exact 0).
TV_FLOOR = 1e-12


# --------------------------------------------------------------------------------------------
# The text and two baselines


@dataclass
class Corpus(Result):
    """The text, its character tokenizer, the train/validation split (last 10 %) and two baselines.

    ``unigram`` and ``bigram`` are validation cross-entropies (nats per character) of the add-one
    character frequencies and the add-one bigram chain fitted on the training text.
    """

    text: str = field(repr=False)
    tokenizer: CharTokenizer = field(repr=False)
    tokens: torch.Tensor = field(repr=False)  # (n,)
    train_tokens: torch.Tensor = field(repr=False)  # (n - n_val,)
    val_tokens: torch.Tensor = field(repr=False)  # (n_val,)
    unigram: float
    bigram: float

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    @property
    def unigram_law(self) -> torch.Tensor:
        """(V,) float64: the add-one character frequencies of the training text."""
        return torch.as_tensor(_unigram_law(self.train_tokens, self.vocab_size))

    @property
    def bigram_kernel(self) -> torch.Tensor:
        """(V, V) float64: the add-one bigram chain of the training text, row x the law of the next character."""
        return torch.as_tensor(_bigram_kernel(self.train_tokens, self.vocab_size))

    def describe(self) -> str:
        """The baselines in one line."""
        return f"validation cross-entropy: unigram {self.unigram:.3f}, bigram {self.bigram:.3f} nats/char"


def corpus(max_chars: int | None = None) -> Corpus:
    r"""The Language Reference topics, tokenized by character, with the unigram and bigram baselines.

    With counts :math:`c` from the training text (plus one), the baselines are
    :math:`-\overline{\log (c_x/\sum c)}` and :math:`-\overline{\log (c_{xy}/\sum_{y'} c_{xy'})}` over
    the validation characters.  ``max_chars`` truncates the text (for tests).
    """
    text = python_reference_text(max_chars)
    tok = CharTokenizer(text)
    tokens = tok.encode(text)  # (n,)
    V = tok.vocab_size
    n_val = int(0.1 * len(tokens))
    if n_val < 2:
        raise ValueError(f"max_chars must leave at least 2 validation characters, got {len(tokens)} characters")
    train_tokens, val_tokens = tokens[:-n_val], tokens[-n_val:]
    unigram = float(-(np.log(_unigram_law(train_tokens, V))[val_tokens.numpy()]).mean())
    bigram_p = _bigram_kernel(train_tokens, V)  # (V, V)
    bigram = float(-np.log(bigram_p[val_tokens[:-1].numpy(), val_tokens[1:].numpy()]).mean())
    out = Corpus(text, tok, tokens, train_tokens, val_tokens, unigram, bigram)
    out.glue("n_chars", f"{len(text):,}")
    out.glue("vocab_size", V)
    out.glue("n_val", f"{n_val:,}")
    out.glue("unigram_loss", unigram)
    out.glue("bigram_loss", bigram)
    return out


def _unigram_law(tokens: torch.Tensor, V: int) -> np.ndarray:
    """(V,): add-one character frequencies (c_x + 1) / Σ (c + 1)."""
    counts = np.bincount(tokens.numpy(), minlength=V) + 1.0  # (V,)
    return counts / counts.sum()


def _bigram_kernel(tokens: torch.Tensor, V: int) -> np.ndarray:
    """(V, V): add-one bigram chain (c_xy + 1) / Σ_y' (c_xy' + 1); every entry positive, so ergodic."""
    counts = np.ones((V, V))
    np.add.at(counts, (tokens[:-1].numpy(), tokens[1:].numpy()), 1.0)
    return counts / counts.sum(1, keepdims=True)


def block_means(rows: np.ndarray, n_blocks: int = LOSS_BLOCKS) -> np.ndarray:
    """Means of ``rows`` (n, ...) over min(n_blocks, n) contiguous blocks of consecutive rows: (n_blocks, ...).

    Held-out windows are in text order, so a block is a stretch of the text; neighbouring windows
    share a topic, and a standard error over blocks (rather than windows) counts that dependence.

    Examples
    --------
    >>> block_means(np.arange(6.0), 3).tolist()
    [0.5, 2.5, 4.5]
    """
    rows = np.asarray(rows, dtype=float)
    n_blocks = check_positive_int(n_blocks, "n_blocks")
    if rows.shape[0] < 2:
        raise ValueError(f"rows must hold at least 2 windows for a standard error, got {rows.shape[0]}")
    return np.stack([b.mean(0) for b in np.array_split(rows, min(n_blocks, rows.shape[0]))])


# --------------------------------------------------------------------------------------------
# Training


@dataclass
class Training(Result):
    """The trained models (in eval mode), their training losses and their held-out window losses.

    ``models`` are the chapter's pair for every contrast: NoPE after its ``steps``, and the rotary
    model stopped at the evaluation whose validation loss is closest to NoPE's final loss (step
    ``matched_step``), so that NoPE against rotary compares the handling of positions at one loss.
    ``window_losses`` has ``nope``, ``rotary`` (the matched model) and ``nope_at_match`` (NoPE's
    weights after ``matched_step`` steps, the loss claim's comparison at equal training).
    """

    models: dict[str, CausalTransformer] = field(repr=False)
    results: dict[str, TrainResult] = field(repr=False)
    window_losses: dict[str, np.ndarray] = field(repr=False)  # (n_windows,) each
    unigram: float
    bigram: float
    matched_step: int = 0

    def plot(self, ax: object) -> None:
        """Cross-entropy against the step: validation (dark), training batches (light), the baselines."""
        for i, (name, res) in enumerate(self.results.items()):
            ax.plot(res.steps, res.train_loss, color=f"C{i}", alpha=0.4, lw=0.8)
            ax.plot(res.val_steps, res.val_loss, "o-", color=f"C{i}", ms=4, label=f"{name}: validation")
        rot = self.results.get("rotary")
        if rot is not None and self.matched_step in rot.val_steps:
            ax.plot([self.matched_step], [rot.val_loss[rot.val_steps.index(self.matched_step)]], "k*", ms=11,
                    label="rotary at NoPE's loss")
        ax.axhline(self.unigram, color="k", ls=":", lw=1, label="unigram")
        ax.axhline(self.bigram, color="k", ls="--", lw=1, label="bigram")
        ax.set(xlabel="step", ylabel="cross-entropy (nats/char)", title="Training (light: training batches)")
        ax.legend()


def _state(model: CausalTransformer) -> dict[str, torch.Tensor]:
    return {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}


def _load_kept(path: Path | None) -> dict | None:
    """The dict a run kept in ``path`` (:func:`_keep`), or None when there is none."""
    if path is None or not path.is_file():
        return None
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except (RuntimeError, ValueError, OSError, EOFError) as err:
        raise ValueError(f"checkpoint {path} is damaged ({type(err).__name__}); delete it to retrain") from err


def _keep(path: Path | None, kept: dict) -> None:
    if path is not None:
        atomic_write(path, lambda tmp: torch.save(kept, tmp))


class _Evals:
    """``on_eval`` of NoPE's run: its weights at every evaluation (step → state dict)."""

    def __init__(self) -> None:
        self.states: dict[int, dict[str, torch.Tensor]] = {}

    def __call__(self, step: int, loss: float, model: CausalTransformer) -> None:
        self.states[step] = _state(model)


class _Match:
    """``on_eval`` of the rotary run: stops at the first evaluation whose validation loss is at most
    ``target`` and keeps, of it and the evaluation before, the weights whose loss is closer to ``target``."""

    def __init__(self, target: float) -> None:
        self.target = float(target)
        self.step, self.loss, self.state = 0, float("inf"), None

    def __call__(self, step: int, loss: float, model: CausalTransformer) -> bool:
        if abs(loss - self.target) < abs(self.loss - self.target):
            self.step, self.loss, self.state = step, float(loss), _state(model)
        return loss <= self.target


def train_models(text: Corpus, *, d_model: int, n_layers: int, n_heads: int, seq_len: int, batch_size: int,
                 steps: int, lr: float, streams: RandomStreams, device: str | torch.device = "cpu",
                 checkpoints: str | os.PathLike | None = None, progress: bool = False,
                 significance: bool = True) -> Training:
    r"""Train the NoPE model, then the rotary model to NoPE's loss (:func:`covbook.transformer.train_language_model`).

    Both start from one initialisation (stream ``init``: they differ only in ``pos``), see the same
    windows (stream ``train``) under the same schedule for ``steps`` steps, and are evaluated
    :data:`N_EVALS` times.  NoPE trains all its steps; the rotary run stops at the first evaluation
    whose validation loss is at most NoPE's final loss, and keeps the weights of that evaluation or
    the one before, whichever is closer to it (step ``matched_step``).  That *matched* rotary model
    is the chapter's rotary model for every contrast: NoPE against rotary then compares the
    handling of positions at one loss, not two amounts of training (and the rotary run costs only
    the steps it needs).

    With ``checkpoints`` (the chapter's ``covbook.session.checkpoint_dir()``) NoPE's run is
    checkpointed in ``checkpoints/10_nope_{key}.pt`` with its weights at each evaluation in
    ``10_nope-evals_{key}.pt``, and the matched rotary model with its losses in
    ``10_rotary-matched_{key}.pt``, ``key`` = :func:`covbook.transformer.checkpoint_fingerprint`
    (new settings or text, new file): an interrupted NoPE run resumes (and, to recover its weights at
    the evaluations before the interruption, runs again from its start), an interrupted rotary run
    (only the steps to the match) starts again, and finished runs load.

    Measures ``val_below_unigram_{nope,rotary}``; ``loss_nope_minus_rotary``, at equal training (NoPE's
    weights after ``matched_step`` steps against the rotary model's), the mean over :data:`LOSS_BLOCKS`
    contiguous blocks of held-out windows of :math:`\ell^{\rm NoPE}_w - \ell^{\rm rotary}_w`, above 0
    (:func:`_measure_above`); and ``loss_matched``, NoPE's final model minus the matched rotary model
    on the same blocks, predicted 0.
    """
    check_positive_ints(d_model=d_model, n_layers=n_layers, n_heads=n_heads, seq_len=seq_len, batch_size=batch_size,
                 steps=steps)
    check_positive_float(lr, "lr")
    ckpt = Path(checkpoints) if checkpoints is not None else None

    def build(pos: str | None) -> CausalTransformer:
        return CausalTransformer(
            vocab_size=text.vocab_size, d_model=d_model, n_layers=n_layers, n_heads=n_heads, mlp=True,
            layer_norm=True, pos=pos, dtype=torch.float32,
            seed=streams.seed_for("init"),  # one draw: the models differ only in `pos`
        ).to(device)

    def file(name: str, key: str) -> Path | None:
        return None if ckpt is None else ckpt / f"10_{name}_{key}.pt"

    kw = dict(steps=steps, batch_size=batch_size, seq_len=seq_len, lr=lr, seed=streams.seed_for("train"),
              eval_every=max(1, steps // N_EVALS))
    nope = build(POSITIONS["nope"])
    key = checkpoint_fingerprint(nope, text.tokens, **kw)  # the library's key: new settings, new file
    evals = _Evals()
    res_nope = train_language_model(nope, text.tokens, **kw, progress=progress, checkpoint=file("nope", key),
                                    on_eval=evals)
    stored = _load_kept(file("nope-evals", key)) or {}
    kept = {**stored, **evals.states}  # a resumed run: the evaluations before the interruption are in the file
    if set(kept) != set(res_nope.val_steps):  # a finished run loaded without them: the same run again
        again = _Evals()
        train_language_model(build(POSITIONS["nope"]), text.tokens, **kw, on_eval=again)
        kept = again.states
    if set(kept) != set(stored) or evals.states:  # a finished run loaded with its evaluations: nothing to write
        _keep(file("nope-evals", key), kept)
    nope.eval()

    rotary = build(POSITIONS["rotary"])
    key_r = checkpoint_fingerprint(rotary, text.tokens, **kw)
    target = float(res_nope.final_val_loss)
    matched = _load_kept(file("rotary-matched", key_r))
    if matched is None or matched["target"] != target:
        match = _Match(target)
        res = train_language_model(rotary, text.tokens, **kw, progress=progress, on_eval=match)
        matched = dict(target=target, step=match.step, loss=match.loss, model=match.state, result=asdict(res))
        _keep(file("rotary-matched", key_r), matched)
    rotary.load_state_dict(matched["model"])
    rotary.eval()
    res_rotary = TrainResult(**matched["result"])
    step = int(matched["step"])
    nope_at_match = build(POSITIONS["nope"])
    nope_at_match.load_state_dict(kept[step])
    nope_at_match.eval()

    models, results = {"nope": nope, "rotary": rotary}, {"nope": res_nope, "rotary": res_rotary}
    wl = {name: window_losses(m, text.val_tokens, seq_len).numpy()
          for name, m in (*models.items(), ("nope_at_match", nope_at_match))}  # (n_w,) each
    out = Training(models, results, wl, text.unigram, text.bigram, matched_step=step)
    for name, value in dict(steps=steps, seq_len=seq_len, d_model=d_model, n_layers=n_layers,
                            n_heads=n_heads).items():
        out.glue(name, value)
    out.glue("val_loss_nope", float(res_nope.final_val_loss))
    out.glue("val_loss_rotary", float(matched["loss"]))
    out.glue("val_loss_nope_at_match", float(res_nope.val_loss[res_nope.val_steps.index(step)]))
    out.glue("matched_step", step)
    for name, res in results.items():
        out.glue(f"train_seconds_{name}", float(res.seconds))
    for name, loss in (("nope", res_nope.final_val_loss), ("rotary", matched["loss"])):
        out.measure(f"val_below_unigram_{name}", float(loss), lower=0.0, upper=text.unigram, name=name)
    out.glue("nope_below_bigram", text.bigram - float(res_nope.final_val_loss))
    # neighbouring windows share a topic of the text: the SE is over contiguous blocks
    blocks = block_means(wl["nope_at_match"] - wl["rotary"])
    loss_diff, loss_se = mean_with_se(blocks)
    out.glue("n_loss_windows", len(wl["nope"]))
    out.glue("loss_diff_z", loss_diff / loss_se)
    measure_above(out, "loss_nope_minus_rotary", loss_diff, prediction=0.0, se=loss_se, dof=len(blocks) - 1,
                   significance=significance, n_blocks=len(blocks), len_wl_nope=len(wl["nope"]), matched_step=step)
    matched_diff, matched_se = mean_with_se(block_means(wl["nope"] - wl["rotary"]))
    out.glue("loss_matched_se", matched_se)
    out.measure("loss_matched", matched_diff, prediction=0.0, se=matched_se, dof=len(blocks) - 1,
                n_blocks=len(blocks), len_wl_nope=len(wl["nope"]), matched_step=step, steps=steps)
    return out


# --------------------------------------------------------------------------------------------
# Held-out windows and prompts


@dataclass
class Contexts(Result):
    """Disjoint windows of the validation text: evaluation windows, sampling and greedy prompts."""

    val_windows: torch.Tensor = field(repr=False)  # (n_win, t_eval), on the device
    prompts: torch.Tensor = field(repr=False)  # (n_prompts, prompt_len), on the device
    greedy_prompts: torch.Tensor = field(repr=False)  # (n_greedy, prompt_len), on the device
    prompt_len: int
    gen_len: int
    rep_windows: torch.Tensor = field(repr=False)  # (n_rep, t_eval), on the device: the windows of rep/ℓ
    # name → (n_surrogate, t_eval), on the device: stationary contexts (SURROGATES)
    surrogates: dict[str, torch.Tensor] = field(default_factory=dict, repr=False)

    @property
    def t_eval(self) -> int:
        return self.prompt_len + self.gen_len

    @property
    def n_win(self) -> int:
        return self.val_windows.shape[0]

    @property
    def n_rep(self) -> int:
        return self.rep_windows.shape[0]


def surrogate_windows(text: Corpus, n: int, length: int, *, generator: torch.Generator | None = None
                      ) -> dict[str, torch.Tensor]:
    r"""Stationary contexts built from the training text: name (:data:`SURROGATES`) → (n, length) long tensor.

    ``unigram``: iid characters :math:`x_s \sim \pi` (the add-one character frequencies); ``bigram``:
    paths of the add-one bigram chain :math:`x_{s+1} \sim P(x_s,\cdot)` started from its stationary law
    (:func:`covbook.markov.sample_markov_chain`), so every position has the same law.  Both are
    stationary and ergodic, the setting of the theorem, and both are laws the model has seen the
    text's statistics of.  On the CPU.
    """
    n, length = check_positive_int(n, "n"), check_positive_int(length, "length")
    pi = text.unigram_law  # (V,)
    iid = torch.multinomial(pi.expand(n, -1), length, replacement=True, generator=generator)  # (n, length)
    chain = sample_markov_chain(text.bigram_kernel, n, length, generator=generator)  # (n, length)
    return {"unigram": iid, "bigram": chain}


def contexts(text: Corpus, *, n_text: int, n_prompts: int, n_greedy: int, prompt_len: int, gen_len: int,
             streams: RandomStreams, n_rep: int | None = None, n_surrogate: int | None = None,
             device: str | torch.device = "cpu") -> Contexts:
    """Windows of the held-out text (:func:`covbook.transformer.spaced_windows`), from the stream ``prompts``.

    In order: min(``n_text``, ⌊(n_val − 1)/t_eval⌋) windows of t_eval = ``prompt_len + gen_len``
    characters (statistics over them are over separate stretches of text), ``n_prompts`` prompts
    for sampling and ``n_greedy`` prompts for greedy decoding, ``prompt_len`` characters each.
    With ``n_rep``, min(``n_rep``, ⌊(n_val − 1)/t_eval⌋) further windows of t_eval characters for
    :func:`rep_excess`, from their own stream ``rep-windows`` (so that their number changes no other
    draw); without it, rep/ℓ reads the ``n_text`` windows.  With ``n_surrogate``, that many
    stationary contexts of t_eval characters per surrogate (:func:`surrogate_windows`, stream
    ``surrogates``).

    Raises ``ValueError`` unless the sizes are positive and the held-out text holds one window.
    """
    check_positive_ints(n_text=n_text, n_prompts=n_prompts, n_greedy=n_greedy, prompt_len=prompt_len, gen_len=gen_len)
    if n_rep is not None:
        check_positive_ints(n_rep=n_rep)
    if n_surrogate is not None:
        check_positive_ints(n_surrogate=n_surrogate)
    val = text.val_tokens
    t_eval = prompt_len + gen_len
    n_fit = (len(val) - 1) // t_eval
    n_win = min(n_text, n_fit)
    if n_win < 1:
        raise ValueError(f"prompt_len + gen_len must fit in the held-out text ({len(val)} characters), "
                         f"got {t_eval}")

    def slices(n: int, length: int, gen: torch.Generator) -> torch.Tensor:
        starts = spaced_windows(len(val) - 1, n, length, generator=gen)  # (n,)
        return val[starts[:, None] + torch.arange(length)[None]].to(device)  # (n, length)

    gen = streams.torch_generator("prompts")
    windows = slices(n_win, t_eval, gen)  # (n_win, t_eval)
    prompts, greedy = slices(n_prompts, prompt_len, gen), slices(n_greedy, prompt_len, gen)
    rep = windows if n_rep is None else slices(min(n_rep, n_fit), t_eval, streams.torch_generator("rep-windows"))
    sur = {} if n_surrogate is None else {
        k: v.to(device) for k, v in surrogate_windows(text, n_surrogate, t_eval,
                                                      generator=streams.torch_generator("surrogates")).items()}
    out = Contexts(windows, prompts, greedy, prompt_len, gen_len, rep, sur)  # rep: (n_rep, t_eval)
    for name, value in dict(gen_len=gen_len, n_prompts=n_prompts, n_greedy=n_greedy, t_eval=t_eval,
                            n_win=n_win, n_rep=out.n_rep, n_surrogate=n_surrogate or 0,
                            n_blocks_text=min(LOSS_BLOCKS, n_win)).items():
        out.glue(name, value)
    return out


# --------------------------------------------------------------------------------------------
# Does the next-token law forget the order of the context?


@dataclass
class OrderDependence(Result):
    """Shuffle test and Markov gap against the context length, on text, on surrogates and on samples.

    ``shuffle[name, src]`` and ``gap_nope[src]`` (src ``text``, ``samples`` or a surrogate of
    :data:`SURROGATES`) have shape (windows or prompts, n_pos), floored at 1e-12;
    ``slopes[kind, name, src]`` = (slope, SE), on text over blocks of windows (:func:`block_means`).
    """

    positions: np.ndarray  # (n_pos,)
    seq_len: int
    samples: dict[str, torch.Tensor] = field(repr=False)  # (P, t_eval) each
    shuffle: dict[tuple[str, str], np.ndarray] = field(repr=False)
    gap_nope: dict[str, np.ndarray] = field(repr=False)
    slopes: dict[tuple[str, str, str], tuple[float, float]] = field(repr=False)

    def plot(self, axes: object) -> None:
        """Left: the shuffle test; right: the NoPE Markov gap with t^{-1/2}; dashed: the training length.

        Solid: real text and samples; dashed: the stationary surrogates.
        """
        axes = np.ravel(axes)
        t = self.positions
        for i, (key, tv) in enumerate(self.shuffle.items()):
            ls = "o--" if key[1] in SURROGATES else "o-"
            axes[0].loglog(t, tv.mean(0), ls, ms=3, color=f"C{i}", label=f"{key[0]}, {key[1]}")
        for i, (src, g) in enumerate(self.gap_nope.items()):
            ls = "o--" if src in SURROGATES else "o-"
            axes[1].loglog(t, g.mean(0), ls, ms=3, color=f"C{i}", label=f"nope, {src}")
        ref = self.gap_nope[SURROGATES[-1]] if SURROGATES[-1] in self.gap_nope else self.gap_nope["text"]
        axes[1].loglog(t, ref.mean(0)[0] * np.sqrt(t[0] / t), "k:", lw=1, label=r"$t^{-1/2}$")
        for ax in axes[:2]:
            ax.axvline(self.seq_len, color="gray", lw=0.8, ls="--")
        axes[0].set(xlabel="context length $t$", ylabel="TV(original, shuffled past)", title="Shuffle test")
        axes[1].set(xlabel="context length $t$", ylabel=r"TV$(p, K_{\hat\pi_t}(x_t,\cdot))$",
                    title="Markov gap (NoPE)")
        axes[0].legend(fontsize="x-small")
        axes[1].legend(fontsize="x-small")
        axes[0].figure.tight_layout()


def _fit_slopes(positions: np.ndarray, rows: np.ndarray, seq_len: int, seed: int) -> dict[str, tuple[float, float]]:
    """Log-log slope of the mean of ``rows`` (R, n_pos) with its bootstrap SE over rows: over all of
    ``positions`` (``all``), over t ≤ ``seq_len`` (``within`` the training length) and t ≥ ``seq_len``
    (``beyond``); the last two are (NaN, NaN) where they hold fewer than three positions."""
    out = {"all": slope_with_se(positions, rows, seed=seed)}
    for part, keep in (("within", positions <= seq_len), ("beyond", positions >= seq_len)):
        out[part] = slope_with_se(positions[keep], rows[:, keep], seed=seed) if keep.sum() >= 3 else (
            float("nan"), float("nan"))
    return out


def measure_rate(out: Result, cid: str, positions: np.ndarray, rows: np.ndarray, *, seq_len: int,
                 seed: int, significance: bool = True) -> tuple[float, float]:
    r"""Measure claim ``cid``: the log-log slope of the mean distance over independent stationary contexts,
    claimed above the theorem's −1/2 (a distance that falls more slowly than :math:`t^{-1/2}`).

    ``rows`` (R, n_pos) are distances (shuffle TV or Markov gap) along R independent contexts at
    ``positions``; the slope of :math:`\log \overline{\mathrm{TV}}_t` on :math:`\log t` over all
    positions, with its bootstrap SE over the contexts (:func:`covbook.stats.slope_with_se`), at
    R − 1 degrees of freedom, is measured with :func:`measure_above` against the prediction −1/2
    (the theorem's :math:`O_P(t^{-1/2})` on a stationary context): with ``significance`` the window
    :math:`[-1/2 + k\,\mathrm{SE}, \infty)` excludes −1/2, else the direction only.  Returns (slope, SE).
    """
    rows = np.asarray(rows, dtype=float)
    slope, se = _fit_slopes(np.asarray(positions), rows, seq_len, seed)["all"]
    measure_above(out, cid, slope, prediction=-0.5, se=se, dof=rows.shape[0] - 1, significance=significance,
                  n_surrogate=rows.shape[0], t_min=int(positions[0]), t_max=int(positions[-1]))
    return slope, se


def measure_equal_slopes(out: Result, cid: str, text: tuple[float, float], stationary: tuple[float, float], *,
                         n_blocks: int, n_surrogate: int) -> None:
    r"""Measure claim ``cid``: the text's slope minus the stationary context's, predicted 0.

    ``text`` and ``stationary`` are (slope, SE) of two independent fits (blocks of text windows, and
    ``n_surrogate`` surrogate contexts); the difference :math:`b_{\text{text}} - b_{\text{stat}}` has SE
    :math:`\sqrt{\mathrm{SE}_{\text{text}}^2 + \mathrm{SE}_{\text{stat}}^2}` at
    min(n_blocks, n_surrogate) − 1 degrees of freedom (a two-sided window 0 ± k·SE).  Glues
    ``text_vs_bigram_se``, and the standard errors from 0 (``text_vs_bigram_z``) and from +1/2
    (``text_vs_bigram_z_half``, the difference of a flat text slope beside a t^(-1/2) fall).
    """
    (b_text, se_text), (b_sur, se_sur) = text, stationary
    se = float(np.hypot(se_text, se_sur))
    diff = float(b_text - b_sur)
    out.glue("text_vs_bigram_se", se)
    out.glue("text_vs_bigram_z", diff / se if se > 0 else float("nan"))
    out.glue("text_vs_bigram_z_half", (0.5 - diff) / se if se > 0 else float("nan"))
    out.measure(cid, diff, prediction=0.0, se=se, dof=min(n_blocks, n_surrogate) - 1, n_blocks=n_blocks,
                n_surrogate=n_surrogate)


def order_dependence(models: dict[str, CausalTransformer], ctx: Contexts, *, seq_len: int,
                     streams: RandomStreams, device: str | torch.device = "cpu",
                     significance: bool = True) -> OrderDependence:
    r"""The shuffle test and the NoPE Markov gap at geometric context lengths up to t_eval.

    On the validation windows, on the stationary surrogates ``ctx.surrogates`` and on samples at
    τ = 1 (stream ``samples``) from the prompts, all in one batch per model; each shuffle test
    permutes twice (stream ``shuffle``, the same permutations for both models).  The positions are
    8 geometric lengths from 8 to t_eval and the training length.  Slopes are log-log with
    bootstrap SEs: over the :data:`LOSS_BLOCKS` blocks of text windows (:func:`block_means`:
    neighbouring windows share a topic), over the (independent) surrogate contexts and prompts.

    Measures, on real text: ``order_contrast`` (rotary minus NoPE shuffle TV at t_eval, paired over
    blocks, above 0), ``shuffle_rate_text`` and ``gap_rate_text`` (NoPE slopes above the −1/2 of a
    stationary context), each with :func:`_measure_above` (a significance with ``significance``,
    else the direction), and ``shuffle_rotary_no_decay`` (predicted 0).  On each surrogate s:
    ``shuffle_slower_{s}`` and ``gap_slower_{s}``, the NoPE slopes, above the theorem's −1/2
    (:func:`measure_rate`); and ``shuffle_text_equals_bigram``, the text's shuffle slope minus the
    bigram surrogate's, predicted 0 (two-sided, SE of the difference of independent slopes), against
    the +1/2 of a flat text slope beside a t^(-1/2) fall on the stationary context.
    """
    check_positive_int(seq_len, "seq_len")
    if set(models) != set(POSITIONS):
        raise ValueError(f"models must be the trained models {sorted(POSITIONS)}, got {sorted(models)}")
    x_text, n_win = ctx.val_windows, ctx.n_win
    geometric = np.geomspace(8, ctx.t_eval, 8).astype(int)
    positions = np.unique(np.append(geometric, seq_len) if seq_len < ctx.t_eval else geometric)  # (n_pos,)
    samples = {name: generate(m, ctx.prompts, ctx.gen_len, temperature=1.0,
                              generator=streams.torch_generator("samples", device=device))
               for name, m in models.items()}  # (P, t_eval) each
    shuffle, gap_nope = {}, {}
    for name, m in models.items():
        parts = {"text": x_text, **ctx.surrogates, "samples": samples[name]}
        x = torch.cat(list(parts.values()))  # (n_win + Σ n_surrogate + P, t_eval): one batch per model
        tv = shuffle_test(m, x, positions, n_perm=2, generator=streams.torch_generator("shuffle")).numpy()
        gap = markov_gap(m, x, positions).numpy() if name == "nope" else None  # (rows, n_pos)
        i = 0
        for src, part in parts.items():
            rows = slice(i, i + part.shape[0])
            shuffle[name, src] = np.maximum(tv[rows], TV_FLOOR)
            if gap is not None:
                gap_nope[src] = np.maximum(gap[rows], TV_FLOOR)
            i += part.shape[0]
    slopes: dict[tuple[str, str, str], tuple[float, float]] = {}
    out = OrderDependence(positions, seq_len, samples, shuffle, gap_nope, slopes)
    out.glue("t_eval_over_seq_len", ctx.t_eval / seq_len)  # the longest context, in training lengths
    fits = {}
    for kind, table in (("shuffle", shuffle), ("gap", {("nope", src): g for src, g in gap_nope.items()})):
        for (name, src), tv in table.items():
            rows = block_means(tv) if src == "text" else tv  # text: blocks of neighbouring windows
            fits[kind, name, src] = _fit_slopes(positions, rows, seq_len,
                                                seed=streams.seed_for(f"bootstrap-{kind}-{name}-{src}"))
            slopes[kind, name, src] = fits[kind, name, src]["all"]
            for part, (b, se) in fits[kind, name, src].items():
                out.glue(f"{kind}_slope_{part}_{name}_{src}", float(b))
                out.glue(f"{kind}_slope_{part}_se_{name}_{src}", float(se))
    for (name, src), tv in shuffle.items():
        out.glue(f"shuffle_last_{name}_{src}", float(tv[:, -1].mean()))
    for src, g in gap_nope.items():
        out.glue(f"gap_last_{src}", float(g[:, -1].mean()))
    last_nope, last_rotary = shuffle["nope", "text"][:, -1], shuffle["rotary", "text"][:, -1]  # (n_win,)
    diff_blocks = block_means(last_rotary - last_nope)  # (n_blocks,)
    n_blocks = len(diff_blocks)
    order_diff, order_se = mean_with_se(diff_blocks)
    out.glue("order_ratio", float(last_nope.mean() / last_rotary.mean()))
    out.glue("order_z", order_diff / order_se if order_se > 0 else float("nan"))
    k = quantile(n_blocks - 1)  # standard errors at the book's level for n_blocks replicates
    out.glue("t_quantile_text", k)
    out.glue("n_blocks", n_blocks)
    measure_above(out, "order_contrast", order_diff, prediction=0.0, se=order_se, dof=n_blocks - 1,
                   significance=significance, n_win=n_win, n_blocks=n_blocks)
    for kind in ("shuffle", "gap"):
        slope, se = slopes[kind, "nope", "text"]
        measure_above(out, f"{kind}_rate_text", slope, prediction=-0.5, se=se, dof=n_blocks - 1,
                       significance=significance, n_win=n_win, n_blocks=n_blocks)
        out.glue(f"{kind}_rate_text_se", float(se))
        # standard errors from the stationary rate and from no decay (the claim tests the first)
        out.glue(f"{kind}_rate_text_z", (float(slope) + 0.5) / float(se))
        out.glue(f"{kind}_rate_text_z0", -float(slope) / float(se))
    slope, se = slopes["shuffle", "rotary", "text"]
    out.measure("shuffle_rotary_no_decay", slope, prediction=0.0, se=se, dof=n_blocks - 1, n_win=n_win,
                n_blocks=n_blocks)
    for src in ctx.surrogates:
        for kind, tv in (("shuffle", shuffle["nope", src]), ("gap", gap_nope[src])):
            slope, se = measure_rate(out, f"{kind}_slower_{src}", positions, tv, seq_len=seq_len,
                                     seed=streams.seed_for(f"bootstrap-{kind}-nope-{src}"),
                                     significance=significance)
            out.glue(f"{kind}_slower_{src}_se", float(se))
            # standard errors from the stationary rate (the claim tests it) and from no decay (untested)
            out.glue(f"{kind}_slower_{src}_z", (float(slope) + 0.5) / float(se))
            out.glue(f"{kind}_slower_{src}_z0", -float(slope) / float(se))
    if "bigram" in ctx.surrogates:
        measure_equal_slopes(out, "shuffle_text_equals_bigram", slopes["shuffle", "nope", "text"],
                             slopes["shuffle", "nope", "bigram"], n_blocks=n_blocks,
                             n_surrogate=ctx.surrogates["bigram"].shape[0])
    return out


# --------------------------------------------------------------------------------------------
# Greedy decoding: cycles


@dataclass
class GreedyCycles(Result):
    """The cycles that greedy runs end in (:class:`covbook.markov.CycleRecord` per run), per model."""

    records: dict[str, list[CycleRecord]] = field(repr=False)
    runs: dict[str, torch.Tensor] = field(repr=False)  # (G, t_eval) each, on the CPU
    prompt_len: int
    tokenizer: CharTokenizer = field(repr=False)

    def report(self, n_examples: int = 3, n_chars: int = 160) -> str:
        """Per model, how many runs end in a cycle, and the first characters of a few continuations."""
        lines = []
        for name, recs in self.records.items():
            found = sum(r.final is not None for r in recs)
            lines.append(f"{name}: {found} of {len(recs)} greedy runs end in a cycle")
            for row in self.runs[name][:n_examples, self.prompt_len:]:
                lines.append("    " + repr(self.tokenizer.decode(row[:n_chars])))
        return "\n".join(lines)


def greedy_cycles(models: dict[str, CausalTransformer], ctx: Contexts, tokenizer: CharTokenizer, *,
                  significance: bool = True) -> GreedyCycles:
    r"""Greedy continuations of the greedy prompts and the cycles they end in.

    A run ends in a cycle when :func:`covbook.markov.find_cycle` finds three periods covering the
    last quarter.  Measures ``greedy_cycles_nope`` (share of runs in a cycle) and ``cycling_contrast``
    (NoPE against rotary on the same prompts, McNemar's exact test: :func:`_measure_cycling_contrast`;
    with ``significance`` false, where the profile's prompts give the test no power, only its direction).
    For NoPE each cycle of period ≥ 2 is also checked for self-consistency (an orbit of the
    mean-field greedy map at its own frequencies) and counted once per orbit (:func:`distinct_cycles`):
    runs that end in one orbit share its verdict, and one trained model has only a handful of such
    orbits, so the count is glued, not tested.
    """
    if set(models) != set(POSITIONS):
        raise ValueError(f"models must be the trained models {sorted(POSITIONS)}, got {sorted(models)}")
    records, runs = {}, {}
    out = GreedyCycles(records, runs, ctx.prompt_len, tokenizer)
    for name, m in models.items():
        runs[name] = generate(m, ctx.greedy_prompts, ctx.gen_len, temperature=0).cpu()  # (G, t_eval)
        recs = records[name] = cycle_records(m, runs[name], ctx.prompt_len, self_consistency=name == "nope")
        found = [r for r in recs if r.final is not None]
        out.glue(f"cycle_frac_{name}", len(found) / len(recs))
        out.glue(f"cycle_periods_{name}", ", ".join(map(str, sorted(r.period for r in found))) or "none")
        out.glue(f"cycle_entries_{name}", ", ".join(map(str, sorted(r.entry for r in found))) or "none")
    out.measure("greedy_cycles_nope", float(np.mean([r.final is not None for r in records["nope"]])))
    _measure_cycling_contrast(out, records, significance=significance)
    ended = [r for r in records["nope"] if r.final is not None]
    # a period-1 cycle (one token repeated) is self-consistent almost by construction: count the others
    n_period1 = sum(r.period == 1 for r in ended)
    longer = [(run[r.final[0]:r.final[0] + r.period], bool(r.self_consistent))
              for r, run in zip(records["nope"], runs["nope"].numpy()) if r.final is not None and r.period > 1]
    # the unit is the orbit: runs that end in one cycle share its verdict
    consistent = list(distinct_cycles(longer).values())
    n_consistent = int(sum(consistent))
    out.glue("n_period1_nope", n_period1)
    out.glue("n_runs_longer_nope", len(longer))
    out.glue("n_cycles_longer_nope", len(consistent))
    out.glue("n_period1_text", counted(n_period1, "run"))
    out.glue("n_runs_longer_text", counted(len(longer), "run"))
    out.glue("n_cycles_longer_text", counted(len(consistent), "distinct cycle"))
    # counted, not tested: one trained model has a handful of such orbits, too few for a test of a share
    out.glue("cycle_consistent_nope", n_consistent)
    return out


def _measure_cycling_contrast(out: GreedyCycles, records: dict[str, list[CycleRecord]], *,
                              significance: bool = True) -> None:
    r"""``cycling_contrast``: more greedy runs end in a cycle without positions than with rotary positions.

    Both models continue the same greedy prompts (distinct windows of the held-out text), so the
    outcomes are paired: of the prompts where exactly one model's run ends in a cycle, b are NoPE's and
    c rotary's.  Under no difference b ~ Binomial(b + c, 1/2) (McNemar's exact test); the window's
    lower end is the smallest count with probability at most LEVEL/2 of being reached under it (the
    one-sided exact test at the book's level), or, when not even b = b + c reaches it, 0 (the window
    then contains the count of no difference, (b + c)/2, and the claim is compatible only).  Without
    ``significance`` the lower end is 0 at any count: the direction alone, a compatible claim (a test
    below its power would fail at the rate its power leaves, not at the book's level).
    """
    nope = [r.final is not None for r in records["nope"]]
    rotary = [r.final is not None for r in records["rotary"]]
    b = sum(x and not y for x, y in zip(nope, rotary))
    c = sum(y and not x for x, y in zip(nope, rotary))
    n = b + c
    crit = next((k for k in range(n + 1) if bdtrc(k - 1, n, 0.5) <= LEVEL / 2), None) if significance else None
    p_value = float(bdtrc(b - 1, n, 0.5)) if n else 1.0  # the exact one-sided binomial test, P(B ≥ b)
    for name, value in dict(n_cycled_nope=sum(nope), n_cycled_rotary=sum(rotary), cycling_b=b, cycling_c=c,
                            cycling_p=p_value, cycling_b_text=counted(b, "prompt"),
                            cycling_c_text=counted(c, "prompt")).items():
        out.glue(name, value)
    out.measure("cycling_contrast", float(b), lower=float(crit) if crit is not None else 0.0, upper=float(n),
                n_discordant=n, no_difference=n / 2, n_prompts=len(nope), p_value=p_value)


def distinct_cycles(cycles: list[tuple[np.ndarray, bool]]) -> dict[tuple[int, ...], bool]:
    """The distinct cycles among ``(period, verdict)`` pairs: one period each, keyed by its least rotation.

    Two runs that end in the same orbit show it from different starting tokens (rotations of one
    period); :func:`covbook.markov.cycle_self_consistent` does not depend on the rotation (the
    frequencies of a period and "the greedy map follows it" are both rotation invariant), so one
    orbit is one verdict.

    Parameters
    ----------
    cycles : list of (int array of shape (p,), bool), one period and its verdict per run

    Returns
    -------
    dict mapping each distinct cycle (its lexicographically least rotation) to its verdict

    Examples
    --------
    >>> distinct_cycles([(np.array([3, 1, 2]), True), (np.array([1, 2, 3]), True), (np.array([2, 1]), False)])
    {(1, 2, 3): True, (1, 2): False}
    """
    out: dict[tuple[int, ...], bool] = {}
    for period, verdict in cycles:
        c = [int(v) for v in period]
        key = min(tuple(c[i:] + c[:i]) for i in range(len(c)))
        if out.setdefault(key, bool(verdict)) != bool(verdict):
            raise ValueError(f"cycle {key} has two verdicts: self-consistency must not depend on the rotation")
    return out


# --------------------------------------------------------------------------------------------
# Temperature: repetition and diversity

_TITLES = {"seq_rep_4": "seq-rep-4", "distinct_2": "distinct-2", "entropy": r"entropy of $\hat\pi$ (nats)",
           "between": r"TV of $\hat\pi$: between prompts, within runs"}


def _metrics(x: torch.Tensor, vocab_size: int) -> dict[str, float]:
    """seq-rep-4, distinct-2, entropy of π̂ and within / between TV of runs ``x`` (R, T)."""
    m4, m2 = repetition_metrics(x.cpu(), vocab_size, n=4), repetition_metrics(x.cpu(), vocab_size, n=2)
    return dict(seq_rep_4=m4["seq_rep"], distinct_2=m2["distinct"], entropy=m4["entropy"], within=m4["within"],
                between=m4["between"])


@dataclass
class TemperatureSweep(Result):
    """Repetition metrics of samples per model and temperature (``sweep[name][i]`` at ``taus[i]``), and of text."""

    taus: list[float]
    sweep: dict[str, list[dict[str, float]]] = field(repr=False)
    reference: dict[str, float]

    def plot(self, axes: object) -> None:
        """seq-rep-4, distinct-2, entropy of π̂ and between / within TV against τ; dotted: the text."""
        axes = np.ravel(axes)
        for j, key in enumerate(["seq_rep_4", "distinct_2", "entropy", "between"]):
            for i, (name, rows) in enumerate(self.sweep.items()):
                axes[j].plot(self.taus, [r[key] for r in rows], "o-", color=f"C{i}", ms=4, label=name)
                if key == "between":
                    axes[j].plot(self.taus, [r["within"] for r in rows], "s--", color=f"C{i}", ms=3,
                                 label=f"{name}: within")
            axes[j].axhline(self.reference[key], color="k", ls=":", lw=1, label="text")
            axes[j].set(xlabel=r"temperature $\tau$", title=_TITLES[key])
        axes[0].legend()
        axes[3].legend(fontsize="x-small")
        axes[0].figure.tight_layout()


def temperature_sweep(models: dict[str, CausalTransformer], ctx: Contexts, *, vocab_size: int, taus: list[float],
                      streams: RandomStreams, device: str | torch.device = "cpu") -> TemperatureSweep:
    r"""Continue the prompts at each temperature (stream ``temperature``, replicate i) and measure repetition.

    Measures ``mode_collapse_{name}`` (seq-rep-4 at the lowest τ minus at τ = 1) and
    ``attractors_low_tau_{name}``: the between-prompt minus within-run TV of the character
    frequencies at the lowest τ (:func:`covbook.markov.attractor_contrast`, jackknife SE; predicted 0
    for a single attractor).

    Raises ``ValueError`` unless ``taus`` holds positive temperatures, its lowest first, and 1.0.
    """
    check_positive_int(vocab_size, "vocab_size")
    taus = list(taus)
    for t in taus:
        check_positive_float(t, "taus")
    if 1.0 not in taus or taus[0] != min(taus):
        raise ValueError(f"taus must start with its lowest temperature and contain 1.0, got {taus}")
    reference = _metrics(ctx.val_windows[:, ctx.prompt_len:], vocab_size)
    sweep: dict[str, list[dict[str, float]]] = {name: [] for name in models}
    low_runs = {}
    for name, m in models.items():
        for i, tau in enumerate(taus):
            g = streams.torch_generator("temperature", i, device=device)
            x = generate(m, ctx.prompts, ctx.gen_len, temperature=tau, generator=g)[:, ctx.prompt_len:]  # (P, n)
            sweep[name].append(_metrics(x, vocab_size))
            if i == 0:
                low_runs[name] = x.cpu()  # the lowest temperature
    out = TemperatureSweep(taus, sweep, reference)
    for k, v in reference.items():
        out.glue(f"text_{k}", float(v))
    out.glue("tau_low", float(taus[0]))
    n_prompts = ctx.prompts.shape[0]
    for name in models:
        low, one = sweep[name][0], sweep[name][taus.index(1.0)]
        for key, row in (("low", low), ("one", one)):
            out.glue(f"seqrep_{key}_{name}", float(row["seq_rep_4"]))
            out.glue(f"distinct_{key}_{name}", float(row["distinct_2"]))
        out.glue(f"between_low_{name}", float(low["between"]))
        out.glue(f"within_low_{name}", float(low["within"]))
        out.measure(f"mode_collapse_{name}", low["seq_rep_4"] - one["seq_rep_4"], name=name)
        d, se = attractor_contrast(low_runs[name], vocab_size)
        d = d if d > 0 or se > 0 else float("nan")  # identical continuations: no evidence of several attractors
        out.glue(f"attractors_z_{name}", d / se if se > 0 else float("nan"))
        out.measure(f"attractors_low_tau_{name}", d, prediction=0.0, se=se, dof=n_prompts - 1,
                    reason=None if d == d else "every continuation at the lowest temperature is the same",
                    name=name, n_prompts=n_prompts)
    return out


# --------------------------------------------------------------------------------------------
# rep/ℓ


@dataclass
class RepExcess(Result):
    """rep/ℓ per validation window: of the text's next characters and of each model's argmax predictions."""

    ell: int
    text_rows: np.ndarray  # (n_rep,)
    rep_rows: dict[str, np.ndarray] = field(repr=False)  # (n_rep,) each


def rep_excess(models: dict[str, CausalTransformer], ctx: Contexts, *, ell: int = 16) -> RepExcess:
    r"""rep/ℓ of the models' predictions minus the text's own, paired over the validation windows.

    rep/ℓ is the share of positions whose next character (the text's, or the model's argmax given
    the true context) is among the previous ℓ; measures ``rep_excess_{name}``, the mean over the
    windows ``ctx.rep_windows`` of the model's minus the text's (predicted 0, SE over the
    :data:`LOSS_BLOCKS` blocks of neighbouring windows, :func:`block_means`).
    """
    ell = check_positive_int(ell, "ell")
    target = ctx.rep_windows[:, 1:].cpu()  # (n_rep, t_eval - 1): the text's own next characters
    text_rate = rep_l(target, target, ell)
    text_rows = np.array([rep_l(t, t, ell) for t in target])  # (n_win,)
    rep_rows: dict[str, np.ndarray] = {}
    out = RepExcess(ell, text_rows, rep_rows)
    out.glue("ell", ell)
    out.glue("rep_text", float(text_rate))
    for name, m in models.items():
        probs = next_token_probs(m, ctx.rep_windows)[:, :-1].cpu()  # (n_rep, t_eval - 1, V)
        rep_rows[name] = np.array([rep_l(p, t, ell) for p, t in zip(probs, target)])  # (n_rep,)
        out.glue(f"rep_{name}", float(rep_rows[name].mean()))
        blocks = block_means(rep_rows[name] - text_rows)  # (n_blocks,): neighbouring windows share a topic
        d, se = mean_with_se(blocks)
        out.glue(f"rep_excess_z_{name}", d / se if se > 0 else float("nan"))
        out.measure(f"rep_excess_{name}", d, prediction=0.0, se=se, dof=len(blocks) - 1, name=name, ell=ell,
                    n_win=ctx.n_rep, n_blocks=len(blocks))
    return out
