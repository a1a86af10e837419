"""covbook sweep: notebooks at several seeds into separate trees, the calibration table and page."""

from __future__ import annotations

import json

import pytest

from claims_fixtures import claim, fake_project, fake_run
from covbook._jsonio import DamagedFile
from covbook.book.config import Paths, UsageError
from covbook.book.sweep import (
    DEVELOPMENT_SEEDS,
    _write,
    binomial_tail,
    calibrate,
    parse_seeds,
    seed_root,
    write_calibration_page,
)
from covbook.claims import LEVEL, Z
from helpers import covbook, make_notebook


def test_parse_seeds():
    assert parse_seeds("0-2") == [0, 1, 2] and parse_seeds("5") == [5]
    for bad in ("3-1", "-1", "a-b", "1-2-3", ""):
        with pytest.raises(UsageError, match="--seeds"):
            parse_seeds(bad)


def test_binomial_tail_against_closed_forms():
    assert binomial_tail(0, 10) == 1.0 and binomial_tail(11, 10) == 0.0
    assert binomial_tail(1, 10) == pytest.approx(1 - (1 - LEVEL) ** 10)
    assert binomial_tail(10, 10, 0.5) == pytest.approx(0.5**10)
    # one failure in 20 seeds is already improbable at the book's level; none never is
    assert binomial_tail(1, 20) < 0.01 < binomial_tail(0, 20)
    with pytest.raises(ValueError):
        binomial_tail(-1, 3)


def test_calibrate_flags_improbable_failures_and_vanished_claims(tmp_path):
    proj = fake_project(tmp_path, {"01_alpha": [claim("a", "01_alpha"), claim("b", "01_alpha")]})
    paths = Paths(proj)
    for seed in (0, 1, 2):
        gen = seed_root(paths, "smoke", seed) / "book" / "generated"
        cl = [claim("a", "01_alpha", measured=1.0 + seed, se=2.0 / Z), claim("b", "01_alpha", passed=seed != 1)]
        fake_run(gen, "01_alpha", cl if seed != 2 else cl[:1], seed=seed)
    data = calibrate(paths, "smoke", [0, 1, 2], ["01_alpha"])
    rows = {r["id"]: r for r in data["01_alpha"]["claims"]}
    assert rows["a"]["passed"] == 3 and rows["a"]["mean"] == pytest.approx(2.0) and rows["a"]["sd"] == pytest.approx(1)
    assert not rows["a"]["flagged"] and rows["a"]["tail_p"] == 1.0
    assert rows["a"]["sd_over_se"] == pytest.approx(1 / (2.0 / Z))  # SD 1 of the residuals over the SE
    assert rows["b"]["n"] == 2 and rows["b"]["passed"] == 1 and rows["b"]["missing_seeds"] == [2]
    assert rows["b"]["flagged"] and rows["b"]["tail_p"] == pytest.approx(binomial_tail(1, 2))
    assert rows["b"]["fail_seeds"] == [1] and rows["a"]["fail_seeds"] == []


def test_page_without_sweep_says_how_to_run_one(tmp_path):
    proj = fake_project(tmp_path, {"01_alpha": [claim("a", "01_alpha")]})
    text = write_calibration_page(Paths(proj)).read_text()
    assert "No sweep has been run; run `covbook sweep --seeds 0-9 --profile smoke`" in text


def test_sweep_usage_errors_exit_2(project):
    for args, match in ((["sweep"], "--seeds"), (["sweep", "--seeds", "4-2"], "--seeds"),
                        (["sweep", "--seeds", "0-1", "99"], "unknown notebook")):
        res = covbook(project, *args)
        assert res.returncode == 2 and match in res.stderr, res.stderr


