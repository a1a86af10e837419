r"""Power at another profile: each evidence claim's window predicted from the run's standard errors.

An SE over ``n`` independent replicates (streams, pairs, tasks, models) scales as
:math:`\mathrm{SE}_Q = \mathrm{SE}_P \sqrt{n_P / n_Q}` (and as :math:`(n\ell)^{-1/2}` for a quantity read
at the end of a stream of length :math:`\ell`, whose variance is :math:`C/\ell`), with Student-t degrees
of freedom :math:`\nu_Q + 1 = (\nu_P + 1) n_Q / n_P`.  The rule's window rebuilt about the same prediction
with that SE (:func:`covbook.rules.window`) gives the claim's predicted kind at profile ``Q``: the measured
value never enters the kind.  Its predicted *verdict* (:attr:`Forecast.verdict`) compares that window with
the measured value ± its SE scaled to ``Q``.  ``studies/power_scaling_h200.py`` checks the model against a
paper-scale run.  No numpy, no torch.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, replace
from functools import cache, partial
from pathlib import Path

from covbook.book.config import PROFILES, expression_value, load_profiles, notebook_parameters, resolve_parameters
from covbook.book.render import render
from covbook.rules import Measurement, Rule, judge, load_rules, quantile, rules_path

__all__ = ["Scale", "Forecast", "parse_replicates", "replicate_count", "scaled", "predict",
           "needed", "measurement_of", "forecast", "claim_forecasts", "decision_text", "fmt_count",
           "profile_parameters"]

#: Windows whose width shrinks as the SE does, so that power grows with the replicates.
SHRINKING = ("two_sided", "at_least", "at_most", "chi2_mean", "run_interval")
#: The note of a forecast whose window does not depend on the replicates (``fixed``, ``tolerance``).
SAME_WINDOW = "its window is the same at every size"
N_CAP = 1e12  # no replicate count beyond this is searched (:func:`needed`)


@dataclass(frozen=True)
class Scale:
    """How a claim's SE scales, ``SE ∝ (n·ℓ)^(−1/2)``: ``n`` counts the replicates (and the dof), ``length`` is ℓ;
    or why the model does not predict the claim's window (``not_predicted``)."""

    n: str | None = None
    length: str | None = None
    also: str | None = None  # what else narrows the SE that the model leaves out (a slope's range of log t)
    not_predicted: str | None = None


def parse_replicates(raw: object, notebook: str, where: str = "notebooks/profiles.yml") -> dict[str, Scale]:
    """A notebook's ``replicates:`` entry, ``{default: spec, <claim id>: spec}``, as a :class:`Scale` by key.

    A spec is an expression of the notebook's parameters that counts the replicates, ``{n: expression,
    length: expression, also: text}`` or, for a claim, ``{not_predicted: reason}``; anything else is a
    ``ValueError`` naming ``<notebook>.replicates`` and the key.

    >>> parse_replicates({"default": {"n": "n_streams", "length": "t_max"}, "c": "n_pairs"}, "01_a")["default"]
    Scale(n='n_streams', length='t_max', also=None, not_predicted=None)
    """
    at = f"{where}: {notebook}.replicates"
    if not isinstance(raw, dict) or not raw:
        raise ValueError(f"{at} must be a mapping {{default: expression, <claim id>: expression | "
                         f"{{not_predicted: reason}}}}, got {raw!r}")
    out = {}
    for key, value in raw.items():
        if not isinstance(key, str) or not key.replace("_", "").isalnum():
            raise ValueError(f"{at}: key {key!r} must be `default` or a claim id")
        spec = {"n": value} if isinstance(value, str) else value
        if not (isinstance(spec, dict) and all(isinstance(v, str) and v.strip() for v in spec.values())
                and (("n" in spec and set(spec) <= {"n", "length", "also"})
                     or (set(spec) == {"not_predicted"} and key != "default"))):
            other = "" if key == "default" else " or {not_predicted: reason}"
            raise ValueError(f"{at}.{key} must be an expression of the notebook's parameters (text), {{n: expression, "
                             f"length: expression, also: text}}{other}, got {value!r}")
        out[key] = Scale(**{k: " ".join(v.split()) for k, v in spec.items()})
    return out


