"""``covbook run --plan``: the work each notebook will do and how long it should take; runs nothing.

The work of a notebook is the expression under its ``work:`` key in
``notebooks/profiles.yml`` (tokens streamed, training steps × batch ...),
evaluated on the parameters the profile gives it.  The time estimate is
calibrated on this device by measured runs: every successful ``covbook run``
stores its run time with its parameters in ``.covbook/timings.json`` (the
run records in ``book/generated/runs`` count too).  With two measured runs of
different work, the estimate is the line ``a + b·work`` through the smallest
and largest (``a`` is start-up: kernel, imports); with one, start-up and work
cannot be told apart, and the estimate is the range between the two extremes.  A notebook never
measured on the device gets no estimate, and the output says so.
"""

from __future__ import annotations

import ast
import math
import operator
from pathlib import Path

from covbook.book.cache import resolve_device
from covbook.book.config import PROFILE_TABLE, Paths, UsageError, load_profiles
from covbook.book.records import read_run
from covbook._jsonio import DamagedFile, read_json

__all__ = ["work_of", "estimate", "print_plan", "time_limit", "DEFAULT_LIMITS", "LIMIT_FACTOR", "LIMIT_FLOOR"]

#: a notebook's time limit (seconds) when its time on this device cannot be estimated: per profile
DEFAULT_LIMITS = {name: p.time_limit for name, p in PROFILE_TABLE.items()}
#: with an estimate, the limit is LIMIT_FACTOR times its upper end, and at least LIMIT_FLOOR seconds
LIMIT_FACTOR = 5.0
LIMIT_FLOOR = 10 * 60

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Pow: operator.pow}
_FUNCS = {"len": len, "sum": sum, "max": max, "min": min}


def work_of(expr: str, params: dict) -> float:
    """Evaluate a work expression (names, numbers, ``+ - * / // **``, len/sum/max/min) on ``params``."""

    def ev(node: ast.AST) -> object:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in params:
                raise UsageError(f"work expression {expr!r} names {node.id!r}, which is not a parameter")
            return params[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return _BINOPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, (ast.List, ast.Tuple)):
            return [ev(e) for e in node.elts]
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCS
                and not node.keywords):
            return _FUNCS[node.func.id](*[ev(a) for a in node.args])
        raise UsageError(f"work expression {expr!r}: unsupported syntax {ast.unparse(node)!r}")

    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError as err:
        raise UsageError(f"work expression {expr!r} is not an expression: {err.msg}") from None
    value = ev(tree)
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        raise UsageError(f"work expression {expr!r} does not evaluate to a finite number")
    return float(value)


def _measurements(paths: Paths, name: str, device: str, expr: str, defaults: dict) -> list[tuple[float, float, str]]:
    """Measured ``(work, seconds, label)`` of ``name`` on ``device`` (cpu | cuda)."""
    found: dict[str, tuple[float, float, str]] = {}
    try:
        timings = read_json(paths.timings, dict) if paths.timings.is_file() else {}
    except DamagedFile:
        timings = {}
    for key, t in timings.get(name, {}).get(device, {}).items():
        try:
            found[key] = (work_of(expr, {**defaults, **t["parameters"]}), float(t["seconds"]), key)
        except (UsageError, KeyError, TypeError, ValueError):
            continue
    try:
        rec = read_run(paths.runs / f"{name}.json")
    except (OSError, DamagedFile):
        rec = None
    if rec is not None and rec.ok and rec.device_used.startswith(device):
        params = {**defaults, **rec.parameters}
        key = str(params.get("profile")) + ("+rehearse" if rec.rehearsal else "")
        if key not in found:
            try:
                found[key] = (work_of(expr, params), float(rec["seconds"]), key)
            except (UsageError, KeyError, TypeError, ValueError):
                pass
    return sorted(found.values())


def estimate(work: float, points: list[tuple[float, float, str]]) -> tuple[float | None, float | None, str]:
    """Seconds for ``work`` from measured ``(work, seconds, label)`` points: ``(low, high, how)``.

    Two runs of different work give the line ``a + b·work`` through the smallest and
    the largest (``low == high``).  One run of ``s`` seconds at work ``w`` cannot
    separate start-up from work: the time is ``a + (s − a)·work/w`` for an unknown
    start-up ``0 ≤ a ≤ s``, so the answer is the range between ``s`` and ``s·work/w``.
    """
    if not points:
        return None, None, "no measured run on this device"
    for w, s, label in points:
        if w == work:
            return s, s, f"measured ({label} run)"
    lo, hi = points[0], points[-1]
    if hi[0] > lo[0] and hi[1] > lo[1]:
        b = (hi[1] - lo[1]) / (hi[0] - lo[0])
        a = max(0.0, lo[1] - b * lo[0])
        return a + b * work, a + b * work, f"line through the {lo[2]} and {hi[2]} runs (start-up {a:.1f} s)"
    w, s, label = hi
    if w <= 0:
        return None, None, f"the {label} run did no work"
    low, high = sorted((s, s * work / w))
    return low, high, (f"one run ({label}, {s:.1f} s): start-up unknown, so between all start-up and none; "
                       "measure a second profile to narrow it")


