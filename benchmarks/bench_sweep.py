"""Benchmark: notebook jobs on the local pool and on Dask local clusters of 1 and 2 workers, in one run.

Prints, measured in throw-away copies of this project with ``covbook ... --force`` (wall time of the
whole command, as a user sees it):

  * the engine's fixed cost: starting and closing a ``LocalCluster`` of 1 and 2 worker processes;
  * its overhead per job: ``--trivial`` copies of a notebook that records one claim and computes
    nothing, run by ``covbook run`` on the local pool (``--jobs 1``, ``--jobs 2``) and on
    ``--cluster local:1`` / ``local:2``; overhead per job = (cluster wall − cluster start − pool wall)
    / jobs at the same number of workers, in rounds alternating pool and cluster so that the machine's
    load hits both alike (the median over rounds is printed);
  * throughput of the real sweep ``covbook sweep --seeds 0-(S-1) --profile smoke 01 02`` (the two
    fastest chapters) on the pool and on the cluster at 1 and 2 workers, in jobs per minute;
  * the load average before and after (the machine may be shared).

Run: ``make bench-sweep`` or ``.venv/bin/python benchmarks/bench_sweep.py [--trivial 6] [--seeds 2]
[--rounds 2]``.  Needs the cluster extra (``pip install -e '.[cluster]'``; ``make setup`` installs it).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RULE = "one: {kind: identity, statement: one is one, window: tolerance, tolerance: 0.0}\n"
COVBOOK = [sys.executable, "-m", "covbook.book.cli"]
FAST = ["01", "02"]
TRIVIAL = """---
jupytext:
  text_representation: {extension: .md, format_name: myst, format_version: 0.13}
kernelspec: {display_name: Python 3, language: python, name: python3}
---
# Trivial

```{code-cell} ipython3
:tags: [parameters]
profile = "quick"
device = "auto"
seed = 0
```

```{code-cell} ipython3
from covbook import claims
claims.measure("one", 1.0, prediction=1.0)
```
"""


def _project(root: Path, trivial: int) -> Path:
    root.mkdir()
    shutil.copy2(ROOT / "_config.yml", root)
    if trivial:
        (root / "notebooks").mkdir()
        (root / "notebooks" / "profiles.yml").write_text("{}\n")
        (root / "notebooks" / "rules").mkdir()
        for i in range(1, trivial + 1):
            (root / "notebooks" / f"{i:02d}_trivial.md").write_text(TRIVIAL)
            (root / "notebooks" / "rules" / f"{i:02d}_trivial.yml").write_text(RULE)
    else:
        shutil.copytree(ROOT / "notebooks", root / "notebooks", ignore=shutil.ignore_patterns("*.ipynb", ".*"))
        shutil.copytree(ROOT / "book", root / "book", ignore=shutil.ignore_patterns("generated"))
    return root


def _timed(cwd: Path, *args: str) -> float:
    start = time.perf_counter()
    proc = subprocess.run([*COVBOOK, *args, "--force", "--no-progress"], cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode:
        raise SystemExit(f"covbook {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return wall


def _cluster_start(n: int) -> float:
    from covbook.book.distributed import open_cluster

    start = time.perf_counter()
    with open_cluster(f"local:{n}"):
        pass
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trivial", type=int, default=6, help="trivial notebook jobs per measurement")
    ap.add_argument("--seeds", type=int, default=2, help="seeds of the real sweep of chapters 01 and 02")
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds of the trivial measurement")
    args = ap.parse_args()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {os.cpu_count()} CPUs")
    starts = {n: _cluster_start(n) for n in (1, 2)}
    for n, s in starts.items():
        print(f"LocalCluster of {n} worker process(es): start + close {s:.2f} s")
    with tempfile.TemporaryDirectory(prefix="covbook-bench-") as tmp:
        triv = _project(Path(tmp) / "trivial", args.trivial)
        walls: dict[str, list[float]] = {}
        for _ in range(args.rounds):
            for n in (1, 2):
                walls.setdefault(f"pool --jobs {n}", []).append(_timed(triv, "run", "--jobs", str(n)))
                walls.setdefault(f"cluster local:{n}", []).append(_timed(triv, "run", "--cluster", f"local:{n}"))
        med = {k: statistics.median(v) for k, v in walls.items()}
        print(f"\n{args.trivial} trivial notebook jobs (`covbook run --force`), median wall of {args.rounds} round(s):")
        for k, v in med.items():
            print(f"  {k:18s} {v:6.2f} s  ({v / args.trivial:.2f} s per job)")
        for n in (1, 2):
            over = (med[f"cluster local:{n}"] - starts[n] - med[f"pool --jobs {n}"]) / args.trivial
            print(f"  engine overhead per job at {n} worker(s): {over:+.2f} s (cluster − its start − pool, / jobs)")
        real = _project(Path(tmp) / "real", 0)
        jobs = 2 * args.seeds
        sweep = ["sweep", "--seeds", f"0-{args.seeds - 1}", "--profile", "smoke", "--device", "cpu", *FAST]
        print(f"\nsweep of chapters 01, 02 at {args.seeds} seed(s), smoke ({jobs} jobs):")
        for label, extra in (("pool --jobs 1", ["--jobs", "1"]), ("pool --jobs 2", ["--jobs", "2"]),
                             ("cluster local:1", ["--cluster", "local:1"]),
                             ("cluster local:2", ["--cluster", "local:2"])):
            wall = _timed(real, *sweep, *extra)
            print(f"  {label:18s} {wall:6.1f} s  {60 * jobs / wall:5.2f} jobs/min")
    print(f"\nload average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
