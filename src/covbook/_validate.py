"""Input validation shared by every covbook module.

Bad input must fail early with a ``ValueError`` that names the argument and says
what was expected, never propagate as a NaN or a silently wrong answer.  One check
per concept (integers, seeds, real numbers, arrays, covariances, checkpoints,
devices, generators); an argument of the wrong type raises :class:`ArgTypeError`,
which is both a ``TypeError`` and a ``ValueError``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence

import numpy as np
import torch

from covbook._devices import device_name


def as_tensor(
    x: object,
    name: str,
    *,
    ndim: int | Sequence[int] | None = None,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Convert ``x`` to a finite floating tensor, checking its number of dims."""
    try:
        t = torch.as_tensor(np.asarray(x) if not isinstance(x, torch.Tensor) else x)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be array-like of numbers, got {type(x).__name__}") from err
    if not (t.is_floating_point() or t.dtype in (torch.int32, torch.int64, torch.int16, torch.int8)):
        raise ValueError(f"{name} must hold real numbers, got dtype {t.dtype}")
    t = t.to(dtype=dtype, device=device)
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if t.ndim not in allowed:
            raise ValueError(f"{name} must have {' or '.join(map(str, allowed))} dims, got shape {tuple(t.shape)}")
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name} must be finite (no NaN or inf)")
    return t


def as_array(x: object, name: str, what: str = "array-like of real numbers") -> np.ndarray:
    """Convert ``x`` to a finite float64 numpy array, or raise saying ``name`` must be ``what``."""
    try:
        a = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be {what}, got {type(x).__name__}") from err
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} must be finite (no NaN or inf)")
    return a


def check_square(m: torch.Tensor, name: str, size: int | None = None) -> None:
    """Raise unless ``m`` is a non-empty square matrix (of side ``size`` when given)."""
    if m.ndim != 2 or m.shape[0] != m.shape[1]:
        raise ValueError(f"{name} must be a square matrix, got shape {tuple(m.shape)}")
    if m.shape[0] == 0:
        raise ValueError(f"{name} must be at least 1x1, got an empty matrix")
    if size is not None and m.shape[0] != size:
        raise ValueError(f"{name} must be {size}x{size}, got shape {tuple(m.shape)}")


def as_covariance(cov: object, name: str = "cov", *, size: int | None = None) -> torch.Tensor:
    """A symmetric positive semi-definite float64 matrix, or a ``ValueError``."""
    c = as_tensor(cov, name, ndim=2)
    check_square(c, name, size)
    scale = max(1.0, float(c.abs().max()))
    if not torch.allclose(c, c.T, atol=1e-10 * scale, rtol=0.0):
        raise ValueError(f"{name} must be symmetric")
    lam_min = float(torch.linalg.eigvalsh(c).min())
    if lam_min < -1e-10 * scale:
        raise ValueError(f"{name} must be positive semi-definite (smallest eigenvalue {lam_min:.3g})")
    return 0.5 * (c + c.T)


def psd_sqrt_factor(cov: torch.Tensor) -> torch.Tensor:
    """A matrix L with L Lᵀ = cov, valid for singular PSD matrices too."""
    lam, vec = torch.linalg.eigh(cov)
    return vec * lam.clamp_min(0.0).sqrt()


def resolve_device(device: str | torch.device) -> torch.device:
    """Map ``auto|cpu|cuda`` to a torch device: ``auto`` is CUDA when present (``_devices.device_name``)."""
    return torch.device(device_name(device))


def as_vector(x: object | None, name: str, size: int) -> torch.Tensor:
    """A finite float64 vector of length ``size``; ``None`` gives the zero vector."""
    if x is None:
        return torch.zeros(size, dtype=torch.float64)
    v = as_tensor(x, name, ndim=1)
    if v.shape[0] != size:
        raise ValueError(f"{name} must have shape ({size},), got {tuple(v.shape)}")
    return v


class ArgTypeError(TypeError, ValueError):
    """An argument of the wrong type.

    Both a ``TypeError`` (the type is wrong) and a ``ValueError`` (the house rule: bad
    input raises ``ValueError`` naming the argument), so a caller may catch either.
    """


