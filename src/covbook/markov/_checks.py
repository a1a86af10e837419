"""Shared argument checks of :mod:`covbook.markov` (token ids, probability vectors, kernels, models).

Xu & Fang (2026), Section 6 (book chapters 09-10).  Private: every public function of
the package validates its input here, so bad input gets the same ``ValueError`` wording
whichever module it enters.  Also the model-side helpers of the Markov reduction (the
default mean field, the vocabulary size, the model's device and dtype).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from covbook._validate import as_tensor, check_positive_float, check_positive_int

MeanField = Callable[[torch.nn.Module, torch.Tensor], torch.Tensor]


def _tokens_np(tokens: object, name: str = "tokens", ndim: Sequence[int] = (1,)) -> np.ndarray:
    """Token ids as a non-negative int64 numpy array with an allowed number of dims."""
    if isinstance(tokens, torch.Tensor):
        tokens = tokens.detach().cpu().numpy()
    arr = np.asarray(tokens)
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        if not np.issubdtype(arr.dtype, np.floating) or not np.all(np.isfinite(arr) & (arr == np.round(arr))):
            raise ValueError(f"{name} must hold integer token ids, got dtype {arr.dtype}")
        if np.any(np.abs(arr) >= 2**62):  # would not survive the cast to int64
            raise ValueError(f"{name} must hold token ids below 2**62, got {np.abs(arr).max():g}")
    arr = arr.astype(np.int64)
    if arr.ndim not in tuple(ndim):
        raise ValueError(f"{name} must have {' or '.join(map(str, ndim))} dims, got shape {arr.shape}")
    if arr.size and arr.min() < 0:
        raise ValueError(f"{name} must be non-negative token ids, got min {arr.min()}")
    return arr


def _vocab_tokens(tokens: object, vocab_size: object, name: str = "tokens") -> tuple[np.ndarray, int]:
    """Token ids of shape (..., T) with T >= 1, each in 0..V-1, and V = ``vocab_size``."""
    v = check_positive_int(vocab_size, "vocab_size")
    arr = _tokens_np(tokens, name, ndim=range(1, 8))
    if arr.shape[-1] == 0:
        raise ValueError(f"{name} must contain at least one token")
    if arr.max() >= v:
        raise ValueError(f"{name} must be ids in 0..{v - 1}, got {arr.max()}")
    return arr, v


def _tokens_torch(tokens: object, vocab_size: int | None, name: str = "tokens") -> tuple[torch.Tensor, bool]:
    """Token ids as a (B, T) long tensor; also says whether the input was 1-d."""
    if isinstance(tokens, torch.Tensor):
        if tokens.is_floating_point() or tokens.is_complex() or tokens.dtype == torch.bool:
            raise ValueError(f"{name} must be an integer tensor of token ids, got dtype {tokens.dtype}")
        t = tokens.long()
    else:
        t = torch.as_tensor(_tokens_np(tokens, name, ndim=(1, 2)))
    if t.ndim not in (1, 2) or t.shape[-1] == 0:
        raise ValueError(f"{name} must have shape (T,) or (B, T) with T >= 1, got {tuple(t.shape)}")
    if t.numel() and int(t.min()) < 0:
        raise ValueError(f"{name} must be non-negative token ids")
    if vocab_size is not None and t.numel() and int(t.max()) >= vocab_size:
        raise ValueError(f"{name} must be ids in 0..{vocab_size - 1}, got {int(t.max())}")
    single = t.ndim == 1
    return (t[None] if single else t), single


def _distribution(p: object, name: str) -> torch.Tensor:
    """A float64 tensor of probability vectors along the last axis, or a ValueError."""
    d = as_tensor(p, name)
    if d.ndim == 0:
        raise ValueError(f"{name} must have at least one dim (the outcomes), got a scalar")
    if bool((d < 0).any()):
        raise ValueError(f"{name} must be non-negative")
    if not torch.allclose(d.sum(-1), torch.ones((), dtype=d.dtype, device=d.device), atol=1e-6, rtol=0.0):
        raise ValueError(f"{name} must sum to 1 along its last axis")
    return d


def _kernel(kernel: object) -> torch.Tensor:
    k = _distribution(kernel, "kernel")
    if k.ndim != 2 or k.shape[0] != k.shape[1]:
        raise ValueError(f"kernel must be a square (V, V) row-stochastic matrix, got shape {tuple(k.shape)}")
    return k


def _temperature(temperature: object) -> float:
    return check_positive_float(temperature, "temperature")


def _positions(positions: object | None, length: int) -> list[int]:
    """1-based context lengths t in [1, T], strictly increasing (default: all)."""
    if positions is None:
        return list(range(1, length + 1))
    try:
        raw = np.asarray(positions, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError) as err:
        raise ValueError(f"positions must be a sequence of integer context lengths, got {positions!r}") from err
    if raw.size == 0 or not np.all(np.isfinite(raw)) or not np.all(raw == np.round(raw)):
        raise ValueError("positions must be a non-empty sequence of integer context lengths")
    pos = [int(p) for p in raw]
    if pos[0] < 1 or pos[-1] > length or any(b <= a for a, b in zip(pos[:-1], pos[1:], strict=True)):
        raise ValueError(f"positions must be strictly increasing context lengths in [1, {length}], got {pos[:6]}")
    return pos


_MAX_BYTES = 4 * 2**30  # the largest array a metric here may allocate (4 GiB)


def _check_size(n_elements: int, what: str) -> None:
    """Refuse an allocation of more than ``_MAX_BYTES`` float64s, saying how much it needs."""
    need = 8 * int(n_elements)
    if need > _MAX_BYTES:
        raise ValueError(f"{what} would need {need / 2**30:,.1f} GiB of memory (more than "
                         f"{_MAX_BYTES / 2**30:.0f} GiB); use fewer tokens or a smaller vocabulary")


def _ngrams(seq: np.ndarray, n: int) -> list[tuple[int, ...]]:
    return [tuple(seq[i : i + n].tolist()) for i in range(seq.size - n + 1)]


def _default_mean_field(model: torch.nn.Module, freqs: torch.Tensor) -> torch.Tensor:
    from covbook.transformer import mean_field_discrete

    return mean_field_discrete(model, freqs)


def _vocab_size(model: torch.nn.Module) -> int:
    v = getattr(model, "vocab_size", None)
    if v is None:
        raise ValueError("model must expose its vocabulary size as `vocab_size`")
    return int(v)


def _model_device_dtype(model: torch.nn.Module) -> tuple[torch.device, torch.dtype]:
    p = next(iter(model.parameters()), None)
    if p is None:
        return torch.device("cpu"), torch.float64
    return p.device, p.dtype
