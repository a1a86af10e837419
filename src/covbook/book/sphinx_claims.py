"""Sphinx extension: the book's prose cites its claims, and the build checks every citation.

Roles (usable in any MyST page or notebook markdown cell of the book):

``{claim}`id```
    the claim ``id`` recorded by this chapter's run (the chapter is the page's
    docname, e.g. ``generated/05_icl_one_step`` reads
    ``generated/claims/05_icl_one_step.json``).
``{claim}`05_icl_one_step:id``` (or ``{claim}`05:id```)
    a claim of another chapter.

  Both render a compact verdict chip: the measured value (four significant
  digits, as :func:`covbook.claims.fmt`), the verdict (``✓``, a red
  ``✗ FAILED``, or ``≈ compatible, cannot exclude X`` for a claim without
  power against its alternative X) and the window inline, linked to the claim's
  row in the reproduction report; the statement, basis and alternatives are
  its tooltip (details on demand).  The claims are judged against the current
  rules (``notebooks/rules``) when the build starts.  A role naming a claim
  that the run did not record is a build warning (an error under ``-W``) with
  the page and line.

``{claim-row}`05_icl_one_step:id```
    used by the generated reproduction report: the claim id as an anchor
    (``claim-05-id``, :func:`covbook.claims.anchor`) that the ``{claim}`` links
    point to, itself linked back to the claim's verdict line in the chapter.

``{claimstat}`name```
    a number about the whole run, for the notation page and the report:
    ``level`` (the per-claim level), ``z``, ``n_evidence``, ``n_claims``,
    ``familywise`` (the chance that a correct run fails at least one evidence
    claim by chance, ``1 − (1 − level)^n_evidence``, in percent).

Configuration: ``covbook_claims_dir`` (default ``generated/claims``, relative
to the book's source folder) and ``covbook_report_doc`` (default
``generated/reproduction``).  The extension imports no science (no torch).
"""

from __future__ import annotations

from pathlib import Path

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util import logging
from sphinx.util.docutils import SphinxRole

from covbook.book.citations import split_target
from covbook.claims import LEVEL, Claim, Z, anchor, familywise, fmt, load_claims

__all__ = ["setup", "split_target"]

logger = logging.getLogger(__name__)

CSS_FILE = "covbook-claims.css"
CSS = """\
.covbook-claim { white-space: nowrap; }
.covbook-claim-pass .covbook-claim-mark { color: #1a7f37; }
.covbook-claim-fail, .covbook-claim-fail .covbook-claim-mark, .covbook-claim-missing {
  color: #b3261e; font-weight: bold; }
.covbook-claim-fail { background: #fde7e9; padding: 0 .2em; border-radius: .2em; }
.covbook-claim-compatible .covbook-claim-mark { color: #8a6d00; }
.covbook-claim-compatible { background: #fff6d6; padding: 0 .2em; border-radius: .2em; }
.covbook-claim-window { color: #57606a; font-size: 90%; }
/* in a table a chip wraps like the cell's text, and its window is left to the tooltip */
table .covbook-claim { white-space: normal; }
table .covbook-claim-window { display: none; }
"""


class claim_link(nodes.inline):
    """A claim citation waiting for its link (resolved once every page is known)."""


def _claims_dir(app: Sphinx) -> Path:
    return Path(app.srcdir) / app.config.covbook_claims_dir


def _load(app: Sphinx) -> None:
    """Read every chapter's claims JSON (at ``builder-inited``)."""
    store: dict[str, dict[str, Claim]] = {}
    folder = _claims_dir(app)
    for f in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            store[f.stem] = {c.id: c for c in load_claims(f)}
        except (ValueError, TypeError) as err:
            logger.warning(f"covbook claims: cannot read {f}: {err}", type="covbook", subtype="claims")
    app.covbook_claims = store  # type: ignore[attr-defined]


def _store(env) -> dict[str, dict[str, Claim]]:
    return getattr(env.app, "covbook_claims", {})


def _mark(c: Claim) -> nodes.inline:
    text = {"pass": "✓", "FAIL": "✗ FAILED", "compatible": "≈ " + c.power_text()}[c.verdict]
    if c.verdict == "pass" and c.alternatives and not c.powered:
        text = "✓ " + c.power_text()  # an evidence claim without power at this profile (smoke) says so
    return nodes.inline(text=f"\u00a0{text}", classes=["covbook-claim-mark"])


def _title(cid: str, c: Claim) -> str:
    """The chip's tooltip: everything the compact display leaves out."""
    alts = f" {c.power_text().capitalize()}." if c.power_text() else ""
    basis = f" Window: {c.basis}." if c.basis else ""
    where = f" at profile {c.profile}" if c.profile else " in this run"
    kind = c.kind if c.rule_kind in (None, c.kind) else f"{c.kind}{where}, an {c.rule_kind} rule without power there"
    return f"{cid} ({kind}, {c.verdict}): {c.statement} Window {c.expected_text()}.{alts}{basis}"


def _where(lineno: int) -> str:
    """Notebook pages number lines as (cell + 1) × 10000 + line (myst-nb): say which cell."""
    if lineno >= 10000:
        return f" (in markdown cell {lineno // 10000} of the notebook, counting from 1)"
    return ""


