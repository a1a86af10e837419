"""The rehearsal: every notebook with the `full` profile's shapes at short lengths.

`covbook run --profile full --rehearse` takes the full profile's parameters,
except those listed under the notebook's `lengths:` key in notebooks/profiles.yml,
which take their smoke value or the (smaller) value given there: model sizes,
dimensions, lists of sizes and the device are the paper-scale ones, the number
of tokens and steps is small.  A
paper-scale run must not fail on what this minute-long run catches (shape
errors, memory at the full model sizes, parameters a notebook does not have).
The claims are not asserted here: at short lengths with full shapes a claim's
own uncertainty is what it is; `test_notebooks.py` checks the claims.

A notebook whose full profile changes only its lengths rehearses with the
smoke run's parameters, or with lengths shorter than smoke's (the values under
``lengths:``); when the rehearsal's device (``auto``) is also the smoke run's
(``cpu``), its rehearsal would execute the same code again on as many numbers or
fewer, so the smoke run of `test_notebooks.py` stands for it (checked here: the
same parameters but the ``profile`` label and lengths at least the rehearsal's,
run ok).  On a GPU machine every
notebook rehearses, on the GPU.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from covbook.book.cache import resolve_device
from covbook.book.config import Paths, discover, load_profiles, notebook_parameters, resolve_parameters
from helpers import ROOT, covbook, pipeline_project

NOTEBOOKS = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.md"))
SMOKE_DEVICE, REHEARSAL_DEVICE = "cpu", "auto"  # conftest.smoke_project runs on the CPU


def _parameters(name: str, profile: str, rehearse: bool, injected: dict | None = None) -> dict:
    """The values ``name`` runs with: its parameters cell updated by what `covbook run` injects.

    ``injected``: the parameters of a run record instead of those `covbook run` would inject now.
    The ``profile`` label and the device are left out; JSON-normalised (tuples read back as lists).
    """
    paths = Paths(ROOT)
    defaults = notebook_parameters(discover(paths)[name])
    if injected is None:
        injected = resolve_parameters(name, defaults, load_profiles(paths.profiles), profile, SMOKE_DEVICE, 0,
                                      rehearse=rehearse)
    values = {**defaults, **injected}
    return json.loads(json.dumps({k: v for k, v in values.items() if k not in ("profile", "device")}))


def _lengths(name: str) -> set[str]:
    """The names under the notebook's ``lengths:`` key in profiles.yml."""
    return set(load_profiles(Paths(ROOT).profiles).get(name, {}).get("lengths", []))


def _covered(smoke: dict, rehearsal: dict, lengths: set[str]) -> bool:
    """Whether ``smoke`` runs what ``rehearsal`` would: equal values, except lengths at least as long.

    A length (a name under ``lengths:``) the rehearsal sets shorter than smoke's runs the same code on
    fewer numbers, so the smoke run covers it; any other difference (a shape, a list of sizes) does not.
    """
    for k in smoke.keys() | rehearsal.keys():
        a, b = smoke.get(k), rehearsal.get(k)
        if a == b:
            continue
        numbers = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (a, b))
        if not (k in lengths and numbers and b <= a):
            return False
    return True


def smoke_stands_for(name: str) -> bool:
    """Whether the smoke run of ``name`` executes what its rehearsal would (see the module docstring)."""
    if resolve_device(REHEARSAL_DEVICE) != SMOKE_DEVICE:
        return False
    return _covered(_parameters(name, "smoke", False), _parameters(name, "full", True), _lengths(name))


REHEARSED = [name for name in NOTEBOOKS if not smoke_stands_for(name)]


@pytest.fixture(scope="session")
def rehearsed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with pipeline_project("rehearsal", tmp_path_factory) as root:
        if not REHEARSED:  # `covbook run` without names would run every notebook
            yield root
            return
        # one kernel at a time on one thread: the rehearsal is off the critical path of `make test` (the smoke
        # notebooks, the book, the browser and the PDF are on it), and a third and fourth kernel on two cores
        # only slowed everything down
        proc = covbook(root, "run", *REHEARSED, "--profile", "full", "--rehearse", "--device", REHEARSAL_DEVICE,
                       "--jobs", "1", "--no-progress", timed="rehearsal (full shapes)", env={"COVBOOK_THREADS": "1"})
        print(proc.stdout, proc.stderr)
        yield root


@pytest.mark.notebooks
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs_at_full_shapes(request: pytest.FixtureRequest, name: str) -> None:
    if name in REHEARSED:
        meta = json.loads((request.getfixturevalue("rehearsed") / "book" / "generated" / "runs" / f"{name}.json")
                          .read_text())
        assert meta["status"] == "ok", f"{name} failed its rehearsal: {meta.get('error')}"
        assert meta["rehearsal"] is True and meta["parameters"]["profile"] == "full"
        return
    # the smoke run executed the rehearsal's parameters on the rehearsal's device
    smoke = request.getfixturevalue("smoke_project")
    meta = json.loads((smoke / "book" / "generated" / "runs" / f"{name}.json").read_text())
    assert meta["status"] == "ok", f"{name} failed its smoke run, which stands for its rehearsal: {meta.get('error')}"
    ran = _parameters(name, "smoke", False, injected=meta["parameters"])
    assert _covered(ran, _parameters(name, "full", True), _lengths(name)), (
        f"{name}: the smoke run no longer covers the rehearsal's parameters")


def test_a_notebook_whose_full_profile_changes_a_shape_is_rehearsed() -> None:
    """The smoke run never stands for a rehearsal at other shapes (a full value of a name not under ``lengths``)."""
    if resolve_device(REHEARSAL_DEVICE) != SMOKE_DEVICE:
        assert REHEARSED == NOTEBOOKS  # on a GPU, every notebook rehearses there
        return
    profiles = load_profiles(ROOT / "notebooks" / "profiles.yml")
    for name in NOTEBOOKS:
        entry = profiles.get(name, {})
        lengths = set(entry.get("lengths", []))
        smoke = {**notebook_parameters(discover(Paths(ROOT))[name]), **entry.get("smoke", {})}
        shapes = {k: v for k, v in entry.get("full", {}).items() if k not in lengths}
        if any(json.dumps(smoke.get(k)) != json.dumps(v) for k, v in shapes.items()):
            assert name in REHEARSED, name
    assert "06_icl_multi_step" in REHEARSED and "02_elliptical_inputs" not in REHEARSED
    assert "08_depth_collapse" not in REHEARSED  # full changes only lengths, and its rehearsal's are shorter


def test_covered_takes_shorter_lengths_only() -> None:
    smoke = {"t_max": 512, "d": 3, "taus": [0.1, 1.0]}
    assert _covered(smoke, {**smoke, "t_max": 128}, {"t_max"})
    assert not _covered(smoke, {**smoke, "t_max": 1024}, {"t_max"})  # longer than smoke: not run there
    assert not _covered(smoke, {**smoke, "d": 2}, {"t_max"})  # a shape
    assert not _covered(smoke, {**smoke, "taus": [0.1]}, {"t_max", "taus"})  # not a number
