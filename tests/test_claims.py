"""Claims: measurements judged by rules (every window form), the JSON file, the rules file, error paths."""

import json
import math

import pytest

from covbook import claims
from covbook.claims import load_claims, measure
from covbook.rules import Alternative, Measurement, Rule, judge, parse_rules, quantile


def _rules(tmp_path, text, name="01_x"):
    d = tmp_path / "notebooks" / "rules"
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{name}.yml").write_text(text)
    return d / f"{name}.yml"


RULES = """\
a:
  kind: evidence
  statement: a slope over {n} streams is −1
  window: two_sided
  basis: bootstrap SE over {n} streams
  alternatives: [{name: no decay, value: 0.0}]
f:
  kind: identity
  statement: rounding
  window: fixed
  interval: [0, 1.0e-12]
"""


@pytest.fixture
def run_env(monkeypatch, tmp_path):
    f = tmp_path / "book" / "generated" / "claims" / "01_x.json"
    f.parent.mkdir(parents=True)
    monkeypatch.setenv(claims.CLAIMS_FILE_ENV, str(f))
    monkeypatch.setenv(claims.NOTEBOOK_ENV, "01_x")
    monkeypatch.setenv(claims.RULES_FILE_ENV, str(_rules(tmp_path, RULES)))
    return f


def test_measure_judges_saves_measurements_and_rejudges_from_the_file(run_env, tmp_path):
    c = measure("a", -0.9, prediction=-1.0, se=0.05, n=40, show=False, glue_value=False)
    assert c.passed and c.powered and c.statement == "a slope over 40 streams is −1"
    assert c.expected_text() == f"-1 ± {claims.fmt(claims.Z * 0.05)}"
    assert not measure("f", 1e-9, show=False, glue_value=False).passed
    saved = json.loads(run_env.read_text())
    assert [m["id"] for m in saved] == ["a", "f"] and "passed" not in saved[0]  # measurements, no verdict
    again = load_claims(run_env)
    assert [x.passed for x in again] == [True, False]
    # a rule change is re-judged from the stored measurement
    _rules(tmp_path, RULES.replace("[0, 1.0e-12]", "[0, 1.0e-6]"))
    assert [x.passed for x in load_claims(run_env)] == [True, True]


def test_a_measurement_without_a_rule_is_kept_and_said(run_env, capsys):
    c = measure("nope", 1.0, glue_value=False)
    assert not c.passed and "no rule" in c.reason and "no rule" in capsys.readouterr().out
    assert "nope" in run_env.read_text()


def _judge(window, value, **kw):
    rule_kw = {k: kw.pop(k) for k in ("interval", "tolerance", "alternatives") if k in kw}
    return judge(Rule("x", "evidence", "s", window, **rule_kw), Measurement("x", "nb", value, **kw))


@pytest.mark.parametrize("window, value, kw, lo, hi", [
    ("two_sided", 1.0, dict(prediction=1.0, se=0.1), 1 - 0.348, 1 + 0.348),
    ("at_least", 1.0, dict(prediction=1.0, se=0.1), 1 - 0.348, None),
    ("at_most", 1.0, dict(prediction=1.0, se=0.1, allowance=0.2), None, 1 + 0.548),
    ("above", 1.0, dict(prediction=0.0, se=0.1), 0.348, None),
    ("below", -1.0, dict(prediction=0.0, se=0.1), None, -0.348),
    ("tolerance", 1.0, dict(prediction=1.0, tolerance=1e-9), 1 - 1e-9, 1 + 1e-9),
    ("fixed", 0.5, dict(interval=(0.0, 1.0)), 0.0, 1.0),
    ("run_interval", 0.5, dict(lower=0.1, upper=None), 0.1, None),
])
def test_every_window_form(window, value, kw, lo, hi):
    c = _judge(window, value, **kw)
    assert c.passed
    assert (c.lower is None) == (lo is None) and (c.upper is None) == (hi is None)
    for got, want in ((c.lower, lo), (c.upper, hi)):
        if want is not None:
            assert got == pytest.approx(want, abs=1e-3)


def test_student_t_window_and_edges():
    c = _judge("two_sided", 1.0 + 6.0 * 0.1, prediction=1.0, se=0.1, dof=7)
    assert c.passed and c.tolerance == pytest.approx(quantile(7) * 0.1)
    assert not _judge("two_sided", 1.0 + 3.5 * 0.1, prediction=1.0, se=0.1).passed


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_non_finite_measurement_fails_never_passes(bad):
    c = _judge("fixed", bad, interval=(-1e9, 1e9))
    assert not c.passed and "measured value" in c.reason


