"""The "Results at a glance" page: status from the claims' verdicts, the data file, the page."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from covbook.book.render import link_theorems, theorem_labels
from covbook.book.results import (
    Results,
    Statement,
    load_statements,
    part_states,
    render,
    status,
    status_detail,
    write_results,
)
from covbook.claims import Claim
from helpers import ROOT


def _claim(cid: str, passed: bool = True, notebook: str = "01_a", measured: float = 1.0, kind: str = "evidence") \
        -> Claim:
    """A claim of kind ``kind``; evidence excludes its one alternative (no effect, 0)."""
    alts = [{"name": "no effect", "value": 0.0, "excluded": True}] if kind == "evidence" else []
    return Claim(cid, notebook, "a statement", measured, 1.0, 0.1, 0.9, 1.1, passed, kind=kind, rule_kind=kind,
                 alternatives=alts, powered=True if alts else None)


def _by_key(*claims: Claim) -> dict:
    return {(c.notebook, c.id): c for c in claims}


def test_status_from_verdicts() -> None:
    s = Statement("T1", "x", "01_a", ("c1", "02_b:c2"))
    both = _by_key(_claim("c1"), _claim("c2", notebook="02_b"))
    assert status(s, both) == "holds"
    assert status(s, _by_key(_claim("c1"))) == "not tested"  # 02_b:c2 missing
    assert status(s, _by_key(_claim("c1"), _claim("c2", False, "02_b"))) == "fails"
    assert status(s, _by_key(_claim("c1"), _claim("c2", notebook="01_a"))) == "not tested"  # wrong chapter
    corrected = Statement("T1", "x", "01_a", ("c1",), correction="only for Gaussians")
    assert status(corrected, _by_key(_claim("c1"))) == "holds with a correction"
    assert status(corrected, _by_key(_claim("c1", False))) == "fails"


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "results.yml"
    p.write_text(text)
    return p


@pytest.mark.parametrize(("text", "match"), [
    ("statements:\n  - {id: T, statement: x, chapter: 01_a, claims: [c], colour: red}\n", "unknown key"),
    ("statements:\n  - {id: T, statement: x, chapter: 01_a, claims: []}\n", "claims"),
    ("statements:\n  - {id: T, statement: x, chapter: chapter one, claims: [c]}\n", "chapter"),
    ("statements:\n  - {id: T, chapter: 01_a, claims: [c]}\n", "statement"),
    ("statements:\n  - {id: T, statement: x, chapter: 01_a, claims: [c]}\n"
     "findings:\n  - {id: T, statement: y, chapter: 01_a, claims: [d]}\n", "duplicate"),
    ("statements: {id: T}\n", "must be a list"),
    ("other: 1\n", "unknown key"),
    ("statements:\n  - {id: T, statement: x, chapter: 01_a, claims: [c], source: paper}\n", "source"),
    ("statements:\n  - {id: T, statement: x, chapter: 01_a, claims: [c], source: abstract}\n", "needs 'abstract'"),
    ("statements:\n  - {id: T, statement: x, chapter: 01_a, claims: [c], source: reconstruction, abstract: a}\n",
     "only for a statement"),
])
def test_malformed_data_file_is_a_clear_error(tmp_path: Path, text: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        load_statements(_write(tmp_path, text))


def test_render_counts_links_and_lists_what_is_missing() -> None:
    results = Results([
        Statement("T1", "holds | here", "01_a", ("c1",), theorem="thm-01-a"),
        Statement("T2", "corrected", "01_a", ("c2",), theorem="thm-gone", correction="a correction"),
        Statement("T3", "absent", "02_b", ("c3",)),
        Statement("F1", "a finding", "01_a", ("c4",), kind="finding"),
    ])
    page = render(results, [_claim("c1"), _claim("c2"), _claim("c4", False, measured=2.5)], {"thm-01-a"},
                  runs={"01_a": {"status": "ok", "parameters": {"profile": "smoke", "seed": 0}}})
    assert "1 holds, 1 holds with a correction, 0 holds in part, 0 compatible only, 0 fails, 1 not tested" in page
    assert "{prf:ref}`thm-01-a`" in page and "{prf:ref}`thm-gone`" not in page  # no dangling reference
    assert "holds \\| here" in page  # a pipe does not break the table
    assert "✗&nbsp;`c4`&nbsp;(2.5)" in page and "✗&nbsp;fails" in page
    assert "{doc}`Chapter 1 <01_a>`" in page
    assert "## Not in this run" in page
    assert "`02_b:c3` is not in the run (its chapter was not run)" in page
    assert "theorem label `thm-gone`" in page
    assert "*Correction:* a correction" in page
    assert "| status | | statement |" in page and "| ✓&nbsp;holds | T1 |" in page  # the verdict first


def test_a_key_claim_without_power_makes_a_statement_compatible_only() -> None:
    s = Statement("T", "x", "01_a", ("c",))
    weak = Claim("c", "01_a", "x", 1.0, 1.0, 0.1, 0.9, 1.1, True, kind="compatible",
                 alternatives=[{"name": "no decay", "value": 1.0, "excluded": False}], powered=False)
    assert status(s, {("01_a", "c"): weak}) == "compatible only"
    page = render(Results([s]), [weak], set())
    assert "≈&nbsp;`c`&nbsp;(1)" in page and "≈&nbsp;compatible only" in page


def test_the_page_names_each_chapters_profile_and_seed_and_warns_when_mixed() -> None:
    runs = {"01_a": {"status": "ok", "parameters": {"profile": "quick", "seed": 0}},
            "02_b": {"status": "ok", "parameters": {"profile": "smoke", "seed": 4}}}
    page = render(Results([Statement("T", "x", "01_a", ("c1",))]), [_claim("c1")], set(), runs=runs)
    assert "1 at `quick`, seed 0; 2 at `smoke`, seed 4" in page and "mixed profiles or seeds" in page


def test_claim_role_rendering() -> None:
    results = Results([Statement("T1", "x", "01_a", ("c1", "02_b:c2"))], claim_role=True)
    page = render(results, [_claim("c1"), _claim("c2", notebook="02_b")], set())
    assert "`c1`&nbsp;{claim}`01_a:c1`" in page and "`02_b:c2`&nbsp;{claim}`02_b:c2`" in page


def test_write_results_without_data_file_writes_nothing(tmp_path: Path) -> None:
    assert write_results(tmp_path / "book" / "generated", [], {}) is None
    assert not (tmp_path / "book" / "generated").exists()


def test_the_books_data_file_is_consistent() -> None:
    results = load_statements(ROOT / "book" / "results.yml")
    chapters = {p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.md")}
    labels = theorem_labels(ROOT / "notebooks")
    ids = {"T1(a)", "T2", "T3", "T4", "T5"}
    assert ids <= {s.id for s in results.statements}, "every main result of the paper has a row"
    for s in results.statements:
        if s.kind == "statement":  # only the abstract is public: each is its claim or the book's reconstruction
            assert s.source in {"abstract", "reconstruction"}, f"{s.id}: no source"
        assert s.chapter in chapters, f"{s.id}: unknown chapter {s.chapter}"
        assert s.theorem is None or s.theorem in labels, f"{s.id}: no theorem box labelled {s.theorem}"
        for nb, _ in s.claim_keys():
            assert nb in chapters, f"{s.id}: unknown chapter {nb}"


def test_key_claims_are_declared_in_the_rules() -> None:
    """Every key claim is one the chapters declare (their rules files list the claim ids)."""
    from covbook.rules import load_rules

    manifest = {f.stem: list(load_rules(f)) for f in (ROOT / "notebooks" / "rules").glob("*.yml")}
    missing = [f"{s.id}: {nb}:{cid}" for s in load_statements(ROOT / "book" / "results.yml").statements
               for nb, cid in s.claim_keys() if cid not in manifest.get(nb, [])]
    assert not missing, f"book/results.yml names claims the chapters do not record: {missing}"


@pytest.mark.book
def test_results_page_of_the_smoke_run(smoke_project: Path, smoke_book: subprocess.CompletedProcess) -> None:
    page = (smoke_project / "book" / "generated" / "results.md").read_text()
    assert "## Not in this run" not in page, page[page.find("## Not in this run"):]
    assert "0 not tested" in page
    assert (smoke_project / "_build" / "html" / "generated" / "results.html").is_file(), smoke_book.stdout[-2000:]



def test_theorem_labels_of_sources_and_executed_notebooks(tmp_path: Path) -> None:
    (tmp_path / "01_a.md").write_text(":::{prf:theorem} A\n:label: thm-01-a\n:::\n")
    (tmp_path / "02_b.ipynb").write_text('{"cells": [{"source": ":::{prf:proposition} B\\n:label: thm-02-b\\n"}]}')
    (tmp_path / "notes.md").write_text(":label: not-a-chapter\n")
    assert theorem_labels(tmp_path) == {"thm-01-a", "thm-02-b"}


def test_link_theorems_links_only_known_labels() -> None:
    text = "rate (Theorems thm-01-a, thm-02-b); Proposition thm-03-gone; x-01-y"
    assert link_theorems(text, {"thm-01-a", "thm-02-b"}) == (
        "rate ({prf:ref}`thm-01-a`, {prf:ref}`thm-02-b`); Proposition thm-03-gone; x-01-y")


def test_render_marks_the_source() -> None:
    res = Results([Statement("T1", "x", "01_a", ("c",), source="abstract", abstract="a says"),
                   Statement("T2", "y", "01_a", ("c",), source="reconstruction")])
    page = render(res, [_claim("c")], set())
    assert "*The abstract's claim:* a says *The book's statement:* x" in page
    assert "*The book's reconstruction.* y" in page
    assert "Only the abstract of the paper is public" in page


def _weak(cid: str) -> Claim:
    return Claim(cid, "01_a", "x", 1.0, 1.0, 0.1, 0.9, 1.1, True, kind="evidence",
                 alternatives=[{"name": "no decay", "value": 1.0, "excluded": False}], powered=False)


def test_named_parts_say_what_is_shown_and_what_is_only_compatible() -> None:
    s = Statement("T", "x", "01_a", ("r", "k", "m"),
                  parts=(("rate", ("r",)), ("constant", ("k",)), ("mean error", ("m",))))
    claims = _by_key(_claim("r"), _claim("k"), _weak("m"))
    assert status(s, claims) == "holds in part"
    assert status_detail(s, claims) == "shown: rate, constant; compatible only: mean error"
    assert part_states(s, claims) == [("rate", "shown"), ("constant", "shown"), ("mean error", "compatible only")]
    # a failed part decides, and the row names it
    failed = _by_key(_claim("r", False), _claim("k"), _weak("m"))
    assert status(s, failed) == "fails"
    assert status_detail(s, failed) == "fails: rate; shown: constant; compatible only: mean error"
    # every part shown: holds, with no detail; no part shown: compatible only
    assert status(s, _by_key(_claim("r"), _claim("k"), _claim("m"))) == "holds"
    assert status_detail(s, _by_key(_claim("r"), _claim("k"), _claim("m"))) == ""
    assert status(s, _by_key(_weak("r"), _weak("k"), _weak("m"))) == "compatible only"
    page = render(Results([s]), list(claims.values()), set())
    assert "◐&nbsp;holds in part<br>shown: rate, constant; compatible only: mean error |" in page
    assert "*rate:* ✓&nbsp;`r`&nbsp;(1); *constant:* ✓&nbsp;`k`&nbsp;(1); *mean error:* ≈&nbsp;`m`" in page
    assert "0 holds, 0 holds with a correction, 1 holds in part, 0 compatible only" in page


def test_an_unnamed_list_is_one_part() -> None:
    s = Statement("T", "x", "01_a", ("r", "m"))
    claims = _by_key(_claim("r"), _weak("m"))
    assert status(s, claims) == "compatible only" and status_detail(s, claims) == ""


def test_parts_are_read_from_the_data_file(tmp_path: Path) -> None:
    res = load_statements(_write(tmp_path, "statements:\n  - id: T\n    statement: x\n    chapter: 01_a\n"
                                           "    claims: {rate: [r, s], mean error: [02_b:m]}\n"))
    (s,) = res.statements
    assert s.claims == ("r", "s", "02_b:m")
    assert s.part_keys() == [("rate", [("01_a", "r"), ("01_a", "s")]), ("mean error", [("02_b", "m")])]


@pytest.mark.parametrize(("claims", "match"), [
    ("{rate: []}", "part 'rate'"),
    ("{rate: [r], constant: [r]}", "more than one part"),
    ("{rate: r}", "part 'rate'"),
])
def test_malformed_parts_are_a_clear_error(tmp_path: Path, claims: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        load_statements(_write(tmp_path, "statements:\n  - {id: T, statement: x, chapter: 01_a, claims: "
                                         + claims + "}\n"))


def test_a_sanity_check_never_shows_a_part_it_only_supports() -> None:
    s = Statement("T", "x", "01_a", ("e", "k"), parts=(("rate", ("e", "k")),))
    assert status(s, _by_key(_claim("e"), _claim("k", kind="sanity"))) == "holds"  # evidence shows, sanity supports
    alone = Statement("T", "x", "01_a", ("k",))
    assert status(alone, _by_key(_claim("k", kind="sanity"))) == "compatible only"
    assert status(alone, _by_key(_claim("k", False, kind="sanity"))) == "fails"  # a supporting claim must pass
    assert status(alone, _by_key(_claim("k", kind="sanity"))) == "compatible only"
    page = render(Results([s, alone]), [_claim("e"), _claim("k", kind="sanity")], set())
    assert "what would decide it:* only sanity checks or identities support it" in page
    assert "*rate:* ✓&nbsp;`e`&nbsp;(1), supporting: ·&nbsp;`k`&nbsp;(1)" in page
    assert "| ≈&nbsp;compatible only | T |" in page
    assert "**The theory's statements: 1 holds, 0 holds with a correction, 0 holds in part, 1 compatible only" in page


def test_the_summary_counts_the_abstracts_claims_and_the_findings_apart() -> None:
    res = Results([Statement("A", "x", "01_a", ("c",), source="abstract", abstract="a says"),
                   Statement("R", "y", "01_a", ("k",), source="reconstruction"),
                   Statement("F", "z", "01_a", ("c",), kind="finding")])
    page = render(res, [_claim("c"), _claim("k", kind="sanity")], set())
    assert ("1 holds, 0 holds with a correction, 0 holds in part, 1 compatible only, 0 fails, 0 not tested.** "
            "Of them, the abstract's claims: 1 holds. The book's findings: 1 holds.") in page


def test_an_identity_shows_only_an_exact_part() -> None:
    parts = (("exact product", ("i",)), ("limit", ("j",)))
    s = Statement("T", "x", "01_a", ("i", "j"), parts=parts, exact=("exact product",))
    claims = _by_key(_claim("i", kind="identity"), _claim("j", kind="identity"))
    assert part_states(s, claims) == [("exact product", "shown"), ("limit", "compatible only")]
    assert status(s, claims) == "holds in part"
    assert status(Statement("T", "x", "01_a", ("i",), exact=("",)), claims) == "holds"  # `exact: true`, no parts
    assert status(Statement("T", "x", "01_a", ("i",)), claims) == "compatible only"
    page = render(Results([s]), list(claims.values()), set())
    assert "*exact product:* ✓&nbsp;`i`&nbsp;(1) (exact); *limit:* supporting: ·&nbsp;`j`&nbsp;(1)" in page


def test_evidence_without_power_or_without_an_alternative_is_compatible_only() -> None:
    s = Statement("T", "x", "01_a", ("c",))
    assert status(s, _by_key(_weak("c"))) == "compatible only"
    bare = Claim("c", "01_a", "x", 1.0, 1.0, 0.1, 0.9, 1.1, True, kind="evidence", rule_kind="evidence")
    assert status(s, _by_key(bare)) == "compatible only"  # it names no alternative to exclude
    assert status(s, _by_key(_claim("c"))) == "holds"


def test_exact_is_read_and_validated(tmp_path: Path) -> None:
    head = "statements:\n  - id: T\n    statement: x\n    chapter: 01_a\n"
    (s,) = load_statements(_write(tmp_path, head + "    claims: {a: [i], b: [j]}\n    exact: [a]\n")).statements
    assert s.exact == ("a",)
    (s,) = load_statements(_write(tmp_path, head + "    claims: [i]\n    exact: true\n")).statements
    assert s.exact == ("",)
    for bad, match in (("claims: {a: [i]}\n    exact: [c]", r"statements\[0\]: 'exact' must be .*\(a\), got \['c'\]"),
                       ("claims: [i]\n    exact: [a]", "it names no parts: use true"),
                       ("claims: {a: [i]}\n    exact: a", "'exact' must be true, false or a list")):
        with pytest.raises(ValueError, match=match):
            load_statements(_write(tmp_path, head + "    " + bad + "\n"))


def test_a_part_marked_exact_is_decided_by_an_identity() -> None:
    """`exact` is for a part an identity decides (an algebraic equality); marking any other part is a slip."""
    from covbook.rules import load_rules

    rules = {f.stem: load_rules(f) for f in (ROOT / "notebooks" / "rules").glob("*.yml")}
    for s in load_statements(ROOT / "book" / "results.yml").statements:
        for name, keys in s.part_keys():
            if name in s.exact:
                kinds = {rules[nb][cid].kind for nb, cid in keys if cid in rules.get(nb, {})}
                assert "identity" in kinds, f"{s.id}: part {name!r} is marked exact but no identity decides it"
