"""Judge the last run: every claim passes its rule, every evidence claim has power, no claim vanished.

``covbook check`` reads the measurements and run records that ``covbook run``
wrote into ``book/generated``, judges each measurement against its chapter's
rules (``notebooks/rules/NN_name.yml``, :mod:`covbook.rules`) without running
anything, and fails when

- a notebook failed, was not run, or recorded no claim;
- a claim failed its rule (including one recorded as not evaluable, with a reason);
- an *evidence* rule carries no ``basis`` or names no alternative;
- an evidence rule's claim is *judged* ``compatible`` (its window contains an
  alternative: :func:`covbook.rules.judged_kind`), which is noted, never a
  failure: the kind follows the window's width at the run's profile;
- a run recorded an id its rules do not declare, or did not record one they do;
- a notebook's prose cites (``{claim}`id```) a claim the run did not record.

It also notes chapters run at mixed profiles or seeds.  A changed rule is
re-judged in well under a second: no kernel starts.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from covbook._jsonio import DamagedFile
from covbook.book.citations import citations, split_target
from covbook.book.config import PROFILE_TABLE, Paths, UsageError, discover
from covbook.book.records import RunRecord, read_run
from covbook.claims import Claim, Measurement, judge_file, load_measurements
from covbook.rules import Rule, load_rules, utf8_text

__all__ = ["Verdict", "check", "rules_file", "read_rules", "run_profile", "judged", "mixed_runs",
           "claim_problems", "id_problems", "citation_problems", "alternative_problems", "source_text",
           "POWER_PROFILES"]

RULES = Path("notebooks") / "rules"
#: profiles whose book a claim without power may not build (at smoke, CI's profile, it is reported only)
POWER_PROFILES = tuple(name for name, p in PROFILE_TABLE.items() if p.power)


@dataclass
class Verdict:
    """All claims of the last run, and every reason the run does not verify."""

    claims: list[Claim] = field(default_factory=list)
    runs: dict[str, RunRecord] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: notebooks whose run recorded measurements that no rule judged (their rules file is invalid): how many
    unjudged: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems

    def problems_of(self, name: str) -> list[str]:
        """The problems of notebook ``name``: its run, claims and rules, and its prose's citations."""
        prefixes = (f"{name}:", f"notebooks/{name}.md:", f"{RULES / name}.yml:")
        return [p for p in self.problems if p.startswith(prefixes)]

    def as_json(self) -> list[dict]:
        """Every claim as a JSON object (with ``kind``, ``basis`` and ``reason``)."""
        return [asdict(c) for c in self.claims]

    def counts(self) -> dict[str, tuple[int, int]]:
        """``kind -> (passed, total)`` for the kinds present, evidence first."""
        out: dict[str, tuple[int, int]] = {}
        for kind in ("evidence", "compatible", "identity", "sanity"):
            cl = [c for c in self.claims if c.kind == kind]
            if cl:
                out[kind] = (sum(c.passed for c in cl), len(cl))
        return out


def source_text(paths: Paths, src: Path) -> str:
    """A notebook's MyST source; a :class:`UsageError` naming the file, byte and line when it is not UTF-8."""
    try:
        return utf8_text(src, src.relative_to(paths.root) if src.is_relative_to(paths.root) else src)
    except ValueError as err:
        raise UsageError(str(err)) from None


def rules_file(paths: Paths, name: str) -> Path:
    return paths.root / RULES / f"{name}.yml"


def read_rules(paths: Paths, name: str) -> dict[str, Rule]:
    """The rules of chapter ``name`` (a :class:`UsageError` naming the file when it is missing or invalid)."""
    f = rules_file(paths, name)
    if not f.is_file():
        raise UsageError(f"{f.relative_to(paths.root)} is missing: every chapter declares its claims' rules there")
    try:
        return load_rules(f)
    except ValueError as err:
        raise UsageError(str(err)) from err


def run_profile(meta: dict) -> tuple[str | None, int | None]:
    """The profile and seed a run record names."""
    params = meta.get("parameters") or {}
    return params.get("profile"), params.get("seed")


def claim_problems(name: str, claims: list[Claim], profile: str | None = None) -> tuple[list[str], list[str]]:
    """``(problems, notes)``: failed claims and evidence rules without a basis or an alternative (problems);
    evidence rules judged ``compatible`` at a profile that builds the book (:data:`POWER_PROFILES`: notes)."""
    out = [f"{name}: claim {c.id} failed: {c.verdict_line()}" for c in claims if not c.passed]
    notes = []
    for c in claims:
        rule_kind = c.rule_kind or c.kind
        if rule_kind == "evidence" and not (c.basis and c.basis.strip()):
            out.append(f"{name}: claim {c.id}: evidence claim without basis (say where its window comes from)")
        if rule_kind in ("evidence", "compatible") and not c.alternatives:
            out.append(f"{name}: claim {c.id}: {rule_kind} rule names no alternative (what must it exclude?)")
        if (rule_kind == "evidence" and c.kind == "compatible" and c.passed
                and (profile in POWER_PROFILES or profile is None)):
            notes.append(f"{name}: claim {c.id}: compatible at profile {profile or 'unknown'}: window "
                         f"{c.expected_text()} contains {', '.join(c.cannot_exclude())}")
    return out, notes


