"""Claims: every quantitative statement the book makes, measured by a run and judged by a rule.

A notebook records a *measurement* with :func:`measure` (the value, the
prediction computed in the run, its standard error and degrees of freedom or
the window its sampling law gives, and any further numbers).  What the claim
means (kind, statement, theorem, how its window is formed, the alternative it
must exclude) is its *rule*, data in ``notebooks/rules/NN_name.yml``
(:mod:`covbook.rules`).  :func:`measure` judges the measurement against the
chapter's rule and shows the verdict line, glues the value for the prose
(myst-nb ``glue``) and, under the covbook runner, writes the measurements to
the chapter's claims JSON file; ``covbook check`` re-judges that file against
the current rules without running the notebook.

Every rule has a *kind*:

``evidence``
    tests a prediction and could fail if the theory were wrong: its window
    excludes the alternative(s) it names (no decay, no effect, the competing
    formula).  Statistical windows use the book's one per-claim level,
    two-sided ``LEVEL`` = 5e-4 (``Z`` ≈ 3.48 standard errors, or the Student-t
    quantile when the SE comes from few replicates).
``compatible``
    the measurement agrees with the prediction but its window cannot exclude
    the alternative at this profile: shown as "compatible, cannot exclude X",
    never cited as evidence of the effect.
``identity``
    an exact algebraic identity checked to rounding.
``sanity``
    a property any reasonable implementation has.
"""

from __future__ import annotations

import json
import math
import operator
import os
from dataclasses import asdict
from pathlib import Path

from covbook._jsonio import write_json_atomic
from covbook.rules import LEVEL, RULE_KINDS, Claim, Measurement, Rule, Z, fmt, judge, load_rules, quantile, rules_path

__all__ = [
    "Claim", "Measurement", "measure", "verdict_markdown", "quantile", "glue", "reset", "write_json_atomic",
    "load_claims", "load_measurements", "measurement_from_json", "judge_file", "anchor", "familywise", "fmt",
    "CLAIMS_FILE_ENV", "RULES_FILE_ENV", "KINDS", "LEVEL", "Z", "record",
]

KINDS = RULE_KINDS
CLAIMS_FILE_ENV = "COVBOOK_CLAIMS_FILE"
NOTEBOOK_ENV = "COVBOOK_NOTEBOOK"
RULES_FILE_ENV = "COVBOOK_RULES_FILE"


