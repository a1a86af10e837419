"""Calibration: run the notebooks at many seeds and compare each claim's failure rate with its level.

``covbook sweep --seeds A-B`` runs the chosen notebooks at every seed, each seed in a shadow project
``book/generated/sweep/<profile>/seed-N/`` (its ``notebooks`` links to the real ones), then writes
``book/calibration.json`` (committed, so that a fresh clone's book shows it) and ``book/generated/calibration.md``.
A claim is *flagged* when it fails at :data:`FLAG_FAILURES` seeds or more, when its SD/SE exceeds
:data:`FLAG_SPREAD`, or when some seed did not record it: fix its window, prediction or statistic, never the seed.
"""

from __future__ import annotations

import json
import math
import os
import re
import statistics
import time
from pathlib import Path

from covbook._jsonio import DamagedFile
from covbook.book.cache import verify_outputs
from covbook.book.checks import read_rules
from covbook.book.config import PROFILES, Paths, UsageError, select
from covbook.book.records import git, git_commit
from covbook.book.render import render, write_page
from covbook.claims import LEVEL, Claim, Z, load_claims, write_json_atomic

__all__ = ["parse_seeds", "SEED_MAX", "SEEDS_MAX", "seed_root", "run_sweep", "calibrate",
           "binomial_tail", "write_calibration_page", "CALIBRATION_JSON"]

CALIBRATION_JSON = Path("book") / "calibration.json"
FLAG_FAILURES = 2  # a claim failing at this many seeds or more is flagged (one failure is what chance gives)
FLAG_SPREAD = 2.0  # a claim whose SD/SE across seeds exceeds this is flagged: its SE understates the spread
#: Windows that test a significance (beyond k·SE of what they exclude): flagged by failures only.
SIGNIFICANCE_WINDOWS = ("above", "below")
#: Kinds judged at the book's level (a compatible claim fails by chance as often as an evidence claim).
STATISTICAL = ("evidence", "compatible")
SEED_MAX = 2**63 - 1  # the largest seed (covbook._validate.check_seed's: numpy's SeedSequence, torch.manual_seed)
SEEDS_MAX = 10_000  # the most seeds one sweep runs (each is a shadow tree of outputs)
_PROFILE_ORDER = {name: i for i, name in enumerate(PROFILES)}


class SeedRanges:
    """A set of seeds given as inclusive ranges.

    >>> seeds = SeedRanges((0, 9), (20, 29))
    >>> 5 in seeds, 15 in seeds, seeds.text(), seeds.as_json()
    (True, False, '0–9 and 20–29', [[0, 9], [20, 29]])
    """

    def __init__(self, *ranges: tuple[int, int]) -> None:
        if not ranges or any(len(r) != 2 or r[0] > r[1] for r in ranges):
            raise ValueError(f"ranges must be (first, last) pairs with first <= last, got {ranges!r}")
        self.ranges = tuple((int(a), int(b)) for a, b in ranges)

    def __contains__(self, seed: object) -> bool:
        return isinstance(seed, int) and any(a <= seed <= b for a, b in self.ranges)

    def text(self) -> str:
        """The ranges in words: ``0–999, 1100–1119 and 1200–1219``."""
        parts = [f"{a}–{b}" if a != b else f"{a}" for a, b in self.ranges]
        return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]

    def as_json(self) -> list[list[int]]:
        """The ranges as ``[[first, last], ...]``."""
        return [[a, b] for a, b in self.ranges]


#: Development seeds: those tolerances were checked against while the rules were written (below 1000) and
#: those of calibrations after which their chapter's rules changed.  A sweep at any of them is in sample.
DEVELOPMENT_SEEDS = SeedRanges((0, 999), (1100, 1119), (1200, 1219), (2000, 2002), (4000, 4005), (6100, 6115),
                               (7000, 7019), (7100, 7105), (8100, 8105), (9100, 9105), (9110, 9145),
                               (10100, 10105), (31337, 31337))


