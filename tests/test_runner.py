"""The pipeline: execution, cache, atomic outputs, failure isolation, usage errors, check."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import X_IS_X
from covbook.book.config import Paths, UsageError, notebook_parameters, resolve_parameters
from covbook.book.runner import run_notebooks
from helpers import COVBOOK, alive, covbook, kernel_of, make_notebook, wait_for

pytestmark = pytest.mark.notebooks


def test_run_check_and_cache(project):
    first = covbook(project, "run", "--profile", "smoke", "--no-progress", check=True)
    assert "2 executed" in first.stdout
    gen = project / "book" / "generated"
    assert (gen / "01_alpha.ipynb").is_file() and (gen / "claims" / "02_beta.json").is_file()
    meta = json.loads((gen / "runs" / "01_alpha.json").read_text())
    assert meta["status"] == "ok" and meta["parameters"]["x"] == 3 and meta["parameters"]["profile"] == "smoke"
    # where the time went: CPU of the notebook's process and its kernel
    assert meta["cpu_seconds"] > 0 and "(CPU" in first.stderr + first.stdout
    nb = json.loads((gen / "01_alpha.ipynb").read_text())
    injected = [c for c in nb["cells"] if "injected-parameters" in c["metadata"].get("tags", [])]
    assert injected and "remove-cell" in injected[0]["metadata"]["tags"]

    timings = json.loads((project / ".covbook" / "timings.json").read_text())  # the plan's calibration
    assert timings["01_alpha"]["cpu"]["smoke"]["parameters"]["x"] == 3
    assert timings["02_beta"]["cpu"]["smoke"]["seconds"] > 0
    assert not list((project / ".covbook" / "tmp").iterdir())  # the run's temporaries are gone

    second = covbook(project, "run", "--profile", "smoke", "--no-progress", check=True)
    assert "0 executed, 2 cached" in second.stdout
    # a change of parameters, of the source, or --force re-executes
    assert "1 executed" in covbook(project, "run", "--profile", "quick", "01", "--no-progress", check=True).stdout
    assert "1 executed" in covbook(project, "run", "02", "--force", "--no-progress", check=True).stdout

    res = covbook(project, "check", "--json", check=True)
    rows = json.loads(res.stdout)
    assert {r["notebook"] for r in rows} == {"01_alpha", "02_beta"}
    assert all({"id", "statement", "measured", "expected", "tolerance", "passed"} <= set(r) for r in rows)
    assert covbook(project, "check").returncode == 0


def test_failing_notebook_does_not_stop_the_others(project):
    (project / "notebooks" / "01_alpha.md").write_text(make_notebook("x = 1\nraise RuntimeError('boom')"))
    res = covbook(project, "run", "--profile", "smoke", "--no-progress")
    assert res.returncode == 1
    assert "01_alpha" in res.stderr and "RuntimeError" in res.stderr and "boom" in res.stderr and "cell" in res.stderr
    gen = project / "book" / "generated"
    assert (gen / "02_beta.ipynb").is_file()
    assert (gen / "failed" / "01_alpha.ipynb").is_file() and not (gen / "01_alpha.ipynb").exists()
    chk = covbook(project, "check")
    assert chk.returncode == 1 and "01_alpha: notebook failed" in chk.stderr


def test_failed_claim_and_missing_claims_fail_check(project):
    bad = "from covbook import claims\nclaims.measure('one_is_two', 1.0, prediction=2.0)"
    (project / "notebooks" / "01_alpha.md").write_text(make_notebook(bad))
    (project / "notebooks" / "rules" / "01_alpha.yml").write_text(
        "one_is_two: {kind: sanity, statement: one is two, window: tolerance, tolerance: 0.5}\n")
    (project / "notebooks" / "02_beta.md").write_text(make_notebook("y = 1"))
    res = covbook(project, "run", "--profile", "smoke", "--no-progress")
    assert res.returncode == 1 and "recorded no claims" in res.stderr  # 02 recorded none
    chk = covbook(project, "check")
    assert chk.returncode == 1
    assert "claim one_is_two failed" in chk.stderr and "02_beta" in chk.stderr
    assert "[FAIL] one_is_two" in chk.stdout


def test_parameters_cell_is_read_and_resolved(project):
    params = notebook_parameters(project / "notebooks" / "01_alpha.md")
    assert params == {"profile": "quick", "device": "auto", "seed": 0, "x": 1}
    got = resolve_parameters("01_alpha", params, {"01_alpha": {"smoke": {"x": 3}}}, "smoke", "cpu", 4)
    assert got == {"x": 3, "profile": "smoke", "device": "cpu", "seed": 4}
    with pytest.raises(UsageError, match="must not set seed"):
        resolve_parameters("01_alpha", params, {"01_alpha": {"full": {"seed": 3}}}, "full", "cpu", 0)


def test_notebook_without_parameters_cell_is_rejected(project):
    (project / "notebooks" / "02_beta.md").write_text(make_notebook("x = 1").replace(":tags: [parameters]\n", ""))
    with pytest.raises(UsageError, match="tagged 'parameters'"):
        run_notebooks(Paths(project), ["02"], progress=False)


# ----------------------------------------------------------------------------- interruption, leftovers, damage

OK = "from covbook import claims\nclaims.measure('x_is_x', x, prediction=x)"
SLEEPER = ("import time\ntime.sleep(120)\n"
           "from covbook import claims\nclaims.measure('never', 1)")


def _start(project, *args: str) -> subprocess.Popen:
    """``covbook ARGS`` in its own session, as a terminal would run it (Ctrl-C = SIGINT to the whole group)."""
    return subprocess.Popen([*COVBOOK, *args], cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, preexec_fn=_terminal_sigint)


def _terminal_sigint() -> None:
    """SIGINT as a terminal's foreground job has it (a background job started by a shell ignores it)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_stops_the_run_within_seconds(project):
    """SIGINT during the 2nd of 3 notebooks: the running kernel stops, the 3rd never starts, the 1st is kept."""
    (project / "notebooks" / "02_beta.md").write_text(make_notebook(SLEEPER))
    ok = "from covbook import claims\nclaims.measure('x_is_x', x, prediction=x)"
    (project / "notebooks" / "03_gamma.md").write_text(make_notebook(ok))
    (project / "notebooks" / "rules" / "03_gamma.yml").write_text(X_IS_X)
    proc = _start(project, "run", "--profile", "smoke", "--jobs", "1", "--no-progress")
    gen = project / "book" / "generated"
    wait_for(lambda: kernel_of(proc.pid, "02_beta"))
    child, kernel = kernel_of(proc.pid, "02_beta")
    time.sleep(1.0)
    t0 = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    elapsed = time.monotonic() - t0
    print(f"Ctrl-C to exit: {elapsed:.2f} s")
    assert proc.returncode == 130, err
    assert elapsed < 5.0
    assert "Traceback" not in err and "Error" not in err, err
    summary = [line for line in err.splitlines() if "interrupted" in line]
    assert len(summary) == 1 and "01_alpha (ok)" in summary[0] and "not finished: 02_beta, 03_gamma" in summary[0]
    assert (gen / "01_alpha.ipynb").is_file() and (gen / "claims" / "01_alpha.json").is_file()
    assert not (gen / "runs" / "02_beta.json").exists() and not (gen / "runs" / "03_gamma.json").exists()
    wait_for(lambda: not alive(kernel) and not alive(child), timeout=5)
    assert not list((project / ".covbook" / "tmp").glob("*"))  # temporaries removed


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the notebook's processes in /proc")
def test_a_later_run_cleans_what_a_kill_9_left(project):
    (project / "notebooks" / "02_beta.md").write_text(make_notebook(SLEEPER))
    proc = _start(project, "run", "02", "--profile", "smoke", "--no-progress")
    wait_for(lambda: kernel_of(proc.pid, "02_beta"))
    child, kernel = kernel_of(proc.pid, "02_beta")
    os.kill(proc.pid, signal.SIGKILL)  # the covbook process: nothing gets to clean up
    proc.wait()
    wait_for(lambda: not alive(child) and not alive(kernel), timeout=10)  # it dies with its parent, its kernel too
    leftovers = list((project / ".covbook" / "tmp").glob("*"))
    assert leftovers  # kill -9 cleaned nothing ...
    (project / "notebooks" / "02_beta.md").write_text(make_notebook("y = 1"))
    res = covbook(project, "run", "01", "--profile", "smoke", "--no-progress", check=True)  # the tree is free
    assert "1 executed" in res.stdout
    assert not any(p.exists() for p in leftovers)  # ... and the next run does


