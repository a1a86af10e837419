"""covbook run|sweep --cluster: Dask distributed as the engine (covbook.book.distributed)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from covbook.book.config import UsageError
from covbook.book.distributed import parse_cluster
from helpers import COVBOOK, cmdline, covbook, descendants, make_notebook

#: The sweep test's two notebooks: a tiny project's (the wiring is under test, not the science, which the
#: fast suite and the smoke run of the real chapters test), each drawing from a generator keyed on (seed,
#: chapter), so the outputs depend on the seed; the second sleeps long enough for a worker to be killed
#: mid-job. They draw with numpy alone: covbook.session (setup, streams) imports torch, about 2 s of CPU in
#: each of the test's ~9 kernels.
FAST = ("01_alpha", "02_beta")
DRAW = ("import time\n"
        "from covbook import claims\n"
        "import numpy as np\n"
        "v = float(np.random.default_rng(np.random.SeedSequence([seed, int(CHAPTER)])).standard_normal())\n"
        "print(f'drew {v!r}')\n"
        "time.sleep(8 if CHAPTER == '02' else 0)\n"  # FAST[1]'s jobs are the ones killed mid-run
        "claims.measure('x_is_x', v, prediction=v)")
X_IS_X = "x_is_x: {kind: identity, statement: x equals itself, window: tolerance, tolerance: 0.0}\n"


def _tiny_project(root: Path) -> Path:
    """Two notebooks of :data:`FAST` (one claim each, its value drawn from the seed's streams) with rules."""
    (root / "notebooks" / "rules").mkdir(parents=True)
    (root / "book").mkdir()
    shutil.copy(Path(__file__).resolve().parents[1] / "_config.yml", root / "_config.yml")
    for i, name in enumerate(FAST, 1):
        (root / "notebooks" / f"{name}.md").write_text(make_notebook(DRAW, f"CHAPTER = '0{i}'"))
        (root / "notebooks" / "rules" / f"{name}.yml").write_text(X_IS_X)
    (root / "notebooks" / "profiles.yml").write_text("01_alpha:\n  smoke: {}\n")
    return root


def test_parse_cluster_accepts_the_three_spellings(tmp_path):
    assert parse_cluster("local:3") == ("local", 3)
    assert parse_cluster("tls://node7:8786") == ("address", "tls://node7:8786")
    f = tmp_path / "scheduler.json"
    f.write_text('{"address": "tcp://node7:8786"}')
    assert parse_cluster(str(f)) == ("file", f)


@pytest.mark.parametrize("spec", ["local:0", "local:x", "local:", "node7:8786", "tcp://", "tcp://h:0", "nothere.json"])
def test_parse_cluster_refuses_anything_else(spec):
    with pytest.raises(UsageError, match="--cluster"):
        parse_cluster(spec)


@pytest.mark.parametrize("spec", ["http://h:1"])
def test_an_address_dask_refuses_is_a_usage_error(project, spec):
    res = covbook(project, "run", "--cluster", spec)
    assert res.returncode == 2 and f"--cluster {spec}: cannot connect" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr and not (project / "book" / "generated" / "runs").exists()


def test_cluster_usage_errors_exit_2_before_any_kernel(project):
    for args, match in ((["run", "--cluster", "local:0"], "local:N"),
                        (["run", "--jobs", "2", "--cluster", "local:2"], "exclude each other"),
                        (["sweep", "--seeds", "0-1", "--cluster", "nowhere"], "local:N")):
        res = covbook(project, *args)
        assert res.returncode == 2 and match in res.stderr, res.stderr
    assert not (project / "book" / "generated" / "runs").exists()


def test_run_help_documents_the_cluster():
    res = subprocess.run([*COVBOOK, "run", "--help"], capture_output=True, text=True, check=True)
    assert "--cluster SPEC" in res.stdout and "local:N" in res.stdout and "tcp://HOST:PORT" in res.stdout


# ----------------------------------------------------------------------------- two notebooks × two seeds


def _kill_a_worker_mid_job(covbook_pid: int, killed: dict, after_s: float = 4.0, timeout: float = 600) -> None:
    """SIGKILL the Dask worker process running a notebook of FAST[1] once it has run ``after_s`` seconds."""
    seen: dict[int, float] = {}
    end = time.monotonic() + timeout
    while time.monotonic() < end and not killed:
        for pid in descendants(covbook_pid):
            cmd = cmdline(pid)
            if "covbook.book.runner" in cmd and FAST[1] in cmd:
                seen.setdefault(pid, time.monotonic())
                if time.monotonic() - seen[pid] > after_s:
                    worker = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
                    killed.update(worker=worker, runner=pid, job=cmd.split()[-1])
                    os.kill(worker, signal.SIGKILL)
                    return
        time.sleep(0.2)


def _claims(tree: Path, name: str) -> list[dict]:
    return json.loads((tree / "book" / "generated" / "claims" / f"{name}.json").read_text())


def _outputs(tree: Path, name: str) -> list:
    """The executed notebook's cells and outputs, without papermill's timestamps and durations and without
    the cell ids (jupytext draws new random ones at every read of a MyST notebook, locally too)."""
    nb = json.loads((tree / "book" / "generated" / f"{name}.ipynb").read_text())
    for cell in nb["cells"]:
        cell.pop("id", None)
        cell.get("metadata", {}).pop("papermill", None)
        cell.get("metadata", {}).pop("execution", None)
    return nb["cells"]


@pytest.mark.notebooks
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the worker processes in /proc")
def test_sweep_on_local_2_matches_the_local_pool_and_survives_a_killed_worker(tmp_path):
    seeds = ["--seeds", "0-1", "--profile", "smoke", "--device", "cpu", "--no-progress", *FAST]
    local = _tiny_project(tmp_path / "local")
    res = covbook(local, "sweep", *seeds, "--jobs", "2")
    assert res.returncode == 0, res.stdout + res.stderr
    dist = _tiny_project(tmp_path / "dist")
    proc = subprocess.Popen([*COVBOOK, "sweep", *seeds, "--cluster", "local:2"], cwd=dist,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killed: dict = {}
    killer = threading.Thread(target=_kill_a_worker_mid_job, args=(proc.pid, killed), daemon=True)
    killer.start()
    out, err = proc.communicate(timeout=900)
    killer.join(timeout=1)
    print(out, err, killed)
    assert proc.returncode == 0, out + err
    assert killed, "no worker was killed: the test did not exercise a worker's death"
    # the killed job ran again: every (notebook, seed) finished once, none twice, none failed
    ok_lines = [line for line in (out + err).splitlines() if line.strip().startswith("ok ")]
    assert sorted(line.split()[1] + line.split()[3] for line in ok_lines) == sorted(
        n + s for n in FAST for s in ("0)", "1)")), out + err
    assert "seed 0: 2 ok, 0 failed" in out and "seed 1: 2 ok, 0 failed" in out, out
    for seed in (0, 1):
        a = local / "book/generated/sweep/smoke" / f"seed-{seed}"
        b = dist / "book/generated/sweep/smoke" / f"seed-{seed}"
        for name in FAST:
            assert _claims(a, name) == _claims(b, name), f"{name} seed {seed}: claims differ"
            assert _outputs(a, name) == _outputs(b, name), f"{name} seed {seed}: outputs differ"
            ra, rb = (json.loads((t / "book/generated/runs" / f"{name}.json").read_text()) for t in (a, b))
            assert ra["hash"] == rb["hash"] and rb["status"] == "ok"  # the same cache key
    calib_a, calib_b = (json.loads((t / "book" / "calibration.json").read_text()) for t in (local, dist))
    for name in FAST:
        assert calib_a["profiles"]["smoke"][name]["claims"] == calib_b["profiles"]["smoke"][name]["claims"]
    # the client wrote the tree: no temporaries left, no worker scratch inside it
    assert not [p for p in dist.rglob("*") if ".covbook/tmp/" in str(p.relative_to(dist)) and p.is_file()]


@pytest.mark.notebooks
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the worker processes in /proc")
def test_a_job_whose_worker_dies_runs_again_with_the_notebooks_it_reads(tmp_path):
    """``kill -9`` of the one worker of local:1 mid-job: that worker also held the notebooks folder the jobs
    read, which scattered data would lose with it (the job cancelled, exit 1); the scheduler computes the
    folder again and the job runs again on the restarted worker, once."""
    tree = _tiny_project(tmp_path / "tree")
    proc = subprocess.Popen([*COVBOOK, "run", FAST[1], "--profile", "smoke", "--device", "cpu", "--no-progress",
                             "--force", "--cluster", "local:1"], cwd=tree, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    killed: dict = {}
    killer = threading.Thread(target=_kill_a_worker_mid_job, args=(proc.pid, killed, 2.0), daemon=True)
    killer.start()
    out, err = proc.communicate(timeout=600)
    killer.join(timeout=1)
    print(out, err, killed)
    assert killed, "no worker was killed: the test did not exercise a worker's death"
    assert proc.returncode == 0, out + err
    assert "scattered" not in err and "Cancelled" not in out + err, err
    assert "1 executed, 0 cached, 0 failed" in out, out
    assert [line.split()[:2] for line in out.splitlines() if line.strip().startswith(("ok ", "FAILED"))] == [
        ["ok", FAST[1]]], out
    assert json.loads((tree / "book/generated/runs" / f"{FAST[1]}.json").read_text())["status"] == "ok"
    assert _claims(tree, FAST[1])


SLEEPER = ("import time\ntime.sleep(120)\n"
           "from covbook import claims\nclaims.measure('never', 1, prediction=1)")


@pytest.mark.notebooks
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the worker processes in /proc")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_or_sigterm_stops_the_cluster_and_its_kernels(project, signum):
    """Ctrl-C (SIGINT to the terminal's process group) or SIGTERM while two kernels run on local:2: exit 130 or
    143 as a local run, one line saying what did not finish, every worker and kernel gone, nothing written, no
    temporaries."""
    for name in ("01_alpha", "02_beta"):
        (project / "notebooks" / f"{name}.md").write_text(make_notebook(SLEEPER))
    proc = subprocess.Popen([*COVBOOK, "run", "--profile", "smoke", "--cluster", "local:2", "--no-progress"],
                            cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    end = time.monotonic() + 300
    while len([p for p in descendants(proc.pid) if "ipykernel" in cmdline(p)]) < 2:
        assert time.monotonic() < end and proc.poll() is None, "the kernels did not start"
        time.sleep(0.5)
    family = descendants(proc.pid)
    t0 = time.monotonic()
    os.killpg(proc.pid, signum) if signum == signal.SIGINT else proc.send_signal(signum)
    out, err = proc.communicate(timeout=60)
    print(f"signal to exit: {time.monotonic() - t0:.1f} s", err)
    how = "interrupted" if signum == signal.SIGINT else "stopped by SIGTERM"
    assert proc.returncode == (130 if signum == signal.SIGINT else 143), err
    assert "Traceback" not in err, err
    assert [line for line in err.splitlines() if how in line] == [
        f"covbook run: {how}; finished and kept: none; not finished: 01_alpha, 02_beta"], err
    end = time.monotonic() + 10
    while [p for p in family if Path(f"/proc/{p}").exists() and cmdline(p)]:
        assert time.monotonic() < end, [cmdline(p) for p in family if Path(f"/proc/{p}").exists()]
        time.sleep(0.2)
    assert not (project / "book" / "generated" / "runs").exists()
    assert not list((project / ".covbook" / "tmp").glob("*"))


@pytest.mark.notebooks
def test_a_cluster_job_has_the_local_time_limit(project):
    """The job, and so its time limit, is the local pool's: past ``--timeout`` it fails naming the running cell."""
    (project / "notebooks" / "02_beta.md").write_text(make_notebook(SLEEPER))
    res = covbook(project, "run", "02", "--profile", "smoke", "--timeout", "8", "--no-progress", "--cluster", "local:1")
    assert res.returncode == 1 and "timed out after 8 s" in res.stderr, res.stdout + res.stderr
    assert "(index 3: 'import time')" in res.stderr, res.stderr