def parse_seeds(text: str) -> list[int]:
    """Seeds from ``"A-B"`` (inclusive) or ``"A"``: integers from 0 to :data:`SEED_MAX`, at most
    :data:`SEEDS_MAX` of them; a :class:`UsageError` otherwise.

    >>> parse_seeds("0-3")
    [0, 1, 2, 3]
    """
    m = re.fullmatch(r"\s*(\d{1,19})\s*(?:-\s*(\d{1,19})\s*)?", text, re.ASCII)  # 19 digits hold SEED_MAX
    lo, hi = (int(m[1]), int(m[2] or m[1])) if m else (1, 0)
    if hi < lo or hi > SEED_MAX:
        raise UsageError(f"--seeds must be A-B or A with integers 0 <= A <= B <= 2**63 - 1, got {text!r}")
    if hi - lo + 1 > SEEDS_MAX:
        raise UsageError(f"--seeds {text} names {hi - lo + 1} seeds; a sweep runs at most {SEEDS_MAX}")
    return list(range(lo, hi + 1))


def binomial_tail(k: int, n: int, p: float = LEVEL) -> float:
    """``P(X >= k)`` for ``X ~ Binomial(n, p)``, exact to rounding (scipy's regularized incomplete beta)."""
    if not (0 <= k and 0 <= n) or not 0.0 <= p <= 1.0:
        raise ValueError(f"need 0 <= k, 0 <= n and 0 <= p <= 1, got k={k}, n={n}, p={p}")
    from scipy.stats import binom

    return 1.0 if k == 0 else float(binom.sf(k - 1, n, p))


def seed_root(paths: Paths, profile: str, seed: int) -> Path:
    """The shadow project one seed of a sweep runs in (its outputs: ``<root>/book/generated``)."""
    return paths.generated / "sweep" / profile / f"seed-{seed}"


def _shadow(paths: Paths, root: Path) -> Paths:
    root.mkdir(parents=True, exist_ok=True)
    link = root / "notebooks"
    if not link.is_symlink():
        if link.exists():
            raise UsageError(f"{link} exists and is not a link to {paths.notebooks}; remove it")
        link.symlink_to(os.path.relpath(paths.notebooks.resolve(), root.resolve()), target_is_directory=True)
    return Paths(root)


def run_sweep(paths: Paths, seeds: list[int], names: list[str] | None = None, *, profile: str = "smoke",
              device: str = "auto", jobs: int = 1, force: bool = False, progress: bool = True, log=print,
              cluster: object | None = None) -> dict:
    """Run ``names`` (default all) at every seed, every (notebook, seed) job at once on ``jobs`` local processes
    or the ``cluster`` (:class:`covbook.book.distributed.Cluster`), then calibrate and write the JSON and the page."""
    from covbook.book.runner import LocalPool, run_trees  # the execution machinery, only when a sweep runs

    chosen = list(select(paths, names))
    _calibrations(paths)  # a damaged calibration file (which the sweep merges into): a usage error before any kernel
    engine = cluster if cluster is not None else LocalPool(jobs, f"{jobs} local job(s)")
    trees = [(_shadow(paths, seed_root(paths, profile, seed)), seed) for seed in seeds]
    start = time.perf_counter()
    by_seed = run_trees(engine, trees, chosen, profile=profile, device=device, force=force, progress=progress)
    log(f"covbook sweep: {len(seeds)} seed(s) on {engine.label} ({time.perf_counter() - start:.1f} s)")
    failed: dict[str, list[int]] = {}
    for seed, results in zip(seeds, by_seed, strict=True):
        bad = [r.name for r in results if r.status == "failed"]
        for name in bad:
            failed.setdefault(name, []).append(seed)
        log(f"covbook sweep: seed {seed}: {len(results) - len(bad)} ok, {len(bad)} failed")
    return _write(paths, calibrate(paths, profile, seeds, chosen), failed)