def test_cache_serves_only_whole_outputs_and_stale_leftovers_are_cleaned(project):
    covbook(project, "run", "01", "--profile", "smoke", "--no-progress", check=True)
    gen = project / "book" / "generated"
    for damaged in (gen / "claims" / "01_alpha.json", gen / "01_alpha.ipynb", gen / "runs" / "01_alpha.json"):
        damaged.write_text(damaged.read_text()[:30])
        res = covbook(project, "run", "01", "--profile", "smoke", "--no-progress", check=True)
        assert "1 executed" in res.stdout, damaged  # not "cached"
        assert covbook(project, "check").returncode == 1  # 02 was never run ...
        assert "damaged" not in covbook(project, "check").stderr  # ... but nothing is damaged
    # leftovers of an interrupted run, a failed copy from before: cleaned by a cached run
    (gen / "failed").mkdir()
    (gen / "failed" / "01_alpha.ipynb").write_text("{}")
    (project / ".covbook" / "tmp" / "20200101T000000-1").mkdir(parents=True)
    res = covbook(project, "run", "01", "--profile", "smoke", "--no-progress", check=True)
    assert "0 executed, 1 cached" in res.stdout
    assert not (gen / "failed" / "01_alpha.ipynb").exists()
    assert not any((project / ".covbook" / "tmp").glob("*"))


