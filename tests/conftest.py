"""Shared fixtures: a throw-away covbook project to exercise the runner and the CLI."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import PIPELINE_STEPS, ROOT, covbook, make_notebook, pipeline_project

#: The rule of the fixture notebooks' one claim (`claims.measure('x_is_x', x, prediction=x)`).
X_IS_X = "x_is_x: {kind: identity, statement: x equals itself, window: tolerance, tolerance: 0.0}\n"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A tiny project: two notebooks (one passing claim each) and a profiles file."""
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "book").mkdir()
    shutil.copy(ROOT / "_config.yml", tmp_path / "_config.yml")
    ok = "from covbook import claims\nclaims.measure('x_is_x', x, prediction=x)"
    (tmp_path / "notebooks" / "01_alpha.md").write_text(make_notebook(ok))
    (tmp_path / "notebooks" / "02_beta.md").write_text(make_notebook(ok, "x = 2"))
    (tmp_path / "notebooks" / "profiles.yml").write_text("01_alpha:\n  smoke: {x: 3}\n")
    rules = tmp_path / "notebooks" / "rules"
    rules.mkdir()
    for name in ("01_alpha", "02_beta"):
        (rules / f"{name}.yml").write_text(X_IS_X)
    return tmp_path


@pytest.fixture(autouse=True)
def _fresh_claims_registry():
    """Each test starts with no recorded claims (the registry is module-level)."""
    from covbook import claims

    reset = getattr(claims, "reset", None) or claims._CLAIMS.clear
    reset()
    yield
    reset()


@pytest.fixture(scope="module", autouse=True)
def _one_thread_for_experiments(request: pytest.FixtureRequest) -> Iterator[None]:
    """tests/experiments run on one torch thread, as the chapters do under ``covbook run`` (COVBOOK_THREADS=1):
    their tensors are tiny (threads only add overhead) and multi-threaded reductions can differ in the last bit."""
    if Path(str(request.path)).parent.name != "experiments":
        yield
        return
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def smoke_project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The project with every notebook executed at the smoke profile (tests/test_notebooks.py)."""
    with pipeline_project("smoke", tmp_path_factory) as root:
        jobs = str(min(2, os.cpu_count() or 1))
        proc = covbook(root, "run", "--profile", "smoke", "--device", "cpu", "--jobs", jobs, "--no-progress",
                       timed="notebooks at smoke")
        print(proc.stdout, proc.stderr)
        yield root


@pytest.fixture(scope="session")
def smoke_book(smoke_project: Path) -> subprocess.CompletedProcess:
    """``covbook build`` of the smoke project, once per session; the HTML is in ``smoke_project/_build/html``."""
    return covbook(smoke_project, "build", timed="book build (covbook build)")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Where the slow stage's time went: each pipeline step, each notebook it ran, the slowest tests."""
    if not PIPELINE_STEPS:
        return
    from covbook._jsonio import DamagedFile, read_json

    tr = terminalreporter
    tr.section("where the time went (wall under the current load; CPU = user + system)")
    for what, _, wall, cpu, _ in PIPELINE_STEPS:
        tr.write_line(f"{what:<32} {wall:8.1f} s wall {cpu:8.1f} s CPU")
    phases = ("kernel", "setup", "science", "figures", "claims")
    for what, root, _, _, started in PIPELINE_STEPS:
        runs = sorted((root / "book" / "generated" / "runs").glob("*.json"))
        if "build" in what or not runs:
            continue
        tr.write_line("")
        tr.write_line(f"{what}: per notebook (cached: served from an earlier run; phases: wall s by cell kind)")
        head = " ".join(f"{p:>7}" for p in phases)
        tr.write_line(f"{'notebook':<36} {'status':<8} {'wall s':>7} {'CPU s':>7}  {head}")
        totals = [0.0, 0.0]
        for f in runs:
            try:
                meta = read_json(f, dict)
            except (OSError, DamagedFile):
                continue
            fresh = meta.get("finished", "") >= time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started - 1))
            status = meta.get("status", "?") if fresh else "cached"
            cpu = meta.get("cpu_seconds")
            if fresh:
                totals[0] += meta.get("seconds", 0.0)
                totals[1] += cpu or 0.0
            ph = meta.get("phases") or {}
            tr.write_line(f"{f.stem:<36} {status:<8} {meta.get('seconds', float('nan')):7.1f} "
                          f"{cpu if cpu is not None else float('nan'):7.1f}  "
                          + " ".join(f"{ph.get(p, float('nan')):7.1f}" for p in phases))
        tr.write_line(f"{'executed in this session':<36} {'':<8} {totals[0]:7.1f} {totals[1]:7.1f}")
    reports = [r for r in tr.stats.get("passed", []) + tr.stats.get("failed", []) if r.when == "call"]
    slow = sorted(reports, key=lambda r: r.duration, reverse=True)[:5]
    if slow:
        tr.write_line("")
        tr.write_line("slowest test calls (fixtures excluded): " + ", ".join(
            f"{r.nodeid.split('::')[-1]} {r.duration:.1f} s" for r in slow))
