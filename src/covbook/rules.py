"""Claim rules: how a measurement is judged, declared as data beside each chapter.

A chapter's run records *measurements* (:class:`Measurement`: a value, the
prediction computed in the run, its standard error and degrees of freedom, or
the window ends its sampling law gives, and any further numbers).  What a
claim *means* is its :class:`Rule`, one entry of ``notebooks/rules/NN_name.yml``
under the claim's literal id::

    slope_gauss_L1:
      kind: evidence            # evidence | compatible | identity | sanity
      statement: At depth L = 1, E|h_t − F_L(x_t)|² decays like 1/t.
      theorem: thm-08-depth-collapse
      window: two_sided         # how the window is formed (WINDOWS)
      basis: bootstrap SE of the slope over {n_pairs} pairs of streams
      alternatives:             # what an evidence claim must exclude
      - {name: "t^(-1/2)", value: -0.5}
      - {name: no decay, value: 0.0}

A rule with ``per_run: true`` claims something of an object the run itself
draws or trains (its trained model, say), whose true value changes with the
seed: its SE is conditional on that object, so the calibration counts its
failures but does not compare its spread across seeds with that SE.

:func:`judge` is a pure function ``(rule, measurement) -> Claim``: the
notebook shows its verdict when it records a measurement, and ``covbook check``
re-judges stored measurements (of the last run, or of every seed of a sweep)
against the current rules without a kernel.

Windows (``k`` is :func:`quantile` at the book's one level, Student-t with the
measurement's ``dof`` when it has one; ``a`` the measurement's ``allowance``, a
non-statistical term the basis explains):

``two_sided``     prediction ± (k·se + a)
``at_least``      [prediction − k·se − a, ∞)   (not below the bound)
``at_most``       (−∞, prediction + k·se + a]  (not above the bound)
``above``         [prediction + k·se, ∞)       (significantly above: excludes the prediction)
``below``         (−∞, prediction − k·se]      (significantly below)
``chi2_mean``     prediction × [χ²_ν(LEVEL/2)/ν, χ²_ν(1 − LEVEL/2)/ν], ν = 2·prediction²/se²: a mean of
                  non-negative (weighted χ²) terms, by its Satterthwaite law (never a negative lower end)
``tolerance``     prediction ± the rule's ``tolerance`` (identities: rounding)
``fixed``         the rule's ``interval: [lower, upper]`` (either end may be null)
``run_interval``  [lower, upper] computed in the run from the sampling law the basis names

Kind follows power.  A rule of kind ``evidence`` says what the claim must show
and names the alternatives it must exclude; the *judged* claim's kind at a
profile is ``evidence`` when its window excludes every alternative there and
``compatible`` when the window contains one (:func:`judged_kind`).  The window
is formed from the prediction and the run's uncertainty (prediction ± k·SE and
the like), so which kind a claim has follows from the window's width at that
profile, never from where the measured value falls: the same rule is
``compatible`` at ``quick`` and ``evidence`` at ``full`` when the larger run's
standard error is small enough.  A rule of kind ``compatible`` never claims
power: its claim is ``compatible`` at every profile, whatever its window
excludes.  ``identity`` and ``sanity`` rules keep their kind.
"""

from __future__ import annotations

import math
import string
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist

import yaml

__all__ = ["Claim", "fmt", "Measurement", "Rule", "Alternative", "WINDOWS", "RULE_KINDS", "LEVEL", "Z", "quantile",
           "judge", "judged_kind",
           "load_rules", "rules_path", "parse_rules", "utf8_text", "window", "chi2_quantile"]

LEVEL = 5e-4
"""The book's one per-claim level: a correct run fails a statistical evidence claim with probability ``LEVEL``."""
Z = NormalDist().inv_cdf(1 - LEVEL / 2)
"""Standard errors per tolerance at ``LEVEL`` (two-sided normal quantile, ≈ 3.48)."""

