"""covbook.streams and covbook._seeds: every random draw from (seed, chapter, experiment, replicate).

Checks determinism, that different names give different streams, that sweep seeds s and
s + 1 share no stream (structurally: distinct SeedSequence inputs; and on the draws
themselves, over every stream name the chapters use), and that no notebook derives a seed
by arithmetic.
"""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest
import torch

from covbook import _seeds
from covbook.session import setup, streams
from covbook.streams import Streams
from helpers import ROOT

NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.md"))
_CALL = re.compile(r"streams\.(?:seed_for|generator|torch_generator|sequence)\(\s*f?\"([^\"]+)\"")


EXPERIMENTS = sorted(p for p in (ROOT / "src" / "covbook" / "experiments").glob("*.py")
                     if re.search(r'^CHAPTER = "\d\d"', p.read_text(encoding="utf-8"), flags=re.M))


def _chapter_of(path) -> str:
    """The chapter an experiments module serves (its ``CHAPTER = "NN"``)."""
    return re.search(r'^CHAPTER = "(\d\d)"', path.read_text(encoding="utf-8"), flags=re.M).group(1)


def _names_used() -> dict[str, set[str]]:
    """``{chapter: experiment names}`` as written in the notebooks and their experiments modules
    (f-string fields kept literally)."""
    used = {p.name[:2]: set(_CALL.findall(p.read_text(encoding="utf-8"))) for p in NOTEBOOKS}
    for p in EXPERIMENTS:
        used.setdefault(_chapter_of(p), set()).update(_CALL.findall(p.read_text(encoding="utf-8")))
    return used


def test_same_names_same_stream() -> None:
    a, b = Streams(3, "01"), Streams(3, "01")
    assert a.seed_for("mse", 2) == b.seed_for("mse", 2)
    assert np.array_equal(a.generator("mse", 2).standard_normal(5), b.generator("mse", 2).standard_normal(5))
    assert torch.equal(torch.randn(5, generator=a.torch_generator("mse", 2)),
                       torch.randn(5, generator=b.torch_generator("mse", 2)))
    assert a.torch_generator("x").initial_seed() == a.seed_for("x")


def test_different_names_different_streams() -> None:
    s = Streams(0, "01")
    seeds = {s.seed_for(e, r) for e in ("a", "b", "ab") for r in ((), 0, 1, (0, 1), (1, 0))}
    seeds |= {Streams(0, c).seed_for("a") for c in ("02", "10", "1")}
    assert len(seeds) == 3 * 5 + 3


@pytest.mark.parametrize(("x", "y"), [
    (("01", "ab", ()), ("01a", "b", ())),  # names are length-prefixed, not concatenated
    (("01", "a", (1, 2)), ("01", "a", (12,))),
    (("01", "a", (0,)), ("01", "a", ())),
    (("01", "a", (1, 2)), ("01", "a", (2, 1))),
])
def test_keys_are_injective(x: tuple, y: tuple) -> None:
    kx, ky = Streams(0, x[0]).key(x[1], x[2]), Streams(0, y[0]).key(y[1], y[2])
    assert kx != ky