@pytest.mark.notebooks
def test_sweep_on_the_fixture_project(project):
    body = ("from covbook import claims\nimport random\nrandom.seed(seed)\n"
            "claims.measure('x_is_x', x, prediction=x)\n"
            "claims.measure('u', random.random())")
    (project / "notebooks" / "rules" / "01_alpha.yml").write_text(
        "x_is_x: {kind: identity, statement: x equals itself, window: tolerance, tolerance: 0.0}\n"
        "u: {kind: evidence, statement: a uniform draw is below 0.5, window: fixed, interval: [null, 0.5],\n"
        "    basis: a test of the flag, alternatives: [{name: above, value: 0.9}]}\n")
    (project / "notebooks" / "01_alpha.md").write_text(make_notebook(body))
    run = covbook(project, "run", "--profile", "smoke", "01", "--no-progress")
    assert run.returncode == 1 and "1 of 2 claims failed" in run.stdout  # seed 0 draws 0.84: `u` fails
    before = (project / "book" / "generated" / "claims" / "01_alpha.json").read_text()
    res = covbook(project, "sweep", "--seeds", "0-2", "01", "--no-progress")
    assert "seed 2: 1 ok, 0 failed" in res.stdout, res.stdout + res.stderr
    # the book's own outputs are untouched; each seed has its own tree
    assert (project / "book" / "generated" / "claims" / "01_alpha.json").read_text() == before
    for seed in (0, 1, 2):
        rec = json.loads((project / "book/generated/sweep/smoke" / f"seed-{seed}" / "book/generated/runs/01_alpha.json")
                         .read_text())
        assert rec["parameters"]["seed"] == seed and rec["status"] == "ok"
    data = json.loads((project / "book" / "calibration.json").read_text())
    rows = {r["id"]: r for r in data["profiles"]["smoke"]["01_alpha"]["claims"]}
    assert data["profiles"]["smoke"]["01_alpha"]["seeds"] == [0, 1, 2] and rows["x_is_x"]["passed"] == 3
    import random
    fails = 0
    for s in (0, 1, 2):
        random.seed(s)
        fails += random.random() > 0.5
    assert rows["u"]["n"] == 3 and rows["u"]["passed"] == 3 - fails and rows["u"]["flagged"] == (fails >= 2)
    assert res.returncode == (1 if fails >= 2 else 0)
    page = (project / "book" / "generated" / "calibration.md").read_text()
    assert "### 01_alpha" in page and "seeds 0–2 (3)" in page and "`u` | evidence" in page
    assert "**in sample**" in page  # seeds 0-2 are development seeds
    # a second sweep is served from each seed's cache
    again = covbook(project, "sweep", "--seeds", "0-2", "01", "--no-progress")
    assert again.stdout.count("1 ok, 0 failed") == 3


def _one_claim_sweep(tmp_path, window: str, values: list[float], se: float = 0.25, per_run: bool = False) -> Paths:
    """A fake project whose one claim ``c`` of ``01_alpha`` measured ``values[seed]`` at seeds 0, 1, …"""
    c = claim("c", "01_alpha", window=window)
    if per_run:
        c["_rule"]["per_run"] = True
    paths = Paths(fake_project(tmp_path, {"01_alpha": [c]}))
    for seed, value in enumerate(values):
        gen = seed_root(paths, "smoke", seed) / "book" / "generated"
        fake_run(gen, "01_alpha", [claim("c", "01_alpha", measured=value, se=se, window=window)], seed=seed)
    return paths


def test_sd_over_se_uses_the_standard_error_a_claim_recorded(tmp_path):
    """A one-sided claim (no centre) divides the SD of its values by the SE its measurement recorded."""
    paths = _one_claim_sweep(tmp_path, "at_least", [1.0, 2.0])
    rows = calibrate(paths, "smoke", [0, 1], ["01_alpha"])["01_alpha"]["claims"]
    assert rows[0]["passed"] == 2
    assert rows[0]["sd_over_se"] == pytest.approx((2 ** 0.5 / 2) / 0.25)  # SD of (1, 2) over the SE 0.25


