#!/usr/bin/env python3
"""Time the stages of `make test`: wall and CPU seconds per stage, and a summary table.

    python3 .ci/stage.py NAME -- COMMAND [ARGS...]   run COMMAND, print and record its times
    python3 .ci/stage.py --reset                     forget the recorded stages (unless COVBOOK_STAGES_KEEP is set)
    python3 .ci/stage.py --summary                   print the table of the recorded stages

CPU seconds are user + system time of COMMAND and every process it waited for
(kernels, workers, the book build): on a loaded machine wall time grows with the
load while CPU time does not, so compare CPU seconds between runs on a shared
machine and wall seconds on an idle one.  The stages are recorded, one JSON
line each, in ``.covbook/stages.jsonl``.  Standard library only: it also times
the stage that creates the virtual environment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

RECORD = Path(__file__).resolve().parents[1] / ".covbook" / "stages.jsonl"


def run(name: str, command: list[str]) -> int:
    """Run ``command``, print ``stage NAME: ...`` and append the stage to the record; its exit status."""
    print(f"stage {name}: $ {' '.join(command)}", flush=True)
    before = os.times()
    start = time.perf_counter()
    status = subprocess.call(command)
    wall = time.perf_counter() - start
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    RECORD.parent.mkdir(parents=True, exist_ok=True)
    with RECORD.open("a") as fh:
        fh.write(json.dumps({"stage": name, "wall": round(wall, 2), "cpu": round(cpu, 2), "status": status}) + "\n")
    verdict = "ok" if status == 0 else f"FAILED (exit {status})"
    print(f"stage {name}: {wall:.1f} s wall, {cpu:.1f} s CPU, {verdict}", flush=True)
    return status


def summary() -> str:
    """The recorded stages as a table, with their total."""
    rows = [json.loads(line) for line in RECORD.read_text().splitlines() if line.strip()] if RECORD.is_file() else []
    if not rows:
        return "no stages recorded"
    width = max(len("total"), *(len(r["stage"]) for r in rows))
    lines = [f"{'stage':<{width}}  {'wall s':>8}  {'CPU s':>8}  status", "-" * (width + 28)]
    for r in rows:
        verdict = "ok" if r["status"] == 0 else "FAILED"
        lines.append(f"{r['stage']:<{width}}  {r['wall']:8.1f}  {r['cpu']:8.1f}  {verdict}")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    lines.append(f"{'total':<{width}}  {sum(r['wall'] for r in rows):8.1f}  {sum(r['cpu'] for r in rows):8.1f}"
                 f"  (load average now {load:.1f} on {os.cpu_count()} CPUs)")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if argv == ["--reset"]:
        if not os.environ.get("COVBOOK_STAGES_KEEP"):  # set by .ci/run, which times stages before `make test`
            RECORD.unlink(missing_ok=True)
        return 0
    if argv == ["--summary"]:
        print(summary())
        return 0
    if len(argv) >= 3 and argv[1] == "--" and not argv[0].startswith("-"):
        return run(argv[0], argv[2:])
    print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