def _write(paths: Paths, data: dict, failed: dict[str, list[int]]) -> dict:
    """Merge ``data`` (one profile's entries) into ``book/calibration.json``, then write the page."""
    for name, entry in data.items():
        entry["failed_seeds"] = failed.get(name, [])
    profiles = _calibrations(paths)
    profile = next(iter(data.values()))["profile"] if data else "smoke"
    profiles[profile] = dict(sorted({**profiles.get(profile, {}), **data}.items()))
    write_json_atomic(paths.root / CALIBRATION_JSON,
                      {"level": LEVEL, "flag_failures": FLAG_FAILURES, "flag_spread": FLAG_SPREAD,
                       "development_seeds": DEVELOPMENT_SEEDS.as_json(),
                       "profiles": dict(sorted(profiles.items(), key=lambda kv: _PROFILE_ORDER.get(kv[0], 9)))})
    write_calibration_page(paths)
    return data


def _centre(c: Claim) -> float | None:
    """The number a claim's window is about: its expected value, else its recorded ``prediction``."""
    if c.expected is not None:
        return c.expected
    p = c.extra.get("prediction")
    return float(p) if isinstance(p, (int, float)) and not isinstance(p, bool) else None


def _finite(x: object) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def _claim_row(cid: str, per_seed: dict[int, dict[str, Claim]], seeds: list[int]) -> dict:
    """One claim's row of the calibration: passes, failing and missing seeds, mean, SD, SD/SE, tail, flag."""
    got = [cl[cid] for cl in per_seed.values() if cid in cl]
    first = got[0] if got else None
    n, fails = len(got), sum(not c.passed for c in got)
    vals = [c.measured for c in got if math.isfinite(c.measured)]
    # the SE a tolerance rests on: recorded by the SE windows (one-sided and Student-t too); else tolerance / Z
    ses = [float(c.extra["se"]) for c in got if _finite(c.extra.get("se"))]
    tols = [c.tolerance for c in got if c.tolerance is not None and math.isfinite(c.tolerance)]
    sd = statistics.stdev(vals) if len(vals) > 1 else None
    se = statistics.fmean(ses) if ses else (statistics.fmean(tols) / Z if tols else None)
    # a prediction that moves with the seed is compared through (measured − predicted)/SE, of SD 1 if calibrated
    zs = [(c.measured - centre) / float(c.extra["se"]) for c in got
          if (centre := _centre(c)) is not None and math.isfinite(c.measured) and math.isfinite(centre)
          and _finite(c.extra.get("se")) and c.extra["se"] > 0]
    spread = statistics.stdev(zs) if len(zs) == n > 1 else (sd / se if sd is not None and se else None)
    if first and first.window in SIGNIFICANCE_WINDOWS:
        spread = None  # no level-α window for a spread to widen: a varying effect shows as failures
    kind = (first.rule_kind or first.kind) if first else "unknown"
    missing = [s for s in seeds if cid not in per_seed.get(s, {})]
    per_run = bool(first and first.per_run)
    return {"id": cid, "kind": kind,
            # power varies with each seed's SE: an evidence rule counts the seeds whose window had it
            "powered": sum(c.kind == "evidence" for c in got) if kind == "evidence" else None,
            "expected": first.expected_text() if first else "", "n": n, "passed": n - fails,
            "mean": statistics.fmean(vals) if vals else None, "sd": sd, "sd_over_se": spread,
            "tail_p": binomial_tail(fails, n) if n else 1.0,
            "fail_seeds": [s for s, cl in per_seed.items() if cid in cl and not cl[cid].passed],
            "missing_seeds": missing, "per_run": per_run,
            # a per-run claim's spread is its estimand's (one model per seed): reported, not flagged
            "flagged": _flagged(fails, None if per_run else spread, n, missing)}