def familywise(n: int, level: float = LEVEL) -> float:
    """Chance that a correct run fails at least one of ``n`` independent claims at ``level``: 1 − (1 − level)^n.

    Examples
    --------
    >>> round(familywise(100), 4)
    0.0488
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be a non-negative integer count of claims, got {n!r}")
    return 1.0 - (1.0 - level) ** n


def anchor(notebook: str, claim_id: str) -> str:
    """HTML id of a claim: ``claim-NN-id`` for notebook ``NN_name`` (else ``claim-NAME-id``).

    The chapter's verdict line and the reproduction report's row carry this id;
    the ``{claim}`` role of the book links to it.

    Examples
    --------
    >>> anchor("05_icl_one_step", "risk_gd")
    'claim-05-risk_gd'
    """
    prefix = notebook.split("_", 1)[0]
    return f"claim-{prefix if prefix.isdigit() else notebook}-{claim_id}"


_MEASURED: dict[str, Measurement] = {}


def _number(x: object, name: str, allow_none: bool = False) -> float | None:
    if x is None:
        if allow_none:
            return None
        raise ValueError(f"{name} must be a number, got None")
    try:
        v = float(x)  # works for numpy and 0-dim torch scalars
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be a real number, got {x!r}") from err
    return v


def _extra(x: object, name: str) -> str | int | float:
    """An extra number as a plain int (integers keep their type, for the rules' texts) or float; texts as they are."""
    if isinstance(x, str):
        return x
    try:
        return operator.index(x)  # type: ignore[arg-type]
    except TypeError:
        return _number(x, name)  # type: ignore[return-value]


def _find_rules(notebook: str, cid: str) -> tuple[str, dict[str, Rule]] | None:
    """The chapter's rules: from the runner's environment, else ``rules/`` beside the notebook (Jupyter's cwd)."""
    env = os.environ.get(RULES_FILE_ENV)
    if env:
        return (notebook, load_rules(env)) if Path(env).is_file() else None
    for base in (Path.cwd(), Path.cwd() / "notebooks"):
        d = base / "rules"
        if notebook != "interactive" and (d / f"{notebook}.yml").is_file():
            return notebook, load_rules(d / f"{notebook}.yml")
        if notebook == "interactive" and d.is_dir():
            hits = [(f.stem, r) for f in sorted(d.glob("*.yml")) if cid in (r := load_rules(f))]
            if len(hits) == 1:
                return hits[0]
    return None


def measure(
    id: str,
    value: object,
    *,
    prediction: object | None = None,
    se: object | None = None,
    dof: int | None = None,
    allowance: object = 0.0,
    lower: object | None = None,
    upper: object | None = None,
    reason: str | None = None,
    glue_value: bool = True,
    show: bool = True,
    **extra: object,
) -> Claim:
    """Record a measurement, judge it against its chapter's rule, show the verdict and save it.

    Parameters
    ----------
    id : str
        The claim's literal id: its rule in ``notebooks/rules/NN_name.yml``.
    value : float
        The measured number; a non-finite value fails the claim.
    prediction : float, optional
        The value (or bound) the theory predicts, computed in the run.
    se : float, optional
        The standard error the window rests on (non-negative).
    dof : int, optional
        Degrees of freedom of ``se`` (replicates − 1): the rule then uses the
        Student-t quantile at the book's level.
    allowance : float
        A non-statistical allowance the rule's basis explains (a proven bias bound).
    lower, upper : float, optional
        Window ends computed in the run from a sampling law (``run_interval`` rules).
    reason : str, optional
        Why the claim could not be evaluated: it is then recorded as failed.
    **extra
        Further numbers (or short texts) the rule's text may name as ``{name}``.

    Returns the judged :class:`Claim`; without a rule (a notebook outside a
    covbook checkout, or an id not declared yet) an unjudged, failed claim that
    says why.
    """
    if not isinstance(id, str) or not id or not id.replace("_", "").replace("-", "").isalnum():
        raise ValueError(f"claim id must be a non-empty identifier of letters, digits, '_' or '-', got {id!r}")
    if reason is not None and not (isinstance(reason, str) and reason.strip()):
        raise ValueError(f"reason must be a non-empty string, got {reason!r}")
    if dof is not None and (isinstance(dof, bool) or not isinstance(dof, int) or dof < 1):
        raise ValueError(f"dof must be a positive integer (replicates − 1), got {dof!r}")
    v = _number(value, "value")
    s = _number(se, "se", True)
    if s is not None and (not math.isfinite(s) or s < 0):
        raise ValueError(f"se must be a finite non-negative standard error, got {se!r}")
    a = _number(allowance, "allowance")
    if not math.isfinite(a) or a < 0:
        raise ValueError(f"allowance must be a finite non-negative number, got {allowance!r}")
    lo, hi = _number(lower, "lower", True), _number(upper, "upper", True)
    if lo is not None and hi is not None and lo > hi:
        raise ValueError(f"lower {lo} exceeds upper {hi}")
    nb = os.environ.get(NOTEBOOK_ENV, "interactive")
    extra_clean = {k: _extra(x, k) for k, x in extra.items()}
    m = Measurement(id, nb, v, _number(prediction, "prediction", True), s, dof, a, lo, hi, reason, extra_clean)
    _MEASURED[id] = m
    _save()
    if glue_value:
        glue(id, v)
    found = _find_rules(nb, id)
    if found is None or id not in found[1]:  # the run keeps the measurement; `covbook check` fails it
        why = ("no rules file found (judged by `covbook check` in a covbook checkout)" if found is None else
               f"no rule in notebooks/rules/{found[0]}.yml: declare it there")
        claim = Claim(id, nb, "(not judged)", v, None, None, None, None, False, extra=extra_clean, kind="sanity",
                      reason=why)
        if show:
            _show(claim)
        return claim
    name, rules = found
    m.notebook = name if nb == "interactive" else nb
    claim = judge(rules[id], m)
    claim.notebook = nb
    if show:
        _show(claim)
    return claim


def record(*results: object, show: bool = True) -> dict[str, Claim]:
    """Record experiment results (:class:`covbook.experiments.Result`): glue their numbers, measure their claims.

    Each result's numbers are glued for the prose, then each of its measurements goes through
    :func:`measure` in the order the experiment made them.  Returns ``{claim id: judged Claim}``.

    Raises ``ValueError`` when an argument has no ``measurements`` and ``numbers`` mappings.
    """
    judged: dict[str, Claim] = {}
    for r in results:
        ms, ns = getattr(r, "measurements", None), getattr(r, "numbers", None)
        if not isinstance(ms, dict) or not isinstance(ns, dict):
            raise ValueError(f"results must be covbook.experiments.Result objects, got {type(r).__name__}")
        for name, value in ns.items():
            glue(name, value)
        for cid, fields in ms.items():
            fields = dict(fields)
            value = fields.pop("value")
            judged[cid] = measure(cid, value, show=show, **fields)
    return judged


def reset() -> None:
    """Forget the measurements recorded in this session (tests use it between cases)."""
    _MEASURED.clear()


def glue(name: str, value: object) -> None:
    """Glue ``value`` under ``name`` for ``{glue:text}`` roles in the prose (no display)."""
    try:
        from myst_nb import glue as _glue
    except ImportError:  # pragma: no cover - myst-nb is a dependency
        return
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover
        return
    if get_ipython() is None:
        return
    value = _plain(value)
    _glue(name, value, display=False)


def _plain(value: object) -> object:
    """numpy / torch scalars as plain Python numbers, so ``{glue:text}`name:.2f``` formats work."""
    if type(value).__module__.split(".")[0] in ("numpy", "torch") and hasattr(value, "item"):
        try:
            return value.item()
        except (ValueError, RuntimeError):  # arrays with more than one element stay as they are
            return value
    return value


def _show(claim: Claim) -> None:
    try:
        from IPython import get_ipython
        from IPython.display import Markdown, display
    except ImportError:  # pragma: no cover
        print(claim.verdict_line())
        return
    if get_ipython() is None:
        print(claim.verdict_line())
        return
    display(Markdown(verdict_markdown(claim)))


def verdict_markdown(claim: Claim) -> str:
    """The chapter's verdict line (markdown, with the anchor the report and the ``{claim}`` role link to).

    ``covbook build`` rewrites these lines in the executed notebooks from the claims judged by the
    current rules, so a rule changed after the run shows in the chapter without re-running it.
    """
    mark = {"pass": "✓ PASS", "FAIL": "✗ FAIL", "compatible": "≈ COMPATIBLE"}[claim.verdict]
    why = f" Not evaluated: {claim.reason}." if claim.reason else ""
    power = f" ({claim.power_text()})" if claim.power_text() else ""
    target = f'<span id="{anchor(claim.notebook, claim.id)}"></span>'
    return (f"{target}**{mark}** `{claim.id}` **{fmt(claim.measured)}** in {claim.expected_text()}{power}.{why} "
            f"— {claim.statement}")


def _save() -> None:
    target = os.environ.get(CLAIMS_FILE_ENV)
    if target:
        write_json_atomic(target, [asdict(m) for m in _MEASURED.values()])


def _is_number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def measurement_from_json(raw: object) -> Measurement:
    """A :class:`Measurement` from one entry of a claims file, every field of the type :func:`measure` writes.

    Raises ``ValueError`` naming the field and what was expected (a number, not ``null`` or ``"1.0"``; an
    ``extra`` mapping of names to numbers or texts).
    """
    if not isinstance(raw, dict):
        raise ValueError(f"expected a JSON object, got {type(raw).__name__}")
    try:
        m = Measurement(**raw)
    except TypeError as err:
        raise ValueError(str(err).replace("Measurement.__init__() ", "")) from None
    if not (isinstance(m.id, str) and m.id) or not isinstance(m.notebook, str):
        raise ValueError(f"id and notebook must be texts, got {m.id!r}, {m.notebook!r}")
    bad = [f"{k} = {getattr(m, k)!r} (expected a number)" for k in ("value", "allowance")
           if not _is_number(getattr(m, k))]
    bad += [f"{k} = {getattr(m, k)!r} (expected a number or null)" for k in ("prediction", "se", "lower", "upper")
            if getattr(m, k) is not None and not _is_number(getattr(m, k))]
    if m.dof is not None and (isinstance(m.dof, bool) or not isinstance(m.dof, int) or m.dof < 1):
        bad.append(f"dof = {m.dof!r} (expected a positive integer or null)")
    if m.reason is not None and not isinstance(m.reason, str):
        bad.append(f"reason = {m.reason!r} (expected a text or null)")
    if not isinstance(m.extra, dict):
        bad.append(f"extra = {m.extra!r} (expected an object of numbers and texts)")
    else:
        bad += [f"extra[{k!r}] = {x!r} (expected a number or a text)" for k, x in m.extra.items()
                if not isinstance(x, (int, float, str))]  # a bool is an int, as measure() stores it
    if bad:
        raise ValueError(f"claim {m.id!r}: " + "; ".join(bad))
    return m


def load_measurements(path: str | os.PathLike) -> list[Measurement]:
    """Read a claims JSON file written by :func:`measure` (a list of measurements, checked field by field)."""
    with open(path, encoding="utf-8") as fh:
        raw = json.load(fh)
    if not isinstance(raw, list):
        raise ValueError(f"{path}: expected a JSON list of measurements")
    out = []
    for i, m in enumerate(raw):
        try:
            out.append(measurement_from_json(m))
        except ValueError as err:
            raise ValueError(f"{path}: entry {i} is not a measurement: {err}") from None
    return out


def judge_file(measurements: list[Measurement], rules: dict[str, Rule], *,
               profile: str | None = None) -> tuple[list[Claim], list[str]]:
    """Judge measurements against rules: the claims (in recorded order) and the ids without a rule."""
    out, missing = [], []
    for m in measurements:
        if m.id in rules:
            out.append(judge(rules[m.id], m, profile=profile))
        else:
            missing.append(m.id)
    return out, missing


def load_claims(path: str | os.PathLike, rules_root: str | os.PathLike | None = None,
                profile: str | None = None) -> list[Claim]:
    """Judge a stored claims file against its chapter's rules.

    ``path`` is ``<root>/book/generated/claims/NN_name.json``; the rules are
    ``<rules_root>/notebooks/rules/NN_name.yml`` (``rules_root`` defaults to
    ``<root>``).  A measurement without a rule is left out (``covbook check``
    reports it).
    """
    p = Path(path)
    root = Path(rules_root) if rules_root is not None else p.absolute().parents[3] if len(p.absolute().parents) > 3 \
        else p.parent
    rf = rules_path(root, p.stem)
    if not rf.is_file():
        raise ValueError(f"{p}: no rules file {rf} to judge its measurements against")
    return judge_file(load_measurements(p), load_rules(rf), profile=profile)[0]