def replicate_count(expr: str, params: dict, where: str = "replicates") -> float:
    """The value of a replicates expression (names, numbers, ``+ - * / **``) on a notebook's parameters.

    >>> replicate_count("n_models * n_prompts", {"n_models": 8, "n_prompts": 4})
    32.0
    """
    n = expression_value(expr, params, where=where, calls=False, error=ValueError)
    if not (math.isfinite(n) and n > 0):
        raise ValueError(f"{where}: expression {expr!r} gives {n:g} replicates; expected a positive count")
    return float(n)


def scaled(m: Measurement, n_from: float, n_to: float, length: float = 1.0) -> Measurement:
    """The measurement ``m`` (over ``n_from`` replicates) as a run over ``n_to`` would record its uncertainty.

    The SE (``se·sqrt(n_from/(n_to·length))``), a run's own window ends (about the prediction, alike) and
    the dof (``round((dof + 1)·n_to/n_from) − 1``, at least 1: they count replicates only) scale; the rest
    is kept.  ``length`` is the ratio ``ℓ_to/ℓ_from`` of a length the SE also falls with.

    >>> m = Measurement("s", "08_x", -0.9, prediction=-1.0, se=0.2, dof=15, lower=-1.6, upper=-0.7)
    >>> s = scaled(m, 16, 64)
    >>> s.se, s.dof, s.lower, s.upper
    (0.1, 63, -1.3, -0.85)
    """
    if not (n_from > 0 and n_to > 0 and length > 0):
        raise ValueError(f"n_from, n_to and length must be positive, got {n_from}, {n_to}, {length}")
    ratio, p = math.sqrt(n_from / (n_to * length)), m.prediction
    lower = m.lower if m.lower is None or p is None else p + (m.lower - p) * ratio
    upper = m.upper if m.upper is None or p is None else p + (m.upper - p) * ratio
    return replace(m, se=None if m.se is None else m.se * ratio, lower=lower, upper=upper,
                   dof=None if m.dof is None else max(1, round((m.dof + 1) * n_to / n_from) - 1))


def _unscalable(rule: Rule, m: Measurement) -> str | None:
    """Why the window of ``rule`` on ``m`` cannot be rebuilt at another size (``None`` when it can)."""
    if rule.window == "run_interval" and m.prediction is None:
        return "the run computes its window's ends and records no prediction to rescale them about"
    if rule.window not in ("fixed", "tolerance", "run_interval") and (m.se is None or not math.isfinite(m.se)):
        return "the run records no standard error"
    return None


def predict(rule: Rule, m: Measurement, n_from: float, n_to: float, *, length: float = 1.0,
            profile: str | None = None):
    """``judge(rule, scaled(m, n_from, n_to, length))``: its window, ``powered`` and ``kind`` are the prediction."""
    if why := _unscalable(rule, m):
        raise ValueError(f"claim {m.id}: cannot predict its window: {why}")
    return judge(rule, scaled(m, n_from, n_to, length), profile=profile)


def needed(rule: Rule, m: Measurement, n_from: float, length: float = 1.0) -> float | None:
    """The smallest replicate count whose predicted window excludes every alternative (at length ratio ``length``).

    ``None`` when no count does: a window that does not shrink with the SE, an alternative inside it however
    small the SE (the allowance, an open side), or more than :data:`N_CAP`.  For ``p ± Z·se`` and an
    alternative at distance ``D``, it is the first integer above ``n_from·(Z·se/D)²``.
    """
    if rule.window not in SHRINKING or _unscalable(rule, m) or not rule.alternatives:
        return None

    def powered(n: float) -> bool:
        return bool(judge(rule, scaled(m, n_from, n, length)).powered)

    hi = max(2, math.ceil(n_from))
    while not powered(hi):
        hi *= 2
        if hi > N_CAP:
            return None
    return float(bisect.bisect_left(range(hi + 1), True, lo=1, key=powered))  # power grows with n for these windows


