"""Calibration: run the notebooks at many seeds and compare each claim's failure rate with its level.

CI runs every notebook at one seed.  A claim whose tolerance is right fails a
correct run with probability at most the book's per-claim level
(:data:`covbook.claims.LEVEL`); a claim with a pre-asymptotic bias or a
too-narrow window fails far more often, which one seed cannot show.
``covbook sweep --seeds A-B`` runs the chosen notebooks at every seed of the
range, each seed into its own output tree
``book/generated/sweep/<profile>/seed-N/`` (a shadow project whose
``notebooks`` links to the real ones, so the runner and its cache are reused
and the book's own outputs are never touched), and writes

- ``book/calibration.json``: per notebook, the profile, seeds and commit of its
  last sweep and, per claim, its pass count and the seeds where it failed, the
  mean and standard deviation of its measured values (and that SD over the
  standard error its tolerance implies) and the binomial tail probability of
  its failures;
  commit it, so the book built from a fresh clone shows the calibration;
- ``book/generated/calibration.md``: the book's calibration page (also written
  by ``covbook build``; it says so when no sweep has been run).

A claim is *flagged* when its number of failures is improbable under the
level, ``P(X ≥ failures) < 0.01`` for ``X ~ Binomial(n_seeds, LEVEL)``, or when
it was not recorded at every seed.  Fix a flagged claim (its window, its
prediction, its tolerance basis), never the seed.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from pathlib import Path

from covbook._jsonio import DamagedFile
from covbook.book.cache import last_failure, verify_outputs
from covbook.book.checks import read_rules
from covbook.book.config import PROFILES, Paths, UsageError, select
from covbook.book.provenance import git_commit
from covbook.book.records import run_ok
from covbook.book.render import seed_text
from covbook.claims import LEVEL, Claim, Z, load_claims, write_json_atomic

__all__ = ["parse_seeds", "SEED_MAX", "SEEDS_MAX", "seed_root", "run_sweep", "rejudge_sweep", "calibrate",
           "binomial_tail", "write_calibration_page", "CALIBRATION_JSON", "FLAG_P"]

CALIBRATION_JSON = Path("book") / "calibration.json"
FLAG_P = 0.01
"""Kept for the tail probability column: ``P(X ≥ failures)`` below it marks an improbable count."""
FLAG_FAILURES = 2
"""A claim that fails at this many seeds or more is flagged (one failure in a sweep is what chance gives)."""
FLAG_SPREAD = 2.0
"""A claim whose SD/SE across seeds exceeds this is flagged: its standard error understates the spread."""
#: Windows that test significance (the value lies beyond k·SE of the prediction it must exclude), not
#: agreement: their spread across seeds is the effect's, and they are flagged by failures only.
SIGNIFICANCE_WINDOWS = ("above", "below")
class SeedRanges:
    """A set of seeds given as inclusive ranges, e.g. ``SeedRanges((0, 999), (1100, 1119))``.

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


DEVELOPMENT_SEEDS = SeedRanges((0, 999), (1100, 1119), (1200, 1219), (2000, 2002), (4000, 4005), (7000, 7019),
                               (7100, 7105), (31337, 31337))
"""Seeds declared as development seeds.  Every seed tolerances were checked against while the rules were
written lies below 1000 (the earlier sweeps used 0-9; CI and the chapters' defaults use 0; ad hoc checks used
small seeds).  The others are the seeds of earlier out-of-sample calibrations and checks after which the rules
of their chapter changed (smoke 1100-1119, 1200-1219 and 7000-7019; quick 2000-2002, 4000-4005, 7100-7105 and
31337): from then on they count as development seeds too.  A calibration at these seeds is in sample; the
book's out-of-sample calibration uses seeds never run before the rules were frozen."""
_PROFILE_ORDER = {name: i for i, name in enumerate(PROFILES)}
#: kinds judged at the book's level (a compatible claim fails by chance as often as an evidence claim)
STATISTICAL = ("evidence", "compatible")


SEED_MAX = 2**63 - 1
"""The largest seed (``covbook._validate.check_seed``'s: what numpy's SeedSequence and ``torch.manual_seed`` take)."""
SEEDS_MAX = 10_000
"""The most seeds one sweep runs (each is a shadow tree of outputs; a calibration needs tens to hundreds)."""


