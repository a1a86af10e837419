"""Nothing stale, nothing lost (issue 19), without kernels: the cache key, the commit of a run's outputs,
the lock, the CLI's error paths.  The tests that execute stub notebooks are in test_reliability_runs.py."""

from __future__ import annotations

import concurrent.futures as cf
import errno
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from covbook.book import cache, runner
from covbook.book.cache import is_cached
from covbook.book.config import Paths
from covbook.book.lock import tree_lock
from helpers import COVBOOK, ROOT, covbook, fake_run, make_notebook, with_read_only

# ----------------------------------------------------------------------------- the cache key


def test_science_hash_ignores_comments_notes_and_editor_folders(tmp_path):
    copy = tmp_path / "covbook"
    shutil.copytree(cache.PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    before = cache.science_hash(copy)
    stats = copy / "stats.py"
    edited = stats.read_text().replace("\n\n\ndef ", "\n\n\n\n# note\ndef ", 2)
    stats.write_text("# a comment\n" + edited + "\n# another\n")
    (copy / "notes.txt").write_text("to do\n")
    (copy / ".ipynb_checkpoints").mkdir()
    (copy / ".ipynb_checkpoints" / "stats-checkpoint.py").write_text("x = 1\n")
    assert cache.science_hash(copy) == before
    stats.write_text(stats.read_text() + "\nSOMETHING = 1\n")  # code that could change a result
    assert cache.science_hash(copy) != before


# ----------------------------------------------------------------------------- outputs and their record


def test_outputs_whose_record_does_not_match_are_never_served(project):
    """A seed-5 notebook and claims under a seed-0 record (a run that failed half-way): not cached, refused."""
    paths = Paths(project)
    fake_run(project, "02_beta", digest="key-seed-0")
    assert is_cached(paths, "02_beta", "key-seed-0")
    nb = paths.generated / "02_beta.ipynb"
    nb.write_text(nb.read_text().replace('"seed = 0"', '"seed = 5"'))  # other outputs, same record
    assert not is_cached(paths, "02_beta", "key-seed-0")
    res = covbook(project, "check")
    assert res.returncode == 1 and "not the file its run record" in res.stderr and "covbook run 02" in res.stderr


def test_a_record_of_an_older_covbook_is_not_served(project):
    paths = Paths(project)
    fake_run(project, "02_beta", digest="k")
    rec = json.loads((paths.runs / "02_beta.json").read_text())
    del rec["outputs"]
    (paths.runs / "02_beta.json").write_text(json.dumps(rec))
    assert not is_cached(paths, "02_beta", "k")


def _outcome(tmp_path: Path, name: str = "02_beta") -> dict:
    """A finished job's outcome: its notebook and claims in a temporary folder, not yet in the tree."""
    folder = tmp_path / "job"
    folder.mkdir()
    (folder / f"{name}.ipynb").write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4,
                                                      "nbformat_minor": 5}))
    (folder / f"{name}.claims.json").write_text("[]")
    meta = {"notebook": name, "parameters": {"seed": 5}, "hash": "key-seed-5", "seconds": 1.0, "cpu_seconds": 1.0,
            "device_used": "cpu", "rehearsal": False, "finished": "then"}
    return {"name": name, "dir": str(folder), "meta": meta, "error": None}


def test_a_run_whose_record_cannot_be_written_is_never_served(project, monkeypatch):
    """The run record's folder refuses the rename (read-only, a full disk): the run fails, and neither its outputs
    (no record names them) nor the last run's (its record names other files) are served."""
    paths = Paths(project)
    fake_run(project, "02_beta", digest="key-seed-0")
    real = os.replace

    def refuse_runs(a, b):
        if Path(b) == paths.runs / "02_beta.json":
            raise PermissionError(errno.EACCES, "Permission denied", str(b))
        return real(a, b)

    monkeypatch.setattr(runner.os, "replace", refuse_runs)
    r = runner.commit_outcome(paths, _outcome(project))
    assert r.status == "failed" and "could not write the outputs" in r.error and "Permission denied" in r.error
    assert not is_cached(paths, "02_beta", "key-seed-5") and not is_cached(paths, "02_beta", "key-seed-0")
    assert json.loads((paths.failed / "02_beta.json").read_text())["error"] == r.error


