"""Claims: every quantitative statement the book makes, recorded and verified.

A claim is a measured number, the value (or interval) that theory predicts, a
tolerance, and one sentence naming the theorem it tests.  Notebooks call
:func:`record` (or one of the tolerance helpers :func:`within_se`,
:func:`at_least_se`, :func:`at_most_se`); the claim is shown as a one-line
verdict, glued for the prose (myst-nb ``glue``) and, when the notebook runs
under the covbook runner, written to the notebook's claims JSON file, which
``covbook check`` reads.

Every claim has a *kind*:

``evidence``
    tests a prediction; it could fail if the theory were wrong.  Its tolerance
    has a recorded ``basis`` and, where it is statistical, uses the book's one
    per-claim level: two-sided ``LEVEL`` = 5e-4, i.e. ``Z`` ≈ 3.48 standard
    errors.
``identity``
    an exact algebraic identity checked to rounding.
``sanity``
    a property any reasonable implementation has.

Tolerances come from theory or from the run's own uncertainty, never from the
wish to see green; a tolerance changed after a failure says so in its basis.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field
from statistics import NormalDist

from covbook._jsonio import write_json_atomic

__all__ = [
    "Claim", "record", "quantile", "within_se", "at_least_se", "at_most_se", "glue", "reset",
    "write_json_atomic", "load_claims", "anchor", "familywise", "fmt", "CLAIMS_FILE_ENV", "KINDS", "LEVEL", "Z",
]

KINDS = ("evidence", "identity", "sanity")
LEVEL = 5e-4
"""The book's one per-claim level: a correct run fails a statistical evidence claim with probability ``LEVEL``."""
Z = NormalDist().inv_cdf(1 - LEVEL / 2)
"""Standard errors per tolerance at ``LEVEL`` (two-sided normal quantile, ≈ 3.48)."""

CLAIMS_FILE_ENV = "COVBOOK_CLAIMS_FILE"
NOTEBOOK_ENV = "COVBOOK_NOTEBOOK"