def test_a_significance_claim_is_flagged_by_failures_not_by_spread(tmp_path):
    """An `above` window (the value beyond k·SE of what it excludes): a varying effect is not a spread flag."""
    paths = _one_claim_sweep(tmp_path, "above", [10.0, 30.0, 50.0])
    rows = calibrate(paths, "smoke", [0, 1, 2], ["01_alpha"])["01_alpha"]["claims"]
    assert rows[0]["sd_over_se"] is None and not rows[0]["flagged"]


def test_a_stored_seeds_claims_edited_by_hand_are_refused(tmp_path):
    proj = fake_project(tmp_path, {"01_alpha": [claim("a", "01_alpha")]})
    paths = Paths(proj)
    for seed in (0, 1):
        gen = seed_root(paths, "smoke", seed) / "book" / "generated"
        fake_run(gen, "01_alpha", [claim("a", "01_alpha")], seed=seed)
    f = seed_root(paths, "smoke", 1) / "book" / "generated" / "claims" / "01_alpha.json"
    data = json.loads(f.read_text())
    data[0]["value"] = 1.2345  # edited; its run record still names the measured file's SHA-256
    f.write_text(json.dumps(data))
    with pytest.raises(DamagedFile, match="not the file its run record 01_alpha.json was committed with; run the "
                       "sweep again, which re-makes it: covbook sweep --seeds 0-1 --profile smoke 01"):
        calibrate(paths, "smoke", [0, 1], ["01_alpha"])


def test_a_damaged_calibration_is_refused_before_any_kernel_and_restored_from_git(tmp_path):
    content = '{"profiles": '
    proj = fake_project(tmp_path, {"01_alpha": [claim("a", "01_alpha")]})
    (proj / "book" / "calibration.json").write_text(content)
    res = covbook(proj, "sweep", "--seeds", "0", "01", "--no-progress")
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert "book/calibration.json: damaged" in res.stderr and "git checkout -- book/calibration.json" in res.stderr
    assert (proj / "book" / "calibration.json").read_text() == content  # never rewritten
    assert not seed_root(Paths(proj), "smoke", 0).exists()


def test_chance_flags_follow_the_flag_rule():
    from covbook.book.sweep import _flag_chance

    # a correct claim is flagged by failures when it fails at two seeds or more
    for n in (1, 3, 20, 200):
        want = 1 - (1 - LEVEL) ** n - n * LEVEL * (1 - LEVEL) ** (n - 1)
        assert _flag_chance(n) == pytest.approx(want, rel=1e-9, abs=1e-15)


def test_detectable_rate_solves_the_flag_rules_power():
    from covbook.book.sweep import FLAG_FAILURES, detectable_rate

    for n in (3, 20, 50):
        r = detectable_rate(n, 0.8)
        assert binomial_tail(FLAG_FAILURES, n, r) == pytest.approx(0.8, abs=1e-9)
    assert detectable_rate(1) == 1.0  # one seed cannot show two failures
    assert detectable_rate(20, 0.5) < detectable_rate(20, 0.8) < detectable_rate(5, 0.8)


def test_flag_rule_two_failures_or_spread_or_missing():
    from covbook.book.sweep import _flagged

    assert not _flagged(1, 1.0, 20, [])
    assert _flagged(2, 1.0, 20, [])
    assert _flagged(0, 2.5, 20, []) and not _flagged(0, 2.5, 2, [])  # SD/SE needs three seeds
    assert _flagged(0, None, 20, [7])


