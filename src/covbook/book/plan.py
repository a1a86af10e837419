"""``covbook run --plan`` and each run's jobs, order and time limits: a notebook's work is its ``work:`` expression in
``notebooks/profiles.yml``, its time the last measured run of that work on the device (``notebooks/timings/*.json``
overlaid with ``.covbook/timings.json``), else the nearest one scaled by the work ratio (:func:`estimate`).
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from pathlib import Path

from covbook._jsonio import DamagedFile, read_json
from covbook.book.cache import content_hash, is_cached, notebook_science, resolve_device
from covbook.book.config import (
    DEFAULT_PROFILE,
    PROFILE_TABLE,
    Paths,
    UsageError,
    discover,
    expression_value,
    load_profiles,
    notebook_parameters,
    resolve_parameters,
    select,
)

__all__ = ["Job", "plan_jobs", "work_of", "estimate", "print_plan", "DEFAULT_LIMITS",
           "LIMIT_FACTOR", "LIMIT_FLOOR", "SHIPPED", "measured_runs", "wall_time"]

#: a notebook's time limit (seconds) when its time on this device cannot be estimated: per profile
DEFAULT_LIMITS = {name: p.time_limit for name, p in PROFILE_TABLE.items()}
#: with an estimate, the limit is LIMIT_FACTOR times its upper end, and at least LIMIT_FLOOR seconds
LIMIT_FACTOR = 5.0
LIMIT_FLOOR = 10 * 60
SHIPPED = Path("notebooks") / "timings"  # the shipped calibrations (the layout of .covbook/timings.json)


@dataclass
class Job:
    """One notebook to run: its source, parameters (and the notebook's defaults), cache key, resolved device (cpu |
    cuda), whether its outputs are current, its work, the estimate of its seconds and how it was made, its limit."""

    name: str
    path: Path
    params: dict
    digest: str
    device: str
    defaults: dict = field(default_factory=dict)
    cached: bool = False
    work: float | None = None
    unit: str = ""
    expected: float | None = None
    how: str = ""
    limit: float | None = None


def plan_jobs(paths: Paths, names: list[str] | None, *, profile: str, device: str, seed: int, rehearse: bool = False,
              resolved_device: str | None = None, force: bool = False, timeout: float | None = None) -> list[Job]:
    """The jobs of ``names``: parameters, keys, cached (never with ``force``), estimates; usage errors raised here."""
    chosen = select(paths, names)
    profiles = load_profiles(paths.profiles)
    if unknown_nb := sorted(set(profiles) - set(discover(paths))):
        raise UsageError(f"notebooks/profiles.yml names unknown notebook(s): {', '.join(unknown_nb)}")
    if rehearse and profile == DEFAULT_PROFILE:
        raise UsageError(f"--rehearse needs another --profile than {profile}: {profile} is the notebooks' own "
                         "defaults, which set no lengths")
    dev = resolved_device or resolve_device(device)
    jobs = []
    for name, path in chosen.items():
        defaults = notebook_parameters(path)
        params = resolve_parameters(name, defaults, profiles, profile, device, seed, rehearse=rehearse)
        job = Job(name, path, params, content_hash(path, params, notebook_science(path), dev), dev, defaults)
        job.cached = not force and is_cached(paths, name, job.digest)
        spec, job.how = profiles.get(name, {}).get("work"), "cannot estimate without a work expression"
        try:
            if spec:
                job.work, job.unit = work_of(spec["expr"], {**defaults, **params}), spec.get("unit", "")
                job.expected, job.how = estimate(job.work, measured_runs(paths, name, dev, spec["expr"], defaults))
        except (UsageError, OSError, TypeError, ValueError) as err:
            job.how = f"cannot estimate: {err}"
        limit = DEFAULT_LIMITS[profile] if job.expected is None else max(LIMIT_FLOOR, LIMIT_FACTOR * job.expected)
        job.limit = float(timeout or limit)
        jobs.append(job)
    return jobs


def work_of(expr: str, params: dict) -> float:
    """Evaluate a work expression (names, numbers, ``+ - * / // **``, len/sum/max/min) on ``params``."""
    value = expression_value(expr, params, where="work")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise UsageError(f"work: expression {expr!r} does not evaluate to a finite number")
    return float(value)


def measured_runs(paths: Paths, name: str, device: str, expr: str, defaults: dict) -> list[tuple[float, float, str]]:
    """Measured ``(work, seconds, label)`` of ``name`` on ``device`` (cpu | cuda), smallest work first: the shipped
    calibrations overlaid with this machine's ``.covbook/timings.json``; the label names the profile and the shipped
    calibration it comes from (``full, nvidia-h200``)."""
    found: dict[str, tuple[float, float, str]] = {}
    shipped = sorted((paths.root / SHIPPED).glob("*.json")) if (paths.root / SHIPPED).is_dir() else []
    for f in [*shipped, paths.timings]:
        try:
            runs = (read_json(f, dict) if f.is_file() else {}).get(name, {}).get(device, {})
        except (DamagedFile, AttributeError):
            continue
        for key, t in runs.items() if isinstance(runs, dict) else ():
            with contextlib.suppress(UsageError, KeyError, TypeError, ValueError, AttributeError):  # unusable: skip
                found[key] = (work_of(expr, {**defaults, **t["parameters"]}), float(t["seconds"]),
                              key + (f", {f.stem}" if f != paths.timings else ""))
    return sorted(found.values())


def estimate(work: float, points: list[tuple[float, float, str]]) -> tuple[float | None, str]:
    """Seconds for ``work`` from measured ``(work, seconds, label)`` points, and how: the run of that work, else the
    largest run below it (else the smallest) scaled by the work ratio.

    Examples
    --------
    >>> estimate(400.0, [(1.0, 3.0, "smoke"), (100.0, 21.0, "quick")])
    (84.0, 'quick run × work ratio 4')
    """
    if not points:
        return None, "no measured run on this device"
    for w, s, label in points:
        if w == work:
            return s, f"measured ({label} run)"
    below = [pt for pt in points if pt[0] <= work]
    w0, s0, label = below[-1] if below else points[0]
    if w0 <= 0:
        return None, f"the {label} run did no work"
    return s0 * work / w0, f"{label} run × work ratio {work / w0:.3g}"


def wall_time(seconds: list[float], jobs: int) -> float:
    """Wall time of independent notebooks on ``jobs`` workers, longest first to the least loaded (LPT)."""
    if jobs < 1:
        raise ValueError(f"jobs must be a positive integer, got {jobs!r}")
    loads = [0.0] * jobs
    for s in sorted(seconds, reverse=True):
        loads[loads.index(min(loads))] += s
    return max(loads)


def _fmt_seconds(s: float | None) -> str:
    if s is None:
        return "?"
    if s < 120:
        return f"{s:.0f} s"
    return f"{s / 60:.0f} min" if s < 7200 else f"{s / 3600:.1f} h"


def print_plan(jobs: list[Job], *, profile: str, device: str, rehearse: bool = False,
               workers: int | None = None) -> int:
    """Print ``covbook run --plan`` for ``jobs`` (with ``workers``: the wall time, that many at a time); return 0."""
    from covbook.book.render import render

    dev = jobs[0].device if jobs else device
    known = [job.expected for job in jobs if job.expected is not None]
    rows = [(job.name, "(no work: key in profiles.yml)" if job.work is None else f"{job.work:.3g} {job.unit}".strip(),
             _fmt_seconds(job.expected), job.how) for job in jobs]
    print(render("plan.txt.j2", profile=profile, rehearse=rehearse, dev=dev, auto=device == "auto", rows=rows,
                 w0=max((len(r[0]) for r in rows), default=8), w1=max((len(r[1]) for r in rows), default=8),
                 total=_fmt_seconds(sum(known)), unknown=[job.name for job in jobs if job.expected is None],
                 workers=workers, wall=_fmt_seconds(wall_time(known, workers)) if workers and known else None), end="")
    return 0
