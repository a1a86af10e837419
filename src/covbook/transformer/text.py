"""Character-level text for the trained language model (book chapter 10).

The corpus is the Python Language Reference shipped with CPython (``pydoc_data.topics``): no
download, deterministic for a given Python version.  :class:`CharTokenizer` maps its characters
to token ids 0..V-1.
"""

from __future__ import annotations

import numpy as np
import torch

from covbook._validate import check_positive_int

__all__ = ["CharTokenizer", "python_reference_text"]


class CharTokenizer:
    """Character-level tokenizer: the sorted set of characters of a text.

    Examples
    --------
    >>> tok = CharTokenizer("hello")
    >>> tok.vocab_size, tok.encode("hole").tolist(), tok.decode(tok.encode("hole"))
    (4, [1, 3, 2, 0], 'hole')
    """

    def __init__(self, text: str) -> None:
        if not isinstance(text, str) or not text:
            raise ValueError("CharTokenizer needs a non-empty string")
        self.chars = sorted(set(text))
        self.index = {c: i for i, c in enumerate(self.chars)}

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def __len__(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> torch.Tensor:
        """LongTensor (len(text),) of character ids."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        try:
            return torch.tensor([self.index[c] for c in text], dtype=torch.long)
        except KeyError as err:
            raise ValueError(f"character {err.args[0]!r} is not in the tokenizer's vocabulary") from err

    def decode(self, ids: object) -> str:
        """The string of the ids (any 1-d integer sequence)."""
        arr = np.asarray(ids.cpu() if isinstance(ids, torch.Tensor) else ids).reshape(-1)
        if arr.size and not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(f"ids must be integer token ids, got dtype {arr.dtype}")
        if arr.size and (arr.min() < 0 or arr.max() >= self.vocab_size):
            raise ValueError(f"ids must lie in [0, {self.vocab_size})")
        return "".join(self.chars[int(i)] for i in arr)


def python_reference_text(max_chars: int | None = None) -> str:
    """The Python Language Reference topics shipped with CPython (``pydoc_data.topics``).

    The topics are joined in sorted key order with blank lines; deterministic for a given
    Python version.  No download.  ``max_chars`` truncates the text.
    """
    from pydoc_data.topics import topics

    text = "\n\n".join(topics[k].strip() for k in sorted(topics))
    if max_chars is not None:
        text = text[: check_positive_int(max_chars, "max_chars")]
    return text