def test_page_counts_failing_evaluations_against_chance_per_profile(tmp_path):
    """Out-of-sample seeds are said so; the failing evaluations are compared with N·α."""
    c = claim("c", "01_alpha")
    proj = fake_project(tmp_path, {"01_alpha": [c]})
    paths = Paths(proj)
    for seed in (1000, 1001, 1002):
        gen = seed_root(paths, "smoke", seed) / "book" / "generated"
        fake_run(gen, "01_alpha", [claim("c", "01_alpha", measured=1.0 + 0.01 * (seed - 1000))], seed=seed)
    _write(paths, calibrate(paths, "smoke", [1000, 1001, 1002], ["01_alpha"]), {})
    data = json.loads((proj / "book" / "calibration.json").read_text())
    entry = data["profiles"]["smoke"]["01_alpha"]
    assert entry["out_of_sample"] and data["development_seeds"] == DEVELOPMENT_SEEDS.as_json()
    page = (proj / "book" / "generated" / "calibration.md").read_text()
    assert "## Profile `smoke`" in page and "**out of sample**" in page
    assert "**Failing evaluations: 0 of 3**" in page and f"chance predicts {3 * LEVEL:.2g}" in page


def test_chance_of_at_least_k_flags_is_the_poisson_binomial_tail():
    """Equal flag chances p: the count is Binomial(N, p); k = 0 is certain, k > N impossible."""
    from math import comb

    from covbook.book.sweep import _chance_of_at_least, _flag_chance

    rows = [{"kind": "evidence", "n": 10}] * 5 + [{"kind": "sanity", "n": 10}]
    data = {"01_alpha": {"claims": rows}}
    p = _flag_chance(10)
    for k in range(7):
        want = sum(comb(5, j) * p**j * (1 - p) ** (5 - j) for j in range(k, 6))
        assert _chance_of_at_least(data, k) == pytest.approx(want, rel=1e-12, abs=1e-300)
    assert _chance_of_at_least(data, 0) == 1.0 and _chance_of_at_least(data, 6) == 0.0


def test_sd_over_se_of_a_prediction_that_moves_with_the_seed_is_that_of_the_residuals(tmp_path):
    """measured − predicted is the same at every seed: no spread, though the measured values differ."""
    proj = fake_project(tmp_path, {"01_alpha": [claim("c", "01_alpha")]})
    paths = Paths(proj)
    for seed in (0, 1, 2):
        gen = seed_root(paths, "smoke", seed) / "book" / "generated"
        fake_run(gen, "01_alpha", [claim("c", "01_alpha", measured=10.0 * seed + 0.1, prediction=10.0 * seed,
                                         se=0.25)], seed=seed)
    rows = calibrate(paths, "smoke", [0, 1, 2], ["01_alpha"])["01_alpha"]["claims"]
    assert rows[0]["sd"] == pytest.approx(10.0) and rows[0]["sd_over_se"] == pytest.approx(0.0, abs=1e-12)


def _page(tmp_path, entries: dict) -> str:
    """The calibration page of a calibration file holding ``entries`` (smoke), with its line breaks as spaces."""
    (tmp_path / "book").mkdir(exist_ok=True)
    (tmp_path / "book" / "calibration.json").write_text(json.dumps({"profiles": {"smoke": entries}}))
    return " ".join(write_calibration_page(Paths(tmp_path)).read_text(encoding="utf-8").split())


def _entry(seeds: list[int], claims: int, flagged: int = 0) -> dict:
    row = {"kind": "evidence", "n": len(seeds), "passed": len(seeds), "mean": 1.0, "sd": 0.1, "sd_over_se": 1.0,
           "tail_p": 1.0, "fail_seeds": [], "missing_seeds": [], "per_run": False, "expected": "1 ± 0.1"}
    return {"profile": "smoke", "seeds": seeds, "commit": "c", "date": "d", "rules_commit": "r",
            "out_of_sample": True, "claims": [{**row, "id": f"c{i}", "flagged": i < flagged} for i in range(claims)]}


