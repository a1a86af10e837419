"""Rules files that cannot mean what they say are refused, naming the file, the rule and the key."""

from __future__ import annotations

import pytest

from claims_fixtures import claim, fake_project, write_rules
from covbook.book.checks import check
from covbook.book.config import Paths
from covbook.rules import load_rules, parse_rules
from helpers import covbook

GAIN = "gain_Gaussian:\n  kind: evidence\n  statement: the gain is 1\n  window: two_sided\n  basis: SE\n"


def _error(text: str) -> str:
    with pytest.raises(ValueError) as err:
        parse_rules(text, "notebooks/rules/02_x.yml")
    return str(err.value)


def test_a_rule_id_given_twice_is_an_error_naming_the_file_and_id():
    text = (GAIN + "  alternatives:\n  - {name: 5 % off, value: 1.05}\n"
            "gain_Gaussian:\n  kind: sanity\n  statement: anything\n  window: fixed\n  interval: [-1000, 1000]\n")
    msg = _error(text)
    assert msg.startswith("notebooks/rules/02_x.yml: rule id 'gain_Gaussian' is given twice (lines 1 and 8)"), msg


@pytest.mark.parametrize("text, says", [
    ("a: {kind: sanity, statement: s, window: fixed, interval: [0, 1], kind: evidence}\n", "rule 'a': key 'kind'"),
    ("a: {kind: evidence, statement: s, window: two_sided, basis: SE,\n"
     "    alternatives: [{name: x, value: 1, value: 2}]}\n", "rule 'a': key 'value'"),
])
def test_a_key_given_twice_inside_a_rule_is_an_error(text, says):
    assert says in _error(text)


@pytest.mark.parametrize("tail, says", [
    ("  alternatives:\n  - {name: no effect, value: .nan}\n",
     "rule 'gain_Gaussian': alternatives[0].value: expected a finite number"),
    ("  alternatives:\n  - {name: no effect, factor: .inf}\n",
     "rule 'gain_Gaussian': alternatives[0].factor: expected a finite number"),
    ("  alternatives:\n  - {name: no effect, value: null}\n", "alternatives[0]: value must be a finite number"),
    ("  alternatives:\n  - {name: no effect, valeu: 0}\n", "alternatives[0]: unknown key(s) valeu"),
    ("  alternatives:\n  - {name: no effect, value: 0, factr: 2}\n", "alternatives[0]: unknown key(s) factr"),
    ("  alternatives:\n  - {name: no effect, value: 0, key: x}\n", "needs exactly one of value, key or factor"),
    ("  alternatives:\n  - {name: no effect, key: 3}\n", "alternatives[0]: key must name a number"),
    ("  alternatives:\n  - {value: 0}\n", "alternatives[0]: name must be a non-empty text"),
    ("  alternatives:\n  - 0.5\n", "alternatives[0]: expected a mapping"),
    ("  alternatives: {name: x, value: 0}\n", "alternatives must be a list"),
    ("  interval: [0, 0.5]\n  alternatives:\n  - {name: x, value: 0}\n",
     "rule 'gain_Gaussian': interval is read only by window fixed; window 'two_sided' would ignore it"),
    ("  tolerance: 0.001\n  alternatives:\n  - {name: x, value: 0}\n",
     "rule 'gain_Gaussian': tolerance is read only by window tolerance"),
])
def test_alternatives_and_window_keys_that_cannot_mean_what_they_say(tail, says):
    msg = _error(GAIN + tail)
    assert msg.startswith("notebooks/rules/02_x.yml: ") and says in msg, msg


@pytest.mark.parametrize("window, says", [
    ("window: tolerance, tolerance: .inf", "rule 'a': tolerance: expected a finite number"),
    ("window: tolerance, tolerance: .nan", "rule 'a': tolerance: expected a finite number"),
    ("window: fixed, interval: [-.inf, .inf]", "rule 'a': interval: expected a finite number (an open end is null)"),
    ("window: fixed, interval: [0, .inf]", "rule 'a': interval: expected a finite number (an open end is null)"),
    ("window: fixed, interval: [.nan, 1]", "rule 'a': interval: expected a finite number"),
])
def test_windows_that_always_pass_are_refused(window, says):
    assert says in _error(f"a: {{kind: sanity, statement: s, {window}}}\n")


def test_open_ends_are_null_and_still_accepted():
    r = parse_rules("a: {kind: sanity, statement: s, window: fixed, interval: [0, null]}\n")["a"]
    assert r.interval == (0.0, None)


def test_a_rules_file_that_is_not_utf8_is_named(tmp_path):
    f = tmp_path / "02_x.yml"
    f.write_bytes("a: {kind: sanity, statement: caf\u00e9, window: fixed, interval: [0, 1]}\n".encode("latin-1"))
    with pytest.raises(ValueError) as err:
        load_rules(f)
    assert str(err.value) == f"{f}: not UTF-8 text (byte 0xe9 on line 1); save it as UTF-8"


def test_check_names_an_alternative_key_the_measurement_does_not_record(tmp_path):
    """A mistyped `key:` reads as "cannot exclude" unless check says the number was never recorded."""
    typo = claim("a", "01_alpha", alternatives=[{"name": "the other law", "key": "r_g_jjj"}])
    proj = fake_project(tmp_path, {"01_alpha": [typo]})
    problems = check(Paths(proj)).problems
    assert any("notebooks/rules/01_alpha.yml: rule 'a': alternatives[0] ('the other law'): key 'r_g_jjj' is not a "
               "number the measurement records" in p for p in problems), problems
    write_rules(proj, "01_alpha", [claim("a", "01_alpha", alternatives=[{"name": "twice", "key": "prediction"}])])
    assert check(Paths(proj)).ok


def test_cli_check_refuses_a_duplicated_rule(tmp_path):
    proj = fake_project(tmp_path, {"01_alpha": [claim("a", "01_alpha")]})
    f = proj / "notebooks" / "rules" / "01_alpha.yml"
    f.write_text(f.read_text() + "a: {kind: sanity, statement: wide, window: fixed, interval: [-1000, 1000]}\n")
    res = covbook(proj, "check")
    assert res.returncode == 1 and "rule id 'a' is given twice" in res.stderr and str(f) in res.stderr
