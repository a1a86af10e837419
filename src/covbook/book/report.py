"""The reproduction report, ``book/generated/reproduction.md`` (``templates/reproduction.md.j2``), from the last run:
the verdict per claim kind, the book's error rate, every claim by notebook (its row is the anchor the chapters'
``{claim}`` citations link to), the runs, their costs and the environment.
"""

from __future__ import annotations

import platform
from pathlib import Path

from covbook._jsonio import read_json, write_json_atomic
from covbook.book.cache import file_digest
from covbook.book.checks import check
from covbook.book.config import Paths
from covbook.book.edition import edition_problems, refresh_verdict_lines, shown_claims
from covbook.book.records import git_commit, read_run, run_costs_markdown, versions
from covbook.book.render import render, theorem_labels, write_page
from covbook.book.results import write_results
from covbook.book.sweep import write_calibration_page
from covbook.claims import KINDS, LEVEL, Claim, Z, familywise

__all__ = ["write_report", "refresh_verdicts"]


def refresh_verdicts(paths: Paths, claims: list[Claim]) -> int:
    """Rewrite the executed chapters' verdict lines from ``claims`` (judged by the current rules), so that chapter,
    report and ``{claim}`` role agree after a rule change without a rerun; each rewritten notebook is committed
    with its run record (:func:`covbook.book.runner.commit_rewritten`).  Returns the number of lines changed."""
    from covbook.book.runner import commit_rewritten  # the one atomic commit of a run's outputs

    changed = 0
    for name in sorted({c.notebook for c in claims}):
        f, record = paths.generated / f"{name}.ipynb", read_run(paths.runs / f"{name}.json")
        if not (f.is_file() and record is not None and record.ok
                and (record.outputs or {}).get("notebook") == file_digest(f)):
            continue  # not the file its record was committed with: never rewritten, reported as damaged
        nb = read_json(f, dict)
        n = refresh_verdict_lines(nb, [c for c in claims if c.notebook == name])
        if n:  # written in the tree's scratch folder (a run clears it), then committed with its record
            write_json_atomic(paths.tmp / f"refresh-{name}.ipynb", nb)
            commit_rewritten(paths, name, paths.tmp / f"refresh-{name}.ipynb")
            changed += n
    return changed


def write_report(paths: Paths) -> Path:
    """Write ``book/generated/reproduction.md``, the calibration and results pages from the last run, and refresh
    the chapters' verdict lines; returns the report's path."""
    v = check(paths)
    shown, edition = shown_claims(paths, v.claims)  # a current chapter's claims from the stored edition
    problems, notes = edition_problems(paths)
    v.problems += problems
    v.notes += notes
    notebooks = {n: sorted((c for c in shown if c.notebook == n), key=lambda c: KINDS.index(c.kind)) for n in v.runs}
    n_evidence = sum(c.kind == "evidence" for c in shown)
    text = render("reproduction.md.j2", claims=shown, kinds=KINDS, level=LEVEL, z=Z, n_evidence=n_evidence,
                  familywise=familywise(n_evidence), problems=v.problems, notes=v.notes, edition=edition, runs=v.runs,
                  notebooks=notebooks, costs=run_costs_markdown(paths).rstrip(), commit=git_commit(paths.root),
                  platform=platform.platform(), versions=versions(), labels=theorem_labels(paths.notebooks))
    out = write_page(paths.generated / "reproduction.md", text)
    write_calibration_page(paths)
    refresh_verdicts(paths, v.claims)  # the book's own run, whose executed notebooks it rewrites
    write_results(paths.generated, shown, v.runs)  # the "Results at a glance" page (book/results.yml)
    return out