@dataclass
class Claim:
    """One verified statement.

    The claim passes when ``lower <= measured <= upper``; with ``expected`` and
    ``tolerance`` given, ``lower, upper = expected ∓ tolerance``.
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

    def _ipython_display_(self) -> None:
        """Show nothing: :func:`record` has already shown the verdict line."""

    def verdict_line(self) -> str:
        """One line: verdict, id, statement, measured against expected."""
        mark = "PASS" if self.passed else "FAIL"
        why = f" ({self.reason})" if self.reason else ""
        return (f"[{mark}] {self.id} [{self.kind}]: {self.statement} — measured {fmt(self.measured)}, "
                f"expected {self.expected_text()}{why}")

    def expected_text(self) -> str:
        if self.expected is not None and self.tolerance is not None:
            return f"{fmt(self.expected)} ± {fmt(self.tolerance)}"
        lo = "-∞" if self.lower is None else fmt(self.lower)
        hi = "∞" if self.upper is None else fmt(self.upper)
        return f"in [{lo}, {hi}]"


def fmt(x: float | None) -> str:
    """Four significant digits, scientific notation where needed."""
    if x is None:
        return "—"
    if not math.isfinite(x):
        return str(x)
    if x != 0 and (abs(x) >= 1e5 or abs(x) < 1e-3):
        return f"{x:.3e}"
    return f"{x:.4g}"


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


_CLAIMS: dict[str, Claim] = {}


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


def record(
    id: str,
    statement: str,
    measured: object,
    expected: object | None = None,
    *,
    tolerance: object | None = None,
    interval: tuple[object | None, object | None] | None = None,
    theorem: str | None = None,
    kind: str = "evidence",
    basis: str | None = None,
    reason: str | None = None,
    glue_value: bool = True,
    show: bool = True,
    **extra: object,
) -> Claim:
    """Record a claim, show its verdict, glue its measured value and save it.

    Give either ``expected`` and ``tolerance`` (pass iff |measured − expected| ≤
    tolerance) or ``interval=(lower, upper)`` (either end may be ``None``).  A
    non-finite measured value fails the claim; it never passes silently.

    Parameters
    ----------
    id : str
        Short identifier, unique within the notebook (a valid glue key).
    statement : str
        One sentence naming the theorem the claim tests.
    measured : float
    expected : float, optional
    tolerance : float, optional
        Non-negative; from theory or the run's own uncertainty.
    interval : (float | None, float | None), optional
    theorem : str, optional
        Label of the theorem box the claim tests.
    kind : {"evidence", "identity", "sanity"}
        What a pass means (see the module docstring).
    basis : str, optional
        Where the tolerance comes from.  Every evidence claim needs one:
        ``covbook check`` fails an evidence claim recorded without it.
    reason : str, optional
        Why the claim could not be evaluated; with a NaN ``measured`` the claim
        is recorded as failed with this reason (a claim is never skipped).

    Examples
    --------
    >>> c = record("demo", "two plus two", 4.0, 4.0, tolerance=0.0, kind="identity",
    ...            show=False, glue_value=False)
    >>> c.passed
    True
    """
    if not isinstance(id, str) or not id or not id.replace("_", "").replace("-", "").isalnum():
        raise ValueError(f"claim id must be a non-empty identifier of letters, digits, '_' or '-', got {id!r}")
    if not isinstance(statement, str) or not statement.strip():
        raise ValueError("claim statement must be a non-empty sentence")
    if kind not in KINDS:
        raise ValueError(f"claim kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if basis is not None and not isinstance(basis, str):
        raise ValueError(f"basis must be a string, got {basis!r}")
    if reason is not None and not (isinstance(reason, str) and reason.strip()):
        raise ValueError(f"reason must be a non-empty string, got {reason!r}")
    m = _number(measured, "measured")
    if interval is not None:
        if expected is not None or tolerance is not None:
            raise ValueError("give either expected and tolerance, or interval, not both")
        try:
            lo_raw, hi_raw = interval
        except (TypeError, ValueError) as err:
            raise ValueError("interval must be a pair (lower, upper)") from err
        lo, hi = _number(lo_raw, "interval lower", True), _number(hi_raw, "interval upper", True)
        if lo is None and hi is None:
            raise ValueError("interval needs at least one finite end")
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(f"interval lower {lo} exceeds upper {hi}")
        exp, tol = None, None
    else:
        exp = _number(expected, "expected")
        tol = _number(tolerance, "tolerance")
        if not (math.isfinite(exp) and math.isfinite(tol)) or tol < 0:
            raise ValueError(f"expected must be finite and tolerance finite and >= 0, got {exp}, {tol}")
        lo, hi = exp - tol, exp + tol
    passed = reason is None and math.isfinite(m) and (lo is None or m >= lo) and (hi is None or m <= hi)
    if not math.isfinite(m) and reason is None:
        reason = f"measured value is {m}"
    nb = os.environ.get(NOTEBOOK_ENV, "interactive")
    extra_clean = {k: _number(v, k) if not isinstance(v, str) else v for k, v in extra.items()}
    claim = Claim(id, nb, statement.strip(), m, exp, tol, lo, hi, bool(passed), theorem, extra_clean,
                  kind, basis.strip() if basis else None, reason)
    _CLAIMS[id] = claim
    _save()
    if glue_value:
        glue(id, m)
    if show:
        _show(claim)
    return claim


def _se(se: object) -> float:
    v = _number(se, "se")
    if not math.isfinite(v) or v < 0:
        raise ValueError(f"se must be a finite non-negative standard error, got {se!r}")
    return v


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
    from scipy.stats import t as student_t

    return float(student_t.ppf(1 - LEVEL / 2, dof))


def _basis(basis: str, extra: float, extra_basis: str | None, dof: int | None = None) -> str:
    if not (isinstance(basis, str) and basis.strip()):
        raise ValueError("basis must name the standard error, e.g. 'bootstrap SE over 200 streams'")
    k = f"{quantile(dof):.2f}" + (f" (Student t, {dof} dof)" if dof is not None else "")
    text = f"{k} × {basis.strip()} (level {LEVEL:g})"
    if extra:
        if not (isinstance(extra_basis, str) and extra_basis.strip()):
            raise ValueError("extra tolerance needs extra_basis: say where it comes from")
        text += f" + {fmt(extra)} ({extra_basis.strip()})"
    return text


def _extra(extra: object) -> float:
    v = _number(extra, "extra")
    if not math.isfinite(v) or v < 0:
        raise ValueError(f"extra must be a finite non-negative tolerance, got {extra!r}")
    return v


def within_se(
    id: str,
    statement: str,
    measured: object,
    expected: object,
    se: object,
    *,
    basis: str,
    extra: object = 0.0,
    extra_basis: str | None = None,
    dof: int | None = None,
    **kw: object,
) -> Claim:
    r"""Evidence claim :math:`|\text{measured} - \text{expected}| \le k\,\mathrm{se} + \text{extra}`.

    ``k`` is :func:`quantile` (``Z``, or the Student-t quantile when ``dof`` is
    given). ``basis`` names the standard error (e.g. ``"bootstrap SE over 200
    streams"``); ``extra`` is a non-statistical allowance (a published figure's
    rounding, a proven bias bound) explained by ``extra_basis``.

    Examples
    --------
    >>> within_se("demo_se", "a mean is zero", 0.1, 0.0, 0.05, basis="SE over 10 runs",
    ...           show=False, glue_value=False).passed
    True
    """
    s, e, k = _se(se), _extra(extra), quantile(dof)
    return record(id, statement, measured, expected, tolerance=k * s + e, kind="evidence",
                  basis=_basis(basis, e, extra_basis, dof), se=s, quantile=k, **kw)  # type: ignore[arg-type]


def at_least_se(
    id: str, statement: str, measured: object, bound: object, se: object, *,
    basis: str, extra: object = 0.0, extra_basis: str | None = None, dof: int | None = None, **kw: object,
) -> Claim:
    r"""Evidence claim :math:`\text{measured} \ge \text{bound} - Z\,\mathrm{se} - \text{extra}`."""
    s, e, b, k = _se(se), _extra(extra), _number(bound, "bound"), quantile(dof)
    return record(id, statement, measured, interval=(b - k * s - e, None), kind="evidence",
                  basis=_basis(basis, e, extra_basis, dof), se=s, quantile=k, **kw)  # type: ignore[arg-type]


def at_most_se(
    id: str, statement: str, measured: object, bound: object, se: object, *,
    basis: str, extra: object = 0.0, extra_basis: str | None = None, dof: int | None = None, **kw: object,
) -> Claim:
    r"""Evidence claim :math:`\text{measured} \le \text{bound} + Z\,\mathrm{se} + \text{extra}`."""
    s, e, b, k = _se(se), _extra(extra), _number(bound, "bound"), quantile(dof)
    return record(id, statement, measured, interval=(None, b + k * s + e), kind="evidence",
                  basis=_basis(basis, e, extra_basis, dof), se=s, quantile=k, **kw)  # type: ignore[arg-type]


def reset() -> None:
    """Forget the claims recorded in this session (tests use it between cases)."""
    _CLAIMS.clear()


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
    mark = "✓ PASS" if claim.passed else "✗ FAIL"
    why = f" Not evaluated: {claim.reason}." if claim.reason else ""
    target = f'<span id="{anchor(claim.notebook, claim.id)}"></span>'
    display(Markdown(f"{target}**{mark}** `{claim.id}` ({claim.kind}) — {claim.statement} Measured "
                     f"**{fmt(claim.measured)}**, expected {claim.expected_text()}.{why}"))


def _save() -> None:
    target = os.environ.get(CLAIMS_FILE_ENV)
    if target:
        write_json_atomic(target, [asdict(c) for c in _CLAIMS.values()])


def load_claims(path: str | os.PathLike) -> list[Claim]:
    """Read a claims JSON file written by :func:`record`."""
    with open(path, encoding="utf-8") as fh:
        raw = json.load(fh)
    if not isinstance(raw, list):
        raise ValueError(f"{path}: expected a JSON list of claims")
    out = []
    for c in raw:
        if not isinstance(c, dict):
            raise ValueError(f"{path}: each claim must be a JSON object")
        out.append(Claim(**c))
    return out
