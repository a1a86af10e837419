"""The reproduction report, ``book/generated/reproduction.md`` (``templates/reproduction.md.j2``), from the last run.

The verdict per claim kind, the book's error rate, every claim by notebook (its row is the anchor the
chapters' ``{claim}`` citations link to), the runs, their costs and the environment.  :func:`write_report`
also writes the calibration and results pages and refreshes the chapters' verdict lines.
"""

from __future__ import annotations

import hashlib
import json
import platform
import re
import tempfile
from pathlib import Path

from covbook._jsonio import write_json_atomic
from covbook.book.checks import check
from covbook.book.config import Paths
from covbook.book.edition import edition_problems, refresh_verdict_lines, shown_claims
from covbook.book.records import git_commit, read_run, run_costs_markdown, versions
from covbook.book.render import cell, render, theorem_labels, write_page
from covbook.book.results import write_results
from covbook.book.sweep import write_calibration_page
from covbook.claims import KINDS, LEVEL, Claim, Z, familywise

__all__ = ["write_report", "refresh_verdicts"]

_ROLE = re.compile(r"\{([A-Za-z][\w:-]*)\}`")


def _quoted(x: str) -> str:
    """A problem or note as text: a ``{claim}`id``` it quotes is shown, not a role (Sphinx would warn again)."""
    return _ROLE.sub(r"\\{\1}`", cell(x))


def refresh_verdicts(paths: Paths, claims: list[Claim]) -> int:
    """Rewrite the executed chapters' verdict lines (found by their anchors) from ``claims``, judged by the
    current rules, so that chapter, report and ``{claim}`` role agree after a rule change without a rerun.

    A rewritten notebook and its run record (the new SHA-256) are committed as one unit
    (:func:`covbook.book.runner.commit_rewritten`); a notebook that is not the file its record names is
    left alone (``check`` reports it as damaged).  Returns the number of lines changed.
    """
    from covbook.book.runner import commit_rewritten  # the one atomic commit of a run's outputs

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
            paths.tmp.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(prefix="refresh-", dir=paths.tmp) as d:
                write_json_atomic(Path(d) / f"{name}.ipynb", nb)
                commit_rewritten(paths, name, Path(d) / f"{name}.ipynb")
            changed += n
    return changed


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
    by_notebook = {name: sorted((c for c in v.claims if c.notebook == name), key=lambda c: order.get(c.kind, 9))
                   for name in v.runs}
    n_evidence = sum(c.kind == "evidence" for c in v.claims)
    text = render("reproduction.md.j2", claims=v.claims, ok=v.ok, kinds=KINDS, level=LEVEL, z=Z,
                  n_evidence=n_evidence, familywise=familywise(n_evidence), problems=[_quoted(p) for p in v.problems],
                  notes=[_quoted(p) for p in v.notes], edition="\n".join(edition_lines),
                  notebooks={name: cl for name, cl in by_notebook.items() if cl}, runs=v.runs,
                  costs=run_costs_markdown(paths).rstrip(), commit=git_commit(paths.root),
                  platform=platform.platform(), versions=versions(), labels=labels)
    out = write_page(paths.generated / "reproduction.md", text)
    write_calibration_page(paths)
    refresh_verdicts(paths, book_claims)
    write_results(paths.generated, v.claims, v.runs)  # the "Results at a glance" page (book/results.yml)
    return out
