"""A fake last run (run records and claims JSON) for tests of check, report, sweep and the {claim} role."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import yaml


def claim(cid: str, notebook: str, *, passed: bool = True, kind: str = "evidence", basis: str | None = "SE",
          measured: float = 1.0, reason: str | None = None, theorem: str | None = None) -> dict:
    return {"id": cid, "notebook": notebook, "statement": f"statement of {cid}", "measured": measured,
            "expected": 1.0, "tolerance": 0.5, "lower": 0.5, "upper": 1.5, "passed": passed, "theorem": theorem,
            "extra": {}, "kind": kind, "basis": basis, "reason": reason}


def fake_run(generated: Path, name: str, claims: list[dict], status: str = "ok", seed: int = 0) -> None:
    """Write ``generated/runs/NAME.json`` and ``generated/claims/NAME.json`` as the runner would."""
    (generated / "runs").mkdir(parents=True, exist_ok=True)
    (generated / "claims").mkdir(parents=True, exist_ok=True)
    (generated / "claims" / f"{name}.json").write_text(json.dumps(claims))
    digest = hashlib.sha256((generated / "claims" / f"{name}.json").read_bytes()).hexdigest()
    meta = {"notebook": name, "status": status, "seconds": 1.0, "parameters": {"profile": "smoke", "seed": seed,
                                                                               "device": "cpu"},
            "outputs": {"claims": digest}}  # the runner's record names the files committed with it
    (generated / "runs" / f"{name}.json").write_text(json.dumps(meta))


def fake_project(root: Path, notebooks: dict[str, list[dict]], manifest: bool = True) -> Path:
    """Notebook sources (empty chapters), a manifest of their ids and a fake run of each."""
    nb = root / "notebooks"
    nb.mkdir(parents=True, exist_ok=True)
    (root / "book").mkdir(exist_ok=True)
    (root / "_config.yml").write_text("title: test\n")
    (nb / "profiles.yml").write_text("{}\n")
    for name, cl in notebooks.items():
        (nb / f"{name}.md").write_text(f"# {name}\n\n```{{prf:theorem}} T\n:label: thm-{name}\n\nx\n```\n")
        fake_run(root / "book" / "generated", name, cl)
    if manifest:
        (nb / "claims_manifest.yml").write_text(
            yaml.safe_dump({name: sorted(c["id"] for c in cl) for name, cl in notebooks.items()}))
    return root
