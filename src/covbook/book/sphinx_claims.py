"""Sphinx extension: the prose cites its claims, and each chapter shows the run its claims come from.

Roles: ``{claim}`id``` (a claim of the page's chapter) or ``{claim}`NN_name:id``` (``NN:id``) renders the
measured value, verdict and window, linked to the claim's row in the report (statement, basis and alternatives
in the tooltip); a claim the run did not record is a build warning naming the page and line.
``{claim-row}`NN_name:id``` is that row's anchor, linked back to the chapter; ``{claimstat}`name``` a number
about the run (``level``, ``z``, ``n_evidence``, ``n_claims``, ``familywise`` = 1 − (1 − level)^n_evidence in
percent).  A chapter page (``generated/NN_name``) is :func:`covbook.book.edition.published_notebook`, its roles
citing the edition's claims where it shows the edition's run.  Config: ``covbook_claims_dir``,
``covbook_report_doc``.  Imports no torch.
"""

from __future__ import annotations

import hashlib
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
from covbook.claims import LEVEL, Claim, Z, anchor, familywise, fmt, load_claims

__all__ = ["setup", "split_target"]

logger = logging.getLogger(__name__)

CSS_FILE = "covbook-claims.css"
STATIC = Path(__file__).resolve().parent / "static"


class claim_link(nodes.inline):
    """A claim citation waiting for its link (resolved once every page is known)."""


def _claims_dir(app: Sphinx) -> Path:
    return Path(app.srcdir) / app.config.covbook_claims_dir


def _paths(app: Sphinx) -> Paths:
    return Paths(Path(app.srcdir).parent)


def _load(app: Sphinx) -> None:
    """At ``builder-inited``: every chapter's claims (a current edition chapter's from the edition), and a key
    per chapter page of the run it shows (the edition's state and the stored files' bytes)."""
    store: dict[str, dict[str, Claim]] = {}
    for f in sorted(_claims_dir(app).glob("*.json")):
        try:
            store[f.stem] = {c.id: c for c in load_claims(f)}
        except (ValueError, TypeError) as err:
            logger.warning(f"covbook claims: cannot read {f}: {err}", type="covbook", subtype="claims")
    app.covbook_claims, app.covbook_edition = store, {}  # type: ignore[attr-defined]
    paths = _paths(app)
    try:
        statuses = edition.status(paths)
    except (ValueError, OSError):
        return
    app.covbook_shown = statuses  # type: ignore[attr-defined]  # each chapter page's, at source-read
    for name, st in statuses.items():
        h = hashlib.sha256(f"{st.state}{json.dumps(dict(st.record or {}), sort_keys=True)}".encode())
        if st.current:
            for f in (paths.root / edition.EDITION / f"{name}.ipynb",
                      paths.root / edition.EDITION / "claims" / f"{name}.json"):
                h.update(f.read_bytes() if f.is_file() else b"")
            try:
                store[name] = {c.id: c for c in edition.edition_claims(paths, name, st.profile)}
            except (UsageError, ValueError, OSError):  # `covbook check` reports it; the role keeps the book's run
                pass
        app.covbook_edition[f"generated/{name}"] = h.hexdigest()  # type: ignore[attr-defined]


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
    paths = _paths(app)
    try:
        record = read_run(paths.runs / f"{name}.json")
    except (ValueError, OSError):
        record = None
    nb = edition.published_notebook(paths, name, own, dict(record) if record is not None else None,
                                    getattr(app, "covbook_shown", None))
    source[0] = json.dumps(nb)


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


class _ClaimRole(SphinxRole):
    def claim(self, role: str) -> tuple[str, str, Claim] | None:
        """``(chapter, id, claim)`` the role's text cites, or None after a warning naming the page and line
        (myst-nb numbers a notebook's lines as (cell + 1) × 10000 + line: the warning names the cell)."""
        store = _store(self.env)
        try:
            chap, cid = split_target(self.text, self.env.docname, list(store))
            if cid not in store[chap]:
                raise ValueError(f"the run did not record claim {cid!r} in {chap} "
                                 f"(recorded: {', '.join(sorted(store[chap])) or 'none'})")
        except ValueError as err:
            cell = f" (in markdown cell {self.lineno // 10000} of the notebook, counting from 1)" \
                if self.lineno >= 10000 else ""
            logger.warning(f"{{{role}}}`{self.text}`: {err}{cell}", location=self.get_location(), type="covbook",
                           subtype="claim")
            return None
        self.env.note_dependency(str(_claims_dir(self.env.app) / f"{chap}.json"))
        return chap, cid, store[chap][cid]