def calibrate(paths: Paths, profile: str, seeds: list[int], names: list[str]) -> dict[str, dict]:
    """Per notebook, its entry of ``book/calibration.json``: the sweep and one row per claim.  A seed's outputs that
    are not those its run record was committed with are a :class:`DamagedFile`, never judged as measured."""
    commit = git_commit(paths.root)
    rules = git(paths.root, "log", "-1", "--format=%h", "--", "notebooks/rules") or "unknown"  # the rules' commit
    out: dict[str, dict] = {}
    for name in names:
        try:
            ruled = sorted(read_rules(paths, name))  # a claim no seed recorded is missing, not absent
        except UsageError:
            ruled = []
        per_seed: dict[int, dict[str, Claim]] = {}
        for seed in seeds:
            sp = Paths(seed_root(paths, profile, seed))
            if (sp.failed / f"{name}.json").is_file():  # its last run failed: not recorded at this seed
                continue
            try:
                rec = verify_outputs(sp, name)
            except DamagedFile as err:
                raise DamagedFile(err.path, f"{err.reason}; run the sweep again, which re-makes it: covbook sweep "
                                            f"--seeds {seeds[0]}-{seeds[-1]} --profile {profile} "
                                            f"{name.split('_', 1)[0]}") from None
            if rec is not None and rec.ok and (sp.claims / f"{name}.json").is_file():
                per_seed[seed] = {c.id: c for c in load_claims(sp.claims / f"{name}.json", paths.root)}
        ids = dict.fromkeys([i for cl in per_seed.values() for i in cl] + ruled)
        out[name] = {"profile": profile, "seeds": list(seeds), "commit": commit, "rules_commit": rules,
                     "out_of_sample": not any(s in DEVELOPMENT_SEEDS for s in seeds),
                     "date": time.strftime("%Y-%m-%d"), "claims": [_claim_row(cid, per_seed, seeds) for cid in ids]}
    return out


def _calibrations(paths: Paths) -> dict[str, dict]:
    """``{profile: {notebook: entry}}`` of ``book/calibration.json``; a :class:`UsageError` when it is damaged."""
    f = paths.root / CALIBRATION_JSON
    if not f.is_file():
        return {}
    try:
        data = json.loads(f.read_text(encoding="utf-8"))
        tables = data.get("profiles", {}) if isinstance(data, dict) else None
        if not (isinstance(tables, dict) and all(isinstance(t, dict) and all(isinstance(e, dict) for e in t.values())
                                                 for t in tables.values())):
            raise ValueError('expected {"profiles": {PROFILE: {NOTEBOOK: {...}}}}')
    except (UnicodeDecodeError, ValueError) as err:  # json.JSONDecodeError is a ValueError
        raise UsageError(f"{CALIBRATION_JSON}: damaged ({err}); it holds every chapter's committed calibration: "
                         f"restore it from git (`git checkout -- {CALIBRATION_JSON}`), do not delete it") from None
    return tables


def _flagged(fails: int, spread: float | None, n: int, missing: list[int]) -> bool:
    """The flag rule: failures at ``FLAG_FAILURES`` seeds or more, SD/SE above ``FLAG_SPREAD``, or not recorded."""
    too_wide = spread is not None and n >= 3 and spread > FLAG_SPREAD
    return fails >= FLAG_FAILURES or too_wide or bool(missing)


def _flag_chance(n: int) -> float:
    """Chance that a correct claim judged at ``n`` seeds fails at ``FLAG_FAILURES`` of them or more."""
    return binomial_tail(FLAG_FAILURES, n, LEVEL)


def detectable_rate(n: int, power: float = 0.8) -> float:
    """The failure rate ``r`` the flag rule catches with probability ``power`` at ``n`` seeds, the root of
    ``P(Binomial(n, r) >= FLAG_FAILURES) = power``; 1 when ``n`` seeds cannot show that many failures."""
    from scipy.optimize import brentq

    if n < FLAG_FAILURES:
        return 1.0
    return float(brentq(lambda r: binomial_tail(FLAG_FAILURES, n, r) - power, 0.0, 1.0, xtol=1e-15))


