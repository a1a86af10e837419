"""The notebook cache: what a result depends on, and whether a stored result is whole.

A notebook is served from ``book/generated`` when its key is unchanged.  The
key covers what can change a result and nothing else:

- the notebook's source and the parameters injected into it;
- the *science* code: every file of the ``covbook`` package outside
  ``covbook/book/`` (the pipeline: runner, CLI, report, lock ... never change a
  number, so editing them re-executes nothing);
- the versions of Python, torch and numpy;
- the device the notebook resolves to (``auto`` becomes ``cpu`` or ``cuda``).

A stored result is served only if it parses: a run record, claims file or
notebook that is truncated or not JSON is re-executed.
"""

from __future__ import annotations

import hashlib
import json
import platform
from functools import lru_cache
from pathlib import Path

from covbook.book.config import DEVICES, Paths, UsageError
from covbook._jsonio import DamagedFile, read_json

__all__ = ["PACKAGE", "science_hash", "environment", "resolve_device", "content_hash", "is_cached",
           "damaged_outputs", "verify_outputs"]

PACKAGE = Path(__file__).resolve().parents[1]  # src/covbook
PIPELINE = Path(__file__).resolve().parent  # src/covbook/book


def science_hash(package: Path = PACKAGE) -> str:
    """Hash of the science code: every file of ``package`` outside ``book/`` and ``__pycache__``."""
    h = hashlib.sha256()
    pipeline = package / "book"
    for f in sorted(package.rglob("*")):
        if not f.is_file() or "__pycache__" in f.parts or f.suffix == ".pyc" or pipeline in f.parents:
            continue
        h.update(f.relative_to(package).as_posix().encode() + b"\0")
        h.update(f.read_bytes())
    return h.hexdigest()


@lru_cache(maxsize=1)
def environment() -> dict[str, str]:
    """Versions that can change a result: Python, torch, numpy (read without importing them)."""
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for pkg in ("torch", "numpy"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def _cuda_available() -> bool:
    """Whether torch sees a CUDA GPU; imports torch only where a GPU driver could be present."""
    if not any(Path(p).exists() for p in ("/dev/nvidiactl", "/dev/nvidia0", "/dev/dxg", "/dev/kfd")):
        return False
    import torch

    return bool(torch.cuda.is_available())


def resolve_device(device: str) -> str:
    """``auto`` → ``cuda`` or ``cpu``; ``cuda`` without a GPU is a :class:`UsageError`."""
    if device == "cpu":
        return "cpu"
    if device == "auto":
        return "cuda" if _cuda_available() else "cpu"
    if device == "cuda":
        if not _cuda_available():
            raise UsageError("--device cuda was requested but no CUDA GPU is available here; use --device auto or cpu")
        return "cuda"
    raise UsageError(f"unknown device {device!r}; valid: {', '.join(DEVICES)}")


def content_hash(nb_path: Path, params: dict, science: str, device: str) -> str:
    """The cache key of one notebook run (``device``: the resolved device, ``cpu`` or ``cuda``)."""
    h = hashlib.sha256()
    h.update(nb_path.read_bytes())
    h.update(json.dumps(params, sort_keys=True, default=str).encode())
    h.update(science.encode())
    h.update(json.dumps(environment(), sort_keys=True).encode())
    h.update(device.encode())
    return h.hexdigest()


def _outputs(paths: Paths, name: str) -> tuple[Path, Path, Path]:
    return paths.runs / f"{name}.json", paths.claims / f"{name}.json", paths.generated / f"{name}.ipynb"


def verify_outputs(paths: Paths, name: str) -> dict | None:
    """Parse the outputs of ``name`` that exist; the run record (``None`` if absent).

    Raises :class:`DamagedFile` for the first one that does not parse.
    """
    from covbook.claims import Measurement

    rec_path, claims_path, nb_path = _outputs(paths, name)
    rec = read_json(rec_path, dict) if rec_path.is_file() else None
    if claims_path.is_file():
        for i, c in enumerate(read_json(claims_path, list)):
            try:
                Measurement(**c)
            except TypeError as err:
                raise DamagedFile(claims_path, f"entry {i} is not a measurement: {err}") from err
    if nb_path.is_file():
        nb = read_json(nb_path, dict)
        if not isinstance(nb.get("cells"), list) or not isinstance(nb.get("nbformat"), int):
            raise DamagedFile(nb_path, "not a Jupyter notebook (no cells or nbformat)")
    return rec


def is_cached(paths: Paths, name: str, digest: str) -> bool:
    """True if all three outputs of ``name`` exist, parse, and were made by a successful run with key ``digest``."""
    if not all(p.is_file() for p in _outputs(paths, name)):
        return False
    try:
        rec = verify_outputs(paths, name)
    except (OSError, DamagedFile):
        return False
    return rec is not None and rec.get("status") == "ok" and rec.get("hash") == digest


def damaged_outputs(paths: Paths, names: list[str]) -> list[str]:
    """One line per damaged output among ``names``: the file and the command that repairs it."""
    problems = []
    for name in names:
        try:
            verify_outputs(paths, name)
        except DamagedFile as err:
            profile = None
            try:
                profile = read_json(paths.runs / f"{name}.json", dict).get("parameters", {}).get("profile")
            except (OSError, DamagedFile):
                pass
            cmd = f"covbook run {name.split('_', 1)[0]}" + (f" --profile {profile}" if profile else "")
            rel = err.path.relative_to(paths.root) if err.path.is_relative_to(paths.root) else err.path
            problems.append(f"{rel} is damaged ({err.reason}); repair it with: {cmd}")
    return problems
