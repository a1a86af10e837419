"""Power at another profile: each evidence claim's window predicted from the run's standard errors.

A claim's window is formed from the prediction and the run's standard error (:func:`covbook.rules.window`),
and an ``evidence`` rule's claim is ``evidence`` at a profile only where that window excludes every
alternative the rule names (:func:`covbook.rules.judged_kind`).  An SE estimated over ``n`` independent
replicates (pairs of streams, tasks, models, prompts, ...) scales as

.. math::

    \\mathrm{SE}_Q = \\mathrm{SE}_P \\sqrt{n_P / n_Q},

so the window of profile ``Q`` is the rule's window rebuilt about the same prediction with ``SE_Q`` (and,
for a Student-t quantile, ``dof_Q + 1 = (dof_P + 1)·n_Q/n_P``), and its predicted kind is
:func:`~covbook.rules.judged_kind` of that window: the measured value never enters.  The smallest ``n``
whose window excludes every alternative is the scale that decides the claim (:func:`needed`).

What counts the replicates is declared per notebook, in one place: the ``replicates:`` key of the
notebook's entry in ``notebooks/profiles.yml`` (:func:`parse_replicates`), an expression of the
notebook's parameters for the notebook (``default``) and for any claim whose replicates differ; only
ratios matter, so ``n_streams`` and ``n_streams / 2`` (pairs) predict alike.  A claim whose SE depends on
more than its replicates (a slope's SE also shrinks with the range of ``log t`` it is fitted over) is
predicted for the replicates alone, and the page says so.  A quantity read at the end of a stream of
length ``t`` (a limit, whose variance is ``C/t`` by the rate theorem) has ``SE ∝ (n·t)^(−1/2)``: it is
declared ``{n: expression, length: expression}`` (:class:`Scale`; the degrees of freedom still count ``n``
alone).  A claim whose window the run builds differently at another profile is declared
``{not_predicted: reason}``.

The model is checked against a paper-scale run: ``studies/power_scaling_h200.py`` predicts the full windows of
chapters 01–05 from their quick run and compares them with the windows of a full run on one GPU
(``tests/data/power_quick_full_h200.json``, tested in ``tests/test_power.py``).

Windows: ``two_sided``, ``at_least``, ``at_most``, ``above``, ``below`` and ``chi2_mean`` are rebuilt from
the scaled SE exactly as :func:`covbook.rules.window` builds them; a ``run_interval`` is rebuilt by scaling
its ends' distances from the prediction like the SE (the large-ν form of the χ²_ν/ν intervals the runs
compute, ν ∝ n); ``fixed`` and ``tolerance`` windows do not depend on the replicates.

This module is part of the pipeline: it imports no science (no numpy, no torch).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

from covbook.book.config import expression_value, load_profiles, notebook_parameters, resolve_parameters
from covbook.rules import Measurement, Rule, judge, quantile

__all__ = ["NotPredicted", "Scale", "Replicates", "Forecast", "parse_replicates", "scaled_se", "scaled_dof", "scaled",
           "predict", "needed", "measurement_of", "replicate_count", "forecast", "SHRINKING", "N_CAP", "SAME_WINDOW",
           "fmt_count", "profile_parameters", "load_replicates", "larger_profiles", "claim_forecasts", "decision_text",
           "plan_lines"]

#: Windows whose width shrinks as the SE does, so that power grows with the replicates.
SHRINKING = ("two_sided", "at_least", "at_most", "chi2_mean", "run_interval")
#: The note of a forecast whose window does not depend on the replicates (``fixed``, ``tolerance``).
SAME_WINDOW = "its window is the same at every size"
#: No replicate count beyond this is searched: a claim that needs more is said to need "more than" it.
N_CAP = 1e12


@dataclass(frozen=True)
class NotPredicted:
    """A claim whose window the model does not predict, and why."""

    reason: str


@dataclass(frozen=True)
class Scale:
    """``SE ∝ (n·ℓ)^(−1/2)``: ``n`` counts the replicates (and the degrees of freedom), ``length`` a length
    the SE also falls with (the context length of a limit read at a stream's end)."""

    n: str
    length: str | None = None
    also: str | None = None  # what else narrows the SE that the model leaves out (a slope's range of log t)


@dataclass(frozen=True)
class Replicates:
    """What counts the independent replicates of one notebook's claims (its ``replicates:`` entry).

    Attributes
    ----------
    notebook : str
        The notebook's name.
    default : str or None
        The expression of the notebook's parameters for every claim not named in ``claims``.
    claims : dict
        Claim id -> expression (``str``), :class:`Scale` or :class:`NotPredicted`.
    """

    notebook: str
    default: str | None = None
    claims: dict = dataclasses.field(default_factory=dict)

    def of(self, claim_id: str) -> Scale | NotPredicted:
        """How the SE of ``claim_id`` scales (or why it is not predicted).

        >>> r = Replicates("08_x", "n_streams", {"tail": "n_tail", "odd": NotPredicted("its window is the run's")})
        >>> r.of("slope").n, r.of("tail").n, r.of("odd").reason
        ('n_streams', 'n_tail', "its window is the run's")
        """
        found = self.claims.get(claim_id, self.default)
        if found is None:
            return NotPredicted(f"profiles.yml declares no replicates for {self.notebook}'s claim {claim_id!r}")
        return Scale(found) if isinstance(found, str) else found


def parse_replicates(raw: object, notebook: str, where: str = "notebooks/profiles.yml") -> Replicates:
    """A notebook's ``replicates:`` entry: ``{default: spec, <claim id>: spec | {not_predicted: reason}}``.

    A spec is an expression of the notebook's parameters that counts the replicates, or
    ``{n: expression, length: expression}`` for an SE that also falls with a length (:class:`Scale`).

    Raises
    ------
    ValueError
        Naming ``<notebook>.replicates`` and the key, for anything else.

    Examples
    --------
    >>> parse_replicates({"default": "n_streams", "c": {"not_predicted": "a fixed window"}}, "01_a").of("c")
    NotPredicted(reason='a fixed window')
    >>> parse_replicates({"default": {"n": "n_streams", "length": "t_max"}}, "01_a").of("c")
    Scale(n='n_streams', length='t_max', also=None)
    >>> try:
    ...     parse_replicates({"c": 3}, "01_a")
    ... except ValueError as err:
    ...     print(str(err)[:60])
    notebooks/profiles.yml: 01_a.replicates.c must be an express
    """
    at = f"{where}: {notebook}.replicates"
    if not isinstance(raw, dict) or not raw:
        raise ValueError(f"{at} must be a mapping {{default: expression, <claim id>: expression | "
                         f"{{not_predicted: reason}}}}, got {raw!r}")
    default, claims = None, {}
    for key, value in raw.items():
        if not isinstance(key, str) or not key.replace("_", "").isalnum():
            raise ValueError(f"{at}: key {key!r} must be `default` or a claim id")
        if isinstance(value, str) and value.strip():
            parsed: str | Scale | NotPredicted = value.strip()
        elif isinstance(value, dict) and "n" in value and set(value) <= {"n", "length", "also"} \
                and all(isinstance(v, str) and v.strip() for v in value.values()):
            parsed = Scale(value["n"].strip(), value["length"].strip() if "length" in value else None,
                           " ".join(value["also"].split()) if "also" in value else None)
        elif isinstance(value, dict) and set(value) == {"not_predicted"} and isinstance(value["not_predicted"], str) \
                and value["not_predicted"].strip():
            parsed = NotPredicted(" ".join(value["not_predicted"].split()))
        else:
            raise ValueError(f"{at}.{key} must be an expression of the notebook's parameters (text), "
                             f"{{n: expression, length: expression, also: text}} or {{not_predicted: reason}}, got "
                             f"{value!r}")
        if key == "default":
            if isinstance(parsed, NotPredicted):
                raise ValueError(f"{at}.default must be an expression of the notebook's parameters")
            default = parsed
        else:
            claims[key] = parsed
    return Replicates(notebook, default, claims)


def replicate_count(expr: str, params: dict, where: str = "replicates") -> float:
    """The value of a replicates expression (names, numbers, ``+ - * / **``) on a notebook's parameters.

    >>> replicate_count("n_models * n_prompts", {"n_models": 8, "n_prompts": 4})
    32.0
    >>> replicate_count("n_pairs", {"n_streams": 4})
    Traceback (most recent call last):
    ...
    ValueError: replicates: expression 'n_pairs' names 'n_pairs', which is not a parameter of the notebook
    """
    n = expression_value(expr, params, where=where, calls=False, error=ValueError)
    if not (math.isfinite(n) and n > 0):
        raise ValueError(f"{where}: expression {expr!r} gives {n:g} replicates; expected a positive count")
    return float(n)


def scaled_se(se: float, n_from: float, n_to: float) -> float:
    """``se · sqrt(n_from / n_to)``: the SE of a mean over ``n_to`` replicates given its value over ``n_from``.

    >>> scaled_se(0.2, 16, 64)
    0.1
    """
    if not (n_from > 0 and n_to > 0):
        raise ValueError(f"n_from and n_to must be positive replicate counts, got {n_from}, {n_to}")
    return se * math.sqrt(n_from / n_to)


def scaled_dof(dof: int | None, n_from: float, n_to: float) -> int | None:
    """Degrees of freedom over ``n_to`` replicates: ``round((dof + 1)·n_to/n_from) − 1``, at least 1.

    >>> scaled_dof(15, 16, 128), scaled_dof(None, 16, 128), scaled_dof(3, 4, 1)
    (127, None, 1)
    """
    if dof is None:
        return None
    return max(1, round((dof + 1) * n_to / n_from) - 1)


def scaled(m: Measurement, n_from: float, n_to: float, length: float = 1.0) -> Measurement:
    """The measurement ``m`` (over ``n_from`` replicates) as a run over ``n_to`` would record its uncertainty.

    The value, prediction, allowance and extras are kept; the SE and the degrees of freedom scale
    (:func:`scaled_se`, :func:`scaled_dof`), and so do a run's own window ends about the prediction.
    ``length`` is the ratio ``ℓ_to/ℓ_from`` of a length the SE also falls with, ``SE ∝ (n·ℓ)^(−1/2)`` (the
    context length of a limit read at a stream's end, whose variance is C/t); it leaves the degrees of
    freedom, which count replicates, alone.

    >>> m = Measurement("s", "08_x", -0.9, prediction=-1.0, se=0.2, lower=-1.6, upper=-0.7)
    >>> s = scaled(m, 16, 64)
    >>> s.se, s.lower, s.upper
    (0.1, -1.3, -0.85)
    """
    if not length > 0:
        raise ValueError(f"length must be a positive ratio of lengths, got {length}")
    ratio = math.sqrt(n_from / (n_to * length))
    se = None if m.se is None else scaled_se(m.se, n_from, n_to * length)
    p = m.prediction
    lower = m.lower if m.lower is None or p is None else p + (m.lower - p) * ratio
    upper = m.upper if m.upper is None or p is None else p + (m.upper - p) * ratio
    return dataclasses.replace(m, se=se, dof=scaled_dof(m.dof, n_from, n_to), lower=lower, upper=upper)


def _scalable(rule: Rule, m: Measurement) -> str | None:
    """Why the window of ``rule`` on ``m`` cannot be rebuilt at another size (``None`` when it can)."""
    if rule.window in ("fixed", "tolerance"):
        return None
    if rule.window == "run_interval" and m.prediction is None:
        return "the run computes its window's ends and records no prediction to rescale them about"
    if rule.window != "run_interval" and (m.se is None or not math.isfinite(m.se)):
        return "the run records no standard error"
    return None


def predict(rule: Rule, m: Measurement, n_from: float, n_to: float, *, length: float = 1.0,
            profile: str | None = None):
    """The claim a run over ``n_to`` replicates would be judged: ``judge(rule, scaled(m, n_from, n_to, length))``.

    Its window, ``powered`` and ``kind`` are the prediction; its measured value and verdict are the
    measured run's and mean nothing at ``n_to``.

    Examples
    --------
    >>> from covbook.rules import Alternative
    >>> r = Rule("s", "evidence", "a slope is −1", "two_sided", alternatives=(Alternative("t^(-1/2)", -0.5),))
    >>> m = Measurement("s", "08_x", -0.98, prediction=-1.0, se=0.2)     # −1 ± 0.70: contains −0.5
    >>> predict(rule=r, m=m, n_from=16, n_to=16).kind, predict(rule=r, m=m, n_from=16, n_to=64).kind
    ('compatible', 'evidence')
    """
    why = _scalable(rule, m)
    if why:
        raise ValueError(f"claim {m.id}: cannot predict its window: {why}")
    return judge(rule, scaled(m, n_from, n_to, length), profile=profile)


def needed(rule: Rule, m: Measurement, n_from: float, length: float = 1.0) -> float | None:
    """The smallest replicate count whose predicted window excludes every alternative (at length ratio ``length``).

    ``None`` when no count does: the window does not shrink with the SE (``fixed``, ``tolerance``,
    ``above``, ``below``: its power is the same at every size), or an alternative stays inside it
    however small the SE (within the allowance, or on the open side of a one-sided window), or more
    than :data:`N_CAP` replicates would be needed.

    For a ``two_sided`` window ``p ± Z·se`` (normal quantile, no allowance) and one alternative at
    distance ``D`` from ``p``, the window excludes it when ``Z·se·sqrt(n_from/n) < D``, so the answer
    is the first integer above ``n_from·(Z·se/D)²``:

    >>> from covbook.rules import Alternative, Z
    >>> r = Rule("s", "evidence", "x", "two_sided", alternatives=(Alternative("no decay", 0.0),))
    >>> m = Measurement("s", "08_x", -1.0, prediction=-1.0, se=0.5)
    >>> needed(r, m, 16) == math.floor(16 * (Z * 0.5 / 1.0) ** 2) + 1
    True
    """
    if rule.window not in SHRINKING or _scalable(rule, m) or not rule.alternatives:
        return None

    def powered(n: float) -> bool:
        return bool(judge(rule, scaled(m, n_from, n, length)).powered)

    if powered(1.0):
        return 1.0
    hi = max(2.0, float(math.ceil(n_from)))
    while not powered(hi):
        hi *= 2.0
        if hi > N_CAP:
            return None
    lo = 1.0  # not powered at lo, powered at hi: bisect on integers (power grows with n for these windows)
    while hi - lo > 1.0:
        mid = math.floor((lo + hi) / 2.0)
        lo, hi = (lo, mid) if powered(mid) else (mid, hi)
    return hi


def measurement_of(claim) -> Measurement:
    """The measurement behind a judged claim (:class:`covbook.claims.Claim`), enough to rebuild its window.

    The allowance is read back from the window: ``tolerance − k·se`` of a ``two_sided`` window, the
    distance of a one-sided end beyond ``p ∓ k·se``.

    >>> from covbook.rules import Alternative
    >>> r = Rule("s", "evidence", "x", "two_sided", alternatives=(Alternative("no decay", 0.0),))
    >>> c = judge(r, Measurement("s", "08_x", -0.9, prediction=-1.0, se=0.1, dof=9, allowance=0.05))
    >>> m = measurement_of(c)
    >>> (m.prediction, m.se, m.dof, round(m.allowance, 12))
    (-1.0, 0.1, 9, 0.05)
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
    """An evidence claim's power at one profile, predicted from a run at another.

    Attributes
    ----------
    claim, notebook, profile : str
        The claim, its notebook and the profile predicted.
    replicates : str or None
        The expression that counts the replicates (``None`` when not predicted).
    n, n_run : float or None
        The replicates at ``profile`` and in the measured run.
    kind : str or None
        The predicted judged kind (``evidence`` or ``compatible``); ``None`` when not predicted.
    lower, upper, se : float or None
        The predicted window and SE.
    n_needed : float or None
        The smallest count with power (:func:`needed`); ``None`` when none does or it is not predicted.
    note : str or None
        Why the window is not predicted, or what the prediction leaves out.
    length_name : str or None
        The length the SE also falls with (:class:`Scale`), and ``length`` its value at ``profile``;
        ``n_needed`` is counted at that length.
    """

    claim: str
    notebook: str
    profile: str
    replicates: str | None
    n: float | None
    n_run: float | None
    kind: str | None
    lower: float | None = None
    upper: float | None = None
    se: float | None = None
    n_needed: float | None = None
    note: str | None = None
    length_name: str | None = None
    length: float | None = None


def forecast(rule: Rule, m: Measurement, replicates: str | Scale | NotPredicted, run_params: dict,
             profiles: dict[str, dict]) -> list[Forecast]:
    """The claim's predicted power at each profile of ``profiles`` (name -> that profile's parameters).

    ``run_params`` are the parameters of the measured run.  A claim the model does not predict gives one
    forecast per profile with ``kind`` ``None`` and the reason in ``note``.
    """
    where = f"{m.notebook}.replicates ({m.id})"
    if rule.window in ("fixed", "tolerance") and not m.reason:  # the same window at every size
        kind = judge(rule, m).kind
        return [Forecast(m.id, m.notebook, name, None, None, None, kind, note=SAME_WINDOW) for name in profiles]
    why = replicates.reason if isinstance(replicates, NotPredicted) else _scalable(rule, m)
    if why is None and m.reason:
        why = f"the run could not evaluate it ({m.reason})"
    if why:
        return [Forecast(m.id, m.notebook, name, None, None, None, None, note=why) for name in profiles]
    scale = Scale(replicates) if isinstance(replicates, str) else replicates
    n_run = replicate_count(scale.n, run_params, where)
    len_run = replicate_count(scale.length, run_params, where) if scale.length else 1.0
    out = []
    for name, params in profiles.items():
        n = replicate_count(scale.n, params, where)
        length = replicate_count(scale.length, params, where) if scale.length else None
        ratio = 1.0 if length is None else length / len_run
        c = predict(rule, m, n_run, n, length=ratio, profile=name)
        out.append(Forecast(m.id, m.notebook, name, scale.n, n, n_run, c.kind, c.lower, c.upper, c.extra.get("se"),
                            needed(rule, m, n_run, ratio), note=scale.also, length_name=scale.length, length=length))
    return out


def fmt_count(n: float | None) -> str:
    """A replicate count as text: ``1,600``; ``—`` for none."""
    return "—" if n is None else f"{n:,.0f}" if float(n).is_integer() or n >= 10 else f"{n:.3g}"


def profile_parameters(root: str | Path, notebook: str, profile: str) -> dict:
    """The parameters notebook ``notebook`` runs with at ``profile`` (its parameters cell and profiles.yml)."""
    root = Path(root)
    defaults = notebook_parameters(root / "notebooks" / f"{notebook}.md")
    table = load_profiles(root / "notebooks" / "profiles.yml")
    return {**defaults, **resolve_parameters(notebook, defaults, table, profile, "cpu", 0)}


def load_replicates(root: str | Path) -> dict[str, Replicates]:
    """Every notebook's ``replicates:`` entry in ``<root>/notebooks/profiles.yml``, parsed (notebook -> entry)."""
    import yaml

    path = Path(root) / "notebooks" / "profiles.yml"
    with open(path, encoding="utf-8") as fh:
        raw = yaml.safe_load(fh) or {}
    return {nb: parse_replicates(entry["replicates"], nb, str(path)) for nb, entry in raw.items()
            if nb != "profiles" and isinstance(entry, dict) and "replicates" in entry}


