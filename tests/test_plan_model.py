"""The plan's estimates against the runs measured on one NVIDIA H200 (fast stage).

``notebooks/timings/nvidia-h200.json`` is the shipped calibration: smoke and quick for every notebook, full
for 01-06 and 08.  Leave a profile's runs out, predict them from the smaller ones, and compare.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import threading
from pathlib import Path

import pytest

from covbook._jsonio import write_json_atomic
from covbook.book.config import Paths, load_profiles, notebook_parameters
from covbook.book.plan import SHIPPED, estimate, measured_runs, plan_jobs, wall_time, work_of
from covbook.book.runner import run_trees

ROOT = Path(__file__).resolve().parents[1]
H200 = ROOT / SHIPPED / "nvidia-h200.json"


def _runs() -> dict[str, dict[str, tuple[float, float, str]]]:
    """``notebook -> profile -> (work, seconds, profile)`` of the shipped H200 runs."""
    profiles, out = load_profiles(ROOT / "notebooks" / "profiles.yml"), {}
    for name, devices in json.loads(H200.read_text()).items():
        defaults = notebook_parameters(ROOT / "notebooks" / f"{name}.md")
        out[name] = {p: (work_of(profiles[name]["work"]["expr"], {**defaults, **t["parameters"]}), t["seconds"], p)
                     for p, t in devices["cuda"].items()}
    return out


def test_an_unmeasured_profile_is_estimated_no_lower_than_it_measured():
    """The work ratio times a smaller run is an upper end (start-up and streams run in parallel grow more slowly
    than the work): it may not fall below any measured quick or full run, or a time limit from it could stop a run
    that would have finished."""
    ratios = {}
    for name, r in _runs().items():
        for target in ("quick", "full"):
            smaller = sorted(v for p, v in r.items() if v[0] < r.get(target, (0,))[0])
            if smaller:
                ratios[f"{name[:2]} {target}"] = estimate(r[target][0], smaller)[0] / r[target][1]
    assert len(ratios) == 18 and min(ratios.values()) >= 1.0, ratios


def test_a_measured_run_of_the_same_work_is_the_estimate():
    for r in _runs().values():
        for work, seconds, profile in r.values():
            assert estimate(work, sorted(r.values())) == (seconds, f"measured ({profile} run)")


def test_the_shipped_calibration_is_read_and_this_machines_timings_win(tmp_path):
    (tmp_path / SHIPPED).mkdir(parents=True)
    write_json_atomic(tmp_path / SHIPPED / "gpu-a.json", {"01_x": {"cuda": {
        "smoke": {"parameters": {"n": 1}, "seconds": 4.0}, "full": {"parameters": {"n": 100}, "seconds": 50.0}}}})
    paths = Paths(tmp_path)
    assert measured_runs(paths, "01_x", "cuda", "n", {}) == [(1.0, 4.0, "smoke, gpu-a"), (100.0, 50.0, "full, gpu-a")]
    write_json_atomic(paths.timings, {"01_x": {"cuda": {"full": {"parameters": {"n": 100}, "seconds": 30.0}}}})
    assert measured_runs(paths, "01_x", "cuda", "n", {})[-1] == (100.0, 30.0, "full")


def test_wall_time_longest_first():
    assert wall_time([5, 4, 3, 3, 3], 2) == 10  # LPT: 5+3 | 4+3+3 (the optimum, 9, is not promised)
    assert wall_time([10.0], 6) == 10.0
    with pytest.raises(ValueError, match="jobs must be a positive integer"):
        wall_time([1.0], 0)


# ----------------------------------------------------------------------------- the run's order: longest first


def test_a_fresh_clone_orders_its_quick_cpu_jobs_longest_first(tmp_path):
    """With the shipped calibrations alone (no ``.covbook/timings.json``), the CPU estimates at quick put the
    trained models and the depth chapter first, the shortest chapter last."""
    fresh = tmp_path / "clone"
    fresh.mkdir()
    (fresh / "notebooks").symlink_to(ROOT / "notebooks")
    paths = Paths(fresh)
    jobs = plan_jobs(paths, None, profile="quick", device="cpu", seed=0)
    expected = {job.name[:2]: job.expected for job in jobs}
    assert all(s is not None and s > 0 for s in expected.values()), expected
    order = sorted(expected, key=lambda name: -expected[name])
    assert set(order[:3]) == {"07", "08", "10"} and order[-1] == "02", order


class _Recorder:
    """An engine whose jobs end at once, failed, recording the order they were submitted in."""

    label, threads = "", None

    def __init__(self) -> None:
        self.order: list[str] = []

    def resolve_device(self, device: str) -> str:
        return "cpu"

    def executor(self, n_jobs: int) -> _Recorder:
        return self

    def stop_signal(self, run_id: str) -> threading.Event:
        return threading.Event()

    def submit(self, fn, job: dict, stop) -> cf.Future:
        self.order.append(job["name"])
        fut: cf.Future = cf.Future()
        fut.set_exception(RuntimeError("not run"))
        return fut

    def shutdown(self, wait: bool) -> None:
        pass


def test_run_trees_submits_the_longest_job_first_and_reports_in_the_notebooks_order(project):
    paths = Paths(project)
    (project / "notebooks" / "profiles.yml").write_text("01_alpha:\n  smoke: {x: 3}\n  work: {expr: 'x'}\n"
                                                        "02_beta:\n  work: {expr: 'x'}\n")
    write_json_atomic(paths.timings, {
        "01_alpha": {"cpu": {"smoke": {"parameters": {"x": 3}, "seconds": 5.0}}},
        "02_beta": {"cpu": {"smoke": {"parameters": {"x": 2}, "seconds": 40.0}}}})
    engine = _Recorder()
    [results] = run_trees(engine, [(paths, 0)], None, profile="smoke", device="cpu", progress=False)
    assert engine.order == ["02_beta", "01_alpha"]  # 40 s before 5 s
    assert [(r.name, r.status, r.error) for r in results] == [("01_alpha", "failed", "RuntimeError: not run"),
                                                              ("02_beta", "failed", "RuntimeError: not run")]
    engine = _Recorder()
    (project / "notebooks" / "02_beta.md").write_text((project / "notebooks" / "02_beta.md").read_text() + "\n")
    paths.timings.unlink()  # nothing measured: the notebooks' order
    run_trees(engine, [(paths, 0)], None, profile="smoke", device="cpu", progress=False)
    assert engine.order == ["01_alpha", "02_beta"]


def test_run_trees_returns_a_large_sweeps_results_in_time(tmp_path, monkeypatch):
    """A cluster sweep hands every (notebook, seed) job to one run_trees: its 6,000 results go back to their trees
    in the notebooks' order in a moment (not by a search of the whole order per result and tree)."""
    import time

    from covbook.book import plan

    names = [f"{k:02d}_n" for k in range(20)]

    def planned(paths, selected, *, seed, **kwargs):
        return [plan.Job(name, paths.root / f"{name}.md", {"seed": seed}, "0" * 64, "cpu") for name in names]

    monkeypatch.setattr(plan, "plan_jobs", planned)
    trees = [(Paths(tmp_path / f"seed-{s}"), s) for s in range(300)]
    start = time.perf_counter()
    results = run_trees(_Recorder(), trees, None, profile="smoke", device="cpu", force=True, progress=False,
                        timeout=60.0)
    assert time.perf_counter() - start < 15.0
    assert [[r.name for r in rs] for rs in results] == [names] * 300
