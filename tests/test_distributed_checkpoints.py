"""Checkpoints of a job run in a scratch tree (a cluster's): packed as bytes, carried both ways, committed with the run.

The fast tests call the pack, unpack, scratch-tree and commit functions directly (no Dask, no notebook);
the slow one runs chapter 10 at smoke on ``--cluster local:1`` and then locally, and checks that the
checkpoint folder came back to the tree and is reused.
"""

from __future__ import annotations

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


def _outcome(paths: Paths, rundir: Path, error: str | None = None) -> dict:
    """The uncommitted outcome of a job whose notebook and claims lie in ``rundir`` (what ``_collect`` builds)."""
    rundir.mkdir(parents=True, exist_ok=True)
    (rundir / f"{NAME}.ipynb").write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4,
                                                      "nbformat_minor": 5}))
    (rundir / f"{NAME}.claims.json").write_text("[]")
    meta = {"notebook": NAME, "parameters": {}, "hash": DIGEST, "seconds": 1.0, "cpu_seconds": 1.0, "phases": {},
            "device_used": "cpu", "rehearsal": False, "finished": "2026-01-01T00:00:00+0000"}
    return {"name": NAME, "meta": meta, "error": error, "rundir": str(rundir)}


def _tree(paths: Paths, name: str = NAME) -> dict[str, bytes]:
    """Every entry of ``checkpoints/NAME/`` (hidden ones too), by path relative to it."""
    base = paths.checkpoints / name
    return {p.relative_to(base).as_posix(): p.read_bytes() for p in sorted(base.rglob("*")) if p.is_file()}


def test_pack_and_unpack_round_trip_the_folder_as_bytes(tmp_path):
    src = _folder(tmp_path / "src", {"10_nope_1.pt": b"\x00nope", "sub/10_rotary_2.pt": b"rotary\xff"})
    (src / ".10_nope_1.pt.tmp123").write_bytes(b"half-written")  # an atomic write cut short: not carried
    (src / "link.pt").symlink_to(src / "10_nope_1.pt")  # not a plain file: not carried
    packed = runner.pack_folder(src)
    assert packed == {"10_nope_1.pt": b"\x00nope", "sub/10_rotary_2.pt": b"rotary\xff"}
    runner.unpack_folder(packed, tmp_path / "dst" / "deep")
    assert runner.pack_folder(tmp_path / "dst" / "deep") == packed
    assert runner.pack_folder(tmp_path / "nothing") is None  # no folder: nothing to carry (not {})
    assert runner.pack_folder(_folder(tmp_path / "empty", {})) == {}


def test_pack_refuses_a_folder_over_the_limit_before_reading_it(tmp_path):
    src = _folder(tmp_path / "src", {"a.pt": b"x" * 600, "b.pt": b"y" * 500})
    assert runner.pack_folder(src, limit=1100) is not None
    with pytest.raises(runner.CheckpointsTooLarge, match="CHECKPOINT_MAX_BYTES"):
        runner.pack_folder(src, limit=1099)
    assert runner.CHECKPOINT_MAX_BYTES >= 128 << 20  # chapter 10 at --profile full makes ~77 MB


@pytest.mark.parametrize("rel", ["../escape.pt", "/abs.pt", "a/../../escape.pt", ".hidden.pt", ""])
def test_unpack_refuses_paths_outside_the_folder_and_writes_nothing(tmp_path, rel):
    with pytest.raises(ValueError, match="outside its folder"):
        runner.unpack_folder({"fine.pt": b"1", rel: b"2"}, tmp_path / "dst")
    assert not (tmp_path / "dst").exists() and not (tmp_path / "escape.pt").exists()


def test_a_scratch_tree_puts_the_checkpoints_where_the_runner_looks_and_returns_them(tmp_path):
    """The worker's side: the runner's own folder rule (``prune_checkpoints``, as a local run) finds what the
    client sent, and a successful job packs what the notebook left there; a failed one returns nothing."""
    job = {"name": NAME, "digest": DIGEST}
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    runner.scratch_tree(scratch, job, {"profiles.yml": b"{}\n", "rules/x.yml": b"a: 1\n"}, {"10_nope_k.pt": b"old"})
    here = runner.prune_checkpoints(Paths(scratch), NAME, DIGEST)  # what the notebook's CHECKPOINT_ENV names
    assert (here / "10_nope_k.pt").read_bytes() == b"old"
    assert (scratch / "notebooks" / "rules" / "x.yml").read_bytes() == b"a: 1\n"
    (here / "10_rotary_k.pt").write_bytes(b"new")  # the notebook trained the other model
    assert runner.returned_checkpoints(scratch, job, {"error": None}) == (
        {"10_nope_k.pt": b"old", "10_rotary_k.pt": b"new"}, None)
    assert runner.returned_checkpoints(scratch, job, {"error": "cell 3 raised"}) == (None, None)
    # --force on the worker retrains, as locally (the client sends nothing then, either)
    assert not any(runner.prune_checkpoints(Paths(scratch), NAME, DIGEST, force=True).glob("*"))