def test_the_run_record_is_moved_into_place_last(project, monkeypatch):
    paths, order = Paths(project), []
    real = os.replace
    monkeypatch.setattr(runner.os, "replace", lambda a, b: (order.append(Path(b)), real(a, b)))
    assert runner.commit_outcome(paths, _outcome(project)).status == "ok"
    assert [p for p in order if p.is_relative_to(paths.generated)] == [
        paths.claims / "02_beta.json", paths.generated / "02_beta.ipynb", paths.runs / "02_beta.json"]
    assert is_cached(paths, "02_beta", "key-seed-5")


@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="needs a tmpfs at /dev/shm")
def test_outputs_onto_a_real_tmpfs(tmp_path):
    other = Path("/dev/shm") / f"covbook-test-{os.getpid()}"
    other.mkdir()
    try:
        if other.stat().st_dev == tmp_path.stat().st_dev:
            pytest.skip("/dev/shm is on the same filesystem here")
        src = tmp_path / "a.json"
        src.write_text("[1]")
        runner._put(src, other / "claims" / "a.json")
        assert (other / "claims" / "a.json").read_text() == "[1]"
        assert [p.name for p in (other / "claims").iterdir()] == ["a.json"]  # no temporary left beside it
    finally:
        shutil.rmtree(other)


def test_a_failed_last_run_is_refused_by_check_and_build_and_its_old_page_removed(project):
    paths = Paths(project)
    fake_run(project, "01_alpha", digest="k1")
    fake_run(project, "02_beta", digest="k2")
    paths.failed.mkdir()
    (paths.failed / "02_beta.json").write_text(json.dumps({"status": "failed", "error": "cell 2 raised OSError",
                                                           "parameters": {"profile": "smoke"}}))
    page = project / "_build" / "html" / "generated" / "02_beta.html"
    page.parent.mkdir(parents=True)
    page.write_text("<p>old results</p>")
    keep = page.with_name("01_alpha.html")
    keep.write_text("<p>fine</p>")
    chk = covbook(project, "check")
    assert chk.returncode == 1 and "02_beta: notebook failed: cell 2 raised OSError" in chk.stderr
    assert "last good outputs are kept" in chk.stderr and "covbook run 02 --profile smoke" in chk.stderr
    res = covbook(project, "build")
    assert res.returncode == 1 and "02_beta: notebook failed" in res.stderr
    assert not page.exists() and keep.exists()


# ----------------------------------------------------------------------------- the kernels' environment


def test_stderr_in_a_visible_cell_is_what_the_build_refuses():
    def nb(tags, name="stderr"):
        return {"cells": [{"cell_type": "code", "execution_count": 3, "metadata": {"tags": tags},
                           "outputs": [{"output_type": "stream", "name": name, "text": "Matplotlib warning\n"}]}]}

    assert "cell 3 (index 0) wrote to stderr" in runner.stderr_problem(nb([]))
    assert "Matplotlib warning" in runner.stderr_problem(nb(["hide-input"]))
    assert runner.stderr_problem(nb(["remove-stderr"])) is None
    assert runner.stderr_problem(nb(["remove-cell"])) is None
    assert runner.stderr_problem(nb([], "stdout")) is None


# ----------------------------------------------------------------------------- time limits


