r"""What the runs cost: a table per notebook, profile and device, rendered from run records.

The reproduction page shows it, so that no time a machine measured is ever typed into prose.  The
rows come from every successful run record the book's tree holds: the book's own run
(``book/generated/runs/``) and the stored seeds of every sweep
(``book/generated/sweep/<profile>/seed-N/book/generated/runs/``).  For each (notebook, profile,
device) with runs :math:`r = 1, \dots, n` of wall time :math:`w_r` and CPU time :math:`c_r`, a row
shows :math:`n`, the median wall time, :math:`\min_r w_r`–:math:`\max_r w_r`, and the median CPU
time over the runs that recorded it.  Rehearsals (full shapes at short lengths) are left out: their
times are not those of the profile.  ``.covbook/timings.json`` (the plan's calibration) is not read:
the book build reads nothing under ``.covbook/``.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

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


def _record_dirs(paths: Paths) -> list[Path]:
    """The book's run records folder, then each stored sweep seed's, in a stable order."""
    seeds = sorted((paths.generated / "sweep").glob("*/seed-*"))
    return [paths.runs] + [Paths(s).runs for s in seeds]


def _records(paths: Paths) -> list[RunRecord]:
    out = []
    for folder in _record_dirs(paths):
        for f in sorted(folder.glob("[0-9][0-9]_*.json")):
            try:
                rec = read_run(f)
            except (OSError, DamagedFile):
                continue  # `covbook check` names a damaged record; a cost table does not stop the build
            if rec is not None and rec.ok and not rec.rehearsal and rec.seconds is not None and rec.profile:
                out.append(rec)
    return out


def run_costs(paths: Paths) -> list[CostRow]:
    """One :class:`CostRow` per (notebook, profile, device) among the tree's successful run records.

    Parameters
    ----------
    paths
        The project's paths; records are read from ``paths.runs`` and the stored sweeps.

    Returns
    -------
    list of CostRow
        Sorted by notebook, then profile, then device.
    """
    groups: dict[tuple[str, str, str], list[RunRecord]] = {}
    for rec in _records(paths):
        name = str(rec.get("notebook", ""))
        device = rec.device_used or str(rec.parameters.get("device") or "?")  # the resolved device, else the asked one
        groups.setdefault((name, rec.profile, device), []).append(rec)
    rows = []
    for (name, profile, device), recs in sorted(groups.items()):
        wall = [r.seconds for r in recs]  # (n,)
        cpu = [float(r["cpu_seconds"]) for r in recs if isinstance(r.get("cpu_seconds"), int | float)]
        rows.append(CostRow(name, profile, device, len(recs), statistics.median(wall), min(wall), max(wall),
                            statistics.median(cpu) if cpu else None))
    return rows


def run_costs_markdown(paths: Paths) -> str:
    """The run-costs table of the reproduction page (Markdown), or one line saying there is no record yet."""
    from covbook.book.render import render

    return render("costs.md.j2", rows=run_costs(paths))
