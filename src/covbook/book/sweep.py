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

from covbook.book.cache import last_failure
from covbook.book.checks import read_rules
from covbook.claims import LEVEL, Z, familywise, fmt, load_claims, write_json_atomic
from covbook.book.config import Paths, UsageError, select

__all__ = ["parse_seeds", "seed_root", "run_sweep", "rejudge_sweep", "calibrate", "binomial_tail", "write_calibration_page",
           "CALIBRATION_JSON", "FLAG_P"]

CALIBRATION_JSON = Path("book") / "calibration.json"
FLAG_P = 0.01
#: kinds judged at the book's level (a compatible claim fails by chance as often as an evidence claim)
STATISTICAL = ("evidence", "compatible")
NO_SWEEP = ("No sweep has been run; run `covbook sweep --seeds 0-9 --profile smoke` (then commit "
            "`book/calibration.json`).")


def parse_seeds(text: str) -> list[int]:
    """Seeds from ``"A-B"`` (inclusive) or ``"A"``; a :class:`UsageError` otherwise.

    Examples
    --------
    >>> parse_seeds("0-3")
    [0, 1, 2, 3]
    """
    parts = text.strip().split("-")
    try:
        if len(parts) == 1:
            lo = hi = int(parts[0])
        elif len(parts) == 2:
            lo, hi = int(parts[0]), int(parts[1])
        else:
            raise ValueError(text)
    except ValueError as err:
        raise UsageError(f"--seeds must be A-B or A with non-negative integers A <= B, got {text!r}") from err
    if lo < 0 or hi < lo:
        raise UsageError(f"--seeds must be A-B or A with non-negative integers A <= B, got {text!r}")
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
    if k == 0:
        return 1.0
    if k > n:
        return 0.0
    return min(1.0, sum(math.comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(k, n + 1)))


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
) -> dict:
    """Run ``names`` (default all) at every seed, then calibrate and write the JSON and the page."""
    from covbook.book.runner import run_notebooks  # the execution machinery, only when a sweep runs

    if not seeds:
        raise UsageError("--seeds names no seed")
    chosen = list(select(paths, names))
    failed: dict[str, list[int]] = {}
    for seed in seeds:
        sp = _shadow(paths, seed_root(paths, profile, seed))
        start = time.perf_counter()
        results = run_notebooks(sp, chosen, profile=profile, device=device, seed=seed, jobs=jobs, force=force,
                                progress=progress)
        bad = [r.name for r in results if r.status == "failed"]
        for name in bad:
            failed.setdefault(name, []).append(seed)
        log(f"covbook sweep: seed {seed}: {len(results) - len(bad)} ok, {len(bad)} failed "
            f"({time.perf_counter() - start:.1f} s)")
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
    for seed in seeds:
        runs = Paths(seed_root(paths, profile, seed)).runs
        for name in chosen:
            rec = runs / f"{name}.json"
            if not rec.is_file() or json.loads(rec.read_text()).get("status") != "ok":
                failed.setdefault(name, []).append(seed)
    if all(len(failed.get(n, [])) == len(seeds) for n in chosen):
        raise UsageError(f"no stored sweep at profile {profile} for seeds {seeds[0]}–{seeds[-1]}: run "
                         f"`covbook sweep --seeds {seeds[0]}-{seeds[-1]} --profile {profile}` first")
    return _write(paths, calibrate(paths, profile, seeds, chosen), failed)


def _write(paths: Paths, data: dict, failed: dict[str, list[int]]) -> dict:
    for name, entry in data.items():
        entry["failed_seeds"] = failed.get(name, [])
    old = _read_json(paths)
    merged = {**old.get("notebooks", {}), **data}
    write_json_atomic(paths.root / CALIBRATION_JSON,
                      {"level": LEVEL, "flag_p": FLAG_P, "notebooks": dict(sorted(merged.items()))})
    write_calibration_page(paths)
    return data