def test_time_limit_from_the_estimate_or_the_profile(project):
    from covbook.book.plan import DEFAULT_LIMITS, LIMIT_FACTOR, LIMIT_FLOOR, plan_jobs

    paths = Paths(project)

    def time_limit(profile):
        return plan_jobs(paths, ["01"], profile=profile, device="cpu", seed=0)[0].limit

    assert time_limit("smoke") == DEFAULT_LIMITS["smoke"]  # no work: key, nothing measured
    (project / "notebooks" / "profiles.yml").write_text("01_alpha:\n  smoke: {x: 3}\n  work: {expr: 'x'}\n")
    (project / ".covbook").mkdir()
    (project / ".covbook" / "timings.json").write_text(json.dumps(
        {"01_alpha": {"cpu": {"smoke": {"parameters": {"x": 3}, "seconds": 500.0}}}}))
    assert time_limit("smoke") == LIMIT_FACTOR * 500.0
    (project / ".covbook" / "timings.json").write_text(json.dumps(
        {"01_alpha": {"cpu": {"smoke": {"parameters": {"x": 3}, "seconds": 1.0}}}}))
    assert time_limit("smoke") == LIMIT_FLOOR


@pytest.mark.parametrize("value", ["0", "-1", "inf", "soon"])
def test_timeout_must_be_a_positive_number(project, value):
    res = covbook(project, "run", "--timeout", value)
    assert res.returncode == 2 and "positive number of seconds" in res.stderr


# ----------------------------------------------------------------------------- usage and CLI edges


def test_a_syntax_error_in_any_cell_is_found_before_a_kernel_starts(project):
    body = "y = 1\n```\n\n```{code-cell} ipython3\n%matplotlib inline\nz = (1,\n"
    (project / "notebooks" / "02_beta.md").write_text(make_notebook(body))
    t0 = time.monotonic()
    res = covbook(project, "run", "--profile", "smoke", "--no-progress")
    assert res.returncode == 2, res.stderr
    assert "02_beta.md: code cell 3 line" in res.stderr and "before any kernel" in res.stderr
    assert not (project / "book" / "generated").exists() and time.monotonic() - t0 < 30


def test_clean_says_when_there_was_nothing_to_remove(project):
    res = covbook(project, "clean", check=True)
    assert "nothing to remove" in res.stdout
    (project / "_build").mkdir()
    res = covbook(project, "clean", check=True)
    assert "removed _build" in res.stdout and "book/generated" not in res.stdout


def test_the_report_names_only_this_repository_s_commit(project):
    from covbook.book.records import git_commit

    def git(*args, cwd):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                       capture_output=True)

    outer = project.parent
    git("init", "-q", cwd=outer)
    git("commit", "-q", "--allow-empty", "-m", "outer", cwd=outer)
    assert git_commit(project).startswith("unknown")  # the enclosing repository's commit is not the book's
    git("init", "-q", cwd=project)
    git("commit", "-q", "--allow-empty", "-m", "book", cwd=project)
    sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=project, capture_output=True,
                         text=True).stdout.strip()
    assert git_commit(project) == sha


def test_a_read_only_covbook_folder_is_one_clear_line(project):
    state = project / ".covbook"
    state.mkdir()
    res = with_read_only(project, [state], "run", "--profile", "smoke", "--no-progress")
    assert res.returncode == 1, res.stderr
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert "cannot be written" in res.stderr and ".covbook" in res.stderr


def test_check_json_into_head_is_quiet(project):
    fake_run(project, "01_alpha", digest="k", claims=3000)
    proc = subprocess.run(f"{' '.join(COVBOOK)} check --json | head -c 100", shell=True, cwd=project,
                          capture_output=True, text=True)
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr


def test_a_disk_full_error_is_one_line(project):
    from covbook.book.config import oserror_text

    err = shutil.Error([(f"/src/f{i}.js", f"/dst/f{i}.js", "[Errno 28] No space left on device") for i in range(900)])
    line = oserror_text(err)
    assert "\n" not in line and len(line) < 200 and "No space left" in line and "900 file(s)" in line
    fake_run(project, "01_alpha", digest="k1")
    fake_run(project, "02_beta", digest="k2")
    res = _with_file_size_limit(project, 20_000, "build")
    assert res.returncode == 1, res.stderr
    assert "Traceback" not in res.stderr and len(res.stderr) < 500 and "error:" in res.stderr, res.stderr


