"""Device names: the one list (``auto | cpu | cuda``) and the one resolution of ``auto``.

Shared by the science (:func:`covbook._validate.resolve_device` returns the torch device) and
the pipeline (``covbook run --device``, which must not import torch on a machine without a GPU):
torch is imported only where a GPU driver could be present.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["DEVICES", "cuda_available", "device_name"]

#: The device choices every notebook and ``covbook run --device`` accept (``cuda:N`` is accepted too).
DEVICES = ("auto", "cpu", "cuda")
_DRIVER_FILES = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/dxg", "/dev/kfd")


def cuda_available() -> bool:
    """Whether torch sees a CUDA GPU; torch is imported only where a GPU driver could be present."""
    if not any(Path(p).exists() for p in _DRIVER_FILES):
        return False
    import torch

    return bool(torch.cuda.is_available())


def device_name(device: object) -> str:
    """``auto`` → ``cuda`` when a GPU is available, else ``cpu``; ``cpu``, ``cuda``, ``cuda:N`` as given.

    Accepts a ``torch.device`` too.  Raises ``ValueError`` for an unknown name, and for ``cuda``
    without a GPU.

    Examples
    --------
    >>> device_name("cpu")
    'cpu'
    """
    name = str(device) if type(device).__name__ == "device" else device
    if not isinstance(name, str) or (name not in DEVICES and not name.startswith("cuda:")):
        raise ValueError(f"device must be one of {', '.join(DEVICES)} (or cuda:N), got {device!r}")
    if name == "auto":
        return "cuda" if cuda_available() else "cpu"
    if name.startswith("cuda") and not cuda_available():
        raise ValueError(f"device {name!r} was requested but no CUDA GPU is available here; use 'auto' or 'cpu'")
    return name