RULE_KINDS = ("evidence", "compatible", "identity", "sanity")
WINDOWS = ("two_sided", "at_least", "at_most", "above", "below", "chi2_mean", "tolerance", "fixed", "run_interval")
_STATISTICAL = ("two_sided", "at_least", "at_most", "above", "below")
RULES_DIR = Path("notebooks") / "rules"


@dataclass(frozen=True)
class Alternative:
    """A value the claim's window must exclude: a literal ``value``, the measurement's number ``key``
    (``prediction`` or one of its extras), or ``factor`` times the prediction."""

    name: str
    value: float | None = None
    key: str | None = None
    factor: float | None = None

    def resolve(self, m: Measurement) -> float | None:
        if self.value is not None:
            return self.value
        if self.factor is not None:
            return None if m.prediction is None else self.factor * m.prediction
        v = m.prediction if self.key == "prediction" else m.extra.get(self.key or "")
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


@dataclass(frozen=True)
class Rule:
    """What a claim means and how its window is formed (one entry of a chapter's rules file)."""

    id: str
    kind: str
    statement: str
    window: str
    theorem: str | None = None
    basis: str | None = None
    interval: tuple[float | None, float | None] | None = None
    tolerance: float | None = None
    alternatives: tuple[Alternative, ...] = ()
    per_run: bool = False  # the estimand is this run's drawn or trained object, which changes with the seed


@dataclass
class Measurement:
    """What a run measured for one claim; no verdict (that is the rule's)."""

    id: str
    notebook: str
    value: float
    prediction: float | None = None
    se: float | None = None
    dof: int | None = None
    allowance: float = 0.0
    lower: float | None = None
    upper: float | None = None
    reason: str | None = None
    extra: dict = field(default_factory=dict)


@dataclass
class Claim:
    """A judged claim: a measurement and the verdict of its rule.

    The claim passes when ``lower <= measured <= upper`` (an open end is
    ``None``); ``expected ± tolerance`` when the window is centred on a
    prediction.  ``alternatives`` lists each value the rule must exclude, with
    ``excluded`` true when the window excludes it; ``powered`` is true when
    every alternative is excluded (``None`` for a rule that names none).
    ``kind`` is the judged kind (:func:`judged_kind`: an ``evidence`` rule
    without power at this profile gives a ``compatible`` claim); ``rule_kind``
    is the kind its rule declares.
    """

    id: str
    notebook: str
    statement: str
    measured: float
    expected: float | None
    tolerance: float | None
    lower: float | None
    upper: float | None
    passed: bool
    theorem: str | None = None
    extra: dict = field(default_factory=dict)
    kind: str = "evidence"
    basis: str | None = None
    reason: str | None = None
    window: str | None = None
    alternatives: list = field(default_factory=list)
    powered: bool | None = None
    profile: str | None = None
    per_run: bool = False
    rule_kind: str | None = None

    def _ipython_display_(self) -> None:
        """Show nothing: :func:`measure` has already shown the verdict line."""

    @property
    def verdict(self) -> str:
        """``pass``, ``FAIL``, or ``compatible`` for a passing claim of that kind."""
        if not self.passed:
            return "FAIL"
        return "compatible" if self.kind == "compatible" else "pass"

    def cannot_exclude(self) -> list[str]:
        """Names of the alternatives the window does not exclude."""
        return [a["name"] for a in self.alternatives if not a.get("excluded")]

    def excluded(self) -> list[str]:
        return [a["name"] for a in self.alternatives if a.get("excluded")]

    def power_text(self) -> str:
        """``excludes X`` / ``compatible, cannot exclude X`` (empty when no alternative is named)."""
        if not self.alternatives:
            return ""
        miss = self.cannot_exclude()
        if miss:
            return "compatible, cannot exclude " + ", ".join(miss)
        if self.kind == "compatible":  # a rule that claims no power, whose window happens to exclude them
            return "compatible (its rule claims no power); its window excludes " + ", ".join(self.excluded())
        return "excludes " + ", ".join(self.excluded())

    def verdict_line(self) -> str:
        """One line: verdict, id, value and window, what it excludes, statement."""
        mark = {"pass": "PASS", "FAIL": "FAIL", "compatible": "COMPATIBLE"}[self.verdict]
        why = f" ({self.reason})" if self.reason else ""
        power = f"; {self.power_text()}" if self.power_text() else ""
        return (f"[{mark}] {self.id} [{self.kind}]: {fmt(self.measured)} in {self.expected_text()}{power}{why} — "
                f"{self.statement}")

    def expected_text(self) -> str:
        if self.expected is not None and self.tolerance is not None:
            return f"{fmt(self.expected)} ± {fmt(self.tolerance)}"
        lo = "-∞" if self.lower is None else fmt(self.lower)
        hi = "∞" if self.upper is None else fmt(self.upper)
        return f"[{lo}, {hi}]"