def measurement_of(claim) -> Measurement:
    """The measurement behind a judged claim (:class:`covbook.claims.Claim`), enough to rebuild its window.

    The allowance is read back from the window: ``tolerance − k·se`` of a ``two_sided`` window, the
    distance of a one-sided end beyond ``p ∓ k·se``.
    """
    extra = dict(claim.extra)
    se, dof = extra.pop("se", None), extra.pop("dof", None)
    p = claim.expected if claim.expected is not None else extra.get("prediction")
    p = float(p) if isinstance(p, (int, float)) and not isinstance(p, bool) else None
    allowance = 0.0
    if se is not None and p is not None:
        k = quantile(dof)
        if claim.window == "two_sided" and claim.tolerance is not None:
            allowance = claim.tolerance - k * se
        elif claim.window == "at_least" and claim.lower is not None:
            allowance = p - k * se - claim.lower
        elif claim.window == "at_most" and claim.upper is not None:
            allowance = claim.upper - p - k * se
    allowance = max(0.0, allowance) if abs(allowance) > 1e-12 * (1.0 + abs(p or 0.0)) else 0.0
    lower, upper = (claim.lower, claim.upper) if claim.window == "run_interval" else (None, None)
    return Measurement(claim.id, claim.notebook, claim.measured, prediction=p, se=se, dof=dof,
                       allowance=allowance, lower=lower, upper=upper, reason=claim.reason, extra=extra)


@dataclass(frozen=True)
class Forecast:
    """An evidence claim's power at ``profile``, predicted from its run at another (:func:`forecast`)."""

    profile: str
    kind: str | None  # the predicted kind, "evidence" or "compatible"; None: not predicted (``note`` says why)
    note: str | None = None  # why it is not predicted, or what the prediction leaves out
    scale: Scale | None = None  # what counts the replicates; None where the window is the same at every size
    n: float | None = None  # the replicates at ``profile``
    n_run: float | None = None  # the replicates of the measured run
    length: float | None = None  # ``scale.length`` at ``profile``
    lower: float | None = None  # the predicted window
    upper: float | None = None
    n_needed: float | None = None  # the smallest count with power (:func:`needed`), at ``length``
    band: tuple[float, float] | None = None  # the measured value ± k·(its SE scaled to ``profile``)

    @property
    def verdict(self) -> str | None:
        """``pass`` when ``band`` lies inside the predicted window (an end ``None`` is open), ``fail`` when it lies
        wholly outside, else ``undecided``; ``None`` without a band.

        >>> [Forecast("full", "evidence", lower=-0.67, upper=-0.33, band=b).verdict
        ...  for b in ((-0.6, -0.4), (-0.35, -0.25), (-0.3, -0.2))]
        ['pass', 'undecided', 'fail']
        """
        if self.band is None:
            return None
        (lo, hi), lower, upper = self.band, self.lower, self.upper
        if (lower is None or lo >= lower) and (upper is None or hi <= upper):
            return "pass"
        return "fail" if (upper is not None and lo > upper) or (lower is not None and hi < lower) else "undecided"


def forecast(rule: Rule, m: Measurement, scale: str | Scale, run_params: dict,
             profiles: dict[str, dict]) -> list[Forecast]:
    """The claim's forecast at each profile of ``profiles`` (name -> parameters) from a run with ``run_params``;
    ``scale`` is the claim's :class:`Scale` (or the expression that counts its replicates)."""
    if rule.window in ("fixed", "tolerance") and not m.reason:  # the same window at every size
        return [Forecast(name, judge(rule, m).kind, SAME_WINDOW) for name in profiles]
    scale = Scale(scale) if isinstance(scale, str) else scale
    why = scale.not_predicted or _unscalable(rule, m) or (m.reason and f"the run could not evaluate it ({m.reason})")
    if why:
        return [Forecast(name, None, why) for name in profiles]
    count = partial(replicate_count, where=f"{m.notebook}.replicates ({m.id})")
    n_run = count(scale.n, run_params)
    len_run = count(scale.length, run_params) if scale.length else 1.0
    out = []
    for name, params in profiles.items():
        n = count(scale.n, params)
        length = count(scale.length, params) if scale.length else None
        ratio = 1.0 if length is None else length / len_run
        c = predict(rule, m, n_run, n, length=ratio, profile=name)
        half = None if c.extra.get("se") is None else quantile(c.extra.get("dof")) * c.extra["se"]
        band = None if half is None else (m.value - half, m.value + half)
        out.append(Forecast(name, c.kind, scale.also, scale, n, n_run, length, c.lower, c.upper,
                            needed(rule, m, n_run, ratio), band))
    return out


