"""The rehearsal: every notebook with the `full` profile's shapes at smoke lengths.

`covbook run --profile full --rehearse` takes the full profile's parameters,
except those listed under the notebook's `lengths:` key in notebooks/profiles.yml,
which take their smoke value: model sizes, dimensions, lists of sizes and the
device are the paper-scale ones, the number of tokens and steps is small.  A
paper-scale run must not fail on what this minute-long run catches (shape
errors, memory at the full model sizes, parameters a notebook does not have).
The claims are not asserted here: at smoke lengths with full shapes a claim's
own uncertainty is what it is; `test_notebooks.py` checks the claims.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import ROOT, covbook, pipeline_project

NOTEBOOKS = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.md"))


@pytest.fixture(scope="session")
def rehearsed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with pipeline_project("rehearsal", tmp_path_factory) as root:
        jobs = str(min(2, os.cpu_count() or 1))
        proc = covbook(root, "run", "--profile", "full", "--rehearse", "--device", "auto", "--jobs", jobs,
                       "--no-progress", timed="rehearsal (full shapes)")
        print(proc.stdout, proc.stderr)
        yield root


@pytest.mark.notebooks
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs_at_full_shapes(rehearsed: Path, name: str) -> None:
    meta = json.loads((rehearsed / "book" / "generated" / "runs" / f"{name}.json").read_text())
    assert meta["status"] == "ok", f"{name} failed its rehearsal: {meta.get('error')}"
    assert meta["rehearsal"] is True and meta["parameters"]["profile"] == "full"