class ClaimRole(_ClaimRole):
    """``{claim}`[chapter:]id``` — the measured value and verdict, linked to the report."""

    def run(self) -> tuple[list[nodes.Node], list[nodes.system_message]]:
        found = self.claim("claim")
        if found is None:
            return [nodes.inline(self.rawtext, f"[unrecorded claim {self.text}]",
                                 classes=["covbook-claim", "covbook-claim-missing"])], []
        chap, cid, claim = found
        node = claim_link("", "", classes=["covbook-claim", f"covbook-claim-{claim.verdict.lower()}"],
                          target="report", anchor=anchor(chap, cid), title=_title(cid, claim))
        node += nodes.inline(text=fmt(claim.measured), classes=["covbook-claim-value"])
        node += _mark(claim)
        node += nodes.inline(text=f"\u00a0{claim.expected_text()}", classes=["covbook-claim-window"])
        return [node], []


class ClaimRowRole(_ClaimRole):
    """``{claim-row}`chapter:id``` — the report's anchor for a claim, linked back to the chapter."""

    def run(self) -> tuple[list[nodes.Node], list[nodes.system_message]]:
        found = self.claim("claim-row")
        if found is None:
            return [nodes.literal(self.rawtext, self.text)], []
        chap, cid, _ = found
        node = claim_link("", "", ids=[anchor(chap, cid)], classes=["covbook-claim-row"], target=chap,
                          anchor=anchor(chap, cid), title=f"where {chap} records {cid}")
        node += nodes.literal(text=cid)
        return [node], []


class ClaimStatRole(SphinxRole):
    """``{claimstat}`name``` — a number about the whole run (see the module docstring)."""

    def run(self) -> tuple[list[nodes.Node], list[nodes.system_message]]:
        store = _store(self.env)
        evidence = sum(c.kind == "evidence" for cl in store.values() for c in cl.values())
        stats = {"level": f"{LEVEL:g}", "z": f"{Z:.2f}", "n_evidence": str(evidence),
                 "n_claims": str(sum(len(cl) for cl in store.values())),
                 "familywise": f"{100 * familywise(evidence):.2g} %"}
        if self.text.strip() not in stats:
            logger.warning(f"{{claimstat}}`{self.text}`: unknown; valid: {', '.join(stats)}",
                           location=self.get_location(), type="covbook", subtype="claim")
            return [nodes.inline(self.rawtext, f"[{self.text}?]", classes=["covbook-claim-missing"])], []
        for chap in store:
            self.env.note_dependency(str(_claims_dir(self.env.app) / f"{chap}.json"))
        return [nodes.inline(self.rawtext, stats[self.text.strip()], classes=["covbook-claimstat"])], []


def _resolve(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    """Turn each :class:`claim_link` into a link (HTML builders) or plain inline text (others)."""
    env = app.env
    report = app.config.covbook_report_doc
    for node in list(doctree.findall(claim_link)):
        hits = [d for d in env.all_docs if d.rsplit("/", 1)[-1] == node["target"]]
        target = report if node["target"] == "report" else hits[0] if len(hits) == 1 else None
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


def _static(app: Sphinx, config) -> None:
    config.html_static_path = [*config.html_static_path, str(STATIC / CSS_FILE)]


def setup(app: Sphinx) -> dict[str, object]:
    app.add_config_value("covbook_claims_dir", "generated/claims", "env", types=[str])
    app.add_config_value("covbook_report_doc", "generated/reproduction", "env", types=[str])
    app.add_node(claim_link)
    app.add_role("claim", ClaimRole())
    app.add_role("claim-row", ClaimRowRole())
    app.add_role("claimstat", ClaimStatRole())
    app.connect("builder-inited", _load)
    app.connect("env-get-outdated", _outdated)
    app.connect("source-read", _source)
    app.connect("doctree-resolved", _resolve)
    app.connect("config-inited", _static)
    app.add_css_file(CSS_FILE)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
