"""covbook.experiments.language_model (chapter 10) at tiny sizes: shapes, determinism, checkpoints, the
claim ids of the chapter's rules, plots and bad input."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from covbook.experiments import language_model as lm  # noqa: E402
from covbook.markov import CycleRecord  # noqa: E402
from covbook.rules import load_rules, rules_path  # noqa: E402
from covbook.streams import Streams  # noqa: E402
from helpers import ROOT  # noqa: E402

torch.set_num_threads(1)
TRAIN = dict(d_model=8, n_layers=2, n_heads=2, seq_len=8, batch_size=4, steps=3, lr=3e-3)
CONTEXTS = dict(n_text=2, n_prompts=3, n_greedy=2, prompt_len=4, gen_len=8, n_rep=3, n_surrogate=3)
RULES = set(load_rules(rules_path(ROOT, "10_trained_language_model")))


@pytest.fixture(scope="module")
def text() -> lm.Corpus:
    return lm.corpus(max_chars=2000)


def _chapter(text: lm.Corpus, checkpoints=None) -> tuple:
    s = Streams(0, "10")
    training = lm.train_models(text, **TRAIN, streams=s, checkpoints=checkpoints)
    models = training.models
    ctx = lm.contexts(text, **CONTEXTS, streams=s)
    return (training, ctx, lm.order_dependence(models, ctx, seq_len=TRAIN["seq_len"], streams=s),
            lm.greedy_cycles(models, ctx, text.tokenizer),
            lm.temperature_sweep(models, ctx, vocab_size=text.vocab_size, taus=[0.5, 1.0], streams=s),
            lm.rep_excess(models, ctx, ell=4))


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("checkpoints")


@pytest.fixture(scope="module")
def results(text: lm.Corpus, folder) -> tuple:
    return _chapter(text, folder)


def test_corpus_and_baselines(text: lm.Corpus) -> None:
    assert len(text.text) == 2000 and text.tokens.shape == (2000,)
    assert text.val_tokens.shape == (200,) and text.train_tokens.shape == (1800,)
    # add-one baselines: the bigram chain uses the previous character, so it cannot be worse by much
    assert 0 < text.bigram < text.unigram < np.log(text.vocab_size) + 0.5
    assert text.numbers["n_chars"] == "2,000" and text.numbers["vocab_size"] == text.vocab_size
    assert "unigram" in text.describe() and not text.measurements


def test_the_measurements_are_the_chapters_claims(results) -> None:
    ids = [k for r in results for k in r.measurements]
    assert len(ids) == len(set(ids)) and set(ids) == RULES
    training, ctx, order, cycles, sweep, rep = results
    assert list(training.measurements) == ["val_below_unigram_nope", "val_below_unigram_rotary",
                                           "loss_nope_minus_rotary", "loss_matched"]
    assert {"t_eval", "n_win", "gen_len"} <= set(ctx.numbers)
    assert {"order_z", "t_quantile_text", "gap_last_samples", "shuffle_rate_text_se"} <= set(order.numbers)
    assert {"cycle_frac_rotary", "cycling_b", "cycling_p", "n_period1_nope", "n_runs_longer_nope"} <= set(
        cycles.numbers)
    assert {"tau_low", "text_between", "seqrep_one_rotary"} <= set(sweep.numbers)
    assert {"ell", "rep_text", "rep_nope"} <= set(rep.numbers)


def test_shapes(results) -> None:
    training, ctx, order, cycles, sweep, rep = results
    assert list(training.models) == ["nope", "rotary"] and not training.models["nope"].training
    assert training.results["nope"].steps == [1, 2, 3]
    assert ctx.val_windows.shape == (2, 12) and ctx.prompts.shape == (3, 4) and ctx.greedy_prompts.shape == (2, 4)
    n_pos = order.positions.size
    assert order.shuffle["rotary", "samples"].shape == (3, n_pos) and order.gap_nope["text"].shape == (2, n_pos)
    assert min(v.min() for v in order.shuffle.values()) >= lm.TV_FLOOR
    assert [len(r) for r in cycles.records.values()] == [2, 2] and cycles.runs["nope"].shape == (2, 12)
    assert cycles.report().startswith("nope: ")
    assert [len(rows) for rows in sweep.sweep.values()] == [2, 2]
    assert ctx.rep_windows.shape == (3, 12) and rep.text_rows.shape == rep.rep_rows["nope"].shape == (3,)
    assert rep.measurements["rep_excess_nope"]["dof"] == 2 and rep.measurements["rep_excess_nope"]["n_win"] == 3


def test_rep_windows_change_no_other_draw(results, text: lm.Corpus) -> None:
    ctx = results[1]
    plain = lm.contexts(text, **{**CONTEXTS, "n_rep": None}, streams=Streams(0, "10"))
    more = lm.contexts(text, **{**CONTEXTS, "n_rep": 5}, streams=Streams(0, "10"))
    for c in (plain, more):
        assert torch.equal(c.val_windows, ctx.val_windows) and torch.equal(c.greedy_prompts, ctx.greedy_prompts)
    assert plain.rep_windows is plain.val_windows and more.n_rep == 5


def test_cycling_contrast_is_mcnemars_exact_test(results) -> None:
    cycles = results[3]
    m = cycles.measurements["cycling_contrast"]
    nope = [r.final is not None for r in cycles.records["nope"]]
    rotary = [r.final is not None for r in cycles.records["rotary"]]
    assert m["value"] == sum(a and not b for a, b in zip(nope, rotary)) and m["n_prompts"] == len(nope)
    assert m["upper"] == m["n_discordant"] == 2 * m["no_difference"]


@pytest.mark.parametrize(("b", "c", "lower"), [(10, 0, 0.0), (12, 0, 12.0), (22, 0, 20.0), (3, 4, 0.0)])
def test_cycling_contrast_window(b: int, c: int, lower: float) -> None:
    # under no difference b ~ Binomial(b + c, 1/2): 12 of 12 has probability 2^-12 = 2.4e-4 <= LEVEL/2 and
    # P(>= 20 of 22) = 6.1e-5 (19 of 22: 4.3e-4),
    # 10 of 10 (9.8e-4) does not, so with 10 discordant prompts no count rejects and the window starts at 0
    cycled, open_ = CycleRecord(final=(0, 1)), CycleRecord(final=None)
    out = lm.GreedyCycles({}, {}, 4, None)
    lm._measure_cycling_contrast(out, {"nope": [cycled] * b + [open_] * c, "rotary": [open_] * b + [cycled] * c})
    m = out.measurements["cycling_contrast"]
    assert m["lower"] == lower and m["value"] == b and m["no_difference"] == (b + c) / 2 and m["upper"] == b + c
    direction = lm.GreedyCycles({}, {}, 4, None)  # where the profile gives the test no power: the direction only
    lm._measure_cycling_contrast(direction, {"nope": [cycled] * b + [open_] * c,
                                             "rotary": [open_] * b + [cycled] * c}, significance=False)
    assert direction.measurements["cycling_contrast"]["lower"] == 0.0


def test_significance_windows(results) -> None:
    training, order = results[0], results[2]
    m = training.measurements["loss_nope_minus_rotary"]
    k = lm.quantile(m["dof"])
    assert m["dof"] == lm.LOSS_BLOCKS - 1 and m["lower"] == pytest.approx(k * m["se"])
    assert m["test"] == "a significance test"
    s = order.measurements["gap_rate_text"]
    assert s["lower"] == pytest.approx(-0.5 + lm.quantile(s["dof"]) * s["se"])
    again = lm.order_dependence(training.models, results[1], seq_len=TRAIN["seq_len"], streams=Streams(0, "10"),
                                significance=False)
    d = again.measurements["order_contrast"]
    assert d["lower"] == pytest.approx(-lm.quantile(d["dof"]) * d["se"]) and d["test"] == "its direction only"


def test_distinct_cycles() -> None:
    # rotations of one period are one orbit, with one verdict
    got = lm.distinct_cycles([(np.array([4, 7, 2]), True), (np.array([2, 4, 7]), True), (np.array([7, 2, 4]), True),
                              (np.array([5, 6]), False), (np.array([6, 5]), False), (np.array([4, 2, 7]), False)])
    assert got == {(2, 4, 7): True, (5, 6): False, (2, 7, 4): False}
    assert lm.distinct_cycles([]) == {}
    with pytest.raises(ValueError, match="two verdicts"):
        lm.distinct_cycles([(np.array([1, 2]), True), (np.array([2, 1]), False)])


def test_checkpoints_are_kept_and_loaded(results, text: lm.Corpus, folder) -> None:
    training = results[0]
    names = sorted(p.name.split("_")[1] for p in folder.glob("10_*.pt"))
    assert names == ["nope", "nope-evals", "rotary-matched"]
    loaded = lm.train_models(text, **TRAIN, streams=Streams(0, "10"), checkpoints=folder)
    assert loaded.results["nope"].resumed_from == TRAIN["steps"]  # loaded, not retrained
    assert loaded.measurements == training.measurements


def test_deterministic_given_the_streams(results, text: lm.Corpus) -> None:
    again = _chapter(text)
    for a, b in zip(results, again):
        assert a.measurements.keys() == b.measurements.keys()
        for k, m in a.measurements.items():
            assert m["value"] == b.measurements[k]["value"] or np.isnan(m["value"]), k


def test_plots(results) -> None:
    training, _, order, _, sweep, _ = results
    fig, ax = plt.subplots()
    training.plot(ax)
    assert len(ax.lines) == 7  # two models, the matched point, two baselines
    fig, axes = plt.subplots(1, 2)
    order.plot(axes)
    assert len(axes[1].lines) == 6  # text, two surrogates, samples, t^(-1/2), the training length
    fig, axes = plt.subplots(2, 2)
    sweep.plot(axes)
    assert axes[1, 1].get_legend() is not None
    plt.close("all")


@pytest.mark.parametrize(("call", "match"), [
    (lambda t, r: lm.corpus(max_chars=5), "max_chars"),
    (lambda t, r: lm.train_models(t, **{**TRAIN, "steps": 0}, streams=Streams(0, "10")), "steps"),
    (lambda t, r: lm.contexts(t, **{**CONTEXTS, "gen_len": 1000}, streams=Streams(0, "10")), "gen_len"),
    (lambda t, r: lm.order_dependence({"nope": r[0].models["nope"]}, r[1], seq_len=8, streams=Streams(0, "10")),
     "models"),
    (lambda t, r: lm.temperature_sweep(r[0].models, r[1], vocab_size=t.vocab_size, taus=[0.5, 2.0],
                                       streams=Streams(0, "10")), "taus"),
    (lambda t, r: lm.rep_excess(r[0].models, r[1], ell=0), "ell"),
    (lambda t, r: lm.contexts(t, **{**CONTEXTS, "n_rep": 0}, streams=Streams(0, "10")), "n_rep"),
])
def test_bad_input(call, match: str, text: lm.Corpus, results) -> None:
    with pytest.raises(ValueError, match=match):
        call(text, results)


# --------------------------------------------------------------------------------------------
# The controls: stationary surrogates, the rotary model at NoPE's loss, blocks of windows


def test_block_means_are_means_of_contiguous_stretches() -> None:
    rows = np.arange(12.0).reshape(6, 2)  # six windows in text order, two positions
    assert lm.block_means(rows, 3).tolist() == [[1.0, 2.0], [5.0, 6.0], [9.0, 10.0]]
    assert lm.block_means(np.arange(5.0), 16).shape == (5,)  # fewer windows than blocks: one window each
    with pytest.raises(ValueError, match="at least 2"):
        lm.block_means(np.zeros((1, 3)))
    with pytest.raises(ValueError, match="n_blocks"):
        lm.block_means(np.zeros(4), 0)


def test_surrogates_are_the_texts_stationary_laws(text: lm.Corpus) -> None:
    pi, P = text.unigram_law, text.bigram_kernel
    assert pi.shape == (text.vocab_size,) and float(pi.sum()) == pytest.approx(1.0)
    assert P.shape == (text.vocab_size,) * 2 and torch.allclose(P.sum(1), torch.ones(text.vocab_size, dtype=P.dtype))
    sur = lm.surrogate_windows(text, 400, 50, generator=torch.Generator().manual_seed(1))
    assert set(sur) == set(lm.SURROGATES) and all(x.shape == (400, 50) for x in sur.values())
    # iid draws: frequencies of the unigram law at every position; the chain starts stationary
    freq = np.bincount(sur["unigram"].reshape(-1).numpy(), minlength=text.vocab_size) / sur["unigram"].numel()
    assert np.abs(freq - pi.numpy()).sum() / 2 < 0.05
    from covbook.markov import stationary_distribution
    first = np.bincount(sur["bigram"][:, 0].numpy(), minlength=text.vocab_size) / 400
    last = np.bincount(sur["bigram"][:, -1].numpy(), minlength=text.vocab_size) / 400
    stat = stationary_distribution(P).numpy()
    assert np.abs(first - stat).sum() / 2 < 0.25 and np.abs(last - stat).sum() / 2 < 0.25
    with pytest.raises(ValueError, match="n"):
        lm.surrogate_windows(text, 0, 5)


def test_surrogate_claims_and_matched_model(results) -> None:
    training, ctx, order = results[:3]
    assert set(ctx.surrogates) == set(lm.SURROGATES) and ctx.surrogates["bigram"].shape == (3, 12)
    for src in lm.SURROGATES:
        assert order.shuffle["nope", src].shape == (3, order.positions.size) and src in order.gap_nope
        m = order.measurements[f"gap_slower_{src}"]
        assert m["prediction"] == -0.5 and m["dof"] == 2 and m["n_surrogate"] == 3
    c = order.measurements["shuffle_text_equals_bigram"]
    t, b = order.slopes["shuffle", "nope", "text"], order.slopes["shuffle", "nope", "bigram"]
    assert c["value"] == pytest.approx(t[0] - b[0]) and c["se"] == pytest.approx(np.hypot(t[1], b[1]))
    # the rotary run stops at the first evaluation at or below NoPE's final validation loss and keeps
    # the closer of it and the one before
    rot, target = training.results["rotary"], training.results["nope"].final_val_loss
    assert rot.val_loss[-1] <= target or rot.val_steps[-1] == TRAIN["steps"]
    assert all(v > target for v in rot.val_loss[:-1])
    best = min(range(len(rot.val_loss)), key=lambda i: abs(rot.val_loss[i] - target))
    assert training.matched_step == rot.val_steps[best] and training.numbers["val_loss_rotary"] == rot.val_loss[best]
    assert training.measurements["loss_matched"]["prediction"] == 0.0
    assert training.measurements["loss_nope_minus_rotary"]["matched_step"] == training.matched_step
    # fits within and beyond the training length are glued even where one has too few positions (NaN)
    assert np.isnan(order.numbers["gap_slope_within_nope_bigram"])  # t = 8..12, trained on 8: one position
    assert np.isfinite(order.numbers["gap_slope_beyond_nope_bigram"])
    # blocks: the text claims' SE is over min(16, n_win) blocks of neighbouring windows
    assert order.measurements["order_contrast"]["n_blocks"] == ctx.n_win


def test_matched_weights_survive_a_reload(results, text: lm.Corpus, folder) -> None:
    assert len(list(folder.glob("10_rotary-matched_*.pt"))) == len(list(folder.glob("10_nope-evals_*.pt"))) == 1
    loaded = lm.train_models(text, **TRAIN, streams=Streams(0, "10"), checkpoints=folder)
    a, b = results[0].models["rotary"].state_dict(), loaded.models["rotary"].state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a) and loaded.matched_step == results[0].matched_step
    for f in folder.glob("10_*-*.pt"):  # a finished run without its kept weights makes them again
        f.unlink()
    again = lm.train_models(text, **TRAIN, streams=Streams(0, "10"), checkpoints=folder)
    assert again.measurements == results[0].measurements


QUICK_T = np.unique(np.append(np.geomspace(8, 352, 8).astype(int), 128))  # the quick profile's positions


def _rows(rng: np.random.Generator, n: int, rate: float) -> np.ndarray:
    """n distances c·t^rate at the quick profile's positions, with a per-row level and per-point noise
    of the spread the trained model shows; (n, n_pos)."""
    return np.exp(rng.normal(0, 0.5, (n, 1)) + rng.normal(0, 0.3, (n, QUICK_T.size))) * QUICK_T ** rate


def _judge(out: lm.OrderDependence, cid: str):
    from covbook.rules import Measurement, judge

    m = out.measurements[cid]
    rule = load_rules(rules_path(ROOT, "10_trained_language_model"))[cid]
    return judge(rule, Measurement(cid, "10_trained_language_model", m["value"],
                                   **{k: v for k, v in m.items() if k in ("prediction", "se", "dof", "lower")},
                                   extra={k: v for k, v in m.items()
                                          if k in ("n_surrogate", "t_min", "t_max", "n_blocks", "test")}))


@pytest.mark.parametrize(("rate", "passes"), [(-0.5, False), (-0.2, True), (0.0, True)])
def test_slower_claim_fails_for_the_theorem_rate(rate: float, passes: bool) -> None:
    # the stationary-context claim at the quick profile's sizes (32 contexts, its positions): a distance
    # slower than t^(-1/2) passes, and the mutant that falls like t^(-1/2) fails
    rows = _rows(np.random.default_rng(3), 32, rate)
    out = lm.OrderDependence(QUICK_T, 128, {}, {}, {}, {})
    lm.measure_rate(out, "gap_slower_bigram", QUICK_T, rows, seq_len=128, seed=0)
    claim = _judge(out, "gap_slower_bigram")
    assert claim.passed is passes
    assert claim.powered  # the window excludes t^(-1/2) at these sizes


@pytest.mark.parametrize(("text_rate", "passes"), [(-0.2, True), (0.3, False)])
def test_equal_slopes_claim_fails_for_a_difference_of_one_half(text_rate: float, passes: bool) -> None:
    # the text-against-stationary claim at the quick profile's sizes (16 blocks of text windows, 32
    # surrogate contexts): equal slopes pass, and the mutant whose text slope is 1/2 above the
    # stationary context's fails
    rng = np.random.default_rng(4)
    text, sur = _rows(rng, 16, text_rate), _rows(rng, 32, -0.2)
    fits = {k: lm._fit_slopes(QUICK_T, rows, 128, seed=0)["all"] for k, rows in (("text", text), ("sur", sur))}
    out = lm.OrderDependence(QUICK_T, 128, {}, {}, {}, {})
    lm.measure_equal_slopes(out, "shuffle_text_equals_bigram", fits["text"], fits["sur"], n_blocks=16,
                            n_surrogate=32)
    claim = _judge(out, "shuffle_text_equals_bigram")
    assert claim.passed is passes
    assert claim.powered  # the window excludes +1/2 at these sizes