def test_a_success_removes_the_failed_copy(project):
    (project / "notebooks" / "01_alpha.md").write_text(make_notebook("x = 1\nraise RuntimeError('boom')"))
    assert covbook(project, "run", "01", "--profile", "smoke", "--no-progress").returncode == 1
    failed = project / "book" / "generated" / "failed" / "01_alpha.ipynb"
    assert failed.is_file()
    ok = "from covbook import claims\nclaims.measure('x_is_x', x, prediction=x)"
    (project / "notebooks" / "01_alpha.md").write_text(make_notebook(ok))
    covbook(project, "run", "01", "--profile", "smoke", "--no-progress", check=True)
    assert not failed.exists()


def test_editing_the_pipeline_does_not_re_execute(project, monkeypatch):
    """The cache key is computed from the science code only: a changed covbook/book hashes the same."""
    from covbook.book import cache

    covbook(project, "run", "01", "--profile", "smoke", "--no-progress", check=True)
    before = cache.science_hash()
    real = cache.PACKAGE
    copy = project / "pkgcopy"
    shutil.copytree(real, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert cache.science_hash(copy) == before
    (copy / "book" / "cli.py").write_text((copy / "book" / "cli.py").read_text() + "\n# edited\n")
    assert cache.science_hash(copy) == before
    res = covbook(project, "run", "01", "--profile", "smoke", "--no-progress", check=True)
    assert "0 executed, 1 cached" in res.stdout


def test_two_runs_at_once_the_second_is_refused_and_the_first_kept(project):
    """Two runs of one notebook at once: the second says who holds the tree and leaves the first alone."""
    (project / "notebooks" / "02_beta.md").write_text(make_notebook("import time\ntime.sleep(6)\n" + OK))
    first = _start(project, "run", "02", "--profile", "smoke", "--no-progress")
    wait_for(lambda: kernel_of(first.pid, "02_beta"))
    second = covbook(project, "run", "02", "--profile", "smoke", "--no-progress")
    assert second.returncode == 1 and f"locked by pid {first.pid}" in second.stderr
    assert "covbook run 02" in second.stderr
    out, err = first.communicate(timeout=120)
    assert first.returncode == 0 and "1 executed" in out, err
    assert (project / "book" / "generated" / "claims" / "02_beta.json").is_file()
    waited = covbook(project, "run", "02", "--profile", "smoke", "--no-progress", "--wait", check=True)
    assert "1 cached" in waited.stdout
