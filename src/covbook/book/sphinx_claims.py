"""Sphinx extension: the prose cites its claims, and each chapter shows the run its claims come from.

``{claim}`[NN_name:]id``` (or ``NN:id``) renders the measured value, verdict and window, linked to the claim's
row in the report; ``{claim-row}`NN_name:id``` is that row's anchor, linked back to the chapter; a claim the run
did not record is a build warning naming the page and line.  A chapter page is
:func:`covbook.book.edition.published_notebook`, citing the edition's claims where it shows the edition's run.
"""

from __future__ import annotations

import json
from pathlib import Path

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util import logging
from sphinx.util.docutils import SphinxRole

from covbook.book import edition
from covbook.book.checks import split_target
from covbook.book.config import Paths, UsageError
from covbook.book.records import read_run
from covbook.book.standalone import run_claims
from covbook.claims import Claim, anchor, fmt
from covbook.rules import rules_path

__all__ = ["setup"]

logger = logging.getLogger(__name__)

CSS = Path(__file__).resolve().parent / "static" / "covbook-claims.css"
CLAIMS_DIR = "generated/claims"
REPORT_DOC = "generated/reproduction"


def _load(app: Sphinx) -> None:
    """At ``builder-inited``: every chapter's claims (a current edition chapter's from the edition), and a key
    per chapter page of the run it shows (the edition's state and run record, which names its files' digests)."""
    paths = Paths(Path(app.srcdir).parent)
    store = run_claims(paths.root, lambda f, err: logger.warning(f"covbook claims: cannot read {f}: {err}",
                                                                 type="covbook", subtype="claims"))
    app.covbook_claims, app.covbook_edition = store, {}  # type: ignore[attr-defined]
    try:
        statuses = edition.status(paths)
    except (ValueError, OSError):
        return
    app.covbook_shown = statuses  # type: ignore[attr-defined]  # each chapter page's, at source-read
    for name, st in statuses.items():
        if st.current:
            try:
                store[name] = {c.id: c for c in edition.edition_claims(paths, name, st.profile)}
            except (UsageError, ValueError, OSError):  # `covbook check` reports it; the role keeps the book's run
                pass
        app.covbook_edition[f"generated/{name}"] = (st.state, dict(st.record or {}))  # type: ignore[attr-defined]


def _outdated(app: Sphinx, env, added, changed, removed) -> list[str]:
    """The chapter pages whose shown run changed since the last build."""
    old, new = getattr(env, "covbook_edition", {}), app.covbook_edition  # type: ignore[attr-defined]
    env.covbook_edition = new
    return sorted(d for d in new if old.get(d) != new[d] and d in env.found_docs and d not in added)


def _source(app: Sphinx, docname: str, source: list[str]) -> None:
    """At ``source-read``: a chapter's executed notebook becomes the one a reader sees, with its note."""
    name = docname.removeprefix("generated/")
    if name == docname or not name[:2].isdigit():
        return
    try:
        own = json.loads(source[0])
    except ValueError:
        return  # not a notebook: myst-nb reports it
    paths = Paths(Path(app.srcdir).parent)
    try:
        record = read_run(paths.runs / f"{name}.json")
    except (ValueError, OSError):
        record = None
    nb = edition.published_notebook(paths, name, own, dict(record) if record is not None else None,
                                    getattr(app, "covbook_shown", None))
    source[0] = json.dumps(nb)


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


class ClaimRole(SphinxRole):
    """``{claim}`[chapter:]id```: the measured value, verdict and window, linked to the report;
    ``{claim-row}`chapter:id```: the report's anchor for a claim, linked back to the chapter."""

    def run(self) -> tuple[list[nodes.Node], list[nodes.system_message]]:
        store: dict[str, dict[str, Claim]] = getattr(self.env.app, "covbook_claims", {})
        try:
            chap, cid = split_target(self.text, self.env.docname, list(store))
            if cid not in store[chap]:
                raise ValueError(f"the run did not record claim {cid!r} in {chap} "
                                 f"(recorded: {', '.join(sorted(store[chap])) or 'none'})")
        except ValueError as err:  # myst-nb numbers a notebook's lines (cell + 1) × 10000 + line: name the cell
            cell = f" (in markdown cell {self.lineno // 10000} of the notebook, counting from 1)" \
                if self.lineno >= 10000 else ""
            logger.warning(f"{{{self.name}}}`{self.text}`: {err}{cell}", location=self.get_location(),
                           type="covbook", subtype="claim")
            if self.name == "claim-row":
                return [nodes.literal(self.rawtext, self.text)], []
            return [nodes.inline(self.rawtext, f"[unrecorded claim {self.text}]",
                                 classes=["covbook-claim", "covbook-claim-missing"])], []
        root = Path(self.env.srcdir).parent  # the verdict follows the measurements and the rules that judge them
        shown = getattr(self.env.app, "covbook_edition", {}).get(f"generated/{chap}", ("absent",))[0]
        for dep in (Path(self.env.srcdir) / CLAIMS_DIR / f"{chap}.json", rules_path(root, chap),
                    *([root / edition.EDITION / "claims" / f"{chap}.json"] if shown == "current" else [])):
            self.env.note_dependency(str(dep))
        claim, here = store[chap][cid], anchor(chap, cid)
        if self.name == "claim-row":
            return [self.link(f"generated/{chap}", here, f"where {chap} records {cid}", [nodes.literal(text=cid)],
                              ids=[here], classes=["covbook-claim-row"])], []
        chip = [nodes.inline(text=fmt(claim.measured), classes=["covbook-claim-value"]), _mark(claim),
                nodes.inline(text=f"\u00a0{claim.expected_text()}", classes=["covbook-claim-window"])]
        return [self.link(REPORT_DOC, here, _title(cid, claim), chip,
                          classes=["covbook-claim", f"covbook-claim-{claim.verdict.lower()}"])], []

    def link(self, target: str, fragment: str, title: str, children: list[nodes.Node], **attrs) -> nodes.Element:
        """``children`` linked to ``target#fragment`` (HTML builders), with ``ids`` on an inline around it."""
        builder = self.env.app.builder
        if builder.format != "html" or target not in self.env.found_docs:
            return nodes.inline("", "", *children, **attrs)
        uri = f"{builder.get_relative_uri(self.env.docname, target)}#{fragment}"
        ref = nodes.reference("", "", *children, refuri=uri, reftitle=title, internal=True)
        if "ids" in attrs:
            return nodes.inline("", "", ref, **attrs)
        ref["classes"] = attrs["classes"]
        return ref


def _static(app: Sphinx, config) -> None:
    config.html_static_path = [*config.html_static_path, str(CSS)]


def setup(app: Sphinx) -> dict[str, object]:
    app.add_role("claim", ClaimRole())
    app.add_role("claim-row", ClaimRole())
    app.connect("builder-inited", _load)
    app.connect("env-get-outdated", _outdated)
    app.connect("source-read", _source)
    app.connect("config-inited", _static)
    app.add_css_file(CSS.name)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