def _with_file_size_limit(project: Path, limit: int, *args: str, env: dict | None = None):
    """``covbook ARGS`` where no file may grow past ``limit`` bytes (a full disk, for one process tree)."""

    def limit_writes():
        import resource
        import signal

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run([*COVBOOK, *args], cwd=project, capture_output=True, text=True, preexec_fn=limit_writes,
                          env={**os.environ, **(env or {})})


# ----------------------------------------------------------------------------- the lock


def test_a_job_the_stop_reached_first_starts_nothing(tmp_path):
    stop = threading.Event()
    stop.set()
    with pytest.raises(runner.Stopped):
        runner.run_job({"name": "01_alpha", "rundir": str(tmp_path / "run")}, stop)
    assert not (tmp_path / "run").exists()


class _OneWaits:
    """An engine of two thread jobs: 01_alpha ends at once, 02_beta waits (at most 30 s) for the run's stop."""

    label, threads = "", None

    def __init__(self) -> None:
        self.started, self.stopped = threading.Event(), threading.Event()

    def resolve_device(self, device: str) -> str:
        return "cpu"

    def executor(self, n_jobs: int) -> cf.Executor:
        return cf.ThreadPoolExecutor(2)

    def stop_signal(self, run_id: str) -> threading.Event:
        return threading.Event()

    def job(self, job: dict, stop) -> dict:
        name = job["name"]
        if name == "02_beta":
            self.started.set()
        deadline = time.monotonic() + 30
        while name == "02_beta" and time.monotonic() < deadline:
            if stop.is_set():
                self.stopped.set()
                raise runner.Stopped(name)
            time.sleep(0.05)
        return {}


def test_an_error_of_the_covbook_process_stops_the_running_jobs(project, monkeypatch):
    """A full disk while committing one job ends the run with that error and stops the others (their threads
    would otherwise keep the process alive at exit until their notebooks finished)."""

    engine = _OneWaits()
    monkeypatch.setattr(runner, "run_job", engine.job)

    def full_disk(*args, **kwargs):
        assert engine.started.wait(10)  # 02_beta runs (a job still queued is cancelled, never started)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(runner, "commit_job", full_disk)
    with pytest.raises(OSError, match="No space left"):
        runner.run_trees(engine, [(Paths(project), 0)], None, profile="smoke", device="cpu", progress=False)
    assert engine.stopped.wait(10), "the waiting job was never told to stop"
    assert not any(Paths(project).tmp.glob("*"))  # the run's temporaries are gone


def test_a_stopped_build_takes_its_jupyter_book_child_and_the_lock_with_it(project):
    """SIGTERM of the build: its child (here a stand-in for jupyter-book) is stopped; then the tree is free."""
    script = ("import sys\nfrom pathlib import Path\nfrom covbook.book.cli import _jupyter_book\n"
              "from covbook.book.config import Paths, stop_on_sigterm\nfrom covbook.book.lock import tree_lock\n"
              "paths = Paths(Path.cwd())\nstop_on_sigterm()\n"
              "with tree_lock(paths.lock, 'covbook build'):\n"
              "    _jupyter_book([sys.executable, '-c', 'import time; print(\"child up\", flush=True); "
              "time.sleep(60)'], paths)\n")
    for how in ("SIGTERM",):
        proc = subprocess.Popen([sys.executable, "-c", script], cwd=project, stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "child up"
        children = _children(proc.pid)
        assert children
        os.kill(proc.pid, getattr(__import__("signal"), how))
        proc.wait(timeout=20)
        deadline = time.monotonic() + 10
        while any(_running(c) for c in children) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_running(c) for c in children), how
        with tree_lock(Paths(project).lock, "next build"):
            pass


def _children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return [int(x) for x in out.split()]


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def test_file_digest_is_sha256(tmp_path):
    import hashlib

    f = tmp_path / "x"
    f.write_bytes(b"abc" * 1000)
    assert cache.file_digest(f) == hashlib.sha256(b"abc" * 1000).hexdigest()


assert ROOT.is_dir()