def test_outgoing_checkpoints_follow_the_local_key_rules(tmp_path, monkeypatch):
    paths = Paths(tmp_path)
    _folder(runner.checkpoint_folder(paths, NAME, DIGEST), {"10_nope_k.pt": b"mine"})
    _folder(runner.checkpoint_folder(paths, NAME, OTHER), {"10_nope_j.pt": b"other code"})
    assert runner.outgoing_checkpoints(paths, NAME, DIGEST, force=False) == {"10_nope_k.pt": b"mine"}
    assert not runner.checkpoint_folder(paths, NAME, OTHER).exists()  # another key: never usable, removed
    assert runner.outgoing_checkpoints(paths, NAME, DIGEST, force=True) is None  # --force retrains ...
    assert _tree(paths) == {f"{DIGEST[:16]}/10_nope_k.pt": b"mine"}  # ... and the old folder stays till it succeeds
    assert runner.outgoing_checkpoints(paths, "01_other", DIGEST, force=False) is None
    notes: list[str] = []
    monkeypatch.setattr(runner, "CHECKPOINT_MAX_BYTES", 3)  # over the limit: not sent, and said
    assert runner.outgoing_checkpoints(paths, NAME, DIGEST, force=False, say=notes.append) is None
    assert len(notes) == 1 and "not sent" in notes[0], notes


def test_a_successful_job_replaces_the_folder_in_one_swap_with_its_outputs(tmp_path):
    paths = Paths(tmp_path)
    _folder(runner.checkpoint_folder(paths, NAME, DIGEST), {"10_nope_k.pt": b"old", "stale.pt": b"gone"})
    res = runner.commit_outcome(paths, _outcome(paths, tmp_path / "run"),
                                {"10_nope_k.pt": b"new", "10_rotary_k.pt": b"r"})
    assert res["status"] == "ok", res
    assert (paths.runs / f"{NAME}.json").is_file() and (paths.generated / f"{NAME}.ipynb").is_file()
    # the whole folder is the job's: no file of the old one survives, no staging or backup is left
    assert _tree(paths) == {f"{DIGEST[:16]}/10_nope_k.pt": b"new", f"{DIGEST[:16]}/10_rotary_k.pt": b"r"}


def test_a_job_without_checkpoints_leaves_the_folder_alone(tmp_path):
    paths = Paths(tmp_path)
    _folder(runner.checkpoint_folder(paths, NAME, DIGEST), {"10_nope_k.pt": b"old"})
    assert runner.commit_outcome(paths, _outcome(paths, tmp_path / "run"), None)["status"] == "ok"
    assert _tree(paths) == {f"{DIGEST[:16]}/10_nope_k.pt": b"old"}


@pytest.mark.parametrize("old", [True, False])
def test_a_failed_job_changes_no_checkpoint_folder(tmp_path, old):
    paths = Paths(tmp_path)
    if old:
        _folder(runner.checkpoint_folder(paths, NAME, DIGEST), {"10_nope_k.pt": b"old"})
    before = _tree(paths) if old else None
    res = runner.commit_outcome(paths, _outcome(paths, tmp_path / "run", error="cell 9 raised"),
                                {"10_nope_k.pt": b"partial"})
    assert res["status"] == "failed"
    assert (_tree(paths) == before) if old else not (paths.checkpoints / NAME).exists()


def _refuse_the_record(monkeypatch, error: BaseException) -> None:
    """The last rename of the commit, the run record's into place, fails with ``error``."""
    real = runner.os.replace

    def replace(a, b):
        if Path(b).name == f"{NAME}.json" and Path(b).parent.name == "runs" and ".old-" not in Path(a).name:
            raise error
        return real(a, b)

    monkeypatch.setattr(runner.os, "replace", replace)