def test_missing_prediction_fails_with_a_reason():
    c = _judge("two_sided", 1.0, se=0.1)
    assert not c.passed and "prediction" in c.reason


def test_power_against_alternatives():
    alts = (Alternative("t^(-1/2)", -0.5), Alternative("no decay", 0.0))
    strong = _judge("two_sided", -1.0, prediction=-1.0, se=0.05, alternatives=alts)
    assert strong.powered and strong.power_text() == "excludes t^(-1/2), no decay"
    weak = _judge("two_sided", -1.0, prediction=-1.0, se=0.2, alternatives=alts)
    assert weak.passed and not weak.powered and weak.cannot_exclude() == ["t^(-1/2)"]
    keyed = _judge("above", 2.0, prediction=0.0, se=0.1, alternatives=(Alternative("no effect", key="prediction"),))
    assert keyed.powered


def test_verdict_line_mentions_value_window_and_power():
    c = _judge("two_sided", -0.98, prediction=-1.0, se=0.05, alternatives=(Alternative("no decay", 0.0),))
    line = c.verdict_line()
    assert line.startswith("[PASS] x") and "-0.98 in -1 ±" in line and "excludes no decay" in line


@pytest.mark.parametrize("text, match", [
    ("x: {kind: proof, statement: s, window: fixed, interval: [0, 1]}", "kind"),
    ("x: {kind: sanity, statement: s, window: wide}", "window"),
    ("x: {kind: sanity, statement: ' ', window: fixed, interval: [0, 1]}", "statement"),
    ("x: {kind: sanity, statement: s, window: fixed}", "interval"),
    ("x: {kind: sanity, statement: s, window: fixed, interval: [2, 1]}", "lower <= upper"),
    ("x: {kind: sanity, statement: s, window: tolerance}", "tolerance"),
    ("x: {kind: sanity, statement: s, window: fixed, interval: [0, 1], colour: red}", "unknown key"),
    ("x: {kind: evidence, statement: s, window: at_least, per_run: yes please}", "per_run must be true or false"),
    ("x: {kind: evidence, statement: s, window: above, alternatives: [{value: 0}]}", "alternative"),
    ("1: {kind: sanity, statement: s, window: fixed, interval: [0, 1]}", "literal identifier"),
    ("[1, 2]", "mapping"),
])
def test_bad_rules_are_refused_naming_the_key(text, match):
    with pytest.raises(ValueError, match=match):
        parse_rules(text)


@pytest.mark.parametrize("kwargs, match", [
    (dict(id="", value=1), "identifier"),
    (dict(id="a b", value=1), "identifier"),
    (dict(id="x", value="abc"), "value"),
    (dict(id="x", value=1, se=-1), "se"),
    (dict(id="x", value=1, dof=0), "dof"),
    (dict(id="x", value=1, allowance=-1), "allowance"),
    (dict(id="x", value=1, lower=2, upper=1), "exceeds"),
    (dict(id="x", value=1, reason=" "), "reason"),
])
def test_measure_rejects_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        measure(show=False, glue_value=False, **kwargs)


def test_numpy_and_torch_scalars_become_plain_numbers():
    import numpy as np
    import torch

    from covbook.claims import _plain

    assert type(_plain(np.float64(1.5))) is float and type(_plain(torch.tensor(2))) is int
    assert _plain(np.arange(3)).shape == (3,) and _plain("text") == "text"


def test_student_t_quantile_matches_scipy_without_importing_it():
    from scipy.stats import t

    assert quantile() == claims.Z
    for dof in (1, 3, 7, 30, 1000):
        assert quantile(dof) == pytest.approx(float(t.ppf(1 - claims.LEVEL / 2, dof)), rel=1e-9)
    with pytest.raises(ValueError, match="dof"):
        quantile(0)


def test_chi2_mean_window_keeps_its_prediction_for_the_calibrations_residuals():
    """A chi2_mean window is not centred on its prediction (no `expected`), so the judged claim carries the
    prediction: the calibration standardizes (measured − prediction)/SE, which moves with a seed's drawn model."""
    from covbook.book.sweep import _centre

    r = Rule("c", "evidence", "a mean of weighted χ² terms is C", "chi2_mean")
    c = judge(r, Measurement("c", "08_x", 95.0, prediction=100.0, se=5.0))
    assert c.expected is None and c.passed
    assert c.lower < 100.0 < c.upper and 100.0 - c.lower < c.upper - 100.0  # the χ² law's right skew
    assert _centre(c) == 100.0
