"""How well SE ∝ n^(−1/2) predicts paper-scale windows: chapters 01–05 at quick (this checkout) against full.

Writes ``tests/data/power_quick_full_h200.json``: for each evidence claim of chapters 01–05 whose window
:mod:`covbook.book.power` predicts, the quick run's measurement, the replicates (and length) at quick and at
full that ``notebooks/profiles.yml`` declares, and the window and kind the same claim had in a full run on
one NVIDIA H200 (the judged claims of that run, a JSON list as ``covbook check`` judges them).  Then prints
each claim's ratio of measured to predicted full window width and their summary.

Usage (after ``covbook run 01 02 03 04 05 --profile quick``)::

    python studies/power_scaling_h200.py PATH/claims-h200.json

The chapters' science must be the same in both runs (the full run's commit and this checkout's).
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
import sys
from pathlib import Path

from covbook._jsonio import write_json_atomic
from covbook.book.power import claim_forecasts, measurement_of, profile_parameters, replicate_count
from covbook.book.records import read_run
from covbook.claims import load_claims
from covbook.rules import load_rules, rules_path

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = ("01_covariance_readout", "02_elliptical_inputs", "03_heavy_tails_and_rates",
            "04_dependence_and_counterexamples", "05_icl_one_step")
OUT = ROOT / "tests" / "data" / "power_quick_full_h200.json"


def rows(full_claims: list[dict]) -> list[dict]:
    """One row per predicted evidence claim of :data:`CHAPTERS` with a two-ended window in both runs."""
    full = {(c["notebook"], c["id"]): c for c in full_claims if c.get("profile") == "full"}
    claims, runs = [], {}
    for nb in CHAPTERS:
        rec = read_run(ROOT / "book" / "generated" / "runs" / f"{nb}.json")
        if rec is None or rec.profile != "quick":
            raise SystemExit(f"{nb}: run it at quick first (covbook run {nb[:2]} --profile quick)")
        runs[nb] = dict(rec)
        claims += load_claims(ROOT / "book" / "generated" / "claims" / f"{nb}.json", profile="quick")
    forecasts = claim_forecasts(ROOT, claims, runs)
    out = []
    for c in claims:
        f = next((x for x in forecasts.get((c.notebook, c.id), []) if x.profile == "full"), None)
        measured = full.get((c.notebook, c.id))
        if f is None or f.scale is None or measured is None or None in (
                f.lower, f.upper, measured["lower"], measured["upper"]):
            continue
        scale = f.scale
        quick_p, full_p = (profile_parameters(ROOT, c.notebook)[p] for p in ("quick", "full"))
        length = 1.0 if not scale.length else \
            replicate_count(scale.length, full_p) / replicate_count(scale.length, quick_p)
        rule = load_rules(rules_path(ROOT, c.notebook))[c.id]
        m = measurement_of(c)
        out.append({
            "notebook": c.notebook, "id": c.id, "window": rule.window,
            "alternatives": [dataclasses.asdict(a) for a in rule.alternatives],
            "quick": dataclasses.asdict(m), "n_quick": f.n_run, "n_full": f.n, "length_ratio": length,
            "replicates": scale.n, "length": scale.length,
            "full": {"lower": measured["lower"], "upper": measured["upper"],
                     "kind": "evidence" if all(a["excluded"] for a in measured["alternatives"]) else "compatible"},
            "predicted": {"lower": f.lower, "upper": f.upper, "kind": f.kind},
        })
    return out


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        raise SystemExit(__doc__)
    data = rows(json.loads(Path(argv[0]).read_text(encoding="utf-8")))
    write_json_atomic(OUT, {"source": "chapters 01-05: quick on this machine's CPU (seed 0) against full on one "
                                      "NVIDIA H200 (seed 0), the same science; written by "
                                      "studies/power_scaling_h200.py", "claims": data})
    ratios = []
    for r in data:
        ratio = (r["full"]["upper"] - r["full"]["lower"]) / (r["predicted"]["upper"] - r["predicted"]["lower"])
        ratios.append(ratio)
        print(f"{r['notebook'][:2]} {r['id']:32s} {r['window']:12s} {ratio:6.3f}  {r['predicted']['kind']} / "
              f"{r['full']['kind']}")
    print(f"{len(ratios)} claims: measured/predicted full width median {statistics.median(ratios):.3f}, geometric "
          f"mean {math.exp(statistics.fmean(map(math.log, ratios))):.3f}, range {min(ratios):.3f} to "
          f"{max(ratios):.3f}; wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main(sys.argv[1:])