def test_seeds_s_and_s_plus_1_are_distinct_seedsequence_inputs() -> None:
    # SeedSequence pads the entropy to its pool size before appending the spawn key, so the
    # hashed input of (s, key) is (s, 0, 0, 0, *key): distinct pairs are distinct inputs
    for s in (0, 1, 2**32 - 1, 2**32):
        ss = Streams(s, "01").sequence("mse", 3)
        assert ss.entropy == s and ss.spawn_key == Streams(0, "01").key("mse", 3)
        assembled = ss._get_assembled_entropy() if hasattr(ss, "_get_assembled_entropy") else None
        if assembled is not None:
            assert list(assembled[: ss.pool_size]) == [s % 2**32, s // 2**32, 0, 0]
            assert list(assembled[ss.pool_size:]) == list(ss.spawn_key)


def test_sweep_seeds_share_no_stream() -> None:
    """First draws of every (chapter, experiment, replicate) the chapters name, at seeds 0–5:
    all distinct, and seed s's uncorrelated with seed s + 1's."""
    used = _names_used()
    assert sum(map(len, used.values())) > 50
    combos = [(c, e, r) for c, names in used.items() for e in sorted(names) for r in ((), *range(8))]
    firsts = {s: np.array([Streams(s, c).seed_for(e, r) for c, e, r in combos], dtype=np.uint64) for s in range(6)}
    everything = np.concatenate(list(firsts.values()))
    assert len(np.unique(everything)) == everything.size
    # the old scheme seed + c would give seed s replicate c the numbers of seed s + 1 replicate c − 1
    for s in range(5):
        a = np.array([Streams(s, c).generator(e, r).standard_normal() for c, e, r in combos])
        b = np.array([Streams(s + 1, c).generator(e, r).standard_normal() for c, e, r in combos])
        shifted = np.array([Streams(s + 1, c).generator(e, r - 1).standard_normal()
                            for c, e, r in combos if isinstance(r, int) and r > 0])
        own = np.array([x for x, (_, _, r) in zip(a, combos, strict=True) if isinstance(r, int) and r > 0])
        for other, mine in ((b, a), (shifted, own)):
            rho = np.corrcoef(mine, other)[0, 1]
            assert abs(rho) < 4.5 / np.sqrt(mine.size), rho  # |ρ| under 4.5 null SDs
            assert not np.any(mine == other)


def test_derive_seed_for_library_substreams() -> None:
    assert _seeds.derive_seed(0, 5) == _seeds.derive_seed(0, 5)
    subs = {_seeds.derive_seed(s, k) for s, k in itertools.product(range(20), range(20))}
    assert len(subs) == 400  # seed + k would give only 39 distinct values
    assert all(0 <= x < 2**63 for x in subs)


@pytest.mark.parametrize(("call", "match"), [
    (lambda: Streams(-1, "01"), "seed"),
    (lambda: Streams(0, ""), "name"),
    (lambda: Streams(0, 1), "name"),  # type: ignore[arg-type]
    (lambda: Streams(0, "01").seed_for(""), "name"),
    (lambda: Streams(0, "01").seed_for("a", -1), "replicate"),
    (lambda: Streams(0, "01").seed_for("a", (1, "b")), "replicate"),  # type: ignore[arg-type]
    (lambda: Streams(0, "01").seed_for("a", True), "replicate"),
    (lambda: _seeds.derive_seed(0, -1), "key"),
])
def test_bad_input(call, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()


def test_session_streams_follow_setup() -> None:
    setup("smoke", 4, "cpu", quiet=True, chapter="07")
    assert streams.seed_for("x", 1) == Streams(4, "07").seed_for("x", 1)
    first = torch.rand(1).item()
    setup("smoke", 4, "cpu", quiet=True, chapter="08")
    assert torch.rand(1).item() != first  # the global generators are per chapter too
    streams.current = None
    with pytest.raises(RuntimeError, match="setup"):
        streams.seed_for("x")


# seed arithmetic: seed + k, k + seed, k * seed, seed * k, seed - k; a generator seeded by hand
_ARITHMETIC = re.compile(r"\bseed\s*[-+*/%]|[-+*/%]\s*seed\b|manual_seed\(|default_rng\(|SeedSequence\(|"
                         r"np\.random\.seed|\bseed=(?:seed\b|\d)")


def _strip(line: str) -> str:
    """A code line without its string literals and comment (prose such as "10-seed" is not code)."""
    return re.sub(r"#.*", "", re.sub(r"\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'", '""', line))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_no_seed_arithmetic_in_notebooks(path) -> None:
    text = path.read_text(encoding="utf-8")
    code = "\n".join(re.findall(r"```\{code-cell\}[^\n]*\n(.*?)```", text, flags=re.S))
    bad = [line.strip() for line in code.splitlines() if _ARITHMETIC.search(_strip(line))]
    assert not bad, f"{path.name} derives seeds by hand (use covbook.session.streams): {bad}"
    assert re.search(rf'setup\(profile, seed, device, chapter="{path.name[:2]}"(, parameters=globals\(\))?\)', code), (
        f"{path.name} must call setup(profile, seed, device, chapter=\"{path.name[:2]}\")")


_PASS_ON = re.compile(r"\bseed=seed\b(?!\s*[-+*/%])")


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.stem)
def test_no_seed_arithmetic_in_experiments(path) -> None:
    # a helper may pass on the seed it was given (`seed=seed`); arithmetic and hand-made generators are refused
    lines = path.read_text(encoding="utf-8").splitlines()
    bad = [line.strip() for line in lines if _ARITHMETIC.search(_PASS_ON.sub("", _strip(line)))]
    assert not bad, f"{path.name} derives seeds by hand (draw from the streams it is given): {bad}"


def test_the_lint_catches_arithmetic() -> None:
    for line in ("seed=seed + c,", "x = 1000 * seed + 3", "torch.Generator().manual_seed(seed)",
                 "np.random.default_rng(seed)", "slope_with_se(t, y, seed=seed)", "seed=7,"):
        assert _ARITHMETIC.search(_strip(line)), line
    for line in ('seed=streams.seed_for("mse", replicate=c),', '"the 10-seed smoke run"', "x = 1  # seed + 1"):
        assert not _ARITHMETIC.search(_strip(line)), line
    assert _ARITHMETIC.search(_PASS_ON.sub("", "f(seed=seed + 1)"))
    assert not _ARITHMETIC.search(_PASS_ON.sub("", "f(seed=seed)"))