def fmt(x: float | None) -> str:
    """Four significant digits, scientific notation where needed."""
    if x is None:
        return "—"
    if not math.isfinite(x):
        return str(x)
    if x != 0 and (abs(x) >= 1e5 or abs(x) < 1e-3):
        return f"{x:.3e}"
    return f"{x:.4g}"



# --- the Student-t quantile, in pure Python (``covbook check`` imports no numpy or scipy) --------------------


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 10_000):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    lbt = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(lbt) * _betacf(a, b, x) / a
    return 1.0 - math.exp(lbt) * _betacf(b, a, 1.0 - x) / b


def _t_upper_tail(t: float, dof: int) -> float:
    """P(T > t) for T ~ Student-t with ``dof`` degrees of freedom, t >= 0."""
    return 0.5 * _betainc(dof / 2.0, 0.5, dof / (dof + t * t))


def _gammainc(a: float, x: float) -> float:
    """Regularized lower incomplete gamma P(a, x) (series below a + 1, continued fraction above)."""
    if x <= 0.0:
        return 0.0
    lg = math.lgamma(a)
    if x < a + 1.0:
        term = total = 1.0 / a
        ap = a
        for _ in range(10_000):
            ap += 1.0
            term *= x / ap
            total += term
            if abs(term) < abs(total) * 1e-16:
                break
        return total * math.exp(-x + a * math.log(x) - lg)
    tiny = 1e-300
    b, c, d = x + 1.0 - a, 1.0 / tiny, 1.0 / (x + 1.0 - a)
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = b + an / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-16:
            break
    return 1.0 - math.exp(-x + a * math.log(x) - lg) * h


def chi2_quantile(p: float, nu: float) -> float:
    """The ``p`` quantile of χ²_ν (ν > 0 real), by bisection on :func:`_gammainc`.

    Examples
    --------
    >>> round(chi2_quantile(0.975, 10), 3)
    20.483
    """
    if not (0.0 < p < 1.0) or not (nu > 0 and math.isfinite(nu)):
        raise ValueError(f"need 0 < p < 1 and a finite nu > 0, got p={p}, nu={nu}")
    lo, hi = 0.0, max(1.0, nu)
    while _gammainc(nu / 2, hi / 2) < p:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if _gammainc(nu / 2, mid / 2) < p else (lo, mid)
        if hi - lo <= 1e-13 * hi:
            break
    return 0.5 * (lo + hi)


_QUANTILES: dict[int, float] = {}


def quantile(dof: object | None = None) -> float:
    """Standard errors per tolerance at the book's level ``LEVEL``.

    ``Z`` for a standard error known or estimated from many replicates; for one
    estimated from ``n`` replicates pass ``dof = n - 1``: the two-sided Student-t
    quantile at the same level, which allows for the noise in the estimated SE
    (it matters below a few dozen replicates: 6.08 at 7 degrees of freedom).

    Examples
    --------
    >>> round(quantile(), 2), round(quantile(7), 2), round(quantile(10**6), 2)
    (3.48, 6.08, 3.48)
    """
    if dof is None:
        return Z
    if isinstance(dof, bool) or not isinstance(dof, int) or dof < 1:
        raise ValueError(f"dof must be a positive integer (replicates − 1), got {dof!r}")
    if dof not in _QUANTILES:
        p = LEVEL / 2
        lo, hi = Z, Z
        while _t_upper_tail(hi, dof) > p:
            hi *= 2.0
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if _t_upper_tail(mid, dof) > p else (lo, mid)
            if hi - lo < 1e-12 * hi:
                break
        _QUANTILES[dof] = 0.5 * (lo + hi)
    return _QUANTILES[dof]


