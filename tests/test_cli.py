"""The ``covbook`` command without kernels (fast stage): usage errors, the lock, damaged outputs, the plan.

Everything here must be found before a kernel starts, so these tests run in the
unit stage (``make unit``); the tests that execute notebooks are in test_runner.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from covbook import _devices
from covbook._jsonio import DamagedFile, read_json, write_json_atomic
from covbook.book import cache
from covbook.book.config import Paths, UsageError, check_value, load_profiles, resolve_parameters
from covbook.book.lock import Busy, tree_lock
from covbook.book.plan import estimate, work_of
from helpers import ROOT, covbook, make_notebook


@pytest.mark.parametrize(
    "args, match",
    [
        (["run", "--profile", "huge"], "invalid choice"),
        (["run", "99_nope"], "unknown notebook"),
        (["run", "--jobs", "0"], "positive integer"),
        (["run", "--seed", "-3"], "non-negative"),
        (["run", "--frobnicate"], "unrecognized arguments"),
        (["run", "--device", "tpu"], "invalid choice"),
        (["run", "--rehearse", "--profile", "quick"], "--rehearse needs"),
        (["bogus"], "invalid choice"),
    ],
)
def test_usage_errors_exit_2(project, args, match):
    res = covbook(project, *args)
    assert res.returncode == 2 and match in res.stderr
    assert "Traceback" not in res.stderr
    assert not (project / "book" / "generated").exists()  # nothing started


def test_unknown_profile_parameter_exits_2(project):
    (project / "notebooks" / "profiles.yml").write_text("01_alpha:\n  smoke: {typo: 3}\n")
    res = covbook(project, "run", "--profile", "smoke")
    assert res.returncode == 2 and "unknown parameter(s) typo" in res.stderr and "valid:" in res.stderr
    (project / "notebooks" / "profiles.yml").write_text("01_alpha:\n  tiny: {x: 3}\n")
    res = covbook(project, "run")
    assert res.returncode == 2 and "unknown profile 'tiny'" in res.stderr


def test_outside_a_project_exits_2(tmp_path):
    res = covbook(tmp_path, "run")
    assert res.returncode == 2 and "not inside a covbook checkout" in res.stderr


def test_malformed_profiles_yaml_is_one_line_with_file_and_line(project):
    (project / "notebooks" / "profiles.yml").write_text("01_alpha:\n  smoke: {x: 3\n  full: {x: 4}\n")
    res = covbook(project, "run", "--profile", "smoke")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "profiles.yml line" in lines[0] and "YAML syntax error" in lines[0]
    with pytest.raises(UsageError, match=r"profiles.yml line \d+, column \d+"):
        load_profiles(project / "notebooks" / "profiles.yml")


@pytest.mark.parametrize(
    "value, default, ok",
    [(3, 1, True), (2.5, 1.0, True), (2, 1.0, True), (True, 1, False), ("1e6", 1000, False), (1.5, 1, False),
     (0, 1, False), (-2, 1, False), (-0.5, -1.0, True), (0.5, -1.0, False), ([1, 2], [4, 8], True),
     ([1, 0], [4, 8], False), ([1.5], [4], False), (4, [4], False), ("cpu", "auto", True), (3, "auto", False),
     (None, 1, False), (0, 0, True), (False, True, True), (5, None, True)],
)
def test_parameter_type_and_sign_follow_the_notebook_default(value, default, ok):
    if ok:
        check_value("p", value, default)
    else:
        with pytest.raises(UsageError, match="p"):
            check_value("p", value, default)


@pytest.mark.parametrize("value, match", [("'3'", "is a str"), ("-3", "must be positive"), ("2.5", "is a float")])
def test_bad_profile_value_exits_2_before_any_kernel(project, value, match):
    (project / "notebooks" / "profiles.yml").write_text(f"01_alpha:\n  smoke: {{x: {value}}}\n")
    res = covbook(project, "run", "--profile", "smoke")
    assert res.returncode == 2 and match in res.stderr and "01_alpha.smoke.x" in res.stderr
    assert not (project / "book" / "generated").exists()


def test_rehearsal_takes_smoke_lengths_and_keeps_full_shapes():
    defaults = {"profile": "quick", "device": "auto", "seed": 0, "width": 8, "steps": 100, "n": 50}
    profiles = {"nb": {"smoke": {"steps": 3, "width": 2}, "full": {"width": 64, "steps": 10**6, "n": 10**5},
                       "lengths": ["steps", "n"]}}
    got = resolve_parameters("nb", defaults, profiles, "full", "cpu", 0, rehearse=True)
    assert got == {"width": 64, "steps": 3, "profile": "full", "device": "cpu", "seed": 0}  # n: notebook default
    assert resolve_parameters("nb", defaults, profiles, "full", "cpu", 0)["steps"] == 10**6
    profiles["nb"]["lengths"] = {"steps": 1, "n": None}  # a mapping: explicit rehearsal values, null = smoke
    got = resolve_parameters("nb", defaults, profiles, "full", "cpu", 0, rehearse=True)
    assert got["steps"] == 1 and "n" not in got and got["width"] == 64
    with pytest.raises(UsageError, match="lengths names unknown"):
        resolve_parameters("nb", defaults, {"nb": {"lengths": ["nope"]}}, "full", "cpu", 0)


def test_the_book_profiles_file_is_valid_and_every_notebook_has_lengths_and_work():
    """The real profiles.yml: types and signs of every profile, lengths and work for every notebook."""
    from covbook.book.config import discover, notebook_parameters

    paths = Paths(ROOT)
    profiles = load_profiles(paths.profiles)
    for name, path in discover(paths).items():
        defaults = notebook_parameters(path)
        for profile in ("smoke", "quick", "full"):
            for rehearse in (False, True) if profile == "full" else (False,):
                params = resolve_parameters(name, defaults, profiles, profile, "cpu", 0, rehearse=rehearse)
                assert work_of(profiles[name]["work"]["expr"], {**defaults, **params}) > 0
        assert profiles[name]["lengths"], name


@pytest.mark.skipif(_devices.cuda_available(), reason="this machine has a CUDA GPU")
def test_device_cuda_without_a_gpu_exits_2_before_any_kernel(project):
    res = covbook(project, "run", "--device", "cuda", "--profile", "smoke")
    assert res.returncode == 2 and "no CUDA GPU" in res.stderr
    assert not (project / "book" / "generated").exists()


def test_commands_without_notebooks_import_no_torch(project):
    """check, clean and run --plan import neither torch nor numpy (they start in well under a second)."""
    code = (
        "import sys, contextlib, io\n"
        "from covbook.book.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
        "    codes = [main(['check']), main(['run', '--plan', '--profile', 'full']), main(['clean'])]\n"
        "import covbook.book.report, covbook.book.sweep, covbook.book.sphinx_claims\n"
        "import covbook.book.runner, covbook.book.plan\n"
        "print(codes, sorted(m for m in ('torch', 'numpy', 'scipy', 'papermill') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=project, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[1, 0, 0] []", out.stdout + out.stderr


def test_the_installed_covbook_command_is_the_cli():
    exe = Path(sys.executable).with_name("covbook")  # the console script the install made
    res = subprocess.run([str(exe), "run", "--jobs", "0"], capture_output=True, text=True)
    assert res.returncode == 2 and "--jobs" in res.stderr and "Traceback" not in res.stderr, res.stderr


# ----------------------------------------------------------------------------- cache key


def test_cache_key_ignores_the_pipeline_and_covers_the_science(tmp_path):
    pkg = tmp_path / "covbook"
    (pkg / "book").mkdir(parents=True)
    (pkg / "attention.py").write_text("x = 1\n")
    (pkg / "book" / "cli.py").write_text("y = 1\n")
    (pkg / "book" / "report.py").write_text("z = 1\n")
    base = cache.science_hash(pkg)
    (pkg / "book" / "cli.py").write_text("y = 2  # an edit of the CLI\n")
    (pkg / "book" / "report.py").write_text("z = 2\n")
    (pkg / "__pycache__").mkdir()
    (pkg / "__pycache__" / "attention.cpython-311.pyc").write_bytes(b"\0")
    assert cache.science_hash(pkg) == base
    (pkg / "attention.py").write_text("x = 2\n")
    assert cache.science_hash(pkg) != base
    edited = cache.science_hash(pkg)
    (pkg / "icl").mkdir()
    (pkg / "icl" / "tasks.py").write_text("")  # a new science module (in a sub-package) counts
    assert cache.science_hash(pkg) != edited
    assert cache.science_hash(pkg) == cache.science_hash(pkg)


def test_cache_key_covers_notebook_parameters_versions_and_device(tmp_path, monkeypatch):
    nb = tmp_path / "01_a.md"
    nb.write_text("source")
    key = cache.content_hash(nb, {"x": 1}, "sci", "cpu")
    assert key == cache.content_hash(nb, {"x": 1}, "sci", "cpu")
    assert key != cache.content_hash(nb, {"x": 2}, "sci", "cpu")
    assert key != cache.content_hash(nb, {"x": 1}, "sci2", "cpu")
    assert key != cache.content_hash(nb, {"x": 1}, "sci", "cuda")
    nb.write_text("source, edited")
    assert key != cache.content_hash(nb, {"x": 1}, "sci", "cpu")
    nb.write_text("source")
    env = dict(cache.environment())
    monkeypatch.setattr(cache, "environment", lambda: {**env, "torch": "0.0.1"})
    assert key != cache.content_hash(nb, {"x": 1}, "sci", "cpu")
    assert set(env) == {"python", "torch", "numpy"}


def test_the_real_package_hash_excludes_covbook_book():
    assert len(cache.science_hash()) == 64


# ----------------------------------------------------------------------------- lock


def test_a_second_writer_is_told_who_holds_the_lock(project):
    paths = Paths(project)
    with tree_lock(paths.lock, "covbook run 01 --profile smoke"):
        for args in (["clean"], ["build"], ["run", "--profile", "smoke"]):
            res = covbook(project, *args)
            assert res.returncode == 1, (args, res.stderr)
            assert "locked by pid" in res.stderr and "covbook run 01 --profile smoke" in res.stderr
            assert "--wait" in res.stderr
        with pytest.raises(Busy, match="locked by pid"):
            with tree_lock(paths.lock, "another"):
                pass
        assert covbook(project, "check").returncode in (0, 1)  # a reader does not need the lock
    assert covbook(project, "clean").returncode == 0


def test_wait_blocks_until_the_lock_is_free(project):
    paths = Paths(project)
    with tree_lock(paths.lock, "holder"):
        proc = subprocess.Popen([sys.executable, "-m", "covbook.book.cli", "clean", "--wait"], cwd=project,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        first = proc.stderr.readline()  # blocks until the child has found the lock held (however slow its start)
        time.sleep(0.5)
        assert proc.poll() is None  # still waiting
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "waiting for pid" in first + err and "covbook clean" in out


# ----------------------------------------------------------------------------- damaged outputs


def _fake_outputs(project: Path, name: str = "01_alpha") -> Paths:
    """The outputs of a successful run of ``name``, written by hand (no kernel); the record names their digests."""
    paths = Paths(project)
    claim = {"id": "x_is_x", "notebook": name, "value": 1.0, "prediction": 1.0, "extra": {}}
    write_json_atomic(paths.claims / f"{name}.json", [claim])
    write_json_atomic(paths.generated / f"{name}.ipynb", {"cells": [], "metadata": {}, "nbformat": 4,
                                                          "nbformat_minor": 5})
    outputs = {"claims": cache.file_digest(paths.claims / f"{name}.json"),
               "notebook": cache.file_digest(paths.generated / f"{name}.ipynb")}
    write_json_atomic(paths.runs / f"{name}.json", {"notebook": name, "status": "ok", "hash": "h", "seconds": 1.0,
                                                    "parameters": {"profile": "smoke", "device": "cpu", "seed": 0},
                                                    "outputs": outputs})
    return paths


@pytest.mark.parametrize("which", ["claims/01_alpha.json", "runs/01_alpha.json", "01_alpha.ipynb"])
@pytest.mark.parametrize("command", ["check", "build"])
def test_check_and_build_name_the_damaged_file_and_the_repair(project, which, command):
    paths = _fake_outputs(project)
    _fake_outputs(project, "02_beta")
    f = paths.generated / which
    f.write_text(f.read_text()[:25])  # truncated, as by a full disk
    res = covbook(project, command)
    assert res.returncode == 1, res.stderr
    assert f"book/generated/{which} is damaged" in res.stderr and "Traceback" not in res.stderr
    assert "repair it with: covbook run 01" in res.stderr
    if which != "runs/01_alpha.json":
        assert "covbook run 01 --profile smoke" in res.stderr


def test_verify_outputs_rejects_wrong_shapes(project):
    paths = _fake_outputs(project)
    write_json_atomic(paths.claims / "01_alpha.json", [{"id": "x"}])
    with pytest.raises(DamagedFile, match="not a measurement"):
        cache.verify_outputs(paths, "01_alpha")
    write_json_atomic(paths.claims / "01_alpha.json", {"not": "a list"})
    with pytest.raises(DamagedFile, match="expected a JSON list"):
        cache.verify_outputs(paths, "01_alpha")
    _fake_outputs(project)
    write_json_atomic(paths.generated / "01_alpha.ipynb", {"cells": "x"})
    with pytest.raises(DamagedFile, match="not a Jupyter notebook"):
        cache.verify_outputs(paths, "01_alpha")
    assert not cache.is_cached(paths, "01_alpha", "h")
    _fake_outputs(project)
    assert cache.is_cached(paths, "01_alpha", "h") and not cache.is_cached(paths, "01_alpha", "other")


def test_json_io_is_atomic_and_verifying(tmp_path):
    p = tmp_path / "a" / "b.json"
    write_json_atomic(p, {"x": [1, 2]})
    assert read_json(p, dict) == {"x": [1, 2]} and list(p.parent.iterdir()) == [p]
    p.write_text('{"x": [1, ')
    with pytest.raises(DamagedFile, match=r"b.json: damaged \(not valid JSON"):
        read_json(p)
    p.write_bytes(b"\xff\xfe")
    with pytest.raises(DamagedFile, match="not UTF-8"):
        read_json(p)
    with pytest.raises(FileNotFoundError):
        read_json(tmp_path / "missing.json")


def test_claims_write_through_the_one_atomic_writer():
    from covbook import _jsonio as jsonio
    from covbook import claims

    assert claims.write_json_atomic is jsonio.write_json_atomic


# ----------------------------------------------------------------------------- plan


def test_work_expressions_are_evaluated_safely():
    assert work_of("n * t + sum(ns) + len(ns) ** 2", {"n": 2, "t": 10, "ns": [1, 2]}) == 27
    for bad, match in [("__import__('os')", "unsupported"), ("n +", "not an expression"), ("m * 2", "'m'"),
                       ("ns", "finite number"), ("n / 0", "division")]:
        with pytest.raises(UsageError, match=match):
            work_of(bad, {"n": 1, "ns": [1]})


def test_estimates_say_how_they_were_made():
    assert estimate(10.0, []) == (None, "no measured run on this device")
    points = [(10.0, 5.0, "smoke"), (1000.0, 23.0, "quick")]
    assert estimate(100_000.0, points) == (2300.0, "quick run × work ratio 100")
    assert estimate(1.0, [(10.0, 5.0, "smoke")]) == (0.5, "smoke run × work ratio 0.1")  # smaller than any run
    assert estimate(10.0, [(10.0, 5.0, "smoke")]) == (5.0, "measured (smoke run)")
    assert estimate(10.0, [(0.0, 5.0, "smoke")]) == (None, "the smoke run did no work")


def test_plan_prints_work_estimates_and_runs_nothing(project):
    (project / "notebooks" / "profiles.yml").write_text(
        "01_alpha:\n  smoke: {x: 3}\n  full: {x: 300}\n  lengths: [x]\n  work: {expr: 'x * 1000', unit: tokens}\n")
    paths = Paths(project)
    write_json_atomic(paths.timings, {"01_alpha": {"cpu": {
        "smoke": {"parameters": {"x": 3}, "seconds": 2.0}, "quick": {"parameters": {"x": 1}, "seconds": 1.0}}}})
    res = covbook(project, "run", "--plan", "--profile", "full", "--device", "cpu", check=True)
    assert "3e+05 tokens" in res.stdout and "smoke run × work ratio 100" in res.stdout
    assert "3 min" in res.stdout  # the smoke run's 2 s times the work ratio 100
    assert "02_beta" in res.stdout and "without an estimate" in res.stdout and "How:" in res.stdout
    assert not paths.generated.exists()
    rehearse = covbook(project, "run", "--plan", "--profile", "full", "--rehearse", "--device", "cpu", check=True)
    assert "3e+03 tokens" in rehearse.stdout and "measured (smoke run)" in rehearse.stdout
    gpu = covbook(project, "run", "--plan", "--profile", "full", "--device", "cuda", check=True)
    assert "device cuda" in gpu.stdout and "no measured run on this device" in gpu.stdout


def test_make_notebook_helper_round_trips(project):
    from covbook.book.config import notebook_parameters

    (project / "notebooks" / "03_gamma.md").write_text(make_notebook("pass", "n = [1, 2]\nlr = 1e-3"))
    got = notebook_parameters(project / "notebooks" / "03_gamma.md")
    assert got == {"profile": "quick", "device": "auto", "seed": 0, "n": [1, 2], "lr": 1e-3}
    assert json.dumps(got)


def test_parameters_cell_in_either_myst_form(tmp_path):
    """The parameters cell is found by its tag in both forms of cell options jupytext reads."""
    from covbook.book.config import notebook_parameters

    yaml_form = make_notebook("pass").replace(":tags: [parameters]\n", "---\ntags: [parameters]\n---\n")
    (tmp_path / "99_yaml.md").write_text(yaml_form)
    assert notebook_parameters(tmp_path / "99_yaml.md") == {"profile": "quick", "device": "auto", "seed": 0, "x": 1}


@pytest.mark.parametrize("profile", ["smoke", "quick", "full"])
def test_plan_works_for_every_profile_and_device_of_the_book(profile):
    for device in ("auto", "cpu", "cuda"):
        res = covbook(ROOT, "run", "--plan", "--profile", profile, "--device", device, check=True)
        lines = res.stdout.splitlines()
        assert lines[0].startswith(f"covbook run --plan: profile {profile}")
        assert sum(line.startswith("  ") for line in lines) == len(list((ROOT / "notebooks").glob("[0-9]*.md"))) + 1
        assert "How:" in res.stdout


def test_help_shows_a_default_only_where_there_is_one(capsys) -> None:
    from covbook.book.cli import parser

    with pytest.raises(SystemExit):
        parser().parse_args(["run", "--help"])
    out = capsys.readouterr().out
    assert "(default: None)" not in out and "(default: False)" not in out
    assert "(default: quick)" in out and "(default: 0)" in out


@pytest.mark.parametrize("command, module, function, kept", [
    (["run", "--profile", "smoke"], "runner", "run_notebooks", "finished and kept: 01_alpha (ok)"),
    (["sweep", "--seeds", "0-1"], "sweep", "run_sweep", "finished and kept: 01_alpha (ok)"),
    (["edition", "smoke"], "edition", "make", "finished and kept: 01_alpha (ok)"),
])
def test_an_interrupted_run_names_what_it_kept_and_exits_as_its_signal_says(project, monkeypatch, capsys, command,
                                                                           module, function, kept):
    """Ctrl-C exits 130 and SIGTERM 143 in every command that runs notebooks; the tree's lock is released."""
    import importlib

    from covbook.book import cli, runner

    def interrupted(*args, **kwargs):
        raise runner.Interrupted([runner.Result("01_alpha", "ok", 1.0)], ["02_beta"], 143, "stopped by SIGTERM")

    monkeypatch.setattr(importlib.import_module(f"covbook.book.{module}"), function, interrupted)
    monkeypatch.setattr(cli, "stop_on_sigterm", lambda: None)
    monkeypatch.chdir(project)
    with pytest.raises(SystemExit) as stopped:
        cli.main(command)
    assert stopped.value.code == 143
    assert capsys.readouterr().err.strip() == f"covbook {command[0]}: stopped by SIGTERM; {kept}; not finished: 02_beta"
    with tree_lock(Paths(project).lock, "next"):
        pass


def test_a_damaged_file_met_by_any_command_is_one_line_exit_1(project, monkeypatch, capsys):
    from covbook.book import checks, cli

    def damaged(paths):
        raise DamagedFile(paths.root / "book" / "generated" / "x.json", "not valid JSON")

    monkeypatch.setattr(checks, "check", damaged)
    monkeypatch.setattr(cli, "stop_on_sigterm", lambda: None)
    monkeypatch.chdir(project)
    assert cli.main(["check"]) == 1
    assert capsys.readouterr().err.strip() == "covbook check: book/generated/x.json is damaged (not valid JSON)"