def test_the_page_compares_the_observed_flags_with_chance(tmp_path):
    from covbook.book.sweep import _chance_of_at_least

    entries = {"01_alpha": _entry(list(range(10)), 100)}
    none = 1 - _chance_of_at_least(entries, 1)
    page = _page(tmp_path, entries)
    assert f"No statistical claim is flagged here; treating the claims as independent (those of one notebook " \
           f"share a run), a correct book flags none by failures with probability {none:.2g}." in page
    assert "1 statistical claim is flagged here;" in _page(tmp_path, {"01_alpha": _entry(list(range(10)), 100, 1)})
    entries = {"01_alpha": _entry(list(range(10)), 100, 2)}
    page = _page(tmp_path, entries)
    assert "2 statistical claims are flagged here" in page
    assert f"and 2 or more with probability {_chance_of_at_least(entries, 2):.2g}." in page


def test_a_per_run_claim_reports_its_spread_but_is_flagged_by_failures_only(tmp_path):
    """``per_run: true`` (the estimand is the run's own trained model): its spread across seeds is the
    estimand's, so SD/SE is reported with a mark and does not flag; failures still do."""
    paths = _one_claim_sweep(tmp_path, "at_least", [1.0, 6.0, 11.0], per_run=True)
    rows = calibrate(paths, "smoke", [0, 1, 2], ["01_alpha"])["01_alpha"]["claims"]
    assert rows[0]["per_run"] and rows[0]["sd_over_se"] == pytest.approx(5.0 / 0.25)
    assert not rows[0]["flagged"]
    _write(paths, calibrate(paths, "smoke", [0, 1, 2], ["01_alpha"]), {})
    assert "20 (per run)" in write_calibration_page(paths).read_text(encoding="utf-8")


def test_development_seeds_hold_the_earlier_out_of_sample_calibrations() -> None:
    from covbook.book.sweep import SeedRanges

    assert 0 in DEVELOPMENT_SEEDS and 999 in DEVELOPMENT_SEEDS and 1000 not in DEVELOPMENT_SEEDS
    assert 1204 in DEVELOPMENT_SEEDS and 2001 in DEVELOPMENT_SEEDS  # flagged claims were fixed after these
    assert 7003 in DEVELOPMENT_SEEDS and 7104 in DEVELOPMENT_SEEDS and 7200 not in DEVELOPMENT_SEEDS
    assert 1300 not in DEVELOPMENT_SEEDS and 2010 not in DEVELOPMENT_SEEDS and "5" not in DEVELOPMENT_SEEDS
    assert SeedRanges((3, 3)).text() == "3"
    for bad in [(), ((5, 4),), ((1, 2, 3),)]:
        with pytest.raises(ValueError, match="ranges must be"):
            SeedRanges(*bad)


def test_the_summary_names_each_set_of_seeds_with_its_notebooks(tmp_path) -> None:
    assert "Seeds 1–3 (3), **out of sample**" in _page(tmp_path, {"01_a": _entry([1, 2, 3], 1),
                                                                  "02_b": _entry([1, 2, 3], 1)})
    page = _page(tmp_path, {"01_a": _entry([1, 2, 3], 1), "03_c": _entry([7, 9], 1), "08_d": _entry([7, 9], 1)})
    assert "Seeds 1–3 (3) for notebook 01; 7, 9 (2) for notebooks 03, 08," in page


def test_an_evidence_rule_keeps_its_kind_and_counts_the_seeds_with_power(tmp_path):
    """Power varies with each seed's SE: the row keeps the rule's kind and counts the seeds whose window had it."""
    c = claim("c", "01_alpha")  # evidence, prediction 1, alternative 0
    paths = Paths(fake_project(tmp_path, {"01_alpha": [c]}))
    for seed, se in enumerate([0.1, 1.0, 0.1]):  # windows 1 ± Z·SE: only SE 0.1 excludes 0
        gen = seed_root(paths, "smoke", seed) / "book" / "generated"
        fake_run(gen, "01_alpha", [claim("c", "01_alpha", measured=1.0, se=se)], seed=seed)
    row = calibrate(paths, "smoke", [0, 1, 2], ["01_alpha"])["01_alpha"]["claims"][0]
    assert (row["kind"], row["powered"], row["n"]) == ("evidence", 2, 3)
