"""Nothing stale, nothing lost (issue 19), with kernels: stub notebooks run by ``covbook run``.

Checkpoints keyed on the code, outputs committed with their record, a full disk, another
filesystem, an unwritable HOME, SIGTERM, a deep TMPDIR, time limits, a dead kernel.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from covbook.book import plan, runner
from covbook.book.config import Paths
from covbook.book.lock import tree_lock
from helpers import COVBOOK, alive, covbook, kernel_of, make_notebook, wait_for, with_read_only

pytestmark = pytest.mark.notebooks

OK = "from covbook import claims\nclaims.measure('x_is_x', x, prediction=x)"
SLEEPER = "import time\ntime.sleep(120)\n" + OK


def _gen(project: Path) -> Path:
    return project / "book" / "generated"


def _snapshot(project: Path, name: str) -> dict[str, bytes]:
    gen = _gen(project)
    return {p: (gen / p).read_bytes() for p in (f"{name}.ipynb", f"claims/{name}.json", f"runs/{name}.json")}


# ----------------------------------------------------------------------------- checkpoints


TRAINER = ("from covbook.session import checkpoint_dir\nfrom covbook import claims\n"
           "marker = checkpoint_dir() / 'trained.txt'\nresumed = marker.is_file()\nmarker.write_text('done')\n"
           "print('resumed' if resumed else 'trained', checkpoint_dir())\n" + OK)


def _trained(project: Path, name: str = "01_alpha") -> str:
    nb = json.loads((_gen(project) / f"{name}.ipynb").read_text())
    text = "".join("".join(o.get("text", "")) for c in nb["cells"] for o in c.get("outputs", []))
    return "resumed" if "resumed" in text else "trained"


def test_a_checkpoint_is_keyed_on_the_code_and_force_retrains(project, monkeypatch):
    (project / "notebooks" / "01_alpha.md").write_text(make_notebook(TRAINER))
    paths = Paths(project)
    monkeypatch.setattr(plan, "notebook_science", lambda path: "science-A")
    runner.run_notebooks(paths, ["01"], profile="smoke", progress=False)
    assert _trained(project) == "trained"
    (_gen(project) / "01_alpha.ipynb").unlink()  # lose the notebook, keep the checkpoint: resumed
    runner.run_notebooks(paths, ["01"], profile="smoke", progress=False)
    assert _trained(project) == "resumed"
    runner.run_notebooks(paths, ["01"], profile="smoke", progress=False, force=True)
    assert _trained(project) == "trained"  # --force retrains
    monkeypatch.setattr(plan, "notebook_science", lambda path: "science-B")  # e.g. lr_at edited to return 0
    [r] = runner.run_notebooks(paths, ["01"], profile="smoke", progress=False)
    assert r.status == "ok" and _trained(project) == "trained"
    assert len(list((paths.checkpoints / "01_alpha").iterdir())) == 1  # the old key's checkpoint is gone


# ----------------------------------------------------------------------------- outputs and their record


def test_a_run_that_cannot_write_its_record_serves_nothing(project):
    """``book/generated/runs`` read-only: ``run 02 --seed 5`` fails; its outputs are never served under the seed-0
    record, and the next run makes the outputs whole again."""
    covbook(project, "run", "02", "--profile", "smoke", "--no-progress", check=True)
    before = _snapshot(project, "02_beta")
    res = with_read_only(project, [_gen(project) / "runs"], "run", "02", "--profile", "smoke", "--seed", "5",
                         "--no-progress")
    assert res.returncode == 1 and "could not write the outputs" in res.stderr, res.stderr
    assert _snapshot(project, "02_beta")["runs/02_beta.json"] == before["runs/02_beta.json"]
    assert "02_beta" in covbook(project, "check").stderr
    again = covbook(project, "run", "02", "--profile", "smoke", "--seed", "0", "--no-progress", check=True)
    assert "1 executed" in again.stdout  # not served: the record names other files
    assert "02_beta" not in covbook(project, "check").stderr


def test_a_full_disk_keeps_the_last_good_outputs(project):
    big = "import os\nprint('x' * int(os.environ.get('COVBOOK_TEST_BIG', '0')))\n" + OK
    (project / "notebooks" / "02_beta.md").write_text(make_notebook(big, "x = 2"))
    covbook(project, "run", "02", "--profile", "smoke", "--no-progress", check=True)
    before = _snapshot(project, "02_beta")
    from test_reliability import _with_file_size_limit

    res = _with_file_size_limit(project, 400_000, "run", "02", "--profile", "smoke", "--force", "--no-progress",
                                env={"COVBOOK_TEST_BIG": "1000000"})
    assert res.returncode == 1 and "File too large" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
    assert _snapshot(project, "02_beta") == before
    failed = _gen(project) / "failed" / "02_beta.ipynb"
    if failed.exists():
        json.loads(failed.read_text())  # whole, or not there
    chk = covbook(project, "check")
    assert chk.returncode == 1 and "02_beta: notebook failed" in chk.stderr and "last good outputs" in chk.stderr
    again = covbook(project, "run", "02", "--profile", "smoke", "--no-progress", check=True)
    assert "1 cached" in again.stdout and not (_gen(project) / "failed" / "02_beta.json").exists()


def test_book_generated_on_another_filesystem(project):
    shm = Path("/dev/shm")
    if not shm.is_dir() or shm.stat().st_dev == project.stat().st_dev:
        pytest.skip("needs /dev/shm on another filesystem")
    other = shm / f"covbook-generated-{os.getpid()}"
    other.mkdir()
    try:
        (project / "book" / "generated").symlink_to(other)
        res = covbook(project, "run", "01", "--profile", "smoke", "--no-progress")
        assert res.returncode == 0 and "1 executed" in res.stdout, res.stderr
        assert (other / "claims" / "01_alpha.json").is_file()
    finally:
        shutil.rmtree(other)


# ----------------------------------------------------------------------------- the kernels' environment


def test_an_unwritable_home_does_not_reach_the_outputs_and_stderr_is_never_cached(project, tmp_path):
    mpl = "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\nplt.figure();\n" + OK
    (project / "notebooks" / "01_alpha.md").write_text(make_notebook(mpl))
    noisy = "import sys\nprint('careful', file=sys.stderr)\n" + OK
    (project / "notebooks" / "02_beta.md").write_text(make_notebook(noisy, "x = 2"))
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home)}
    for var in ("XDG_CACHE_HOME", "XDG_CONFIG_HOME", "MPLCONFIGDIR", "IPYTHONDIR"):
        env[var] = str(home / var.lower())  # all unwritable, as a CI runner's HOME can be
    res = with_read_only(project, [home], "run", "--profile", "smoke", "--no-progress", env=env)
    assert "01_alpha" not in res.stderr, res.stderr  # matplotlib found a writable cache in .covbook/
    assert res.returncode == 1 and "02_beta" in res.stderr and "wrote to stderr" in res.stderr
    assert "careful" in res.stderr
    again = covbook(project, "run", "02", "--profile", "smoke", "--no-progress")
    assert "1 failed" in again.stdout  # not cached as ok
    assert (project / ".covbook" / "home" / "matplotlib").is_dir()


def test_a_deep_tmpdir_still_runs_and_keeps_the_last_good_outputs(project, tmp_path):
    deep = tmp_path / ("t" * 92)
    deep.mkdir()
    covbook(project, "run", "01", "--profile", "smoke", "--no-progress", check=True)
    env = {**os.environ, "TMPDIR": str(deep)}
    res = subprocess.run([*COVBOOK, "run", "--profile", "smoke", "--force", "--no-progress"], cwd=project,
                         capture_output=True, text=True, env=env)
    assert res.returncode == 0 and "2 executed" in res.stdout, res.stderr


# ----------------------------------------------------------------------------- SIGTERM


def _start(project, *args: str) -> subprocess.Popen:
    return subprocess.Popen([*COVBOOK, *args], cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def test_sigterm_is_handled_like_ctrl_c(project):
    (project / "notebooks" / "02_beta.md").write_text(make_notebook(SLEEPER))
    proc = _start(project, "run", "--profile", "smoke", "--no-progress")
    tmp = project / ".covbook" / "tmp"
    wait_for(lambda: kernel_of(proc.pid, "02_beta"))
    child, kernel = kernel_of(proc.pid, "02_beta")
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)  # to covbook alone, as `timeout` or a CI runner sends it
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert time.monotonic() - t0 < 6 and "Traceback" not in err
    [line] = [ln for ln in err.splitlines() if "SIGTERM" in ln]
    assert "01_alpha (ok)" in line and "not finished: 02_beta" in line
    assert not list(tmp.glob("*"))
    wait_for(lambda: not alive(kernel) and not alive(child), timeout=5)
    with tree_lock(Paths(project).lock, "next"):
        pass


# ----------------------------------------------------------------------------- time limits, dead kernels, counts


def test_a_notebook_past_its_time_limit_fails_naming_the_cell(project):
    (project / "notebooks" / "02_beta.md").write_text(make_notebook(SLEEPER))
    t0 = time.monotonic()
    res = covbook(project, "run", "02", "--profile", "smoke", "--timeout", "8", "--no-progress")
    assert time.monotonic() - t0 < 100
    assert res.returncode == 1 and "02_beta" in res.stderr and "timed out after 8 s" in res.stderr, res.stderr
    assert "(index 3: 'import time')" in res.stderr, res.stderr  # after the parameters and injected cells


def test_a_dead_kernel_is_reported_with_its_cell(project):
    crash = "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n" + OK
    (project / "notebooks" / "02_beta.md").write_text(make_notebook(crash))
    res = covbook(project, "run", "02", "--profile", "smoke", "--no-progress")
    assert res.returncode == 1 and "kernel died in" in res.stderr, res.stderr
    assert "(index 3: 'import os, signal')" in res.stderr
    assert "Traceback" not in res.stderr


def test_run_counts_the_claims_that_failed(project):
    bad = "from covbook import claims\nclaims.measure('wrong', 1.0, prediction=2.0)"
    (project / "notebooks" / "01_alpha.md").write_text(make_notebook(bad))
    (project / "notebooks" / "rules" / "01_alpha.yml").write_text(
        "wrong: {kind: sanity, statement: one is two, window: tolerance, tolerance: 0.5}\n")
    res = covbook(project, "run", "--profile", "smoke", "--no-progress")
    assert "0 failed" in res.stdout and "1 of 2 claims failed" in res.stdout, res.stdout