@pytest.mark.parametrize("old", [True, False])
def test_outputs_that_fail_to_commit_take_the_new_checkpoints_back(tmp_path, monkeypatch, old):
    paths = Paths(tmp_path)
    if old:
        _folder(runner.checkpoint_folder(paths, NAME, DIGEST), {"10_nope_k.pt": b"old"})
    _refuse_the_record(monkeypatch, OSError(28, "No space left on device"))
    res = runner.commit_outcome(paths, _outcome(paths, tmp_path / "run"), {"10_nope_k.pt": b"new"})
    assert res["status"] == "failed" and "could not write the outputs" in res["error"], res
    assert _tree(paths) == ({f"{DIGEST[:16]}/10_nope_k.pt": b"old"} if old else {})
    assert not (paths.generated / f"{NAME}.ipynb").exists()  # the notebook went back too


def test_checkpoints_that_cannot_be_written_fail_the_run_and_keep_the_old_folder(tmp_path, monkeypatch):
    paths = Paths(tmp_path)
    _folder(runner.checkpoint_folder(paths, NAME, DIGEST), {"10_nope_k.pt": b"old"})

    def full_disk(files, folder, *, sync=False):
        (Path(folder) / "10_nope_k.pt").write_bytes(b"ha")  # half of it written, then the disk is full
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(runner, "unpack_folder", full_disk)
    res = runner.commit_outcome(paths, _outcome(paths, tmp_path / "run"), {"10_nope_k.pt": b"new"})
    assert res["status"] == "failed" and "could not write the checkpoints" in res["error"], res
    assert not (paths.runs / f"{NAME}.json").exists()  # the outputs did not commit either
    assert _tree(paths) == {f"{DIGEST[:16]}/10_nope_k.pt": b"old"}


def test_ctrl_c_during_the_commit_puts_the_old_folder_back(tmp_path, monkeypatch):
    paths = Paths(tmp_path)
    _folder(runner.checkpoint_folder(paths, NAME, DIGEST), {"10_nope_k.pt": b"old"})

    _refuse_the_record(monkeypatch, KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        runner.commit_outcome(paths, _outcome(paths, tmp_path / "run"), {"10_nope_k.pt": b"new"})
    assert _tree(paths) == {f"{DIGEST[:16]}/10_nope_k.pt": b"old"}


def test_leftovers_of_a_killed_commit_go_at_the_next_run(tmp_path):
    paths = Paths(tmp_path)
    here = _folder(runner.checkpoint_folder(paths, NAME, DIGEST), {"10_nope_k.pt": b"ok"})
    _folder(here.with_name(f".{here.name}.new-x"), {"10_nope_k.pt": b"half"})
    _folder(here.with_name(f".{here.name}.old-1-y"), {"10_nope_k.pt": b"older"})
    assert runner.prune_checkpoints(paths, NAME, DIGEST) == here
    assert _tree(paths) == {f"{DIGEST[:16]}/10_nope_k.pt": b"ok"}


class _Future:
    def __init__(self, payload=None, error=None):
        self.payload, self.error = payload, error

    def result(self):
        if self.error is not None:
            raise self.error
        return self.payload


def test_collect_commits_the_returned_folder_and_a_killed_job_none(tmp_path):
    paths = Paths(tmp_path)
    rundir = tmp_path / ".covbook" / "tmp" / "run"
    rundir.mkdir(parents=True)
    r = runner.commit_job(_Future(error=RuntimeError("KilledWorker: 3 workers died")), paths, NAME, rundir)
    assert r.status == "failed" and not paths.checkpoints.exists()
    outcome = _outcome(paths, tmp_path / "built")
    payload = {"outcome": {k: outcome[k] for k in ("name", "meta", "error")},
               "notebook": (tmp_path / "built" / f"{NAME}.ipynb").read_bytes(), "claims": b"[]",
               "checkpoints": {"10_nope_k.pt": b"trained"}, "note": "a note"}
    notes: list[str] = []
    r = runner.commit_job(_Future(payload), paths, NAME, rundir, say=notes.append)
    assert r.status == "ok", r
    assert _tree(paths) == {f"{DIGEST[:16]}/10_nope_k.pt": b"trained"}
    assert notes == [f"  note    {NAME}: a note"]


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
    # that a cluster job carries them to its worker is tested without a notebook (outgoing_checkpoints above)