def fmt_count(n: float | None) -> str:
    """A replicate count as text: ``1,600``; ``—`` for none."""
    return "—" if n is None else f"{n:,.0f}" if float(n).is_integer() or n >= 10 else f"{n:.3g}"


def profile_parameters(root: str | Path, notebook: str, table: dict | None = None) -> dict[str, dict]:
    """The parameters notebook ``notebook`` runs with at each profile: its parameters cell and ``table`` (the
    parsed ``notebooks/profiles.yml``, read when not given)."""
    defaults = notebook_parameters(Path(root) / "notebooks" / f"{notebook}.md")
    table = load_profiles(Path(root) / "notebooks" / "profiles.yml") if table is None else table
    return {p: {**defaults, **resolve_parameters(notebook, defaults, table, p, "cpu", 0)} for p in PROFILES}


def claim_forecasts(root: str | Path, claims: list, runs: dict[str, dict],
                    keys: set[tuple[str, str]] | None = None) -> dict[tuple[str, str], list[Forecast]]:
    """Forecasts at each profile larger than its run's of every claim of an ``evidence`` rule (or of ``keys``);
    ``runs`` are the run records by notebook (their ``parameters`` are the measured run's)."""
    root, out = Path(root), {}
    path = root / "notebooks" / "profiles.yml"
    table = load_profiles(path)  # read once: parsing it and the parameters cells is most of the time
    replicates = {nb: parse_replicates(e["replicates"], nb, str(path)) for nb, e in table.items() if "replicates" in e}
    params = cache(partial(profile_parameters, root, table=table))
    rules_of = cache(lambda nb: load_rules(rules_path(root, nb)) if rules_path(root, nb).is_file() else {})
    for c in claims:
        if (keys is not None and (c.notebook, c.id) not in keys) or (c.rule_kind or c.kind) != "evidence":
            continue
        injected = dict((runs.get(c.notebook) or {}).get("parameters") or {})
        built, rules = c.profile or injected.get("profile"), rules_of(c.notebook)
        if built not in PROFILES or c.id not in rules:
            continue  # a run of no known profile has no parameters to scale from
        entry = replicates.get(c.notebook, {})
        if unknown := sorted(set(entry) - {"default"} - set(rules)):
            raise ValueError(f"notebooks/profiles.yml: {c.notebook}.replicates names claim(s) {', '.join(unknown)}, "
                             f"which {c.notebook}.yml does not have")
        scale = entry.get(c.id) or entry.get("default") or Scale(
            not_predicted=f"profiles.yml declares no replicates for {c.notebook}'s claim {c.id!r}")
        run_params = {**params(c.notebook)[built],
                      **{k: v for k, v in injected.items() if k not in ("profile", "device", "seed")}}
        targets = {name: params(c.notebook)[name] for name in PROFILES[PROFILES.index(built) + 1:]}
        out[(c.notebook, c.id)] = forecast(rules[c.id], measurement_of(c), scale, run_params, targets)
    return out


def decision_text(forecasts: list[Forecast], window: str | None = None) -> str:
    """What would decide a claim whose rule has window ``window`` (``templates/decision.md.j2``): the first profile
    predicted to give it power, else the largest; then the measured value's predicted verdict at each profile."""
    if not forecasts:
        return ""
    chosen = next((f for f in forecasts if f.kind == "evidence"), forecasts[-1])
    return " ".join(render("decision.md.j2", f=chosen, count=fmt_count, shrinks=window in SHRINKING,
                           verdicts=[f for f in forecasts if f.verdict]).split()).replace(" ;", ";").replace(" ,", ",")