def larger_profiles(profile: str | None) -> list[str]:
    """The profiles after ``profile`` in the profiles table (smallest first); every one for an unknown profile."""
    from covbook.book.config import PROFILES

    return list(PROFILES[PROFILES.index(profile) + 1:]) if profile in PROFILES else list(PROFILES)


def claim_forecasts(root: str | Path, claims: list, runs: dict[str, dict],
                    keys: set[tuple[str, str]] | None = None) -> dict[tuple[str, str], list[Forecast]]:
    """Forecasts at each profile larger than its run's of every claim of an ``evidence`` rule (or of ``keys``).

    Parameters
    ----------
    root
        The project root (its ``notebooks/``: parameters cells, profiles.yml, rules).
    claims
        Judged claims (:class:`covbook.claims.Claim`) of the runs.
    runs
        Run records by notebook: their ``parameters`` (and profile) are the measured run's.
    keys
        ``(notebook, claim id)`` to forecast; default every evidence claim.
    """
    from covbook.book.config import PROFILES
    from covbook.rules import load_rules, rules_path

    root = Path(root)
    replicates = load_replicates(root)
    out: dict[tuple[str, str], list[Forecast]] = {}
    params: dict[tuple[str, str], dict] = {}
    for c in claims:
        key = (c.notebook, c.id)
        if (keys is not None and key not in keys) or (c.rule_kind or c.kind) != "evidence":
            continue
        run = runs.get(c.notebook) or {}
        injected = dict(run.get("parameters") or {})
        built = c.profile or injected.get("profile")
        rules_file = rules_path(root, c.notebook)
        if built not in PROFILES or not rules_file.is_file() or c.id not in load_rules(rules_file):
            continue  # a run of no known profile has no parameters to scale from
        targets = larger_profiles(built)
        for name in [*targets, built]:
            if (c.notebook, name) not in params:
                params[(c.notebook, name)] = profile_parameters(root, c.notebook, name)
        defaults = params[(c.notebook, built)]
        run_params = {**defaults, **{k: v for k, v in injected.items() if k not in ("profile", "device", "seed")}}
        entry = replicates.get(c.notebook) or Replicates(c.notebook)
        unknown = sorted(set(entry.claims) - set(load_rules(rules_file)))
        if unknown:
            raise ValueError(f"notebooks/profiles.yml: {c.notebook}.replicates names claim(s) {', '.join(unknown)}, "
                             f"which {rules_file.name} does not have")
        out[key] = forecast(load_rules(rules_file)[c.id], measurement_of(c), entry.of(c.id), run_params,
                            {name: params[(c.notebook, name)] for name in targets})
    return out


