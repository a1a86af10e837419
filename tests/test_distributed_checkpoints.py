"""Checkpoints of a cluster job: its worker shares the tree's filesystem, so it keeps them where a local run does.

The fast tests call the key rule and the commit directly (no Dask, no notebook); the slow one runs chapter 10 at
smoke on ``--cluster local:1`` and then locally, and checks that the local run reuses the cluster's checkpoints.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
from pathlib import Path

import pytest

from covbook.book import runner
from covbook.book.config import Paths
from helpers import book_project, covbook

NAME = "10_trained_language_model"
DIGEST = "ab" * 32
OTHER = "cd" * 32


def _folder(root: Path, files: dict[str, bytes]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


def _tree(paths: Paths, name: str = NAME) -> dict[str, bytes]:
    """Every entry of ``checkpoints/NAME/`` (hidden ones too), by path relative to it."""
    base = paths.checkpoints / name
    return {p.relative_to(base).as_posix(): p.read_bytes() for p in sorted(base.rglob("*")) if p.is_file()}


def test_checkpoints_of_another_key_go_and_force_retrains(tmp_path):
    paths = Paths(tmp_path)
    here = _folder(runner.checkpoint_folder(paths, NAME, DIGEST), {"10_nope_k.pt": b"mine"})
    _folder(runner.checkpoint_folder(paths, NAME, OTHER), {"10_nope_j.pt": b"other code"})
    assert runner.prune_checkpoints(paths, NAME, DIGEST) == here
    assert _tree(paths) == {f"{DIGEST[:16]}/10_nope_k.pt": b"mine"}  # another key: never usable, removed
    runner.prune_checkpoints(paths, NAME, DIGEST, force=True)
    assert _tree(paths) == {}


def test_a_job_whose_worker_was_killed_too_often_fails_and_commits_nothing(tmp_path):
    paths = Paths(tmp_path)
    fut: cf.Future = cf.Future()
    fut.set_exception(RuntimeError("KilledWorker: 3 workers died"))
    r = runner.commit_job(fut, paths, NAME)
    assert r.status == "failed" and "KilledWorker" in r.error
    assert not paths.generated.exists()


# ----------------------------------------------------------------------------- chapter 10 on local:1


def _glued(tree: Path, name: str) -> str:
    """The glued ``train_seconds_nope`` of the executed notebook: read from the checkpoint when it is reused."""
    nb = json.loads((tree / "book" / "generated" / f"{NAME}.ipynb").read_text())
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            if out.get("metadata", {}).get("scrapbook", {}).get("name") == name:
                return out["data"]["application/papermill.record/text/plain"]
    raise AssertionError(f"no glued {name}")


def _checkpoint_files(tree: Path) -> dict[str, tuple[int, int, bytes]]:
    base = tree / "book" / "generated" / "checkpoints" / NAME
    return {p.relative_to(base).as_posix(): (p.stat().st_ino, p.stat().st_mtime_ns, p.read_bytes())
            for p in sorted(base.rglob("*")) if p.is_file()}


@pytest.mark.notebooks
def test_chapter_10_on_a_cluster_brings_its_checkpoints_home_and_a_local_run_reuses_them(tmp_path):
    tree = book_project(tmp_path / "tree")
    args = ["run", "--profile", "smoke", "--rehearse", "--device", "cpu", "--no-progress", "10"]  # tiny lengths
    res = covbook(tree, *args, "--cluster", "local:1")
    assert res.returncode == 0, res.stdout + res.stderr
    record = json.loads((tree / "book" / "generated" / "runs" / f"{NAME}.json").read_text())
    after_cluster = _checkpoint_files(tree)
    assert sorted(after_cluster) and all(k.startswith(record["hash"][:16] + "/10_") and k.endswith(".pt")
                                         for k in after_cluster), after_cluster
    assert not [p for p in (tree / "book" / "generated" / "checkpoints").rglob(".*")]  # no staging left
    trained = _glued(tree, "train_seconds_nope")
    # a local run of the same key (its outputs gone, so it executes) loads the checkpoints, trains nothing
    (tree / "book" / "generated" / "runs" / f"{NAME}.json").unlink()
    res = covbook(tree, *args)
    assert res.returncode == 0, res.stdout + res.stderr
    assert _checkpoint_files(tree) == after_cluster  # not rewritten: same inode, time stamp and bytes
    assert _glued(tree, "train_seconds_nope") == trained  # the training time stored in the checkpoint
    # the cluster's worker wrote them where a local run looks: the tree both share
