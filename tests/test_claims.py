"""Claims: verdicts, interval logic, the JSON file, error paths."""

import json
import math

import pytest

from covbook import claims
from covbook.claims import load_claims, record


def test_tolerance_claim_passes_and_fails_at_the_edge(monkeypatch, tmp_path):
    f = tmp_path / "c.json"
    monkeypatch.setenv(claims.CLAIMS_FILE_ENV, str(f))
    monkeypatch.setenv("COVBOOK_NOTEBOOK", "nb")
    assert record("a", "inside", 1.1, 1.0, tolerance=0.1, show=False).passed
    assert not record("b", "outside", 1.1001, 1.0, tolerance=0.1, show=False).passed
    saved = load_claims(f)
    assert {c.id for c in saved} >= {"a", "b"} and all(c.notebook == "nb" for c in saved)
    assert json.loads(f.read_text())[0]["statement"] == "inside"


def test_interval_claims_and_open_ends():
    assert record("i1", "upper bound", 3.0, interval=(None, 30), show=False).passed
    assert not record("i2", "lower bound", -1.0, interval=(0, None), show=False).passed
    c = record("i3", "interval", 0.5, interval=(0, 1), show=False)
    assert c.passed and c.lower == 0 and c.upper == 1 and c.expected is None


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_non_finite_measurement_fails_never_passes(bad):
    assert not record("nf", "nan", bad, interval=(-1e9, 1e9), show=False).passed


def test_verdict_line_mentions_everything():
    c = record("v", "the slope is minus one", -0.98, -1.0, tolerance=0.05, show=False)
    line = c.verdict_line()
    assert "PASS" in line and "-0.98" in line and "± 0.05" in line and "slope" in line


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(id="", statement="s", measured=1, expected=1, tolerance=0), "identifier"),
        (dict(id="a b", statement="s", measured=1, expected=1, tolerance=0), "identifier"),
        (dict(id="x", statement=" ", measured=1, expected=1, tolerance=0), "statement"),
        (dict(id="x", statement="s", measured="abc", expected=1, tolerance=0), "measured"),
        (dict(id="x", statement="s", measured=1, expected=1, tolerance=-1), "tolerance"),
        (dict(id="x", statement="s", measured=1, expected=None, tolerance=1), "expected"),
        (dict(id="x", statement="s", measured=1, interval=(2, 1)), "exceeds"),
        (dict(id="x", statement="s", measured=1, interval=(None, None)), "finite end"),
        (dict(id="x", statement="s", measured=1, expected=1, tolerance=1, interval=(0, 2)), "not both"),
    ],
)
def test_record_rejects_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        record(show=False, **kwargs)


def test_numpy_and_torch_scalars_become_plain_numbers():
    import numpy as np
    import torch

    from covbook.claims import _plain

    assert type(_plain(np.float64(1.5))) is float and type(_plain(torch.tensor(2))) is int
    assert _plain(np.arange(3)).shape == (3,) and _plain("text") == "text"


def test_kind_must_be_known():
    with pytest.raises(ValueError, match="kind"):
        claims.record("k", "s", 1.0, 1.0, tolerance=0.0, kind="proof", show=False, glue_value=False)


def test_within_se_uses_the_book_level():
    c = claims.within_se("w", "near zero", 3.4 * 0.1, 0.0, 0.1, basis="SE over 10 runs", show=False,
                         glue_value=False)
    assert c.passed and c.kind == "evidence" and "3.48" in c.basis
    c = claims.within_se("w2", "near zero", 3.5 * 0.1, 0.0, 0.1, basis="SE over 10 runs", show=False,
                         glue_value=False)
    assert not c.passed


def test_one_sided_helpers_and_extra_needs_its_basis():
    assert claims.at_least_se("a", "big", 0.7, 1.0, 0.1, basis="SE", show=False, glue_value=False).passed
    assert not claims.at_most_se("b", "small", 1.5, 1.0, 0.1, basis="SE", show=False, glue_value=False).passed
    with pytest.raises(ValueError, match="extra_basis"):
        claims.within_se("c", "s", 0.0, 0.0, 0.1, basis="SE", extra=0.1, show=False, glue_value=False)
    with pytest.raises(ValueError, match="se"):
        claims.within_se("c", "s", 0.0, 0.0, float("nan"), basis="SE", show=False, glue_value=False)


def test_unevaluable_claim_is_recorded_as_failed_with_its_reason():
    c = claims.record("u", "s", float("nan"), 1.0, tolerance=1.0, reason="too few cycles", show=False,
                      glue_value=False)
    assert not c.passed and c.reason == "too few cycles"


def test_student_t_quantile_for_an_se_from_few_replicates():
    assert claims.quantile() == claims.Z
    assert claims.quantile(7) > 6.0 > claims.quantile(100) > claims.Z
    c = claims.within_se("t", "near zero", 5.0 * 0.1, 0.0, 0.1, basis="SE over 8 runs", dof=7, show=False,
                         glue_value=False)
    assert c.passed and "Student t, 7 dof" in c.basis
    with pytest.raises(ValueError, match="dof"):
        claims.within_se("t", "s", 0.0, 0.0, 0.1, basis="SE", dof=0, show=False, glue_value=False)