def parse_seeds(text: str) -> list[int]:
    """Seeds from ``"A-B"`` (inclusive) or ``"A"``: integers from 0 to :data:`SEED_MAX`, at most
    :data:`SEEDS_MAX` of them; a :class:`UsageError` otherwise.

    Examples
    --------
    >>> parse_seeds("0-3")
    [0, 1, 2, 3]
    """
    expected = f"--seeds must be A-B or A with integers 0 <= A <= B <= 2**63 - 1, got {text!r}"
    parts = text.strip().split("-")
    if len(parts) > 2 or not all(p.strip().isascii() and p.strip().isdigit() and len(p.strip()) <= 19 for p in parts):
        raise UsageError(expected)  # 19 digits hold SEED_MAX (and int() refuses thousands of digits)
    lo, hi = int(parts[0]), int(parts[-1])
    if hi < lo or hi > SEED_MAX:
        raise UsageError(expected)
    if hi - lo + 1 > SEEDS_MAX:
        raise UsageError(f"--seeds {text} names {hi - lo + 1} seeds; a sweep runs at most {SEEDS_MAX}")
    return list(range(lo, hi + 1))


def binomial_tail(k: int, n: int, p: float = LEVEL) -> float:
    """``P(X >= k)`` for ``X ~ Binomial(n, p)`` (exact sum).

    Examples
    --------
    >>> binomial_tail(0, 10)
    1.0
    >>> round(binomial_tail(1, 10, 0.5), 6)
    0.999023
    """
    if not (0 <= k and 0 <= n) or not 0.0 <= p <= 1.0:
        raise ValueError(f"need 0 <= k, 0 <= n and 0 <= p <= 1, got k={k}, n={n}, p={p}")
    from scipy.stats import binom  # the regularized incomplete beta: exact to rounding at any n, tiny tails too

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


def run_sweep(
    paths: Paths,
    seeds: list[int],
    names: list[str] | None = None,
    *,
    profile: str = "smoke",
    device: str = "auto",
    jobs: int = 1,
    force: bool = False,
    progress: bool = True,
    log=print,
    cluster: object | None = None,
) -> dict:
    """Run ``names`` (default all) at every seed, then calibrate and write the JSON and the page.

    With ``cluster`` (a :class:`covbook.book.distributed.Cluster`) every (notebook, seed) job is
    submitted at once, so that no worker idles while a seed's slowest notebook finishes.
    """
    from covbook.book.runner import run_notebooks  # the execution machinery, only when a sweep runs

    if not seeds:
        raise UsageError("--seeds names no seed")
    chosen = list(select(paths, names))
    failed: dict[str, list[int]] = {}
    if cluster is not None:
        from covbook.book.distributed import run_trees

        start = time.perf_counter()
        trees = [(_shadow(paths, seed_root(paths, profile, seed)), seed) for seed in seeds]
        by_seed = dict(zip(seeds, run_trees(cluster, trees, chosen, profile=profile, device=device, force=force,
                                            progress=progress)))
        log(f"covbook sweep: {len(seeds)} seed(s) on {cluster.spec} ({time.perf_counter() - start:.1f} s)")
    for seed in seeds:
        start = time.perf_counter()
        if cluster is None:
            sp = _shadow(paths, seed_root(paths, profile, seed))
            results = run_notebooks(sp, chosen, profile=profile, device=device, seed=seed, jobs=jobs, force=force,
                                    progress=progress)
        else:
            results = by_seed[seed]
        bad = [r.name for r in results if r.status == "failed"]
        for name in bad:
            failed.setdefault(name, []).append(seed)
        log(f"covbook sweep: seed {seed}: {len(results) - len(bad)} ok, {len(bad)} failed"
            + ("" if cluster else f" ({time.perf_counter() - start:.1f} s)"))
    return _write(paths, calibrate(paths, profile, seeds, chosen), failed)