class ClaimRole(SphinxRole):
    """``{claim}`[chapter:]id``` — the measured value and verdict, linked to the report."""

    def run(self) -> tuple[list[nodes.Node], list[nodes.system_message]]:
        store = _store(self.env)
        try:
            chap, cid = split_target(self.text, self.env.docname, list(store))
            claim = store[chap].get(cid)
            if claim is None:
                raise ValueError(f"the run did not record claim {cid!r} in {chap} "
                                 f"(recorded: {', '.join(sorted(store[chap])) or 'none'})")
        except ValueError as err:
            logger.warning(f"{{claim}}`{self.text}`: {err}{_where(self.lineno)}", location=self.get_location(),
                           type="covbook", subtype="claim")
            return [nodes.inline(self.rawtext, f"[unrecorded claim {self.text}]",
                                 classes=["covbook-claim", "covbook-claim-missing"])], []
        self.env.note_dependency(str(_claims_dir(self.env.app) / f"{chap}.json"))
        verdict = claim.verdict.lower()
        node = claim_link("", "", classes=["covbook-claim", f"covbook-claim-{verdict}"],
                          target="report", anchor=anchor(chap, cid), title=_title(cid, claim))
        node += nodes.inline(text=fmt(claim.measured), classes=["covbook-claim-value"])
        node += _mark(claim)
        node += nodes.inline(text=f"\u00a0{claim.expected_text()}", classes=["covbook-claim-window"])
        return [node], []


class ClaimRowRole(SphinxRole):
    """``{claim-row}`chapter:id``` — the report's anchor for a claim, linked back to the chapter."""

    def run(self) -> tuple[list[nodes.Node], list[nodes.system_message]]:
        store = _store(self.env)
        try:
            chap, cid = split_target(self.text, self.env.docname, list(store))
            if cid not in store[chap]:
                raise ValueError(f"the run did not record claim {cid!r} in {chap}")
        except ValueError as err:
            logger.warning(f"{{claim-row}}`{self.text}`: {err}{_where(self.lineno)}", location=self.get_location(),
                           type="covbook", subtype="claim")
            return [nodes.literal(self.rawtext, self.text)], []
        self.env.note_dependency(str(_claims_dir(self.env.app) / f"{chap}.json"))
        node = claim_link("", "", ids=[anchor(chap, cid)], classes=["covbook-claim-row"], target=chap,
                          anchor=anchor(chap, cid), title=f"where {chap} records {cid}")
        node += nodes.literal(text=cid)
        return [node], []


def _stats(store: dict[str, dict[str, Claim]]) -> dict[str, str]:
    evidence = sum(c.kind == "evidence" for cl in store.values() for c in cl.values())
    return {
        "level": f"{LEVEL:g}",
        "z": f"{Z:.2f}",
        "n_evidence": str(evidence),
        "n_claims": str(sum(len(cl) for cl in store.values())),
        "familywise": f"{100 * familywise(evidence):.2g} %",
    }


class ClaimStatRole(SphinxRole):
    """``{claimstat}`name``` — a number about the whole run (see the module docstring)."""

    def run(self) -> tuple[list[nodes.Node], list[nodes.system_message]]:
        store = _store(self.env)
        stats = _stats(store)
        key = self.text.strip()
        if key not in stats:
            logger.warning(f"{{claimstat}}`{self.text}`: unknown; valid: {', '.join(stats)}",
                           location=self.get_location(), type="covbook", subtype="claim")
            return [nodes.inline(self.rawtext, f"[{self.text}?]", classes=["covbook-claim-missing"])], []
        for chap in store:
            self.env.note_dependency(str(_claims_dir(self.env.app) / f"{chap}.json"))
        return [nodes.inline(self.rawtext, stats[key], classes=["covbook-claimstat"])], []


def _chapter_doc(env, chapter: str) -> str | None:
    hits = [d for d in env.all_docs if d.rsplit("/", 1)[-1] == chapter]
    return hits[0] if len(hits) == 1 else None


def _resolve(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    """Turn each :class:`claim_link` into a link (HTML builders) or plain inline text (others)."""
    env = app.env
    report = app.config.covbook_report_doc
    for node in list(doctree.findall(claim_link)):
        target = report if node["target"] == "report" else _chapter_doc(env, node["target"])
        new: nodes.Element
        if app.builder.format == "html" and target in env.all_docs:
            uri = app.builder.get_relative_uri(docname, target) + "#" + node["anchor"]
            new = nodes.reference("", "", refuri=uri, reftitle=node["title"], internal=True)
            new.extend(node.children)
            if node["ids"]:
                new = nodes.inline("", "", new, ids=node["ids"], classes=node["classes"])
            else:
                new["classes"] = node["classes"]
        else:
            new = nodes.inline("", "", *node.children, ids=node["ids"], classes=node["classes"])
        node.replace_self(new)


def _write_css(app: Sphinx, exc: Exception | None) -> None:
    if exc is None and app.builder.format == "html":
        static = Path(app.outdir) / "_static"
        static.mkdir(parents=True, exist_ok=True)
        (static / CSS_FILE).write_text(CSS, encoding="utf-8")


def setup(app: Sphinx) -> dict[str, object]:
    app.add_config_value("covbook_claims_dir", "generated/claims", "env", types=[str])
    app.add_config_value("covbook_report_doc", "generated/reproduction", "env", types=[str])
    app.add_node(claim_link)
    app.add_role("claim", ClaimRole())
    app.add_role("claim-row", ClaimRowRole())
    app.add_role("claimstat", ClaimStatRole())
    app.connect("builder-inited", _load)
    app.connect("doctree-resolved", _resolve)
    app.connect("build-finished", _write_css)
    app.add_css_file(CSS_FILE)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}