def _chance_of_at_least(data: dict, k: int) -> float:
    """P(at least ``k`` statistical claims flagged by failures) in a correct book: the Poisson-binomial tail of
    independent Bernoulli(:func:`_flag_chance`) flags (an approximation: a notebook's claims share a run)."""
    dist = [1.0]  # dist[j] = P(j flags among the claims so far)
    for e in data.values():
        for r in e["claims"]:
            if r["kind"] in STATISTICAL:
                p = _flag_chance(r["n"])
                dist = [a * (1 - p) + b * p for a, b in zip([*dist, 0.0], [0.0, *dist], strict=True)]
    return float(min(1.0, max(0.0, sum(dist[k:]))))


def spread_flag_chance(n: int) -> float:
    """P(SD/SE > FLAG_SPREAD) for a calibrated claim with normal errors over ``n`` seeds: P(χ²_{n−1} > s²(n−1)).

    >>> round(spread_flag_chance(3), 4), spread_flag_chance(20) < 1e-7
    (0.0183, True)
    """
    from scipy.stats import chi2

    return float(chi2.sf(FLAG_SPREAD**2 * (n - 1), n - 1)) if n >= 3 else 0.0


def _summary(profile: str, entries: dict) -> dict:
    """The numbers of one profile's section of the calibration page (its sentences: the template's)."""
    rows = [r for e in entries.values() for r in e["claims"]]
    stat = [r for r in rows if r["kind"] in STATISTICAL]
    n_eval, n_fail = sum(r["n"] for r in stat), sum(r["n"] - r["passed"] for r in stat)
    groups: dict[tuple[int, ...], list[str]] = {}  # the notebooks of each set of seeds
    for name, e in sorted(entries.items()):
        groups.setdefault(tuple(e["seeds"]), []).append(name[:2])
    n_seeds = min(len(k) for k in groups)  # the flag rule's power at the fewest seeds of any notebook
    k = sum(r["flagged"] for r in stat)
    # how many statistical claims a calibrated book flags by spread alone, at each notebook's number of seeds
    spread_flags = sum(spread_flag_chance(len(e["seeds"])) for e in entries.values() for r in e["claims"]
                       if r["kind"] in STATISTICAL and not r.get("per_run") and r.get("sd_over_se") is not None)
    return {"name": profile, "entries": sorted(entries.items()), "groups": list(groups.items()),
            "out_of_sample": all(e.get("out_of_sample") for e in entries.values()),
            "commits": sorted({e.get("rules_commit", "unknown") for e in entries.values()}),
            "n_claims": len(rows), "n_statistical": len(stat), "n_notebooks": len(entries),
            "n_eval": n_eval, "n_fail": n_fail, "expected": n_eval * LEVEL,
            "p_fail": binomial_tail(n_fail, n_eval, LEVEL), "flagged": [r["id"] for r in rows if r["flagged"]], "k": k,
            "none": 1.0 - _chance_of_at_least(entries, 1), "p_k": _chance_of_at_least(entries, k),
            "spread_flags": spread_flags, "n_seeds": n_seeds, "flag_chance": _flag_chance(n_seeds),
            "detect_half": 100 * detectable_rate(n_seeds, 0.5), "detect_80": 100 * detectable_rate(n_seeds, 0.8)}


def write_calibration_page(paths: Paths) -> Path:
    """Write ``book/generated/calibration.md`` from ``book/calibration.json`` (or say that none was run)."""
    profiles = sorted(_calibrations(paths).items(), key=lambda kv: _PROFILE_ORDER.get(kv[0], 9))
    return write_page(paths.generated / "calibration.md",
                      render("calibration.md.j2", level=LEVEL, flag_failures=FLAG_FAILURES, flag_spread=FLAG_SPREAD,
                             development_seeds=DEVELOPMENT_SEEDS.text(),
                             profiles=[_summary(p, e) for p, e in profiles if e]))
