"""Write the book's reproduction report from the last run.

``write_report`` turns the per-notebook claims and run records in
``book/generated`` (verified by :func:`covbook.book.checks.check`) into the page
``book/generated/reproduction.md``: the verdict, counted per claim kind; the
book's one per-claim level and the chance it implies that a correct run fails
some evidence claim by chance; every claim grouped by notebook with its kind,
tolerance basis and, where it could not be evaluated, the reason; each
notebook's run time, profile and device; package versions and git commit.
Each claim's row carries the anchor that the chapters' ``{claim}`` citations
link to, and links back to the claim's verdict line in its chapter.  It also
writes the calibration page (:mod:`covbook.book.sweep`).
"""

from __future__ import annotations

import hashlib
import json
import platform
import re
import tempfile
from pathlib import Path

from covbook._jsonio import write_json_atomic
from covbook.book.checks import Verdict, check
from covbook.book.config import Paths
from covbook.book.costs import run_costs_markdown
from covbook.book.edition import edition_problems, refresh_verdict_lines, shown_claims
from covbook.book.provenance import git_commit, versions
from covbook.book.records import read_run
from covbook.book.render import render
from covbook.book.results import write_results
from covbook.book.sweep import write_calibration_page
from covbook.book.theorems import link_theorems, theorem_labels
from covbook.claims import KINDS, LEVEL, Claim, Z, familywise, fmt

__all__ = ["Verdict", "check", "write_report", "versions", "error_rate_text", "refresh_verdicts"]


def error_rate_text(n_evidence: int) -> str:
    """The statement of the book's error rate for a run with ``n_evidence`` evidence claims."""
    return render("error_rate.md.j2", level=LEVEL, z=Z, n_evidence=n_evidence,
                  familywise=familywise(n_evidence)).rstrip("\n")


def _cell(x: str) -> str:
    return x.replace("|", "\\|").replace("\n", " ")


_ROLE = re.compile(r"\{([A-Za-z][\w:-]*)\}`")


def _quoted(x: str) -> str:
    """A problem or note as text: a ``{claim}`id``` it quotes is shown, not rendered as a role (whose target
    it says is wrong, so Sphinx would warn about it again)."""
    return _ROLE.sub(r"\\{\1}`", _cell(x))




def _counts_text(claims: list[Claim]) -> str:
    parts = []
    for kind in KINDS:
        cl = [c for c in claims if c.kind == kind]
        if cl:
            parts.append(f"{kind} {sum(c.passed for c in cl)} of {len(cl)}")
    return ", ".join(parts)


def verdict_chip(c: Claim) -> str:
    """The compact verdict: ``✓ pass``, ``**✗ FAIL**`` or ``≈ compatible, cannot exclude X``."""
    if not c.passed:
        return "**✗ FAIL**"
    if c.kind == "compatible":
        return "≈ " + c.power_text()
    if c.alternatives and not c.powered:
        return "✓ pass; " + c.power_text()
    return "✓ pass"


def _theorem(c: Claim, labels: set[str]) -> str:
    """A link to the claim's theorem box, or nothing (never a raw label)."""
    return f" ({{prf:ref}}`{c.theorem}`)" if c.theorem and c.theorem in labels else ""


def _row(name: str, c: Claim, labels: set[str]) -> str:
    needs = (c.rule_kind or c.kind) == "evidence"
    basis = _cell(c.basis) if c.basis else ("**none: an evidence claim needs a basis**" if needs else "—")
    if c.reason:
        basis += f"; not evaluated: {_cell(c.reason)}"
    power = _cell(c.power_text()) if c.alternatives else "—"
    statement = link_theorems(_cell(c.statement), labels)
    kind = c.kind if c.rule_kind in (None, c.kind) else f"{c.kind} (an {c.rule_kind} rule without power here)"
    return (f"| {verdict_chip(c)} | {fmt(c.measured)} in {_cell(c.expected_text())} | "
            f"{{claim-row}}`{name}:{c.id}`: {statement}{_theorem(c, labels)} | {kind} | {power} | {basis} |")