# --- judging ---------------------------------------------------------------------------------------------------


def _need(m: Measurement, name: str, rule: Rule) -> float:
    v = getattr(m, name)
    if v is None or not math.isfinite(v):
        raise ValueError(f"claim {m.id}: window {rule.window!r} needs a finite measurement {name!r}, got {v!r}")
    return float(v)


def window(rule: Rule, m: Measurement) -> tuple[float | None, float | None, float | None, float | None]:
    """``(lower, upper, expected, tolerance)`` of ``rule`` applied to ``m`` (``None`` for an open end)."""
    w = rule.window
    if w in _STATISTICAL:
        p, se = _need(m, "prediction", rule), _need(m, "se", rule)
        if se < 0 or not math.isfinite(m.allowance) or m.allowance < 0:
            raise ValueError(f"claim {m.id}: se and allowance must be finite and >= 0, got {se}, {m.allowance}")
        k = quantile(m.dof)
        tol = k * se + m.allowance
        if w == "two_sided":
            return p - tol, p + tol, p, tol
        if w == "at_least":
            return p - tol, None, None, None
        if w == "at_most":
            return None, p + tol, None, None
        if w == "above":
            return p + k * se, None, None, None
        return None, p - k * se, None, None
    if w == "chi2_mean":
        p, se = _need(m, "prediction", rule), _need(m, "se", rule)
        if p <= 0 or se <= 0:
            raise ValueError(f"claim {m.id}: window 'chi2_mean' needs prediction > 0 and se > 0, got {p}, {se}")
        nu = 2.0 * p * p / (se * se)
        return p * chi2_quantile(LEVEL / 2, nu) / nu, p * chi2_quantile(1 - LEVEL / 2, nu) / nu, None, None
    if w == "tolerance":
        p, tol = _need(m, "prediction", rule), float(rule.tolerance or 0.0)
        return p - tol, p + tol, p, tol
    if w == "fixed":
        lo, hi = rule.interval or (None, None)
        return lo, hi, None, None
    if w == "run_interval":
        if m.lower is None and m.upper is None:
            raise ValueError(f"claim {m.id}: window 'run_interval' needs the run's lower and/or upper end")
        return m.lower, m.upper, None, None
    raise ValueError(f"claim {m.id}: unknown window {w!r}; expected one of {', '.join(WINDOWS)}")


def _inside(x: float, lo: float | None, hi: float | None) -> bool:
    return (lo is None or x >= lo) and (hi is None or x <= hi)


class _Text(string.Formatter):
    def get_value(self, key, args, kwargs):
        if key not in kwargs:
            raise ValueError(f"the rule's text names {{{key}}}, which the measurement does not record")
        return kwargs[key]


def _fill(text: str | None, m: Measurement) -> str | None:
    if text is None:
        return None
    names = {"LEVEL": LEVEL, "Z": Z, "k": quantile(m.dof) if m.dof else Z, "dof": m.dof, "se": m.se,
             "prediction": m.prediction, **m.extra}
    return _Text().format(text, **names)


