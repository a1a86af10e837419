"""The "Results at a glance" page: which of the theory's statements hold, from the run.

``book/results.yml`` declares the statements the book tests (the results T1–T5, each the abstract's claim or
the book's reconstruction by its ``source``, and the book's own findings) and the key claims that decide
each, optionally in named parts (``claims: {rate: [slope_s1p0], constant: [...]}``), some marked ``exact``.
Only evidence shows a part (:func:`shows`), as the page's introduction (``templates/results.md.j2``) tells the
reader; a key claim that passes without power gets its forecast (:mod:`covbook.book.power`).
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from covbook.book.power import claim_forecasts, decision_text, fmt_count
from covbook.book.render import render as render_page
from covbook.book.render import theorem_labels, write_page
from covbook.claims import Claim

__all__ = ["STATUSES", "SOURCES", "Statement", "load_statements", "status", "PART_STATES", "part_states",
           "shows", "supports", "status_detail", "render", "write_results"]

STATUSES = ("holds", "holds with a correction", "holds in part", "compatible only", "fails", "not tested")
#: The state of one part of a statement, in the order the row lists them.
PART_STATES = ("fails", "not tested", "shown", "compatible only")
_FIELDS = {"id", "statement", "chapter", "theorem", "correction", "claims", "source", "abstract", "exact"}
#: Where a statement comes from: only the paper's abstract is public.
SOURCES = {"abstract": "The abstract's claim", "reconstruction": "The book's reconstruction"}
_CHAPTER = re.compile(r"^[0-9]{2}_[A-Za-z0-9_]+$")


@dataclass(frozen=True)
class Statement:
    """One row of the page: a statement, where it is tested, and the claims that decide it."""

    id: str
    statement: str
    chapter: str
    claims: tuple[str, ...]
    theorem: str | None = None
    correction: str | None = None
    kind: str = "statement"  # "statement" (of the theory) or "finding" (of the book)
    parts: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (name, claims) of each named part; () for one unnamed part
    source: str | None = None  # "abstract" or "reconstruction" (SOURCES)
    abstract: str | None = None  # what the abstract says, in the book's words (source "abstract" only)
    exact: tuple[str, ...] = ()  # the parts that are algebraic equalities, which an identity shows ("" unnamed)

    def part_keys(self) -> list[tuple[str, list[tuple[str, str]]]]:
        """``(part name, its claims' (notebook, claim id))`` for each part, one named ``""`` when none is named
        (``NN_name:id`` names another chapter's claim)."""
        return [(name, [tuple(c.split(":", 1)) if ":" in c else (self.chapter, c) for c in ids])
                for name, ids in self.parts or (("", self.claims),)]

    def claim_keys(self) -> list[tuple[str, str]]:
        """``(notebook, claim id)`` of each key claim."""
        return [key for _, keys in self.part_keys() for key in keys]


@dataclass
class Results:
    """The data file, parsed."""

    statements: list[Statement] = field(default_factory=list)
    claim_role: bool = False


def _parse_entry(raw: object, kind: str, where: str) -> Statement:
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: expected a mapping with keys {sorted(_FIELDS)}, got {type(raw).__name__}")
    if unknown := sorted(set(raw) - _FIELDS):
        raise ValueError(f"{where}: unknown key(s) {', '.join(unknown)}; valid: {', '.join(sorted(_FIELDS))}")
    for key in ("id", "statement", "chapter"):
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            raise ValueError(f"{where}: '{key}' must be a non-empty string")
    if not _CHAPTER.match(raw["chapter"]):
        raise ValueError(f"{where}: chapter {raw['chapter']!r} must be a notebook name like 01_covariance_readout")
    claims, parts = raw.get("claims"), ()
    if isinstance(claims, dict) and claims:  # named parts: {part name: [claim ids]}
        for name, ids in claims.items():
            if not isinstance(name, str) or not name.strip() or not _ids(ids):
                raise ValueError(f"{where}: 'claims' part {name!r} must name a non-empty list of claim ids")
        parts = tuple((name.strip(), tuple(ids)) for name, ids in claims.items())
        claims = [c for _, ids in parts for c in ids]
        if len(set(claims)) != len(claims):
            raise ValueError(f"{where}: 'claims' names a claim in more than one part")
    if not _ids(claims):
        raise ValueError(f"{where}: 'claims' must be a non-empty list of claim ids, or a mapping from part names "
                         "to such lists")
    for key in ("theorem", "correction"):
        if raw.get(key) is not None and not isinstance(raw[key], str):
            raise ValueError(f"{where}: '{key}' must be a string")
    source, abstract = raw.get("source"), raw.get("abstract")
    if source is not None and source not in SOURCES:
        raise ValueError(f"{where}: 'source' must be one of {', '.join(SOURCES)}, got {source!r}")
    if source == "abstract" and (not isinstance(abstract, str) or not abstract.strip()):
        raise ValueError(f"{where}: a statement with source 'abstract' needs 'abstract': what the abstract says, "
                         "apart from the book's precise statement")
    if abstract is not None and source != "abstract":
        raise ValueError(f"{where}: 'abstract' is only for a statement with source 'abstract'")
    return Statement(id=raw["id"].strip(), statement=" ".join(raw["statement"].split()), chapter=raw["chapter"],
                     claims=tuple(claims), parts=parts, theorem=raw.get("theorem") or None,
                     correction=" ".join(raw["correction"].split()) if raw.get("correction") else None, kind=kind,
                     source=source, abstract=" ".join(abstract.split()) if abstract else None,
                     exact=_exact(raw.get("exact"), [name for name, _ in parts] or [""], where))


def _ids(ids: object) -> bool:
    """Whether ``ids`` is a non-empty list of claim ids."""
    return isinstance(ids, list) and bool(ids) and all(isinstance(c, str) and c for c in ids)


def _exact(raw: object, names: list[str], where: str) -> tuple[str, ...]:
    """The entry's ``exact``: ``true`` (every part), ``false``/absent (none) or a list of its part names."""
    if raw is None or isinstance(raw, bool):
        return tuple(names) if raw else ()
    if not isinstance(raw, (list, tuple)) or not all(isinstance(n, str) for n in raw) \
            or names == [""] or not set(n.strip() for n in raw) <= set(names):
        raise ValueError(f"{where}: 'exact' must be true, false or a list of the entry's part names "
                         f"({', '.join(names) if names != [''] else 'it names no parts: use true'}), got {raw!r}")
    return tuple(n.strip() for n in raw)


def load_statements(path: str | os.PathLike) -> Results:
    """Read ``book/results.yml``; a malformed file is a ``ValueError`` naming the entry and the key."""
    raw = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: expected a mapping with 'statements' and 'findings'")
    if unknown := sorted(set(raw) - {"statements", "findings", "claim_role"}):
        raise ValueError(f"{path}: unknown key(s) {', '.join(unknown)}; valid: claim_role, statements, findings")
    out = Results(claim_role=bool(raw.get("claim_role", False)))
    for kind, key in (("statement", "statements"), ("finding", "findings")):
        entries = raw.get(key) or []
        if not isinstance(entries, list):
            raise ValueError(f"{path}: '{key}' must be a list")
        out.statements += [_parse_entry(e, kind, f"{path}: {key}[{i}]") for i, e in enumerate(entries)]
    if dup := [k for k, n in Counter(s.id for s in out.statements).items() if n > 1]:
        raise ValueError(f"{path}: duplicate id(s) {', '.join(dup)}")
    return out


def shows(claim: Claim, exact: bool = False) -> bool:
    """Whether the claim, passing, shows its part: evidence that excludes every alternative it names (at least
    one), or an identity when the part is ``exact``."""
    if claim.kind == "identity":
        return exact
    return claim.kind == "evidence" and bool(claim.alternatives) and bool(claim.powered)


def supports(claim: Claim, exact: bool = False) -> bool:
    """Whether the claim only supports its part: a sanity check, or an identity of a part that is not exact."""
    return claim.kind == "sanity" or (claim.kind == "identity" and not exact)


def part_states(statement: Statement, claims: dict[tuple[str, str], Claim]) -> list[tuple[str, str]]:
    """``(part name, state)`` of each part of the statement, the state one of ``PART_STATES``."""
    out = []
    for name, keys in statement.part_keys():
        found, exact = [claims.get(k) for k in keys], name in statement.exact
        if any(c is None for c in found):
            state = "not tested"
        elif not all(c.passed for c in found):
            state = "fails"
        elif any(shows(c, exact) for c in found) and all(shows(c, exact) or supports(c, exact) for c in found):
            state = "shown"
        else:
            state = "compatible only"
        out.append((name, state))
    return out


def status(statement: Statement, claims: dict[tuple[str, str], Claim]) -> str:
    """The statement's status, one of ``STATUSES``, from its key claims' verdicts (see the module docstring)."""
    states = {state for _, state in part_states(statement, claims)}
    if "not tested" in states:
        return "not tested"
    if "fails" in states:
        return "fails"
    if states == {"shown"}:
        return "holds with a correction" if statement.correction else "holds"
    return "holds in part" if "shown" in states else "compatible only"


def status_detail(statement: Statement, claims: dict[tuple[str, str], Claim]) -> str:
    """Which named parts are shown and which are only compatible (or fail, or are not in the run): ``shown:
    rate; compatible only: mean error``.  Empty when no part is named or all share one state."""
    states = part_states(statement, claims)
    if not statement.parts or len({state for _, state in states}) < 2:
        return ""
    groups = [(state, [name for name, st in states if st == state]) for state in PART_STATES]
    return "; ".join(f"{state}: {', '.join(names)}" for state, names in groups if names)


def render(results: Results, claims: list[Claim], labels: set[str], runs: dict[str, dict] | None = None,
           forecasts: dict[tuple[str, str], list] | None = None) -> str:
    """The page's MyST markdown (``templates/results.md.j2``) from the claims, their run records by notebook and
    their :func:`covbook.book.power.claim_forecasts` by ``(notebook, claim id)``."""
    runs, forecasts, by_key = runs or {}, forecasts or {}, {(c.notebook, c.id): c for c in claims}
    sections = []
    for kind, title in (("statement", "The theory's statements"), ("finding", "Findings of the book")):
        rows = []
        for s in (s for s in results.statements if s.kind == kind):
            st, parts, undecided = status(s, by_key), [], []
            for (name, keys), (_, state) in zip(s.part_keys(), part_states(s, by_key)):
                exact = name in s.exact  # a passing claim that only supports its part is listed apart, after
                side = [k for k in keys if k in by_key and by_key[k].passed and supports(by_key[k], exact)]
                parts.append((name, exact, [k for k in keys if k not in side], side))
                if state == "compatible only" and st in ("holds in part", "compatible only"):  # what would decide it
                    undecided.append((name, [k for k in parts[-1][2] if not shows(by_key[k], exact)]))
            rows.append({"s": s, "status": st, "detail": status_detail(s, by_key), "parts": parts,
                         "undecided": undecided})
        sections.append((title, rows))
    used = [(n, m.get("parameters", {}).get("profile"), m.get("parameters", {}).get("seed"))
            for n, m in sorted(runs.items()) if m.get("status") == "ok"]
    profiles = sorted({str(m.get("parameters", {}).get("profile")) for m in runs.values() if m.get("parameters")})
    abstract = [k for s in results.statements if s.source == "abstract" for k in s.claim_keys() if k in by_key]
    return render_page("results.md.j2", profiles=profiles, statuses=STATUSES, used=used,
                       counts=Counter(r["status"] for r in sections[0][1]),
                       abstract_counts=Counter(r["status"] for r in sections[0][1] if r["s"].source == "abstract"),
                       finding_counts=Counter(r["status"] for r in sections[1][1]),
                       mixed=len({u[1] for u in used}) > 1 or len({u[2] for u in used}) > 1, sections=sections,
                       sources=SOURCES, labels=labels, claim_role=results.claim_role, shows=shows, supports=supports,
                       statements=results.statements, by_key=by_key, count=fmt_count, ran={u[0] for u in used},
                       decisions={k: decision_text(v, by_key[k].window) for k, v in forecasts.items()},
                       larger=list(dict.fromkeys(f.profile for k in abstract for f in forecasts.get(k, []))),
                       at={k: {f.profile: f for f in v} for k, v in forecasts.items()})


def write_results(generated: str | os.PathLike, claims: list[Claim], runs: dict[str, dict]) -> Path | None:
    """Write ``<generated>/results.md`` from ``book/results.yml`` (beside ``generated``), every claim of the last
    run and its run records by notebook; ``None`` when that file is absent."""
    generated = Path(generated)
    data = generated.parent / "results.yml"
    if not data.is_file():
        return None
    results = load_statements(data)
    keys = {k for st in results.statements for k in st.claim_keys()}
    forecasts = claim_forecasts(generated.parent.parent, claims, runs, keys)
    labels = theorem_labels(generated)  # the boxes of the chapters that are in this build
    return write_page(generated / "results.md", render(results, claims, labels, runs, forecasts))