_DECISION = """\
{%- if f.kind is none -%}
not predicted: {{ f.note }}
{%- elif f.replicates is none -%}
{{ f.kind }} at every profile: {{ f.note }}
{%- elif f.kind == "evidence" -%}
evidence predicted at `{{ f.profile }}` \
(`{{ f.replicates }}` {{ count(f.n) }}{% if f.n_needed %} ≥ {{ count(f.n_needed) }} needed{{ at }}{% endif %})
{%- elif f.n_needed -%}
not decided by `{{ f.profile }}` (`{{ f.replicates }}` {{ count(f.n) }}): \
needs `{{ f.replicates }}` ≥ {{ count(f.n_needed) }}{{ at }}
{%- elif shrinks -%}
not decided by any size: an alternative stays inside its window however small the SE \
(within its allowance, or on its open side)
{%- else -%}
not decided by size: its window's power does not grow with the replicates
{%- endif -%}
"""


def decision_text(forecasts: list[Forecast], window: str | None = None) -> str:
    """What scale would decide a claim: the first profile predicted to give it power, else the largest.

    Examples
    --------
    >>> f = Forecast("s", "08_x", "full", "n_streams", 256.0, 32.0, "evidence", n_needed=90.0)
    >>> decision_text([f])
    'evidence predicted at `full` (`n_streams` 256 ≥ 90 needed)'
    >>> decision_text([dataclasses.replace(f, kind="compatible", n_needed=2000.0)])
    'not decided by `full` (`n_streams` 256): needs `n_streams` ≥ 2,000'
    """
    import jinja2

    if not forecasts:
        return ""
    chosen = next((f for f in forecasts if f.kind == "evidence"), forecasts[-1])
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False)  # noqa: S701 (Markdown)
    at = f" at `{chosen.length_name}` {fmt_count(chosen.length)}" if chosen.length_name else ""
    text = env.from_string(_DECISION).render(f=chosen, count=fmt_count, shrinks=window in SHRINKING, at=at)
    if chosen.kind is not None and chosen.replicates is not None and chosen.note:
        extra = f"not counted: {chosen.note}, which would narrow its window further"
        text = f"{text[:-1]}; {extra})" if text.endswith(")") else f"{text} ({extra})"
    return text