def rejudge_sweep(paths: Paths, seeds: list[int], names: list[str] | None = None, *, profile: str = "smoke") -> dict:
    """Judge a stored sweep's measurements against the current rules (nothing runs); write the JSON and the page.

    Each seed's measurements stay where the sweep wrote them
    (``book/generated/sweep/<profile>/seed-N``); a seed whose notebook did not
    run counts as failed, as in :func:`run_sweep`.
    """
    if not seeds:
        raise UsageError("--seeds names no seed")
    chosen = list(select(paths, names))
    failed: dict[str, list[int]] = {}
    never: dict[str, list[int]] = {}
    for seed in seeds:
        sp = Paths(seed_root(paths, profile, seed))
        for name in chosen:
            if not (sp.runs / f"{name}.json").is_file() and last_failure(sp, name) is None:
                never.setdefault(name, []).append(seed)
            elif not run_ok(sp.runs / f"{name}.json") or last_failure(sp, name) is not None:
                failed.setdefault(name, []).append(seed)
    again = f"covbook sweep --seeds {seeds[0]}-{seeds[-1]} --profile {profile}"
    if all(len(never.get(n, [])) == len(seeds) for n in chosen):
        raise UsageError(f"no stored sweep at profile {profile} for seeds {seeds[0]}–{seeds[-1]}: run `{again}` "
                         "first")
    if never:
        raise UsageError("; ".join(f"{n} never ran at seed(s) {seed_text(s)}" for n, s in never.items())
                         + f" (profile {profile}): rejudge only the stored seeds, or run them: `{again} "
                         + " ".join(n.split("_", 1)[0] for n in never) + "`")
    data = calibrate(paths, profile, seeds, chosen)
    before = _profiles(_read_json(paths)).get(profile, {})
    for name, entry in data.items():  # the measurements are the stored sweep's: keep the commit that made them
        old = before.get(name, {})
        if old.get("seeds") == entry["seeds"] and old.get("commit"):
            entry["commit"] = old["commit"]
    return _write(paths, data, failed)


def _write(paths: Paths, data: dict, failed: dict[str, list[int]]) -> dict:
    for name, entry in data.items():
        entry["failed_seeds"] = failed.get(name, [])
    profiles = _profiles(_read_json(paths))
    profile = next(iter(data.values()))["profile"] if data else "smoke"
    profiles[profile] = dict(sorted({**profiles.get(profile, {}), **data}.items()))
    write_json_atomic(paths.root / CALIBRATION_JSON,
                      {"level": LEVEL, "flag_failures": FLAG_FAILURES, "flag_spread": FLAG_SPREAD,
                       "development_seeds": DEVELOPMENT_SEEDS.as_json(),
                       "profiles": dict(sorted(profiles.items(), key=lambda kv: _PROFILE_ORDER.get(kv[0], 9)))})
    write_calibration_page(paths)
    return data


def _centre(c: Claim) -> float | None:
    """The number a claim's window is about: its expected value, or the prediction of a window (such as
    ``chi2_mean``) that is not centred on it."""
    if c.expected is not None:
        return c.expected
    p = c.extra.get("prediction")
    return float(p) if isinstance(p, (int, float)) and not isinstance(p, bool) else None


def _verified(paths: Paths, profile: str, seeds: list[int], seed: int, name: str) -> None:
    """Refuse (:class:`DamagedFile`) a seed's outputs that are not what its run record was committed with (a
    claims file edited by hand is never judged as measured)."""
    try:
        verify_outputs(Paths(seed_root(paths, profile, seed)), name)
    except DamagedFile as err:
        raise DamagedFile(err.path, f"{err.reason}; run the sweep again, which re-makes it: covbook sweep --seeds "
                                    f"{seeds[0]}-{seeds[-1]} --profile {profile} {name.split('_', 1)[0]}") from None


