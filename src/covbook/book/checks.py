"""Verify the last run: every claim passes, every evidence claim has a basis, no claim vanished.

``covbook check`` reads the per-notebook claims and run records that ``covbook
run`` wrote into ``book/generated`` and fails when

- a notebook failed, was not run, or recorded no claim;
- a claim failed (including a claim recorded as not evaluable, with a reason);
- an *evidence* claim carries no ``basis`` (where its tolerance comes from);
- a notebook's set of claim ids differs from the committed manifest
  ``notebooks/claims_manifest.yml``;
- a notebook's prose cites (``{claim}`id```) a claim the run did not record
  (the book build fails on it too, but only after minutes).

The manifest makes a claim impossible to lose silently: a notebook records the
same claim ids at every profile and seed (a claim that cannot be evaluated is
recorded as failed with its reason, never skipped).  After a deliberate change
of a notebook's claims, ``covbook check --update-manifest`` rewrites the
manifest from the last run; the diff is then reviewed and committed with the
notebook.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

from covbook.book.citations import citations, split_target
from covbook.claims import Claim, load_claims
from covbook.book.config import Paths, UsageError, discover

__all__ = ["Verdict", "check", "manifest_path", "read_manifest", "write_manifest", "update_manifest",
           "claim_problems", "id_problems", "citation_problems"]

MANIFEST = Path("notebooks") / "claims_manifest.yml"
MANIFEST_HEADER = """\
# The claim ids each notebook records, the same at every profile and seed (sorted).
# `covbook check` fails when a run's ids differ from this list: a claim must not vanish
# (one that cannot be evaluated is recorded as failed with its reason, never skipped).
# After a deliberate change of a notebook's claims: `covbook check --update-manifest`,
# review the diff, commit it with the notebook.
"""


@dataclass
class Verdict:
    """All claims of the last run, and every reason the run does not verify."""

    claims: list[Claim] = field(default_factory=list)
    runs: dict[str, dict] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_json(self) -> list[dict]:
        """Every claim as a JSON object (with ``kind``, ``basis`` and ``reason``)."""
        return [asdict(c) for c in self.claims]

    def counts(self) -> dict[str, tuple[int, int]]:
        """``kind -> (passed, total)`` for the kinds present, evidence first."""
        out: dict[str, tuple[int, int]] = {}
        for kind in ("evidence", "identity", "sanity"):
            cl = [c for c in self.claims if c.kind == kind]
            if cl:
                out[kind] = (sum(c.passed for c in cl), len(cl))
        return out


def manifest_path(paths: Paths) -> Path:
    return paths.root / MANIFEST


def read_manifest(paths: Paths) -> dict[str, list[str]] | None:
    """The committed manifest (notebook -> sorted claim ids), or ``None`` when there is none."""
    path = manifest_path(paths)
    if not path.is_file():
        return None
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as err:
        raise UsageError(f"{path}: not valid YAML ({err}); rewrite it with `covbook check --update-manifest`") from err
    if not isinstance(data, dict):
        raise UsageError(f"{path}: expected a mapping of notebook name -> list of claim ids")
    for k, v in data.items():
        if not (isinstance(k, str) and isinstance(v, list) and all(isinstance(i, str) for i in v)):
            raise UsageError(f"{path}: entry {k!r}: expected a mapping of notebook name -> list of claim ids "
                             f"(quote ids YAML reads as other types, e.g. 'off', '1'), got {v!r}")
    return {k: list(v) for k, v in data.items()}


def write_manifest(paths: Paths, manifest: dict[str, list[str]]) -> Path:
    """Write the manifest (notebooks in order, ids sorted) with its explanatory header."""
    path = manifest_path(paths)
    body = yaml.safe_dump({k: sorted(manifest[k]) for k in sorted(manifest)}, sort_keys=False,
                          default_flow_style=False, allow_unicode=True)
    tmp = path.with_suffix(".yml.tmp")
    tmp.write_text(MANIFEST_HEADER + body, encoding="utf-8")
    tmp.replace(path)
    return path


def _run_ids(paths: Paths) -> dict[str, list[str]]:
    """Claim ids of each notebook whose last run succeeded."""
    out = {}
    for name in discover(paths):
        rec, cfile = paths.runs / f"{name}.json", paths.claims / f"{name}.json"
        if rec.is_file() and cfile.is_file() and json.loads(rec.read_text()).get("status") == "ok":
            out[name] = sorted(c.id for c in load_claims(cfile))
    return out


def update_manifest(paths: Paths) -> list[str]:
    """Rewrite the manifest from the last run; returns one line per change.

    Notebooks whose last run failed (or that were not run) keep their entry;
    entries of notebooks that no longer exist are dropped.
    """
    old = read_manifest(paths) or {}
    names = discover(paths)
    new = {k: v for k, v in old.items() if k in names}
    new.update(_run_ids(paths))
    changes = []
    for name in sorted(set(old) | set(new)):
        before, after = set(old.get(name, [])), set(new.get(name, []))
        if name not in new:
            changes.append(f"{name}: removed (no such notebook)")
        elif name not in old:
            changes.append(f"{name}: added with {len(after)} claim ids")
        elif before != after:
            changes.append(f"{name}: " + "; ".join(
                part for part in (f"+ {', '.join(sorted(after - before))}" if after - before else "",
                                  f"- {', '.join(sorted(before - after))}" if before - after else "") if part))
    write_manifest(paths, new)
    return changes


def claim_problems(name: str, claims: list[Claim]) -> list[str]:
    """Failed claims and evidence claims without a basis."""
    out = [f"{name}: claim {c.id} failed: {c.verdict_line()}" for c in claims if not c.passed]
    out += [f"{name}: claim {c.id}: evidence claim without basis (say where its tolerance comes from)"
            for c in claims if c.kind == "evidence" and not (c.basis and c.basis.strip())]
    return out


def id_problems(name: str, ids: list[str], expected: list[str] | None, where: str = str(MANIFEST)) -> list[str]:
    """Differences between the claim ids a run recorded and the manifest's."""
    if expected is None:
        return [f"{name}: not in {where} (review its claim ids, then `covbook check --update-manifest`)"]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    missing, new = sorted(set(expected) - set(ids)), sorted(set(ids) - set(expected))
    out = [f"{name}: claim id recorded twice: {', '.join(dup)}"] if dup else []
    if missing:
        out.append(f"{name}: claim(s) in {where} not recorded by this run: {', '.join(missing)} "
                   "(a claim that cannot be evaluated is recorded as failed with a reason, never skipped)")
    if new:
        out.append(f"{name}: claim(s) not in {where}: {', '.join(new)} "
                   "(if intended: `covbook check --update-manifest` and commit the manifest)")
    return out