def _check_int(n: object, name: str, expected: str, ok: Callable[[int], bool]) -> int:
    """Return ``n`` as an int, or raise naming ``name`` and ``expected`` unless it is an integer with ``ok(n)``."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise ArgTypeError(f"{name} must be {expected}, got {type(n).__name__} {n!r}")
    if not ok(int(n)):
        raise ValueError(f"{name} must be {expected}, got {n!r}")
    return int(n)


def check_positive_int(n: object, name: str) -> int:
    """Return ``n`` as an int, or raise unless it is a positive integer."""
    return _check_int(n, name, "a positive integer", lambda k: k > 0)


def check_positive_ints(**sizes: object) -> None:
    """Raise, naming the first offender, unless every keyword's value is a positive integer.

    Examples
    --------
    >>> check_positive_ints(n_models=2, n_prompts=3)
    """
    for name, n in sizes.items():
        check_positive_int(n, name)


def check_nonnegative_int(n: object, name: str) -> int:
    """Return ``n`` as an int, or raise unless it is an integer >= 0."""
    return _check_int(n, name, "a non-negative integer", lambda k: k >= 0)


def check_seed(seed: object, name: str = "seed") -> int:
    """Return ``seed`` as an int, or raise unless it is an integer in [0, 2**63) (what torch and numpy accept)."""
    return _check_int(seed, name, "a non-negative integer below 2**63", lambda k: 0 <= k < 2**63)


def check_checkpoints(checkpoints: object, name: str = "checkpoints") -> list[int]:
    """Return ``checkpoints`` as a list of ints, or raise unless it is a non-empty strictly increasing
    sequence of positive integers (integer-valued floats are accepted)."""
    msg = f"{name} must be a non-empty strictly increasing sequence of positive integers"
    try:
        raw = np.asarray(checkpoints).reshape(-1)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{msg}, got {checkpoints!r}") from err
    if raw.size == 0:
        raise ValueError(f"{msg} (non-empty), got {checkpoints!r}")
    if raw.dtype == bool or not (np.issubdtype(raw.dtype, np.integer) or np.issubdtype(raw.dtype, np.floating)):
        raise ValueError(f"{msg}, got {checkpoints!r}")
    if not np.all(np.isfinite(raw)) or np.any(raw != np.round(raw)):
        raise ValueError(f"{name} must be integers, got {checkpoints!r}")
    cps = [int(c) for c in raw]
    if cps[0] < 1 or any(b <= a for a, b in zip(cps, cps[1:], strict=False)):
        raise ValueError(f"{msg} (increasing), got {cps[:5]}...")
    return cps


def _check_real(x: object, name: str, expected: str, ok: Callable[[float], bool]) -> float:
    """Return ``x`` as a float, or raise naming ``name`` and ``expected`` unless ``ok(float(x))``.

    Strings, bytes and bools are refused as the wrong type, although ``float`` accepts them.
    """
    if isinstance(x, (str, bytes, bool)):
        raise ArgTypeError(f"{name} must be {expected}, got {type(x).__name__} {x!r}")
    try:
        v = float(x)  # type: ignore[arg-type]
    except (TypeError, ValueError) as err:
        raise ArgTypeError(f"{name} must be {expected}, got {type(x).__name__} {x!r}") from err
    if not math.isfinite(v) or not ok(v):
        raise ValueError(f"{name} must be {expected}, got {x!r}")
    return v


def check_positive_float(x: object, name: str) -> float:
    """Return ``x`` as a float, or raise unless it is a positive finite number (not a string or bool)."""
    return _check_real(x, name, "a positive finite number", lambda v: v > 0)


def check_nonnegative_float(x: object, name: str) -> float:
    """Return ``x`` as a float, or raise unless it is a finite number >= 0 (not a string or bool)."""
    return _check_real(x, name, "a finite number >= 0", lambda v: v >= 0)


def check_generator(generator: object, name: str = "generator") -> torch.Generator:
    """Return ``generator``, or raise :class:`ArgTypeError` unless it is a ``torch.Generator``."""
    if not isinstance(generator, torch.Generator):
        raise ArgTypeError(f"{name} must be a torch.Generator (e.g. torch.Generator().manual_seed(0)), "
                        f"got {type(generator).__name__}")
    return generator


def _memory_bytes() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):  # pragma: no cover - non-POSIX systems
        return 2**36


def check_fits(shape: Sequence[int], name: str, itemsize: int = 8) -> None:
    """Refuse an allocation of ``shape`` float64 values larger than the machine's memory.

    The message names the argument and the size the request would need.

    Examples
    --------
    >>> check_fits((10, 10), "n")
    >>> check_fits((10**9, 10**9), "n")
    Traceback (most recent call last):
    ...
    ValueError: n asks for 10^18 values (7.28e+06 TiB), more than this machine's memory...
    """
    count = 1
    for k in shape:
        count *= int(k)
    need = count * itemsize
    if need > _memory_bytes():
        raise ValueError(f"{name} asks for 10^{math.log10(max(count, 1)):.0f} values ({need / 2**40:.3g} TiB), more "
                         f"than this machine's memory ({_memory_bytes() / 2**30:.0f} GiB); draw in smaller chunks")


def finite_result(out: torch.Tensor, what: str) -> torch.Tensor:
    """Return ``out``, or raise if the computation overflowed: the inputs were too large for float64."""
    if not bool(torch.isfinite(out).all()):
        raise ValueError(f"{what} is not finite in float64: the inputs are too large (rescale them)")
    return out