def calibrate(paths: Paths, profile: str, seeds: list[int], names: list[str]) -> dict[str, dict]:
    """Per notebook and claim: pass rate, mean and SD of measured values, tail probability, flag."""

    manifest = {}
    for name in names:
        try:
            manifest[name] = sorted(read_rules(paths, name))
        except UsageError:
            manifest[name] = []
    commit = git_commit(paths.root)
    out: dict[str, dict] = {}
    for name in names:
        per_seed: dict[int, dict[str, dict]] = {}
        for seed in seeds:
            f = Paths(seed_root(paths, profile, seed)).claims / f"{name}.json"
            rec = Paths(seed_root(paths, profile, seed)).runs / f"{name}.json"
            ok = (run_ok(rec) and f.is_file()
                  and last_failure(Paths(seed_root(paths, profile, seed)), name) is None)
            if ok:
                _verified(paths, profile, seeds, seed, name)
                per_seed[seed] = {c.id: c for c in load_claims(f, paths.root)}
        ids: list[str] = []
        for cl in per_seed.values():
            ids += [i for i in cl if i not in ids]
        ids += [i for i in manifest.get(name, []) if i not in ids]
        rows = []
        for cid in ids:
            got = [cl[cid] for cl in per_seed.values() if cid in cl]
            fail_seeds = [s for s, cl in per_seed.items() if cid in cl and not cl[cid].passed]
            missing = [s for s in seeds if s not in per_seed or cid not in per_seed[s]]
            n, fails = len(got), sum(not c.passed for c in got)
            vals = [c.measured for c in got if math.isfinite(c.measured)]
            tail = binomial_tail(fails, n) if n else 1.0
            # the standard error a claim's tolerance rests on: recorded by within_se / at_least_se /
            # at_most_se (also one-sided, and with a Student-t quantile); else tolerance / Z
            ses = [float(c.extra["se"]) for c in got if isinstance(c.extra.get("se"), (int, float))
                   and math.isfinite(c.extra["se"])]
            tols = [c.tolerance for c in got if c.tolerance is not None and math.isfinite(c.tolerance)]
            sd = statistics.stdev(vals) if len(vals) > 1 else None
            se = statistics.fmean(ses) if ses else (statistics.fmean(tols) / Z if tols else None)
            # a prediction that moves with the seed (a model drawn per seed) is compared through the
            # standardized residuals (measured − predicted)/SE, whose SD is 1 for a calibrated claim
            zs = [(c.measured - centre) / float(c.extra["se"]) for c in got
                  if (centre := _centre(c)) is not None and math.isfinite(c.measured) and math.isfinite(centre)
                  and isinstance(c.extra.get("se"), (int, float)) and math.isfinite(c.extra["se"])
                  and c.extra["se"] > 0]
            spread = (statistics.stdev(zs) if len(zs) == n > 1 else
                      (sd / se if sd is not None and se else None))
            per_run = bool(got and got[0].per_run)
            if got and got[0].window in SIGNIFICANCE_WINDOWS:
                # a significance claim (|effect| beyond k·SE) has no level-α window for a spread to widen:
                # an effect that varies across seeds shows as failures (a loss of power), counted above
                spread = None
            rows.append({
                "id": cid,
                # the rule's kind; whether a seed's window had the power to exclude the alternatives
                # varies with that seed's SE, so the evidence rules count the seeds with power
                "kind": (got[0].rule_kind or got[0].kind) if got else "unknown",
                "powered": (sum(c.kind == "evidence" for c in got)
                            if got and (got[0].rule_kind or got[0].kind) == "evidence" else None),
                "expected": got[0].expected_text() if got else "",
                "n": n,
                "passed": n - fails,
                "mean": statistics.fmean(vals) if vals else None,
                "sd": sd,
                "sd_over_se": spread,
                "tail_p": tail,
                "fail_seeds": fail_seeds,
                "missing_seeds": missing,
                "per_run": per_run,
                # a per-run claim's spread across seeds is its estimand's (one model per seed), not an error
                # of its SE: reported, not flagged
                "flagged": _flagged(fails, None if per_run else spread, n, missing),
            })
        out[name] = {"profile": profile, "seeds": list(seeds), "commit": commit,
                     "rules_commit": rules_commit(paths.root),
                     "out_of_sample": not any(s in DEVELOPMENT_SEEDS for s in seeds),
                     "date": time.strftime("%Y-%m-%d"), "claims": rows}
    return out