def plan_lines(root: str | Path, names: list[str], profile: str) -> list[str]:
    """The predicted power at ``profile`` of each notebook's evidence claims, from its last run (for ``--plan``).

    One line per notebook in ``names`` whose last run (``book/generated``) was at a smaller profile: how many
    evidence claims are predicted ``evidence`` there, and those that are not, with the count that would give
    them power.  Nothing for a notebook without a run.
    """
    from covbook.book.records import read_run
    from covbook.claims import load_claims

    root = Path(root)
    gen = root / "book" / "generated"
    out = []
    for name in names:
        rec, path = read_run(gen / "runs" / f"{name}.json"), gen / "claims" / f"{name}.json"
        if rec is None or not rec.ok or not path.is_file() or profile not in larger_profiles(rec.profile):
            continue
        claims = load_claims(path, rules_root=root, profile=rec.profile)
        found = claim_forecasts(root, claims, {name: dict(rec)})
        at = [f for fs in found.values() for f in fs if f.profile == profile]
        strong = [f for f in at if f.kind == "evidence"]
        weak = [f for f in at if f.kind == "compatible"]
        unknown = [f for f in at if f.kind is None]
        text = f"- {name}: {len(strong)} of {len(at)} evidence claims predicted evidence at {profile} " \
               f"(from its {rec.profile} run)"
        if weak:
            text += "; compatible: " + ", ".join(
                f.claim + (f" (needs {f.replicates} ≥ {fmt_count(f.n_needed)})" if f.n_needed else "") for f in weak)
        if unknown:
            text += f"; {len(unknown)} not predicted"
        out.append(text)
    return out