def calibrate(paths: Paths, profile: str, seeds: list[int], names: list[str]) -> dict[str, dict]:
    """Per notebook and claim: pass rate, mean and SD of measured values, tail probability, flag."""
    from covbook.book.report import git_commit  # report imports this module

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
            ok = (rec.is_file() and json.loads(rec.read_text()).get("status") == "ok" and f.is_file()
                  and last_failure(Paths(seed_root(paths, profile, seed)), name) is None)
            if ok:
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
            zs = [(c.measured - c.expected) / float(c.extra["se"]) for c in got
                  if c.expected is not None and math.isfinite(c.measured) and math.isfinite(c.expected)
                  and isinstance(c.extra.get("se"), (int, float)) and math.isfinite(c.extra["se"])
                  and c.extra["se"] > 0]
            spread = (statistics.stdev(zs) if len(zs) == n > 1 else
                      (sd / se if sd is not None and se else None))
            rows.append({
                "id": cid,
                "kind": got[0].kind if got else "unknown",
                "expected": got[0].expected_text() if got else "",
                "n": n,
                "passed": n - fails,
                "mean": statistics.fmean(vals) if vals else None,
                "sd": sd,
                "sd_over_se": spread,
                "tail_p": tail,
                "fail_seeds": fail_seeds,
                "missing_seeds": missing,
                "flagged": tail < FLAG_P or bool(missing),
            })
        out[name] = {"profile": profile, "seeds": list(seeds), "commit": commit,
                     "date": time.strftime("%Y-%m-%d"), "claims": rows}
    return out