def _read_json(paths: Paths) -> dict:
    f = paths.root / CALIBRATION_JSON
    if not f.is_file():
        return {}
    try:
        data = json.loads(f.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UsageError(f"{CALIBRATION_JSON}: damaged ({err}); it holds every chapter's committed calibration: "
                         f"restore it from git (`git checkout -- {CALIBRATION_JSON}`), do not delete it") from None
    return data if isinstance(data, dict) else {}


def _profiles(data: dict) -> dict[str, dict]:
    """``{profile: {notebook: entry}}`` from a calibration file (an older file keyed by notebook only is read
    by each entry's own profile)."""
    if isinstance(data.get("profiles"), dict):
        return {p: dict(e) for p, e in data["profiles"].items() if isinstance(e, dict)}
    out: dict[str, dict] = {}
    old = data.get("notebooks")
    for name, entry in (old.items() if isinstance(old, dict) else ()):
        if isinstance(entry, dict):
            out.setdefault(entry.get("profile", "smoke"), {})[name] = entry
    return out


def rules_commit(root: Path) -> str:
    """The last commit that changed ``notebooks/rules`` (the rules a calibration judges), or ``"unknown"``."""
    import subprocess

    try:
        out = subprocess.run(["git", "-C", str(root), "log", "-1", "--format=%h", "--", "notebooks/rules"],
                             capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() or "unknown"


def _flagged(fails: int, spread: float | None, n: int, missing: list[int]) -> bool:
    """The flag rule: failures at ``FLAG_FAILURES`` seeds or more, SD/SE above ``FLAG_SPREAD``, or not recorded."""
    too_wide = spread is not None and n >= 3 and spread > FLAG_SPREAD
    return fails >= FLAG_FAILURES or too_wide or bool(missing)


def _flag_chance(n: int) -> float:
    """Chance that a correct claim judged at ``n`` seeds fails at ``FLAG_FAILURES`` of them or more."""
    return binomial_tail(FLAG_FAILURES, n, LEVEL)


def detectable_rate(n: int, power: float = 0.8) -> float:
    """The failure rate a claim needs for the flag rule to catch it with probability ``power`` at ``n`` seeds.

    Solves ``P(Binomial(n, r) >= FLAG_FAILURES) = power`` for ``r`` by bisection.

    Examples
    --------
    >>> round(detectable_rate(20), 3)
    0.142
    """
    if n < FLAG_FAILURES:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if binomial_tail(FLAG_FAILURES, n, mid) < power else (lo, mid)
    return hi


def failing_evaluations(entries: dict) -> tuple[int, int]:
    """``(evaluations, failures)`` of the statistical claims (evidence and compatible) over a profile's sweep."""
    rows = [r for e in entries.values() for r in e["claims"] if r["kind"] in STATISTICAL]
    return sum(r["n"] for r in rows), sum(r["n"] - r["passed"] for r in rows)


def _chance_of_at_least(data: dict, k: int) -> float:
    """P(at least ``k`` statistical claims flagged by failures) in a correct book, treating the claims' flags as
    independent Bernoulli(:func:`_flag_chance`) draws, so that their count is Poisson-binomial (computed
    exactly).  Claims of one notebook share each seed's run, so this is an approximation."""
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


def _spread_flags(data: dict) -> float:
    """How many statistical claims a calibrated book flags by spread alone, at each notebook's number of seeds."""
    return sum(spread_flag_chance(len(e["seeds"])) for e in data.values() for r in e["claims"]
               if r["kind"] in STATISTICAL and not r.get("per_run") and r.get("sd_over_se") is not None)


def _summary(profile: str, entries: dict) -> dict:
    """The numbers of one profile's section of the calibration page (its sentences: the template's)."""
    rows = [r for e in entries.values() for r in e["claims"]]
    stat = [r for r in rows if r["kind"] in STATISTICAL]
    n_eval, n_fail = failing_evaluations(entries)
    groups: dict[tuple[int, ...], list[str]] = {}  # the notebooks of each set of seeds
    for name, e in sorted(entries.items()):
        groups.setdefault(tuple(e["seeds"]), []).append(name[:2])
    n_seeds = min(len(k) for k in groups)  # the flag rule's power at the fewest seeds of any notebook
    k = sum(r["flagged"] for r in stat)
    return {"name": profile, "entries": sorted(entries.items()), "groups": list(groups.items()),
            "out_of_sample": all(e.get("out_of_sample") for e in entries.values()),
            "commits": sorted({e.get("rules_commit", "unknown") for e in entries.values()}),
            "n_claims": len(rows), "n_statistical": len(stat), "n_notebooks": len(entries),
            "n_eval": n_eval, "n_fail": n_fail, "expected": n_eval * LEVEL,
            "p_fail": binomial_tail(n_fail, n_eval, LEVEL), "flagged": [r["id"] for r in rows if r["flagged"]], "k": k,
            "none": 1.0 - _chance_of_at_least(entries, 1), "p_k": _chance_of_at_least(entries, k),
            "spread_flags": _spread_flags(entries), "n_seeds": n_seeds, "flag_chance": _flag_chance(n_seeds),
            "detect_half": 100 * detectable_rate(n_seeds, 0.5), "detect_80": 100 * detectable_rate(n_seeds, 0.8)}


def write_calibration_page(paths: Paths) -> Path:
    """Write ``book/generated/calibration.md`` from ``book/calibration.json`` (or say that none was run)."""
    from covbook.book.render import render

    profiles = sorted(_profiles(_read_json(paths)).items(), key=lambda kv: _PROFILE_ORDER.get(kv[0], 9))
    text = render("calibration.md.j2", level=LEVEL, flag_failures=FLAG_FAILURES, flag_spread=FLAG_SPREAD,
                  development_seeds=DEVELOPMENT_SEEDS.text(), profiles=[_summary(p, e) for p, e in profiles if e])
    out = paths.generated / "calibration.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".md.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(out)
    return out
