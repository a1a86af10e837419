"""A fake last run (run records, measurements, rules files) for tests of check, report, sweep and the {claim} role."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import yaml

from covbook.rules import Z


def claim(cid: str, notebook: str, *, passed: bool = True, kind: str = "evidence", basis: str | None = "SE",
          measured: float | None = None, reason: str | None = None, theorem: str | None = None,
          alternatives: list[dict] | None = None, prediction: float = 1.0, se: float = 0.5 / Z,
          window: str = "two_sided") -> dict:
    """A measurement with its rule under ``"_rule"``: window prediction ± Z·se = [0.5, 1.5] by default.

    ``passed=False`` without a ``measured`` value measures 5.0 (outside the window).
    """
    if measured is None:
        measured = 1.0 if passed else 5.0
    if alternatives is None:
        alternatives = [{"name": "no effect", "value": 0.0}] if kind in ("evidence", "compatible") else []
    rule = {"kind": kind, "statement": f"statement of {cid}", "window": window}
    if theorem:
        rule["theorem"] = theorem
    if basis:
        rule["basis"] = basis
    if alternatives:
        rule["alternatives"] = alternatives
    return {"id": cid, "notebook": notebook, "value": measured, "prediction": prediction, "se": se, "dof": None,
            "allowance": 0.0, "lower": None, "upper": None, "reason": reason, "extra": {}, "_rule": rule}


def measurements(claims: list[dict]) -> list[dict]:
    return [{k: v for k, v in c.items() if k != "_rule"} for c in claims]


def fake_run(generated: Path, name: str, claims: list[dict], status: str = "ok", seed: int = 0,
             profile: str = "smoke") -> None:
    """Write ``generated/runs/NAME.json`` and ``generated/claims/NAME.json`` (the measurements) as the runner would."""
    (generated / "runs").mkdir(parents=True, exist_ok=True)
    (generated / "claims").mkdir(parents=True, exist_ok=True)
    (generated / "claims" / f"{name}.json").write_text(json.dumps(measurements(claims)))
    digest = hashlib.sha256((generated / "claims" / f"{name}.json").read_bytes()).hexdigest()
    meta = {"notebook": name, "status": status, "seconds": 1.0, "parameters": {"profile": profile, "seed": seed,
                                                                               "device": "cpu"},
            "outputs": {"claims": digest}}  # the runner's record names the files committed with it
    (generated / "runs" / f"{name}.json").write_text(json.dumps(meta))


def write_rules(root: Path, name: str, claims: list[dict]) -> Path:
    """``notebooks/rules/NAME.yml`` declaring the rule of each claim."""
    d = root / "notebooks" / "rules"
    d.mkdir(parents=True, exist_ok=True)
    f = d / f"{name}.yml"
    f.write_text(yaml.safe_dump({c["id"]: c["_rule"] for c in claims}, sort_keys=False, allow_unicode=True))
    return f


def fake_project(root: Path, notebooks: dict[str, list[dict]], rules: bool = True, profile: str = "smoke") -> Path:
    """Notebook sources (empty chapters), the rules of their claims and a fake run of each."""
    nb = root / "notebooks"
    nb.mkdir(parents=True, exist_ok=True)
    (root / "book").mkdir(exist_ok=True)
    (root / "_config.yml").write_text("title: test\n")
    (nb / "profiles.yml").write_text("{}\n")
    for name, cl in notebooks.items():
        (nb / f"{name}.md").write_text(f"# {name}\n\n```{{prf:theorem}} T\n:label: thm-{name}\n\nx\n```\n")
        fake_run(root / "book" / "generated", name, cl, profile=profile)
        if rules:
            write_rules(root, name, cl)
    return root
