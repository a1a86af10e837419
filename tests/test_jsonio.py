"""Tests of covbook._jsonio: the one atomic writer (JSON and checkpoints) and the verifying reader."""

from __future__ import annotations

from pathlib import Path

import pytest

from covbook._jsonio import DamagedFile, atomic_write, read_json, write_json_atomic


def test_json_round_trip_and_damage(tmp_path):
    path = tmp_path / "sub" / "x.json"
    write_json_atomic(path, {"a": [1, 2.5, None]})
    assert read_json(path, dict) == {"a": [1, 2.5, None]}
    with pytest.raises(DamagedFile, match="x.json"):
        read_json(path, list)
    path.write_text("{", encoding="utf-8")
    with pytest.raises(DamagedFile, match="damaged"):
        read_json(path)


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "state.bin"
    atomic_write(path, lambda tmp: Path(tmp).write_bytes(b"old"))

    def fails(tmp: str) -> None:
        with open(tmp, "wb") as fh:
            fh.write(b"half")
        raise KeyboardInterrupt  # also Ctrl-C

    with pytest.raises(KeyboardInterrupt):
        atomic_write(path, fails)
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["state.bin"]


def test_an_atomic_write_gets_the_mode_a_plain_open_gives(tmp_path):
    """Not the temporary's private 0600: a page or a published notebook must be readable as any file is."""
    import os

    plain = tmp_path / "plain.txt"
    plain.write_text("x", encoding="utf-8")
    write_json_atomic(tmp_path / "a.json", [1])
    atomic_write(tmp_path / "b.txt", lambda tmp: Path(tmp).write_text("x", encoding="utf-8"))
    for name in ("a.json", "b.txt"):
        assert os.stat(tmp_path / name).st_mode & 0o777 == os.stat(plain).st_mode & 0o777
