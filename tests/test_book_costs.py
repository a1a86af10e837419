"""The run-costs table of the reproduction page (covbook.book.records): rendered from run records only."""

from __future__ import annotations

import json
from pathlib import Path

from claims_fixtures import claim, fake_project
from covbook.book.config import Paths
from covbook.book.records import run_costs_markdown


def _record(folder: Path, name: str, profile: str, seconds: float, cpu: float | None = None, *,
            status: str = "ok", rehearsal: bool = False, device: str = "cpu") -> None:
    folder.mkdir(parents=True, exist_ok=True)
    rec = {"notebook": name, "parameters": {"profile": profile, "seed": 0}, "seconds": seconds,
           "device_used": device, "rehearsal": rehearsal, "status": status}
    if cpu is not None:
        rec["cpu_seconds"] = cpu
    (folder / f"{name}.json").write_text(json.dumps(rec))


def test_costs_group_the_books_run_and_the_sweeps_seeds(tmp_path: Path) -> None:
    paths = Paths(tmp_path)
    _record(paths.runs, "01_a", "quick", 30.0, 25.0)
    for seed, (wall, cpu) in zip((5, 6, 7), ((10.0, 8.0), (14.0, 9.0), (12.0, None)), strict=True):
        _record(Paths(paths.generated / "sweep" / "smoke" / f"seed-{seed}").runs, "01_a", "smoke", wall, cpu)
    _record(Paths(paths.generated / "sweep" / "smoke" / "seed-8").runs, "01_a", "smoke", 99.0, status="failed")
    _record(Paths(paths.generated / "sweep" / "smoke" / "seed-9").runs, "02_b", "full", 7.0, rehearsal=True)
    rows = [line for line in run_costs_markdown(paths).splitlines() if line.startswith("| 0")]
    assert rows == [
        "| 01_a | quick | cpu | 1 | 30.0 | 30.0–30.0 | 25.0 |",
        "| 01_a | smoke | cpu | 3 | 12.0 | 10.0–14.0 | 8.5 |",  # median CPU over the 2 runs that recorded it
    ]  # a failed run and a rehearsal cost nothing here: their times are not the profile's


def test_costs_table_is_rendered_from_the_records(tmp_path: Path) -> None:
    paths = Paths(tmp_path)
    _record(paths.runs, "01_a", "quick", 30.04, None, device="cuda")
    text = run_costs_markdown(paths)
    assert "| 01_a | quick | cuda | 1 | 30.0 | 30.0–30.0 | — |" in text.splitlines()


def test_no_records_says_so_and_a_damaged_one_is_skipped(tmp_path: Path) -> None:
    paths = Paths(tmp_path)
    assert run_costs_markdown(paths).strip() == "No run record holds a time yet: run `covbook run` first."
    paths.runs.mkdir(parents=True)
    (paths.runs / "01_a.json").write_text("{not json")
    assert run_costs_markdown(paths).strip() == "No run record holds a time yet: run `covbook run` first."


def test_the_reproduction_page_shows_the_run_costs(tmp_path: Path) -> None:
    from covbook.book.report import write_report

    proj = fake_project(tmp_path, {"01_alpha": [claim("a", "01_alpha")]})
    text = write_report(Paths(proj)).read_text(encoding="utf-8")
    assert "## What the runs cost" in text
    assert "| 01_alpha | smoke | cpu | 1 | 1.0 | 1.0–1.0 | — |" in text.splitlines()
