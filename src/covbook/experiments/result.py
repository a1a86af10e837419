"""What an experiment hands its chapter: measurements for the claim rules, numbers for the prose.

An experiment function fills a :class:`Result` (usually a dataclass subclass that also holds the
arrays its figures need) with :meth:`Result.measure` and :meth:`Result.glue`; the chapter passes it
to :func:`covbook.claims.record`, which judges each measurement against the chapter's rules and
glues each number, in the order they were made.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import torch

__all__ = ["Result", "RandomStreams", "MEASUREMENT_FIELDS"]

#: The keyword fields a measurement may carry besides its value (those of ``covbook.claims.measure``).
MEASUREMENT_FIELDS = ("prediction", "se", "dof", "allowance", "lower", "upper", "reason")
_ID = re.compile(r"^[A-Za-z0-9_-]+$")


class RandomStreams(Protocol):
    """The chapter's named random streams (:class:`covbook.streams.Streams`, or ``covbook.session.streams``)."""

    def seed_for(self, experiment: str, replicate: object = ()) -> int: ...

    def generator(self, experiment: str, replicate: object = ()) -> np.random.Generator: ...

    def torch_generator(self, experiment: str, replicate: object = (),
                        device: str | torch.device = "cpu") -> torch.Generator: ...


def _plain(x: object) -> object:
    """A number as a Python float/int (0-d arrays and tensors included); other values unchanged."""
    if isinstance(x, torch.Tensor):
        return x.item() if x.numel() == 1 else x
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray) and x.ndim == 0:
        return x.item()
    return x


@dataclass
class Result:
    """An experiment's measurements (claim id → value and fields) and glued numbers (name → value).

    Examples
    --------
    >>> r = Result()
    >>> r.measure("slope", -1.01, prediction=-1.0, se=0.02)
    >>> r.glue("n_max", 20_000)
    >>> r.measurements["slope"]["prediction"], r.numbers["n_max"]
    (-1.0, 20000)
    """

    measurements: dict[str, dict[str, object]] = field(default_factory=dict, repr=False, kw_only=True)
    numbers: dict[str, object] = field(default_factory=dict, repr=False, kw_only=True)

    def measure(self, id: str, value: object, **fields: object) -> None:
        """Add the measurement for claim ``id``: ``value`` and the fields of ``covbook.claims.measure``.

        Raises ``ValueError`` for an id that is not a literal identifier, or one already measured.
        """
        if not isinstance(id, str) or not _ID.match(id):
            raise ValueError(f"id must be a claim identifier of letters, digits, '_' or '-', got {id!r}")
        if id in self.measurements:
            raise ValueError(f"id {id!r} is measured twice by this result")
        v = _plain(value)
        if isinstance(v, float) and math.isnan(v) and "reason" not in fields:
            fields = {**fields, "reason": "the measurement is NaN"}
        self.measurements[id] = {"value": v, **{k: _plain(x) for k, x in fields.items()}}

    def glue(self, name: str, value: object) -> None:
        """Add a number the chapter's prose shows with ``{glue:text}`name```."""
        if not isinstance(name, str) or not _ID.match(name):
            raise ValueError(f"name must be an identifier of letters, digits, '_' or '-', got {name!r}")
        self.numbers[name] = _plain(value)

    def merge(self, other: Result) -> None:
        """Take ``other``'s measurements and numbers into this result (ids must not repeat)."""
        for k, fields in other.measurements.items():
            self.measure(k, fields["value"], **{f: x for f, x in fields.items() if f != "value"})
        for k, x in other.numbers.items():
            self.glue(k, x)