def id_problems(name: str, ids: list[str], expected: list[str] | None, where: str = "rules") -> list[str]:
    """Differences between the claim ids a run recorded and those its rules file declares."""
    if expected is None:
        return [f"{name}: has no {where} file"]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    missing, new = sorted(set(expected) - set(ids)), sorted(set(ids) - set(expected))
    out = [f"{name}: claim id recorded twice: {', '.join(dup)}"] if dup else []
    if missing:
        out.append(f"{name}: claim(s) in {where} not recorded by this run: {', '.join(missing)} "
                   "(a claim that cannot be evaluated is recorded as failed with a reason, never skipped)")
    if new:
        out.append(f"{name}: claim(s) recorded but not in {where}: {', '.join(new)} (declare each rule there)")
    return out


def mixed_runs(runs: dict[str, dict]) -> str | None:
    """A warning when the chapters' last runs used different profiles or seeds (else ``None``)."""
    used = {n: run_profile(m) for n, m in runs.items() if m.get("status") == "ok"}
    if len({p for p, _ in used.values()}) > 1 or len({s for _, s in used.values()}) > 1:
        return ("chapters were run at mixed profiles or seeds: "
                + ", ".join(f"{n.split('_', 1)[0]} {p} seed {s}" for n, (p, s) in sorted(used.items())))
    return None


def citation_problems(paths: Paths, recorded: dict[str, set[str]]) -> list[str]:
    """Citations in the notebooks' prose of claims that the run did not record.

    ``recorded`` maps each notebook whose run succeeded to its claim ids; a
    citation of a chapter that did not run is left to that chapter's own problem.
    """
    out = []
    for name, src in discover(paths).items():
        try:
            prose = source_text(paths, src)
        except UsageError as err:
            out.append(str(err))
            continue
        for line, text in citations(prose):
            try:
                chap, cid = split_target(text, name, list(discover(paths)))
            except ValueError as err:
                out.append(f"notebooks/{src.name}:{line}: {{claim}}`{text}`: {err}")
                continue
            if chap in recorded and cid not in recorded[chap]:
                out.append(f"notebooks/{src.name}:{line}: {{claim}}`{text}` cites a claim that {chap} did not record")
    return out


def judged(paths: Paths, name: str, claims_file: Path, rules: dict[str, Rule],
           profile: str | None = None) -> tuple[list[Claim], list[str]]:
    """The claims of one stored run judged against ``rules``, and the recorded ids."""
    ms = load_measurements(claims_file)
    cl, _ = judge_file(ms, rules, profile=profile)
    return cl, [m.id for m in ms]


def alternative_problems(ms: list[Measurement], rules: dict[str, Rule], where: str) -> list[str]:
    """Alternatives whose ``key`` names a number the measurement does not record (a typo would read as
    "cannot exclude" instead of an error)."""
    out = []
    for m in ms:
        for i, a in enumerate(rules[m.id].alternatives if m.id in rules else ()):
            if a.key is None:
                continue
            v = m.prediction if a.key == "prediction" else m.extra.get(a.key)
            if not isinstance(v, (int, float)) or isinstance(v, bool):
                numbers = {"prediction": m.prediction, **m.extra}
                names = ", ".join(sorted(k for k, x in numbers.items()
                                         if isinstance(x, (int, float)) and not isinstance(x, bool))) or "none"
                out.append(f"{where}: rule {m.id!r}: alternatives[{i}] ({a.name!r}): key {a.key!r} is not a number "
                           f"the measurement records (it records: {names})")
    return out


def check(paths: Paths) -> Verdict:
    """Judge the stored measurements of the last run against the current rules; every reason it does not verify."""
    v = Verdict()
    names = discover(paths)
    stale = sorted(f.stem for f in (paths.root / RULES).glob("*.yml") if f.stem not in names) \
        if (paths.root / RULES).is_dir() else []
    for s in stale:
        v.problems.append(f"{RULES / (s + '.yml')}: rules of a notebook that does not exist")
    for name in names:
        try:
            rules = read_rules(paths, name)
        except UsageError as err:
            v.problems.append(f"{name}: {err}")
            rules = None
        try:
            meta = read_run(paths.runs / f"{name}.json")
        except DamagedFile as err:
            v.problems.append(f"{name}: {err}")
            continue
        if meta is None:
            v.problems.append(f"{name}: has not been run (covbook run {name})")
            continue
        v.runs[name] = meta
        if not meta.ok:
            v.problems.append(f"{name}: notebook failed: {meta.error or 'unknown error'}")
            continue
        cfile = paths.claims / f"{name}.json"
        if not cfile.is_file():
            v.problems.append(f"{name}: produced no claims")
            continue
        try:
            ms = load_measurements(cfile)
        except ValueError as err:  # `covbook check` and `build` name it as damaged before judging
            v.problems.append(f"{name}: {err}")
            continue
        if rules is None:  # its rules file is the problem; its citations cannot be checked against the rules
            v.unjudged[name] = len(ms)
            continue
        profile, _ = run_profile(meta)
        cl, ids = judge_file(ms, rules, profile=profile)[0], [m.id for m in ms]
        v.problems.extend(alternative_problems(ms, rules, f"{RULES / (name + '.yml')}"))
        if not ids:
            v.problems.append(f"{name}: produced no claims")
        v.claims.extend(cl)
        problems, notes = claim_problems(name, cl, profile)
        v.problems.extend(problems)
        v.notes.extend(notes)
        v.problems.extend(id_problems(name, ids, sorted(rules), f"{RULES / (name + '.yml')}"))
    mixed = mixed_runs(v.runs)
    if mixed:
        v.notes.append(mixed)
    recorded = {name: {c.id for c in v.claims if c.notebook == name} for name, m in v.runs.items()
                if m.get("status") == "ok" and name not in v.unjudged}
    v.problems.extend(citation_problems(paths, recorded))
    return v