def time_limit(paths: Paths, job: object, profile: str) -> float:
    """The time limit of one planned notebook (a :class:`covbook.book.runner.Job`), in seconds.

    ``LIMIT_FACTOR`` × the upper end of the plan's estimate on this device (at least
    ``LIMIT_FLOOR``: a loaded machine or a cold cache is slower), or the profile's
    ``DEFAULT_LIMITS`` entry when there is no estimate.  ``covbook run --timeout`` overrides it.
    """
    fallback = float(DEFAULT_LIMITS.get(profile, max(DEFAULT_LIMITS.values())))
    try:
        spec = load_profiles(paths.profiles).get(job.name, {}).get("work")  # type: ignore[attr-defined]
        if not spec:
            return fallback
        params = {**job.defaults, **job.params}  # type: ignore[attr-defined]
        work = work_of(spec["expr"], params)
        _, high, _ = estimate(work, _measurements(paths, job.name, job.device, spec["expr"], job.defaults))  # type: ignore[attr-defined]
    except (UsageError, OSError, TypeError, ValueError):
        return fallback
    return fallback if high is None else max(LIMIT_FLOOR, LIMIT_FACTOR * high)


def _fmt_seconds(s: float | None) -> str:
    if s is None:
        return "?"
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


def _fmt_range(low: float | None, high: float | None) -> str:
    if low is None or high is None or _fmt_seconds(low) == _fmt_seconds(high):
        return _fmt_seconds(high)
    return f"{_fmt_seconds(low)}–{_fmt_seconds(high)}"


def planned_device(device: str) -> str:
    """The device a plan is made for: ``cuda`` as asked (planning for a GPU needs none here), else resolved."""
    return "cuda" if device == "cuda" else resolve_device(device)


def print_plan(paths: Paths, jobs: list, *, profile: str, device: str, rehearse: bool = False) -> int:
    """Print the plan of ``covbook run`` for its planned ``jobs`` (``runner.plan_jobs``); returns 0."""
    dev = planned_device(device)
    profiles = load_profiles(paths.profiles)
    mode = f"profile {profile}" + (" rehearsal (short lengths)" if rehearse else "")
    print(f"covbook run --plan: {mode}, device {dev}" + (" (from auto)" if device == "auto" else ""))
    rows, low_total, high_total, unknown = [], 0.0, 0.0, []
    for job in jobs:
        spec = profiles.get(job.name, {}).get("work")
        if not spec:
            rows.append((job.name, "(no work: key in profiles.yml)", "?", "cannot estimate without a work expression"))
            unknown.append(job.name)
            continue
        work = work_of(spec["expr"], {**job.defaults, **job.params})
        low, high, how = estimate(work, _measurements(paths, job.name, dev, spec["expr"], job.defaults))
        if low is None or high is None:
            unknown.append(job.name)
        else:
            low_total += low
            high_total += high
        rows.append((job.name, f"{work:.3g} {spec.get('unit', '')}".strip(), _fmt_range(low, high), how))
    w0 = max(len(r[0]) for r in rows) if rows else 8
    w1 = max(len(r[1]) for r in rows) if rows else 8
    for name, work, secs, how in rows:
        print(f"  {name:<{w0}}  {work:<{w1}}  {secs:>7}  {how}")
    print(f"  {'total':<{w0}}  {'':<{w1}}  {_fmt_range(low_total, high_total):>7}"
          + (f"  + {len(unknown)} notebook(s) without an estimate: {', '.join(unknown)}" if unknown else ""))
    print(f"How: the work is each notebook's `work:` expression in {Path('notebooks') / 'profiles.yml'} on the "
          f"profile's parameters; the time is calibrated on measured runs on {dev} ({Path('.covbook') / 'timings.json'}"
          ", written by every `covbook run`): a line a + b*work through two runs of different work, or "
          "a range between all start-up and none from one run. Run `covbook run --profile smoke --device "
          f"{dev}` (and quick) on this machine to calibrate.")
    return 0
