"""What the runs cost: a table per notebook, profile and device, rendered from run records, never typed.

The records are every successful run record of the book's run (``book/generated/runs/``) and of each stored
sweep seed; a row gives the number of runs, the median, least and greatest wall time and the median CPU time
(of the runs that recorded one).  Rehearsals are left out: their times are not the profile's.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from covbook._jsonio import DamagedFile
from covbook.book.config import Paths
from covbook.book.records import RunRecord, read_run

__all__ = ["CostRow", "run_costs", "run_costs_markdown"]


@dataclass(frozen=True)
class CostRow:
    """The measured cost of one notebook at one profile on one device, over ``runs`` runs."""

    notebook: str
    profile: str
    device: str
    runs: int
    wall_median: float
    wall_min: float
    wall_max: float
    cpu_median: float | None


def _records(paths: Paths) -> list[RunRecord]:
    """The successful, timed run records (no rehearsal) of the book's run, then of each stored sweep seed."""
    folders = [paths.runs] + [Paths(s).runs for s in sorted((paths.generated / "sweep").glob("*/seed-*"))]
    out = []
    for f in (f for folder in folders for f in sorted(folder.glob("[0-9][0-9]_*.json"))):
        try:
            rec = read_run(f)
        except (OSError, DamagedFile):
            continue  # `covbook check` names a damaged record; a cost table does not stop the build
        if rec is not None and rec.ok and not rec.rehearsal and rec.seconds is not None and rec.profile:
            out.append(rec)
    return out


def run_costs(paths: Paths) -> list[CostRow]:
    """One :class:`CostRow` per (notebook, profile, device) of the records, sorted by those three."""
    groups: dict[tuple[str, str, str], list[RunRecord]] = {}
    for rec in _records(paths):
        device = rec.device_used or str(rec.parameters.get("device") or "?")  # the resolved device, else the asked one
        groups.setdefault((str(rec.get("notebook", "")), rec.profile, device), []).append(rec)
    rows = []
    for key, recs in sorted(groups.items()):
        wall = [r.seconds for r in recs]  # (n,)
        cpu = [float(r["cpu_seconds"]) for r in recs if isinstance(r.get("cpu_seconds"), int | float)]
        rows.append(CostRow(*key, len(recs), statistics.median(wall), min(wall), max(wall),
                            statistics.median(cpu) if cpu else None))
    return rows


def run_costs_markdown(paths: Paths) -> str:
    """The run-costs table of the reproduction page (Markdown), or one line saying there is no record yet."""
    from covbook.book.render import render

    return render("costs.md.j2", rows=run_costs(paths))