def judged_kind(rule_kind: str, powered: bool | None) -> str:
    """The kind of a judged claim: an ``evidence`` rule's claim is ``evidence`` only with power.

    ``powered`` is :attr:`Claim.powered` (``True`` when the window excludes every
    alternative, ``False`` when it contains one, ``None`` when the rule names
    none).  It depends on the window alone (its ends, formed from the prediction
    and the run's standard error), so the kind follows the window's width at the
    run's profile, never the measured value.

    Examples
    --------
    >>> judged_kind("evidence", True), judged_kind("evidence", False), judged_kind("compatible", True)
    ('evidence', 'compatible', 'compatible')
    """
    if rule_kind not in RULE_KINDS:
        raise ValueError(f"rule_kind must be one of {', '.join(RULE_KINDS)}, got {rule_kind!r}")
    if rule_kind == "evidence" and powered is False:
        return "compatible"
    return rule_kind


def judge(rule: Rule, m: Measurement, *, profile: str | None = None):
    """The judged claim of measurement ``m`` under ``rule`` (a :class:`covbook.claims.Claim`).

    Passes when the value is finite, no ``reason`` says it could not be
    evaluated, and it lies in the window.  Each alternative is marked excluded
    when it lies outside the window; the claim's ``kind`` is
    :func:`judged_kind` of the rule's kind and that power (a claim that could
    not be evaluated fails and keeps its rule's kind).

    Examples
    --------
    >>> r = Rule("s", "evidence", "a slope is −1", "two_sided", alternatives=(Alternative("no decay", 0.0),))
    >>> c = judge(r, Measurement("s", "08_x", -0.98, prediction=-1.0, se=0.05))
    >>> c.passed, c.powered, c.kind
    (True, True, 'evidence')
    >>> wide = judge(r, Measurement("s", "08_x", -0.98, prediction=-1.0, se=0.5))  # window [-2.7, 0.7]
    >>> wide.passed, wide.powered, wide.kind, wide.rule_kind
    (True, False, 'compatible', 'evidence')
    """
    if rule.id != m.id:
        raise ValueError(f"rule {rule.id!r} judged against measurement {m.id!r}")
    reason = m.reason
    try:
        lo, hi, exp, tol = window(rule, m)
        statement, basis = _fill(rule.statement, m), _fill(rule.basis, m)
    except ValueError as err:
        if reason is None:
            reason = str(err)
        lo = hi = exp = tol = None
        statement, basis = rule.statement, rule.basis
    value = m.value
    if not math.isfinite(value) and reason is None:
        reason = f"measured value is {value}"
    passed = reason is None and math.isfinite(value) and _inside(value, lo, hi)
    alts = []
    for a in rule.alternatives:
        v = a.resolve(m)
        alts.append({"name": a.name, "value": v,
                     "excluded": bool(v is not None and reason is None and (lo is not None or hi is not None)
                                      and not _inside(v, lo, hi))})
    powered = all(a["excluded"] for a in alts) if alts else None
    extra = dict(m.extra)
    if m.se is not None:
        extra.setdefault("se", m.se)
    if m.dof is not None:
        extra.setdefault("dof", m.dof)
    if exp is None and m.prediction is not None:  # a window about a prediction it does not centre on
        extra.setdefault("prediction", m.prediction)
    kind = rule.kind if reason else judged_kind(rule.kind, powered)
    return Claim(id=m.id, notebook=m.notebook, statement=statement or rule.statement, measured=value,
                 expected=exp, tolerance=tol, lower=lo, upper=hi, passed=bool(passed), theorem=rule.theorem,
                 extra=extra, kind=kind, basis=basis, reason=reason, window=rule.window,
                 alternatives=alts, powered=powered, profile=profile, per_run=rule.per_run,
                 rule_kind=rule.kind)


# --- reading rules files ---------------------------------------------------------------------------------------


def rules_path(root: str | Path, notebook: str) -> Path:
    """``notebooks/rules/<notebook>.yml`` under the project ``root``."""
    return Path(root) / RULES_DIR / f"{notebook}.yml"