def refresh_verdicts(paths: Paths, claims: list[Claim]) -> int:
    """Rewrite the verdict lines in the executed chapters from ``claims`` (judged by the current rules).

    A chapter shows the verdict its run judged; after a rule change, ``covbook build`` replaces each
    verdict line (found by its anchor) so that the chapter, the report and the ``{claim}`` role agree
    without re-running the notebook.  The run record names the SHA-256 of the notebook committed with
    it, so a rewritten notebook and its record, with the new digest, are committed as one unit
    (:func:`covbook.book.runner.commit_files`): the record stays true and the chapter is still served
    from the cache.  A notebook that is not the file its record names is left alone (``check`` and
    ``build`` report it as damaged).  Returns the number of lines changed.
    """
    changed = 0
    for name in sorted({c.notebook for c in claims}):
        f = paths.generated / f"{name}.ipynb"
        if not f.is_file():
            continue
        data = f.read_bytes()
        record = read_run(paths.runs / f"{name}.json")
        committed = (record.outputs or {}).get("notebook") if record is not None and record.ok else None
        if committed != hashlib.sha256(data).hexdigest():
            continue  # not the file its record was committed with: never rewritten, reported as damaged
        nb = json.loads(data.decode("utf-8"))
        n = refresh_verdict_lines(nb, [c for c in claims if c.notebook == name])
        if n:
            _commit_notebook(paths, name, nb)
            changed += n
    return changed


def _commit_notebook(paths: Paths, name: str, nb: dict) -> None:
    """Replace chapter ``name``'s executed notebook by ``nb``, its run record following (:func:`commit_rewritten`)."""
    from covbook.book.runner import commit_rewritten  # the one atomic commit of a run's outputs

    paths.tmp.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="refresh-", dir=paths.tmp) as d:
        write_json_atomic(Path(d) / f"{name}.ipynb", nb)
        commit_rewritten(paths, name, Path(d) / f"{name}.ipynb")


def write_report(paths: Paths) -> Path:
    """Write ``book/generated/reproduction.md`` (and the calibration page) from the last run; returns its path."""
    v = check(paths)
    book_claims = v.claims  # the book's own run, whose executed notebooks refresh_verdicts rewrites
    v.claims, edition_lines = shown_claims(paths, v.claims)  # a current chapter's claims from the stored edition
    problems, notes = edition_problems(paths)
    v.problems += problems
    v.notes += notes
    labels = theorem_labels(paths.notebooks)
    order = {k: i for i, k in enumerate(KINDS)}
    notebooks = []
    for name in v.runs:
        cl = sorted((c for c in v.claims if c.notebook == name), key=lambda c: order.get(c.kind, len(order)))
        if cl:
            notebooks.append((name, f"{sum(c.passed for c in cl)} of {len(cl)}", _counts_text(cl),
                              [_row(name, c, labels) for c in cl]))
    n_evidence = sum(c.kind == "evidence" for c in v.claims)
    text = render("reproduction.md.j2", n_claims=len(v.claims), n_pass=sum(c.passed for c in v.claims), ok=v.ok,
                  by_kind=_counts_text(v.claims), level=LEVEL, z=Z, n_evidence=n_evidence,
                  familywise=familywise(n_evidence), problems=[_quoted(p) for p in v.problems],
                  notes=[_quoted(p) for p in v.notes], edition="\n".join(edition_lines), notebooks=notebooks,
                  runs=v.runs, costs=run_costs_markdown(paths).rstrip(), commit=git_commit(paths.root),
                  platform=platform.platform(), versions=versions())
    out = paths.generated / "reproduction.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".md.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(out)
    write_calibration_page(paths)
    refresh_verdicts(paths, book_claims)
    write_results(paths.generated, v.claims, v.runs)  # the "Results at a glance" page (book/results.yml)
    return out
