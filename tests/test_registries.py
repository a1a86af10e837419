"""One registry per concept: the profile table, the device names, the run-record reader."""

from __future__ import annotations

import json

import pytest
import yaml

from covbook import _devices
from covbook._jsonio import DamagedFile
from covbook._validate import resolve_device
from covbook.book import cache, checks, plan
from covbook.book.config import DEFAULT_PROFILE, PROFILE_TABLE, PROFILES, UsageError, load_profiles, profile_table
from covbook.book.records import RunRecord, read_run
from helpers import ROOT


def test_the_profile_table_is_the_one_in_profiles_yml() -> None:
    raw = yaml.safe_load((ROOT / "notebooks" / "profiles.yml").read_text(encoding="utf-8"))["profiles"]
    assert PROFILES == tuple(raw) == ("smoke", "quick", "full")
    assert DEFAULT_PROFILE == "quick" and PROFILE_TABLE["quick"].defaults
    assert checks.POWER_PROFILES == tuple(n for n, s in raw.items() if s.get("power"))
    assert plan.DEFAULT_LIMITS == {n: s["time_limit"] for n, s in raw.items()}


def test_a_new_profile_is_one_entry() -> None:
    table = profile_table({"smoke": {"time_limit": 60}, "quick": {"defaults": True},
                           "medium": {"description": "between", "power": True, "time_limit": 600}})
    assert list(table) == ["smoke", "quick", "medium"] and table["medium"].power and table["medium"].time_limit == 600


@pytest.mark.parametrize(("raw", "match"), [
    (None, "profiles"),
    ({"smoke": {}}, "defaults"),
    ({"a": {"defaults": True}, "b": {"defaults": True}}, "exactly one"),
    ({"a": {"defaults": True, "colour": "red"}}, "keys"),
    ({"a": {"defaults": True, "time_limit": 0}}, "time_limit"),
    ({"a b": {"defaults": True}}, "profile"),
    ({"a": {"defaults": "true"}}, "true or false"),
    ({"a": {"defaults": True}, "b": {"power": "no"}}, "true or false"),
    ({True: {"defaults": True}}, "profile"),
])
def test_bad_profile_tables(raw, match: str) -> None:
    with pytest.raises(UsageError, match=match):
        profile_table(raw)


def test_load_profiles_checks_and_drops_the_table(tmp_path) -> None:
    f = tmp_path / "profiles.yml"
    f.write_text("profiles: {q: {defaults: true}}\n01_a:\n  smoke: {n: 1}\n", encoding="utf-8")
    assert load_profiles(f) == {"01_a": {"smoke": {"n": 1}}}
    f.write_text("profiles: {q: {}}\n", encoding="utf-8")
    with pytest.raises(UsageError, match="defaults"):
        load_profiles(f)


def test_device_names() -> None:
    assert _devices.DEVICES == ("auto", "cpu", "cuda")
    assert _devices.device_name("cpu") == "cpu" and resolve_device("cpu").type == "cpu"
    assert cache.resolve_device("auto") in ("cpu", "cuda")
    with pytest.raises(ValueError, match="device must be one of"):
        _devices.device_name("tpu")
    with pytest.raises(UsageError, match="--device"):
        cache.resolve_device("tpu")
    if not _devices.cuda_available():
        with pytest.raises(ValueError, match="no CUDA GPU"):
            resolve_device("cuda")


def test_run_records(tmp_path) -> None:
    assert read_run(tmp_path / "none.json") is None
    f = tmp_path / "r.json"
    f.write_text(json.dumps({"notebook": "01_a", "status": "ok", "hash": "k", "seconds": 2, "device_used": "cpu",
                             "parameters": {"profile": "smoke", "seed": 4}, "outputs": {"claims": "x"}}))
    r = read_run(f)
    assert isinstance(r, RunRecord) and r.ok
    assert (r.profile, r.seed, r.key, r.seconds, r.device_used, r.rehearsal) == ("smoke", 4, "k", 2.0, "cpu", False)
    assert r.outputs == {"claims": "x"} and r.get("notebook") == "01_a" and r.error is None
    f.write_text(json.dumps({"status": "failed", "error": "boom"}))
    assert read_run(f).error == "boom" and not read_run(f).ok and read_run(f).parameters == {}
    f.write_text("{not json")
    with pytest.raises(DamagedFile):
        read_run(f)
    f.write_text(json.dumps({"status": "ok", "parameters": [1]}))
    with pytest.raises(DamagedFile, match="parameters"):
        read_run(f)