def _opt_float(v: object, where: str, end: bool = False) -> float | None:
    """A finite number or ``None`` (``.nan`` and ``.inf`` are refused; an interval's open ``end`` is ``null``)."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"{where}: expected a number or null, got {v!r}")
    if not math.isfinite(v):
        raise ValueError(f"{where}: expected a finite number{' (an open end is null)' if end else ''}, got {v!r}")
    return float(v)


#: The keys a window reads beyond the measurement; any other window ignores them, so a rule may not give them.
_WINDOW_KEYS = {"interval": ("fixed",), "tolerance": ("tolerance",)}
_ALTERNATIVE_KEYS = ("name", "value", "key", "factor")


def _alternative(i: int, a: object, cid: str, where: str) -> Alternative:
    """Alternative ``i`` of rule ``cid``: a name and one of a finite ``value``, a ``key`` or a finite ``factor``."""
    at = f"{where}: rule {cid!r}: alternatives[{i}]"
    if not isinstance(a, dict):
        raise ValueError(f"{at}: expected a mapping {{name: ..., value|key|factor: ...}}, got {a!r}")
    unknown = sorted(str(k) for k in set(a) - set(_ALTERNATIVE_KEYS))
    if unknown:
        raise ValueError(f"{at}: unknown key(s) {', '.join(unknown)} (an alternative has "
                         f"{', '.join(_ALTERNATIVE_KEYS)})")
    if not (isinstance(a.get("name"), str) and a["name"].strip()):
        raise ValueError(f"{at}: name must be a non-empty text, got {a.get('name')!r}")
    given = [k for k in ("value", "key", "factor") if k in a]
    if len(given) != 1:
        raise ValueError(f"{at}: needs exactly one of value, key or factor, got {', '.join(given) or 'none'}")
    if "key" in a and not (isinstance(a["key"], str) and a["key"].strip()):
        raise ValueError(f"{at}: key must name a number the measurement records, got {a['key']!r}")
    value, factor = _opt_float(a.get("value"), f"{at}.value"), _opt_float(a.get("factor"), f"{at}.factor")
    if given[0] in ("value", "factor") and (value if given[0] == "value" else factor) is None:
        raise ValueError(f"{at}: {given[0]} must be a finite number, got null")
    return Alternative(a["name"], value, a.get("key"), factor)


def _rule(cid: str, raw: object, where: str) -> Rule:
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: rule {cid!r} must be a mapping")
    unknown = set(raw) - {"kind", "statement", "theorem", "window", "basis", "interval", "tolerance",
                          "alternatives", "per_run"}
    if unknown:
        raise ValueError(f"{where}: rule {cid!r}: unknown key(s) {', '.join(sorted(unknown))}")
    kind, win, stmt = raw.get("kind"), raw.get("window"), raw.get("statement")
    if kind not in RULE_KINDS:
        raise ValueError(f"{where}: rule {cid!r}: kind must be one of {', '.join(RULE_KINDS)}, got {kind!r}")
    if win not in WINDOWS:
        raise ValueError(f"{where}: rule {cid!r}: window must be one of {', '.join(WINDOWS)}, got {win!r}")
    if not (isinstance(stmt, str) and stmt.strip()):
        raise ValueError(f"{where}: rule {cid!r}: statement must be a non-empty sentence")
    for k, windows in _WINDOW_KEYS.items():
        if k in raw and win not in windows:
            raise ValueError(f"{where}: rule {cid!r}: {k} is read only by window {' or '.join(windows)}; window "
                             f"{win!r} would ignore it")
    interval = None
    if win == "fixed":
        iv = raw.get("interval")
        if not (isinstance(iv, list) and len(iv) == 2):
            raise ValueError(f"{where}: rule {cid!r}: a fixed window needs interval: [lower, upper]")
        interval = (_opt_float(iv[0], f"{where}: rule {cid!r}: interval", end=True),
                    _opt_float(iv[1], f"{where}: rule {cid!r}: interval", end=True))
        if interval == (None, None) or (None not in interval and interval[0] > interval[1]):
            raise ValueError(f"{where}: rule {cid!r}: interval {iv!r} needs a finite end and lower <= upper")
    tol = _opt_float(raw.get("tolerance"), f"{where}: rule {cid!r}: tolerance")
    if win == "tolerance" and (tol is None or tol < 0):
        raise ValueError(f"{where}: rule {cid!r}: a tolerance window needs tolerance >= 0")
    raw_alts = raw.get("alternatives") or []
    if not isinstance(raw_alts, list):
        raise ValueError(f"{where}: rule {cid!r}: alternatives must be a list, got {raw_alts!r}")
    alts = [_alternative(i, a, cid, where) for i, a in enumerate(raw_alts)]
    for k in ("theorem", "basis"):
        if raw.get(k) is not None and not isinstance(raw[k], str):
            raise ValueError(f"{where}: rule {cid!r}: {k} must be text")
    per_run = raw.get("per_run", False)
    if not isinstance(per_run, bool):
        raise ValueError(f"{where}: rule {cid!r}: per_run must be true or false, got {per_run!r}")
    return Rule(cid, kind, stmt.strip(), win, raw.get("theorem"), (raw.get("basis") or "").strip() or None,
                interval, tol, tuple(alts), per_run)


def _duplicate_keys(node: yaml.Node, at: str = "") -> str | None:
    """The first key given twice in a mapping of the YAML node tree (YAML itself would keep the last silently)."""
    if isinstance(node, yaml.MappingNode):
        seen: dict[object, int] = {}
        for key_node, value_node in node.value:
            key, line = key_node.value if isinstance(key_node, yaml.ScalarNode) else None, key_node.start_mark.line + 1
            if key is not None and key in seen:
                what = f"{at}key {key!r}" if at else f"rule id {key!r}"
                lines = f"line {line}" if seen[key] == line else f"lines {seen[key]} and {line}"
                return f"{what} is given twice ({lines}); YAML would keep the last silently"
            if key is not None:
                seen[key] = line
            found = _duplicate_keys(value_node, at or f"rule {key!r}: ")
            if found:
                return found
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            found = _duplicate_keys(item, at)
            if found:
                return found
    return None


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml where installed: 10× faster


def parse_rules(text: str, where: str = "rules") -> dict[str, Rule]:
    """The rules of one chapter from the YAML text of its rules file (id -> :class:`Rule`).

    A key given twice in one mapping (a claim id, or a rule's key) is an error, not the last one winning.
    """
    loader = _LOADER(text)
    try:
        node = loader.get_single_node()
        duplicate = _duplicate_keys(node) if node is not None else None
        if duplicate:
            raise ValueError(f"{where}: {duplicate}")
        data = (loader.construct_document(node) if node is not None else None) or {}
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ValueError(f"{where}: not valid YAML ({' '.join(str(getattr(err, 'problem', None) or err).split())}"
                         f"{at})") from None
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected a mapping of claim id -> rule")
    out = {}
    for cid, raw in data.items():
        if not (isinstance(cid, str) and cid.replace("_", "").replace("-", "").isalnum()):
            raise ValueError(f"{where}: claim id {cid!r} must be a literal identifier (quote ids YAML reads "
                             "as other types)")
        out[cid] = _rule(cid, raw, where)
    return out


_CACHE: dict[Path, tuple[float, dict[str, Rule]]] = {}


def utf8_text(path: str | Path, name: object | None = None) -> str:
    """The text of ``path``; a ``ValueError`` naming the file (as ``name``), the byte and its line if not UTF-8."""
    data = Path(path).read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise ValueError(f"{name or path}: not UTF-8 text (byte 0x{data[err.start]:02x} on line {line}); save it "
                         "as UTF-8") from None


def load_rules(path: str | Path) -> dict[str, Rule]:
    """Read a chapter's rules file (cached on its modification time)."""
    p = Path(path)
    mtime = p.stat().st_mtime
    if p in _CACHE and _CACHE[p][0] == mtime:
        return _CACHE[p][1]
    rules = parse_rules(utf8_text(p), str(p))
    _CACHE[p] = (mtime, rules)
    return rules
