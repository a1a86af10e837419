"""Power at another profile (covbook.book.power): windows rebuilt from scaled standard errors, against closed
forms; the replicates each notebook declares in notebooks/profiles.yml (fast stage)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from covbook.book import power
from covbook.book.config import load_profiles
from covbook.rules import LEVEL, Alternative, Measurement, Rule, Z, chi2_quantile, judge, load_rules, quantile

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data"
TWO = (Alternative("t^(-1/2)", -0.5), Alternative("no decay", 0.0))


def _rule(window: str, alts=TWO, **kw) -> Rule:
    return Rule("s", "evidence", "a slope is −1", window, alternatives=alts, **kw)


def _m(se: float = 0.2, dof: int | None = None, allowance: float = 0.0, value: float = -1.0, **kw) -> Measurement:
    return Measurement("s", "08_x", value, prediction=-1.0, se=se, dof=dof, allowance=allowance, **kw)


@pytest.mark.parametrize(("n_from", "n_to"), [(16, 64), (16, 4), (10, 1000), (3, 3)])
def test_se_scales_as_inverse_root_of_replicates(n_from, n_to):
    assert power.scaled(_m(0.3), n_from, n_to).se == pytest.approx(0.3 * math.sqrt(n_from / n_to), rel=1e-15)


def test_bad_counts_are_refused():
    with pytest.raises(ValueError, match="n_from, n_to and length must be positive"):
        power.scaled(_m(0.1), 0, 4)


@pytest.mark.parametrize(("se", "allowance", "n_from"), [(0.2, 0.0, 16), (0.05, 0.0, 200), (0.3, 0.1, 32),
                                                          (0.01, 0.2, 8)])
def test_needed_two_sided_closed_form(se, allowance, n_from):
    """p ± (Z·se·sqrt(n_from/n) + a) excludes the nearest alternative (D = 0.5 from p) once
    n > n_from·(Z·se/(D − a))²."""
    need = power.needed(_rule("two_sided"), _m(se, allowance=allowance), n_from)
    closed = math.floor(n_from * (Z * se / (0.5 - allowance)) ** 2) + 1
    assert need == max(1, closed)


def test_needed_with_student_t_is_where_the_window_first_excludes():
    """With a Student-t quantile the count is the first n whose window (k at the scaled dof) excludes −0.5."""
    rule, m = _rule("two_sided"), _m(0.25, dof=15)
    need = power.needed(rule, m, 16)
    assert judge(rule, power.scaled(m, 16, need)).powered
    assert not judge(rule, power.scaled(m, 16, need - 1)).powered
    at, before = power.scaled(m, 16, need), power.scaled(m, 16, need - 1)
    assert quantile(at.dof) * at.se < 0.5 <= quantile(before.dof) * before.se


def test_no_count_decides_an_alternative_inside_the_allowance():
    assert power.needed(_rule("two_sided"), _m(0.2, allowance=0.6), 16) is None


@pytest.mark.parametrize("window", ["above", "below", "fixed", "tolerance"])
def test_windows_whose_power_does_not_grow_with_replicates(window):
    kw = {"interval": (-2.0, 0.0)} if window == "fixed" else {"tolerance": 0.1} if window == "tolerance" else {}
    assert power.needed(_rule(window, **kw), _m(0.2), 16) is None


def test_an_alternative_on_the_open_side_is_never_excluded():
    rule = _rule("at_least", alts=(Alternative("bigger", 0.0),))  # [p − k·se, ∞) always contains 0 > p
    assert power.needed(rule, _m(0.01), 16) is None


def test_at_most_closed_form():
    rule = _rule("at_most", alts=(Alternative("no decay", 0.0),))  # (−∞, −1 + Z·se]: excludes 0 once Z·se < 1
    assert power.needed(rule, _m(0.5), 10) == math.floor(10 * (Z * 0.5) ** 2) + 1


def test_chi2_mean_window_at_scaled_nu():
    """A chi2_mean window at n replicates: ν = 2p²/se² grows like n, ends p·χ²_ν(α/2, 1 − α/2)/ν."""
    rule = Rule("c", "evidence", "the mean is C", "chi2_mean",
                alternatives=(Alternative("half", 0.5), Alternative("double", 2.0)))
    m = Measurement("c", "01_x", 1.1, prediction=1.0, se=0.49)
    c = power.predict(rule, m, 12, 48)
    nu = 2.0 / (0.49 ** 2 * 12 / 48)
    assert c.lower == pytest.approx(chi2_quantile(LEVEL / 2, nu) / nu, rel=1e-9)
    assert c.upper == pytest.approx(chi2_quantile(1 - LEVEL / 2, nu) / nu, rel=1e-9)
    need = power.needed(rule, m, 12)
    assert judge(rule, power.scaled(m, 12, need)).powered and not judge(rule, power.scaled(m, 12, need - 1)).powered


def test_run_interval_ends_scale_about_the_prediction():
    rule = Rule("c", "evidence", "C", "run_interval", alternatives=(Alternative("half", 0.5),))
    m = Measurement("c", "01_x", 1.0, prediction=1.0, se=0.1, lower=0.4, upper=1.8)
    c = power.predict(rule, m, 100, 400)
    assert (c.lower, c.upper) == (pytest.approx(0.7), pytest.approx(1.4))
    assert power.needed(rule, m, 100) == 144 + 1  # 1 − 0.6·sqrt(100/n) > 0.5 ⇔ n > 144


@pytest.mark.parametrize("value", [-3.0, -1.0, -0.5, 0.0, 2.0])
def test_the_predicted_kind_never_depends_on_the_measured_value(value):
    rule = _rule("two_sided")
    assert power.predict(rule, _m(0.2, value=value), 16, 64).kind == "evidence"
    assert power.predict(rule, _m(0.2, value=value), 16, 16).kind == "compatible"


def test_a_window_without_an_se_is_not_predicted():
    with pytest.raises(ValueError, match="records no standard error"):
        power.predict(_rule("two_sided"), _m(se=float("nan")), 16, 64)


@pytest.mark.parametrize(("window", "kw"), [("two_sided", {"dof": 9, "allowance": 0.05}), ("at_least", {}),
                                            ("at_most", {"allowance": 0.1}), ("chi2_mean", {}),
                                            ("run_interval", {"lower": -1.5, "upper": -0.7})])
def test_the_measurement_is_read_back_from_the_judged_claim(window, kw):
    rule = _rule(window)
    m = Measurement("s", "08_x", -0.9, prediction=-1.0 if window != "chi2_mean" else 1.0, se=0.1, **kw)
    first = judge(rule, m)
    again = judge(rule, power.measurement_of(first))
    assert (again.lower, again.upper) == (pytest.approx(first.lower), pytest.approx(first.upper))
    assert power.measurement_of(first).allowance == pytest.approx(m.allowance, abs=1e-12)


@pytest.mark.parametrize(("raw", "match"), [
    ([], "must be a mapping"),
    ({"default": 3}, r"01_a\.replicates\.default must be an expression"),
    ({"c": {"not_predicted": ""}}, r"01_a\.replicates\.c must be"),
    ({"c": {"reason": "x"}}, r"01_a\.replicates\.c must be"),
    ({"default": {"not_predicted": "x"}}, r"01_a\.replicates\.default must be an expression"),
    ({"a claim": "n"}, "must be `default` or a claim id"),
])
def test_a_malformed_replicates_entry_names_it(raw, match):
    with pytest.raises(ValueError, match=match):
        power.parse_replicates(raw, "01_a")


@pytest.mark.parametrize(("expr", "match"), [
    ("len(taus)", "unsupported syntax"), ("n_streams -", "not an expression"),
    ("n_streams - 64", "expected a positive count"), ("n_streams / 0", "division"), ("taus", "is not a number")])
def test_a_bad_replicates_expression_is_a_clear_error(expr, match):
    with pytest.raises(ValueError, match=match):
        power.replicate_count(expr, {"n_streams": 64, "taus": [0.1, 1.0]}, "01_a.replicates (c)")


def test_an_unknown_parameter_names_the_claim():
    with pytest.raises(ValueError, match=r"08_x\.replicates \(s\): expression 'n_pairs' names 'n_pairs'"):
        power.forecast(_rule("two_sided"), _m(), "n_pairs", {"n_streams": 32}, {"full": {"n_streams": 256}})


def test_forecast_at_each_profile():
    out = power.forecast(_rule("two_sided"), _m(0.2), "n_streams", {"n_streams": 16},
                         {"quick": {"n_streams": 16}, "full": {"n_streams": 256}})
    assert [(f.profile, f.kind, f.n) for f in out] == [("quick", "compatible", 16.0), ("full", "evidence", 256.0)]
    assert out[1].band == pytest.approx((-1 - Z * 0.05, -1 + Z * 0.05))
    assert out[1].n_needed == math.floor(16 * (Z * 0.2 / 0.5) ** 2) + 1
    assert power.decision_text(out) == (f"evidence predicted at `full` (`n_streams` 256 ≥ "
                                        f"{power.fmt_count(out[1].n_needed)} needed), and from the measured value and "
                                        "its SE it would pass at `quick` (window [-1.696, -0.3038], value "
                                        "[-1.696, -0.3038]), pass at `full` (window [-1.174, -0.826], value "
                                        "[-1.174, -0.826])")
    why = power.Scale(not_predicted="its window is the run's")
    skipped = power.forecast(_rule("two_sided"), _m(), why, {}, {"full": {}})
    assert skipped[0].kind is None and power.decision_text(skipped) == "not predicted: its window is the run's"


def test_a_significance_window_predicted_at_a_larger_profile_names_no_needed_count():
    rule = _rule("above", alts=(Alternative("no effect", -1.0),))  # [p + k·se, ∞) excludes p at any se > 0
    out = power.forecast(rule, _m(0.2), "n", {"n": 16}, {"full": {"n": 64}})
    assert out[0].kind == "evidence" and out[0].n_needed is None
    assert power.decision_text(out, "above").startswith("evidence predicted at `full` (`n` 64), and from the measured")


def test_what_the_model_leaves_out_is_said():
    scale = power.parse_replicates({"default": {"n": "n", "also": "the range of log t"}}, "01_a")["default"]
    out = power.forecast(_rule("two_sided"), _m(0.2), scale, {"n": 16}, {"full": {"n": 20}})
    assert out[0].kind == "compatible" and power.decision_text(out).split(", and from")[0].endswith(
        "needs `n` ≥ 32 (not counted: the range of log t, which would narrow its window further)")


def test_a_fixed_window_keeps_its_kind_at_every_profile():
    rule = Rule("b", "evidence", "below the bound", "fixed", interval=(0.0, 1.0),
                alternatives=(Alternative("twice the bound", 2.0),))
    m = Measurement("b", "01_x", 0.4)
    out = power.forecast(rule, m, power.Scale(not_predicted="unused"), {}, {"quick": {}, "full": {}})
    assert [(f.kind, f.n_needed, f.note) for f in out] == [("evidence", None, power.SAME_WINDOW)] * 2
    assert power.decision_text(out) == f"evidence at every profile: {power.SAME_WINDOW}"


def _notebooks() -> list[str]:
    return sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.md"))


@pytest.mark.parametrize("notebook", _notebooks())
def test_every_evidence_rule_has_its_replicates_declared(notebook):
    """Each notebook declares what counts its replicates; each name is a parameter at every profile, each claim
    it names is a rule of the chapter, and every evidence rule is covered (by `default` or by name)."""
    table = load_profiles(ROOT / "notebooks" / "profiles.yml")
    entry = power.parse_replicates(table[notebook]["replicates"], notebook) if "replicates" in table[notebook] else None
    rules = load_rules(ROOT / "notebooks" / "rules" / f"{notebook}.yml")
    evidence = [r.id for r in rules.values() if r.kind == "evidence"]
    if not evidence:
        return
    assert entry is not None, f"notebooks/profiles.yml: {notebook} has evidence rules but no `replicates:`"
    assert not set(entry) - {"default"} - set(rules), f"{notebook}.replicates names claims its rules do not have"
    for params in power.profile_parameters(ROOT, notebook, table).values():
        for cid in evidence:
            scale = entry.get(cid) or entry.get("default")
            assert scale is not None, f"{notebook}: evidence rule {cid} has no replicates"
            for expr in filter(None, (scale.n, scale.length)):
                assert power.replicate_count(expr, params, f"{notebook}.replicates ({cid})") > 0


def test_08_full_predicted_from_quick():
    """Chapter 08's Gaussian slopes at quick (16 pairs, CPU) predict their full windows (128 pairs): each is
    predicted evidence at full, and the SEs measured at full on one H200 lie within a factor 2 of the
    prediction (the t-range, 1,024 → 16,384, also changes; the model leaves it out)."""
    quick = {m["id"]: Measurement(**m) for m in json.loads((DATA / "08_slopes_quick_cpu.json").read_text())
             ["measurements"]}
    full = {m["id"]: m for m in json.loads((DATA / "08_slopes_full_h200.json").read_text())["measurements"]}
    for cid, m in quick.items():
        rule = dataclasses.replace(_rule("two_sided"), id=cid)
        n_quick, n_full = m.extra["n_pairs"], full[cid]["extra"]["n_pairs"]
        c = power.predict(rule, dataclasses.replace(m, extra={}), n_quick, n_full, profile="full")
        assert c.kind == "evidence", cid
        assert 0.5 < full[cid]["se"] / c.extra["se"] < 2.0, cid


def _h200_rows() -> list[dict]:
    return json.loads((DATA / "power_quick_full_h200.json").read_text())["claims"]


def _predicted_from_quick(row: dict):
    alts = tuple(Alternative(**a) for a in row["alternatives"])
    rule = Rule(row["id"], "evidence", "stored", row["window"], alternatives=alts)
    m = Measurement(**row["quick"])
    return power.predict(rule, m, row["n_quick"], row["n_full"], length=row["length_ratio"], profile="full")


def test_full_kinds_predicted_from_quick_are_the_kinds_measured_at_full():
    """Chapters 01–05 at quick (CPU) predict each evidence claim's kind at full; a full run on one H200 gave
    the same kind for every one (studies/power_scaling_h200.py wrote the fixture)."""
    rows = _h200_rows()
    assert len(rows) >= 40
    for row in rows:
        c = _predicted_from_quick(row)
        predicted = row["predicted"]
        assert (c.lower, c.upper) == (pytest.approx(predicted["lower"]), pytest.approx(predicted["upper"]))
        assert c.kind == row["predicted"]["kind"] == row["full"]["kind"], row["id"]


def test_full_widths_measured_on_the_h200_match_the_prediction():
    """Measured/predicted full window width: within a factor 2 for every claim, and 1 within 20 % on the
    geometric mean (slopes come out narrower than predicted: their t-range grows too, which the model leaves
    out)."""
    ratios = [(r["full"]["upper"] - r["full"]["lower"]) / (r["predicted"]["upper"] - r["predicted"]["lower"])
              for r in _h200_rows()]
    assert all(0.5 < x < 2.0 for x in ratios), sorted(ratios)
    assert 0.8 < math.exp(sum(map(math.log, ratios)) / len(ratios)) < 1.25


def test_the_decision_says_why_no_size_decides_a_claim():
    f = power.Forecast("full", "compatible", scale=power.Scale("n"), n=64.0, n_run=16.0)
    assert power.decision_text([f], "two_sided") == (
        "not decided by any size: an alternative stays inside its window however small the SE (within its "
        "allowance, or on its open side)")
    assert power.decision_text([f], "above") == ("not decided by size: its window's power does not grow with the "
                                                 "replicates")
    assert power.decision_text([dataclasses.replace(f, note="the range of log t")], "two_sided").endswith(
        "on its open side; not counted: the range of log t, which would narrow its window further)")
    long = dataclasses.replace(f, kind="evidence", n_needed=20.0, scale=power.Scale("n", "t_max"), length=4096.0)
    assert power.decision_text([long]) == "evidence predicted at `full` (`n` 64 ≥ 20 needed at `t_max` 4,096)"


@pytest.mark.parametrize(("value", "verdict"), [(-1.0, "pass"), (-0.3, "fail"), (-0.85, "undecided")])
def test_the_predicted_verdict_compares_the_measured_value_and_its_scaled_se_with_the_predicted_window(value, verdict):
    """At 256 streams the window is −1 ± Z·0.05 ≈ [−1.17, −0.83] and the value's band value ± Z·0.05."""
    out = power.forecast(_rule("two_sided"), _m(0.2, value=value), "n_streams", {"n_streams": 16},
                         {"full": {"n_streams": 256}})
    (f,) = out
    assert f.band == pytest.approx((value - Z * 0.05, value + Z * 0.05)) and f.verdict == verdict
    word = {"pass": "pass", "fail": "fail", "undecided": "stay undecided"}[verdict]
    assert f"from the measured value and its SE it would {word} at `full`" in power.decision_text(out)


def test_no_verdict_without_a_standard_error():
    rule = Rule("b", "evidence", "below the bound", "fixed", interval=(0.0, 1.0),
                alternatives=(Alternative("twice the bound", 2.0),))
    out = power.forecast(rule, Measurement("b", "01_x", 0.4), power.Scale(not_predicted="unused"), {}, {"full": {}})
    assert out[0].verdict is None and "would" not in power.decision_text(out)
