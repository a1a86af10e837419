"""Shared fixtures: a throw-away covbook project to exercise the runner and the CLI."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from helpers import PIPELINE_STEPS, ROOT, covbook, make_notebook, pipeline_project, pipeline_steps

# Property tests draw the same examples on every run, so `make test` is deterministic (a fuzz find
# must not turn CI red at random); COVBOOK_HYPOTHESIS=explore draws fresh ones, to look for new finds.
settings.register_profile("deterministic", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("COVBOOK_HYPOTHESIS", "deterministic"))

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


@pytest.fixture(scope="session")
def pdf_job(smoke_book: subprocess.CompletedProcess, smoke_project: Path) -> Iterator[subprocess.Popen | None]:
    """``python -m covbook.book.pdf`` (``make pdf``) of the smoke build, started in the background as soon as it
    is requested (None when the build failed).  The browser test requests it before its pass over the pages, so
    the PDF edition is printed meanwhile (mostly Chromium waiting on its pages, not CPU) instead of after it;
    tests/test_pdf.py waits for it.  Its output goes to ``_build/pdf.log``."""
    if smoke_book.returncode:
        yield None
        return
    log = smoke_project / "_build" / "pdf.log"
    with log.open("w") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "covbook.book.pdf"], cwd=smoke_project, stdout=fh,
                                stderr=subprocess.STDOUT, text=True)
    proc.log = log  # type: ignore[attr-defined]
    try:
        yield proc
    finally:
        if proc.poll() is None:  # the PDF test was not selected, or stopped early
            proc.terminate()
        proc.wait(timeout=60)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Where the slow tests' time went: each pipeline step, each notebook it ran, the slowest tests."""
    steps = pipeline_steps()
    if not steps:
        return
    from covbook._jsonio import DamagedFile, read_json

    tr = terminalreporter
    tr.section("where the time went (wall under the current load; CPU = user + system)")
    for what, _, wall, cpu, _ in steps:
        tr.write_line(f"{what:<32} {wall:8.1f} s wall {cpu:8.1f} s CPU")
    for what, root, _, _, started in steps:
        runs = sorted((root / "book" / "generated" / "runs").glob("*.json"))
        if "build" in what or not runs:
            continue
        tr.write_line("")
        tr.write_line(f"{what}: per notebook (cached: served from an earlier run)")
        tr.write_line(f"{'notebook':<36} {'status':<8} {'wall s':>7} {'CPU s':>7}")
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
            tr.write_line(f"{f.stem:<36} {status:<8} {meta.get('seconds', float('nan')):7.1f} "
                          f"{cpu if cpu is not None else float('nan'):7.1f}")
        tr.write_line(f"{'executed in this session':<36} {'':<8} {totals[0]:7.1f} {totals[1]:7.1f}")
    reports = [r for r in tr.stats.get("passed", []) + tr.stats.get("failed", []) if r.when == "call"]
    slow = sorted(reports, key=lambda r: r.duration, reverse=True)[:5]
    if slow:
        tr.write_line("")
        tr.write_line("slowest test calls (fixtures excluded): " + ", ".join(
            f"{r.nodeid.split('::')[-1]} {r.duration:.1f} s" for r in slow))


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist (`make test` runs both stages on one worker per core) each worker takes its share of
    the cores for torch, instead of every worker starting one thread per core.  The controller (or a run
    without xdist) starts the session's record of pipeline steps afresh."""
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if workers:
        import torch

        torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(workers)))
    if not hasattr(config, "workerinput"):
        PIPELINE_STEPS.unlink(missing_ok=True)


#: fixtures of the one smoke run of a session (conftest.smoke_project and everything built on it)
SMOKE_FIXTURES = {"smoke_project", "smoke_book", "pdf_job", "site", "driver", "pdf"}
#: the test files whose every test uses the smoke run, and the single tests elsewhere that do
SMOKE_FILES = {"test_notebooks.py", "test_browser.py", "test_pdf.py"}
SMOKE_TESTS = {"test_results.py::test_results_page_of_the_smoke_run"}


def pipeline_group(nodeid: str) -> str | None:
    """The pipeline run a test shares with others: ``"smoke"``, ``"rehearsal"`` or None (it shares none).

    Read from the test's id alone, so that pytest-xdist's controller, which collects nothing, can group by it.
    """
    from test_rehearsal import REHEARSED

    path, _, test = nodeid.partition("::")
    file = path.rsplit("/", 1)[-1]
    if file == "test_rehearsal.py" and test.startswith("test_notebook_runs_at_full_shapes["):
        return "rehearsal" if test[test.index("[") + 1:-1] in REHEARSED else "smoke"
    if file in SMOKE_FILES or f"{file}::{test}" in SMOKE_TESTS:
        return "smoke"
    return None


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """With ``--dist loadgroup`` (the tests stage of `make test`): the tests of one pipeline run on one worker.

    The tests of the smoke run (its notebooks, the book built from it, the browser, the PDF) form one unit of
    work and those of the rehearsal another, so each pipeline runs once in the session while the other tests
    (runner, reliability, sweep, cluster, small books) share the remaining workers.  xdist's own
    ``xdist_group`` mark cannot do this here: it renames the test ids, which pytest 9.2 no longer lets it do.
    """
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class PipelineGroups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return pipeline_group(nodeid) or nodeid

    return PipelineGroups(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Slow tests first; a test that uses the smoke run must be in its group (:func:`pipeline_group`): else, on
    another worker, it would execute every notebook a second time."""
    # the slow tests outside the pipelines (real kernels: clusters, sweeps, checkpoints) start first, right after
    # the pipelines (the largest units), so that none of them is left to run alone at the end of the session
    items.sort(key=lambda item: pipeline_group(item.nodeid) is None and item.get_closest_marker("notebooks") is None)
    stray = [item.nodeid for item in items
             if SMOKE_FIXTURES & set(getattr(item, "fixturenames", ())) and pipeline_group(item.nodeid) != "smoke"]
    if stray:
        raise pytest.UsageError(f"tests/conftest.py: add to SMOKE_FILES or SMOKE_TESTS (they use the smoke run): "
                                f"{', '.join(stray)}")
