"""Bad input is one line naming the file and what was expected, with the documented exit status (issue 50).

No kernel runs here: each input is refused before one would start.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from claims_fixtures import claim, fake_project, fake_run
from covbook.book import cache
from covbook.book.config import UsageError, check_value
from covbook.book.sweep import seed_root
from helpers import covbook

SRC = Path(cache.__file__).resolve().parents[2]  # src/


def test_a_non_utf8_science_file_is_a_usage_error_naming_it(tmp_path):
    pkg = tmp_path / "covbook"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "stats.py").write_bytes(b"x = 1  # caf\xe9\n")
    nb = tmp_path / "01_a.md"
    nb.write_text("```{code-cell} ipython3\nfrom covbook import stats\n```\n")
    with pytest.raises(UsageError, match=r"stats\.py.*UTF-8"):
        cache.notebook_science(nb, pkg)
    with pytest.raises(UsageError, match=r"stats\.py.*UTF-8"):
        cache.science_hash(pkg)


def _package_copy(tmp_path: Path, profiles: str) -> dict[str, str]:
    """A copy of covbook whose packaged profiles.yml is ``profiles``; the environment that imports it."""
    dst = tmp_path / "src"
    shutil.copytree(SRC / "covbook", dst / "covbook", ignore=shutil.ignore_patterns("__pycache__", "profiles.yml"))
    (dst / "covbook" / "profiles.yml").write_text(profiles)
    return {**os.environ, "PYTHONPATH": str(dst)}


@pytest.mark.parametrize("profiles", ["profiles: {smoke: [\n",
                                      "profiles:\n  quick: {defaults: true, time_limit: -5}\n"])
def test_a_damaged_profiles_file_is_one_line_on_every_command(tmp_path, project, profiles):
    env = _package_copy(tmp_path, profiles)
    for cmd in (["check"], ["run", "--plan"], ["build"], ["edition", "smoke"], ["clean"]):
        proc = subprocess.run([sys.executable, "-m", "covbook.book.cli", *cmd], cwd=project, env=env,
                              capture_output=True, text=True)
        assert proc.returncode == 2 and "profiles.yml" in proc.stderr, (cmd, proc.stderr)
        assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, (cmd, proc.stderr)


def test_a_project_profiles_file_of_bad_values_fails_check(project):
    (project / "notebooks" / "profiles.yml").write_text("01_alpha:\n  smoke: [1, 2\n")
    res = covbook(project, "check")
    assert res.returncode == 2 and "profiles.yml" in res.stderr and "Traceback" not in res.stderr


def test_absurd_parameter_values_are_refused():
    with pytest.raises(UsageError, match=rf"t_max = {10**29} .*at most 2\*\*53"):
        check_value("profiles.yml: 01.full.t_max", 10**29, 200_000)
    with pytest.raises(UsageError, match="at most"):
        check_value("x", 1e300, 1.5)
    check_value("t_max", 2**53, 200_000)


def test_a_garbage_scheduler_file_is_a_usage_error(project):
    (project / "sched.json").write_text("garbage")
    res = covbook(project, "run", "--cluster", "sched.json")
    assert res.returncode == 2 and "sched.json" in res.stderr and "Traceback" not in res.stderr, res.stderr
    (project / "sched.json").write_text("[]")
    res = covbook(project, "run", "--cluster", "sched.json")
    assert res.returncode == 2 and "address" in res.stderr and "Traceback" not in res.stderr, res.stderr


@pytest.mark.parametrize("content", ["[]", '{"profiles": []}', '{"profiles": {"smoke": []}}'])
def test_a_calibration_of_the_wrong_shape_is_refused_never_rewritten(tmp_path, content):
    proj = fake_project(tmp_path, {"01_alpha": [claim("a", "01_alpha")]})
    from covbook.book.config import Paths

    fake_run(seed_root(Paths(proj), "smoke", 0) / "book" / "generated", "01_alpha", [claim("a", "01_alpha")], seed=0)
    (proj / "book" / "calibration.json").write_text(content)
    res = covbook(proj, "sweep", "--seeds", "0-0", "01")
    assert res.returncode == 2 and "calibration.json" in res.stderr and "git checkout" in res.stderr, res.stderr
    assert (proj / "book" / "calibration.json").read_text() == content


def _publishable(project: Path) -> Path:
    from helpers import fake_run as fake

    for name in ("01_alpha", "02_beta"):
        fake(project, name, digest="k")
    return project


def _publish(project: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "covbook.book.cli", "publish"], cwd=project,
                          env={**os.environ, "COVBOOK_REPOSITORY": "octo/covbook"}, capture_output=True, text=True)


def test_publish_checks_every_notebook_before_rewriting_any(project):
    _publishable(project)
    gen = project / "book" / "generated"
    first = (gen / "01_alpha.ipynb").read_bytes()
    (gen / "02_beta.ipynb").write_text((gen / "02_beta.ipynb").read_text()[:40])  # truncated
    proc = _publish(project)
    assert proc.returncode == 1 and "02_beta.ipynb" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert (gen / "01_alpha.ipynb").read_bytes() == first  # nothing rewritten partway


def test_publish_on_a_locked_tree_exits_1(project):
    from covbook.book.config import Paths
    from covbook.book.lock import tree_lock

    _publishable(project)
    with tree_lock(Paths(project).lock, "covbook run"):
        proc = _publish(project)
    assert proc.returncode == 1 and "locked by" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_a_wrongly_shaped_stored_run_record_is_damaged(project):
    rec = project / "book" / "edition" / "runs" / "01_alpha.json"
    rec.parent.mkdir(parents=True)
    rec.write_text(json.dumps({"notebook": "01_alpha", "status": "ok", "parameters": [1]}))
    res = covbook(project, "check")
    assert res.returncode == 1 and "book/edition/runs/01_alpha.json" in res.stderr and "Traceback" not in res.stderr