def _read_json(paths: Paths) -> dict:
    f = paths.root / CALIBRATION_JSON
    if not f.is_file():
        return {}
    try:
        data = json.loads(f.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise UsageError(f"{f}: damaged ({err}); delete it and rerun `covbook sweep`") from err
    return data if isinstance(data, dict) else {}


def _flag_chance(n: int) -> float:
    """Chance that a correct claim recorded at ``n`` seeds is flagged: P(X ≥ k) at the smallest k the rule flags."""
    return next((tail for k in range(1, n + 1) if (tail := binomial_tail(k, n)) < FLAG_P), 0.0)


def _chance_flags(data: dict) -> float:
    """Expected number of evidence claims a sweep flags when every claim is right (the flag rule's own tail)."""
    return sum(_flag_chance(r["n"]) for e in data.values() for r in e["claims"] if r["kind"] in STATISTICAL)


def _chance_of_at_least(data: dict, k: int) -> float:
    """P(at least ``k`` evidence claims flagged) in a correct book, treating the claims' flags as independent
    Bernoulli(:func:`_flag_chance`) draws, so that their count is Poisson-binomial (computed exactly).  Claims of
    one notebook share each seed's run, so this is an approximation."""
    dist = [1.0]  # dist[j] = P(j flags among the claims so far)
    for e in data.values():
        for r in e["claims"]:
            if r["kind"] in STATISTICAL:
                p = _flag_chance(r["n"])
                dist = [a * (1 - p) + b * p for a, b in zip([*dist, 0.0], [0.0, *dist], strict=True)]
    return float(min(1.0, max(0.0, sum(dist[k:]))))


def _flag_count_sentence(data: dict, k: int) -> str:
    """How the observed number ``k`` of flagged evidence claims compares with chance."""
    none = 1.0 - _chance_of_at_least(data, 1)
    first = ("No evidence claim is flagged here" if k == 0 else
             "1 evidence claim is flagged here" if k == 1 else f"{k} evidence claims are flagged here")
    tail = "" if k == 0 else f" and {k} or more with probability {_chance_of_at_least(data, k):.2g}"
    return (f"{first}; treating the claims as independent (those of one notebook share a run), a correct book "
            f"flags none with probability {none:.2g}{tail}.")


def _num(x: float | None) -> str:
    return "—" if x is None else fmt(x)


def write_calibration_page(paths: Paths) -> Path:
    """Write ``book/generated/calibration.md`` from ``book/calibration.json`` (or say that none was run)."""
    data = _read_json(paths).get("notebooks", {})
    lines = [
        "# Calibration: the claims across seeds",
        "",
        "CI checks every claim at one seed. This page reruns the notebooks at many seeds and counts, for "
        f"each claim, how often it passes. At the book's per-claim level α = {LEVEL:g} a correct claim "
        "essentially never fails; a claim is **flagged** when its failures are improbable under that level "
        f"(binomial tail probability P(X ≥ failures) < {FLAG_P:g} for X ~ Binomial(seeds, α); with 20 "
        "seeds or fewer a single failure is flagged) or when some seed did not record it. A flagged claim "
        "is biased or too narrow: its window, prediction or tolerance basis is fixed, not the seed. The "
        "measured values' mean and standard deviation (SD) across seeds show how much each number moves. "
        "The column SD/SE compares that spread with the standard error the claim recorded: for a claim "
        "with a numeric prediction and a standard error recorded at every seed it is the SD across seeds "
        "of the standardized residual (measured − predicted)/SE, so a prediction that changes with the "
        "seed (a model drawn per seed) does not count as spread; otherwise the SD of the measured values "
        "over their mean SE (for an older claim file, tolerance ÷ Z). With a Student-t window over ν "
        "replicates a calibrated claim's SD/SE is about √(ν/(ν − 2)), above 1. Well above 1, the claim's standard error understates the seed-to-seed "
        "variation; for a bound or a window the claim's truth may itself move with the seed (a model "
        "trained per seed), and the column then mixes that movement with the noise. It is a diagnostic: "
        "the flag is the pass count.",
        "",
        "Generated by `covbook sweep --seeds A-B --profile P` from `book/calibration.json`.",
        "",
    ]
    if not data:
        lines += [f"**{NO_SWEEP}**", ""]
    else:
        rows = [r for e in data.values() for r in e["claims"]]
        flagged = [r for r in rows if r["flagged"]]
        ev = [r for r in rows if r["kind"] in STATISTICAL]
        ev_flagged = [r for r in ev if r["flagged"]]
        seeds = sorted({s for e in data.values() for s in e["seeds"]})
        bad = sorted({s for e in data.values() for r in e["claims"] for s in r.get("fail_seeds", [])}
                     | {s for e in data.values() for s in e.get("failed_seeds", [])})
        lines += [f"**{len(rows)} claims ({len(ev)} evidence) over {len(data)} notebook(s); "
                  f"{len(flagged)} flagged.** Seeds at which some claim failed or some notebook did not run: "
                  f"{len(bad)} of {len(seeds)}" + (f" ({', '.join(map(str, bad))})" if bad else "") + ". "
                  f"Treating the claims as independent, a correct book with these {len(ev)} evidence claims "
                  "fails some claim by chance at about "
                  f"{100 * familywise(len(ev)):.2g} % of seeds, and a sweep of this size flags about "
                  f"{_chance_flags(data):.2g} of its evidence claims by chance alone (with 20 seeds or fewer a "
                  "correct claim is flagged with probability 1 − (1 − α)^seeds). "
                  + _flag_count_sentence(data, len(ev_flagged)), ""]
        for name, e in sorted(data.items()):  # chapter order
            seeds = e["seeds"]
            seed_text = f"{seeds[0]}–{seeds[-1]}" if seeds == list(range(seeds[0], seeds[-1] + 1)) else \
                ", ".join(map(str, seeds))
            lines += [f"## {name}", "",
                      f"Profile `{e['profile']}`, seeds {seed_text} ({len(seeds)}), commit {e['commit']}, "
                      f"{e['date']}."
                      + (f" The notebook failed at seed(s) {', '.join(map(str, e['failed_seeds']))}."
                         if e.get("failed_seeds") else ""), "",
                      "| claim | kind | passed | mean | SD | SD/SE | expected (first seed) | tail p | |",
                      "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
            for r in e["claims"]:
                flag = "**⚑ flagged**" if r["flagged"] else ""
                if r.get("fail_seeds"):
                    flag += f" failed at seed(s) {', '.join(map(str, r['fail_seeds']))}"
                if r["missing_seeds"]:
                    flag += f" not recorded at seed(s) {', '.join(map(str, r['missing_seeds']))}"
                lines.append(f"| `{r['id']}` | {r['kind']} | {r['passed']} of {r['n']} | {_num(r['mean'])} | "
                             f"{_num(r['sd'])} | {_num(r.get('sd_over_se'))} | {r['expected'].replace('|', '/')} | {r['tail_p']:.2g} | {flag} |")
            lines.append("")
    out = paths.generated / "calibration.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".md.tmp")
    tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    tmp.replace(out)
    return out

