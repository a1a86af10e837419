"""Shared fixtures: a throw-away covbook project to exercise the runner and the CLI."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import ROOT, covbook, make_notebook, pipeline_project

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
    for name in ("01_alpha", "02_beta", "03_gamma"):
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


@pytest.fixture(scope="session")
def smoke_project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The project with every notebook executed at the smoke profile (tests/test_notebooks.py)."""
    with pipeline_project("smoke", tmp_path_factory) as root:
        jobs = str(min(2, os.cpu_count() or 1))
        proc = covbook(root, "run", "--profile", "smoke", "--device", "cpu", "--jobs", jobs, "--no-progress")
        print(proc.stdout, proc.stderr)
        yield root


@pytest.fixture(scope="session")
def smoke_book(smoke_project: Path) -> subprocess.CompletedProcess:
    """``covbook build`` of the smoke project, once per session; the HTML is in ``smoke_project/_build/html``."""
    return covbook(smoke_project, "build")
