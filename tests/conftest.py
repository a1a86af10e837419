"""Shared fixtures: a throw-away covbook project to exercise the runner and the CLI."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from helpers import ROOT, make_notebook


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A tiny project: two notebooks (one passing claim each) and a profiles file."""
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "book").mkdir()
    shutil.copy(ROOT / "_config.yml", tmp_path / "_config.yml")
    ok = ("from covbook import claims\nclaims.record('x_is_x', 'x equals itself', x, x, tolerance=0.0)")
    (tmp_path / "notebooks" / "01_alpha.md").write_text(make_notebook(ok))
    (tmp_path / "notebooks" / "02_beta.md").write_text(make_notebook(ok, "x = 2"))
    (tmp_path / "notebooks" / "profiles.yml").write_text("01_alpha:\n  smoke: {x: 3}\n")
    return tmp_path


@pytest.fixture(autouse=True)
def _fresh_claims_registry():
    """Each test starts with no recorded claims (the registry is module-level)."""
    from covbook import claims

    reset = getattr(claims, "reset", None) or claims._CLAIMS.clear
    reset()
    yield
    reset()