def citation_problems(paths: Paths, recorded: dict[str, set[str]]) -> list[str]:
    """Citations in the notebooks' prose of claims that the run did not record.

    ``recorded`` maps each notebook whose run succeeded to its claim ids; a
    citation of a chapter that did not run is left to that chapter's own problem.
    """
    out = []
    for name, src in discover(paths).items():
        for line, text in citations(src.read_text(encoding="utf-8")):
            try:
                chap, cid = split_target(text, name, list(discover(paths)))
            except ValueError as err:
                out.append(f"notebooks/{src.name}:{line}: {{claim}}`{text}`: {err}")
                continue
            if chap in recorded and cid not in recorded[chap]:
                out.append(f"notebooks/{src.name}:{line}: {{claim}}`{text}` cites a claim that {chap} did not record")
    return out


def check(paths: Paths) -> Verdict:
    """Collect the claims of the last run and every reason it does not verify."""
    v = Verdict()
    manifest = read_manifest(paths)
    if manifest is None:
        v.problems.append(f"{MANIFEST} is missing: run `covbook check --update-manifest` after a full run and "
                          "commit it")
    names = discover(paths)
    for stale in sorted(set(manifest or {}) - set(names)):
        v.problems.append(f"{stale}: in {MANIFEST} but there is no such notebook (`covbook check --update-manifest`)")
    for name in names:
        rec = paths.runs / f"{name}.json"
        if not rec.is_file():
            v.problems.append(f"{name}: has not been run (covbook run {name})")
            continue
        meta = json.loads(rec.read_text())
        v.runs[name] = meta
        if meta.get("status") != "ok":
            v.problems.append(f"{name}: notebook failed: {meta.get('error', 'unknown error')}")
            continue
        cfile = paths.claims / f"{name}.json"
        cl = load_claims(cfile) if cfile.is_file() else []
        if not cl:
            v.problems.append(f"{name}: produced no claims")
        v.claims.extend(cl)
        v.problems.extend(claim_problems(name, cl))
        if manifest is not None:
            v.problems.extend(id_problems(name, [c.id for c in cl], manifest.get(name)))
    recorded = {name: {c.id for c in v.claims if c.notebook == name} for name, m in v.runs.items()
                if m.get("status") == "ok"}
    v.problems.extend(citation_problems(paths, recorded))
    return v
