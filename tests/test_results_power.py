"""The results page says which part of a statement is only compatible and what scale would decide it, predicted
from the run's standard errors (covbook.book.power), rendered from the run records."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from covbook.book.power import Forecast, Scale
from covbook.book.results import Results, Statement, load_statements, render, write_results
from covbook.claims import Claim, load_claims
from covbook.rules import Z
from helpers import ROOT, make_notebook

RULES = """\
slope: {kind: evidence, statement: the slope is −1, window: two_sided, alternatives: [{name: "t^(-1/2)", value: -0.5}]}
wide: {kind: evidence, statement: the slope is −1, window: two_sided, alternatives: [{name: "t^(-1/2)", value: -0.5}]}
rate: {kind: evidence, statement: the rate, window: two_sided, alternatives: [{name: no decay, value: 0.0}]}
"""


def _project(tmp_path: Path, replicates: str = "  replicates: {default: n_streams}\n") -> Path:
    """One chapter run at quick (n_streams 16); full has 256 streams."""
    nb = tmp_path / "notebooks"
    (nb / "rules").mkdir(parents=True)
    (nb / "01_a.md").write_text(make_notebook("pass", "n_streams = 16"))
    (nb / "profiles.yml").write_text(f"01_a:\n  smoke: {{n_streams: 4}}\n  full: {{n_streams: 256}}\n{replicates}")
    (nb / "rules" / "01_a.yml").write_text(RULES)
    gen = tmp_path / "book" / "generated"
    (gen / "claims").mkdir(parents=True)
    (gen / "runs").mkdir()
    measurements = [  # −1 ± Z·0.2 contains −0.5; at 256 streams −1 ± Z·0.05 excludes it
        {"id": "slope", "notebook": "01_a", "value": -0.95, "prediction": -1.0, "se": 0.2, "extra": {"n": 16}},
        {"id": "wide", "notebook": "01_a", "value": -0.95, "prediction": -1.0, "se": 2.0, "extra": {"n": 16}},
        {"id": "rate", "notebook": "01_a", "value": -1.0, "prediction": -1.0, "se": 0.01},
    ]
    (gen / "claims" / "01_a.json").write_text(json.dumps(measurements))
    run = {"notebook": "01_a", "parameters": {"profile": "quick", "device": "cpu", "seed": 0}, "status": "ok"}
    (gen / "runs" / "01_a.json").write_text(json.dumps(run))
    (tmp_path / "book" / "results.yml").write_text(yaml.safe_dump({"statements": [
        {"id": "T", "statement": "x", "chapter": "01_a", "source": "abstract", "abstract": "a says",
         "claims": {"rate": ["rate"], "slope": ["slope"], "wide slope": ["wide"]}}]}))
    return tmp_path


def _page(root: Path) -> str:
    gen = root / "book" / "generated"
    claims = load_claims(gen / "claims" / "01_a.json", rules_root=root, profile="quick")
    run = json.loads((gen / "runs" / "01_a.json").read_text())
    return write_results(gen, claims, {"01_a": run}).read_text()


def test_a_part_only_compatible_says_what_scale_decides_it(tmp_path: Path) -> None:
    page = _page(_project(tmp_path))
    need = math.floor(16 * (Z * 0.2 / 0.5) ** 2) + 1  # Z·0.2·sqrt(16/n) < 0.5
    wide_need = math.floor(16 * (Z * 2.0 / 0.5) ** 2) + 1
    assert "◐&nbsp;holds in part<br>shown: rate; compatible only: slope, wide slope |" in page
    assert ("*Only compatible at this profile; what would decide it:* `slope`: evidence predicted at `full` "
            f"(`n_streams` 256 ≥ {need} needed), and from the measured value and its SE it would stay undecided at "
            "`full` (window [-1.174, -0.826], value [-1.124, -0.776]); `wide`: not decided by `full` (`n_streams` "
            f"256): needs `n_streams` ≥ {wide_need:,}, and from") in page
    # the table of the abstract's statements: every key claim, its kind here and predicted at each larger profile
    assert f"| T | `slope` | `quick` | compatible | evidence (`n_streams` 256; needs {need}), would stay undecided |" \
        in page
    assert "| T | `rate` | `quick` | evidence | evidence (`n_streams` 256; needs 1), would pass |" in page


def test_a_claim_declared_not_predicted_says_why(tmp_path: Path) -> None:
    root = _project(tmp_path, "  replicates:\n    default: n_streams\n    wide: {not_predicted: the run builds it}\n")
    assert "`wide`: not predicted: the run builds it" in _page(root)


def test_an_unknown_replicates_parameter_is_an_error_naming_it(tmp_path: Path) -> None:
    root = _project(tmp_path, "  replicates: {default: n_pairs}\n")
    with pytest.raises(ValueError, match=r"01_a\.replicates \(slope\): expression 'n_pairs' names 'n_pairs'"):
        _page(root)


def test_replicates_naming_an_unknown_claim_is_an_error_naming_it(tmp_path: Path) -> None:
    root = _project(tmp_path, "  replicates: {default: n_streams, slopes: n_streams}\n")
    with pytest.raises(ValueError, match=r"01_a\.replicates names claim\(s\) slopes, which 01_a\.yml does not have"):
        _page(root)


def test_what_would_decide_a_rule_that_claims_no_power() -> None:
    s = Statement("T", "x", "01_a", ("c",))
    c = Claim("c", "01_a", "x", 1.0, 1.0, 0.1, 0.9, 1.1, True, kind="compatible", rule_kind="compatible")
    assert "what would decide it:* `c`: its rule is of kind `compatible`: it claims no power at any size |" in \
        render(Results([s]), [c], set())


def test_render_without_forecasts_has_no_decision_lines() -> None:
    weak = Claim("c", "01_a", "x", 1.0, 1.0, 0.1, 0.9, 1.1, True, kind="compatible", rule_kind="evidence",
                 alternatives=[{"name": "no decay", "value": 1.0, "excluded": False}], powered=False)
    page = render(Results([Statement("T", "x", "01_a", ("c",))]), [weak], set())
    assert "≈&nbsp;compatible only" in page and "`c`: no larger profile to predict" in page
    forecasts = {("01_a", "c"): [Forecast("full", "evidence", scale=Scale("n"), n=64.0, n_run=16.0, n_needed=20.0)]}
    page = render(Results([Statement("T", "x", "01_a", ("c",))]), [weak], set(), forecasts=forecasts)
    assert "`c`: evidence predicted at `full` (`n` 64 ≥ 20 needed)" in page


def test_key_claims_decide_their_statement() -> None:
    """T1(a) is decided by the limit along every stream, the rate and the constant; the mean normalised error
    tests the delta-method constant over streams and queries, a part of T1(g)."""
    by_id = {s.id: s for s in load_statements(ROOT / "book" / "results.yml").statements}
    assert "stream_mean_normalised_error" not in by_id["T1(a)"].claims
    assert ("mean error over streams and queries", ("stream_mean_normalised_error",)) in by_id["T1(g)"].parts
