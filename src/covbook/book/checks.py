"""Judge the last run (``covbook check``): every claim passes its rule, every evidence claim has power, no claim
vanished; from the measurements and run records in ``book/generated`` and the chapters' rules
(``notebooks/rules/NN_name.yml``, :mod:`covbook.rules`), without running anything.  (A ``{claim}`` citation of
an unrecorded claim fails the build instead: :mod:`covbook.book.sphinx_claims`.)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from covbook._jsonio import DamagedFile
from covbook.book.config import PROFILE_TABLE, Paths, UsageError, discover
from covbook.book.records import RunRecord, read_run
from covbook.claims import Claim, Measurement, judge_file, load_measurements
from covbook.rules import RULES_DIR, Rule, load_rules, rules_path

__all__ = ["Verdict", "check", "read_rules", "judge_chapter", "split_target", "POWER_PROFILES"]

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
        """The problems of notebook ``name``: its run, claims and rules."""
        return [p for p in self.problems if p.startswith((f"{name}:", f"{RULES_DIR / name}.yml:"))]

    def as_json(self) -> list[dict]:
        """Every claim as a JSON object (with ``kind``, ``basis`` and ``reason``)."""
        return [asdict(c) for c in self.claims]


def read_rules(paths: Paths, name: str) -> dict[str, Rule]:
    """The rules of chapter ``name`` (a :class:`UsageError` naming the file when it is missing or invalid)."""
    f = rules_path(paths.root, name)
    if not f.is_file():
        raise UsageError(f"{f.relative_to(paths.root)} is missing: every chapter declares its claims' rules there")
    try:
        return load_rules(f)
    except ValueError as err:
        raise UsageError(str(err)) from err


def _alternative_problems(ms: list[Measurement], rules: dict[str, Rule], where: str) -> list[str]:
    """Alternatives whose ``key`` names a number the measurement does not record (a typo would read as
    "cannot exclude" instead of an error)."""
    out = []
    for m in ms:
        numbers = {k: x for k, x in {**m.extra, "prediction": m.prediction}.items()
                   if isinstance(x, (int, float)) and not isinstance(x, bool)}
        for i, a in enumerate(rules[m.id].alternatives if m.id in rules else ()):
            if a.key is not None and a.key not in numbers:
                out.append(f"{where}: rule {m.id!r}: alternatives[{i}] ({a.name!r}): key {a.key!r} is not a number "
                           f"the measurement records (it records: {', '.join(sorted(numbers)) or 'none'})")
    return out


def judge_chapter(name: str, ms: list[Measurement], rules: dict[str, Rule],
                  profile: str | None) -> tuple[list[Claim], list[str], list[str]]:
    """``(claims, problems, notes)`` of chapter ``name``'s measurements ``ms`` judged by ``rules`` at ``profile``;
    a note is an evidence rule judged ``compatible`` at a profile that builds the book (:data:`POWER_PROFILES`)."""
    where, ids = f"{RULES_DIR / name}.yml", [m.id for m in ms]
    claims = judge_file(ms, rules, profile=profile)[0]
    out = _alternative_problems(ms, rules, where) + ([] if ms else [f"{name}: produced no claims"])
    out += [f"{name}: claim {c.id} failed: {c.verdict_line()}" for c in claims if not c.passed]
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
    dup = sorted({i for i in ids if ids.count(i) > 1})
    missing, new = sorted(set(rules) - set(ids)), sorted(set(ids) - set(rules))
    if dup:
        out.append(f"{name}: claim id recorded twice: {', '.join(dup)}")
    if missing:
        out.append(f"{name}: claim(s) in {where} not recorded by this run: {', '.join(missing)} "
                   "(a claim that cannot be evaluated is recorded as failed with a reason, never skipped)")
    if new:
        out.append(f"{name}: claim(s) recorded but not in {where}: {', '.join(new)} (declare each rule there)")
    return claims, out, notes


def split_target(text: str, docname: str, chapters: list[str]) -> tuple[str, str]:
    """``(chapter, claim id)`` cited by a ``{claim}`` role's text on page ``docname``: ``id`` names this page's
    chapter (the last part of ``docname``), ``NN_name:id`` or ``NN:id`` another of ``chapters`` (those with
    claims in the run).  Raises ``ValueError`` with a message.

    >>> split_target("05:risk", "generated/06_icl_multi_step", ["05_icl_one_step", "06_icl_multi_step"])
    ('05_icl_one_step', 'risk')
    """
    text = text.strip()
    if ":" in text:
        chap, cid = (s.strip() for s in text.split(":", 1))
        hits = [chap] if chap in chapters else [c for c in chapters if c.split("_", 1)[0] == chap]
        if len(hits) != 1:
            raise ValueError(f"no claims of chapter {chap!r} in this run (chapters with claims: "
                             f"{', '.join(chapters) or 'none'})")
        return hits[0], cid
    chap = docname.rsplit("/", 1)[-1]
    if chap not in chapters:
        raise ValueError(f"page {docname!r} is not a chapter with claims in this run; cite another chapter's "
                         f"claim as NN_name:{text}")
    return chap, text


def check(paths: Paths) -> Verdict:
    """Judge the stored measurements of the last run against the current rules: every reason it does not verify (a
    rules file without its notebook, a notebook that failed or was not run, :func:`judge_chapter`'s problems) and
    notes (:func:`judge_chapter`'s, chapters run at mixed profiles or seeds)."""
    v = Verdict()
    names = discover(paths)
    for f in sorted((paths.root / RULES_DIR).glob("*.yml")):
        if f.stem not in names:
            v.problems.append(f"{RULES_DIR / f.name}: rules of a notebook that does not exist")
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
        cfile = paths.claims / f"{name}.json"
        if not meta.ok:
            v.problems.append(f"{name}: notebook failed: {meta.error or 'unknown error'}")
            continue
        if not cfile.is_file():
            v.problems.append(f"{name}: produced no claims")
            continue
        try:
            ms = load_measurements(cfile)
        except ValueError as err:  # `covbook check` and `build` name it as damaged before judging
            v.problems.append(f"{name}: {err}")
            continue
        if rules is None:  # its rules file is the problem
            v.unjudged[name] = len(ms)
            continue
        claims, problems, notes = judge_chapter(name, ms, rules, meta.profile)
        v.claims.extend(claims)
        v.problems.extend(problems)
        v.notes.extend(notes)
    used = {n: (m.profile, m.seed) for n, m in v.runs.items() if m.ok}
    if len(set(used.values())) > 1:
        v.notes.append("chapters were run at mixed profiles or seeds: "
                       + ", ".join(f"{n.split('_', 1)[0]} {p} seed {s}" for n, (p, s) in sorted(used.items())))
    return v
