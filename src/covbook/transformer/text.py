"""Character-level text for the trained language model (book chapter 10).

The corpus is the Python Language Reference shipped with CPython (``pydoc_data.topics``): no
download, deterministic for a given Python version.  :class:`CharTokenizer` maps its characters
to token ids 0..V-1, and :func:`spaced_windows` picks evaluation windows of the held-out text
that do not overlap, so that statistics over them are over independent stretches of text.
"""

from __future__ import annotations

import numpy as np
import torch

from covbook._validate import check_positive_int

__all__ = ["CharTokenizer", "python_reference_text", "spaced_windows"]


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


def spaced_windows(n_tokens: int, n_windows: int, length: int, *,
                   generator: torch.Generator | None = None) -> torch.Tensor:
    r"""Start offsets of ``n_windows`` windows of ``length`` tokens, spread over a text of ``n_tokens``.

    Systematic sampling with a random start: the text is cut into n strides of
    s = ⌊n_tokens / n⌋ tokens and window k starts at k·s + u, with one offset
    u ~ Uniform{0, …, s − length} (drawn from ``generator``; 0 without one).  When
    s ≥ length the windows are disjoint, so a standard error over windows is over
    separate stretches of text rather than over overlapping copies of one; when the
    text is too short for that (s < length), the starts are evenly spaced over
    [0, n_tokens − length] and neighbouring windows overlap by length − s tokens.

    Returns
    -------
    LongTensor (n_windows,), increasing, each start + length <= n_tokens

    Examples
    --------
    >>> spaced_windows(100, 4, 20).tolist()
    [0, 25, 50, 75]
    >>> spaced_windows(50, 3, 30).tolist()      # too short: overlapping, evenly spaced
    [0, 10, 20]
    """
    n_tokens = check_positive_int(n_tokens, "n_tokens")
    n_windows = check_positive_int(n_windows, "n_windows")
    length = check_positive_int(length, "length")
    if length > n_tokens:
        raise ValueError(f"length={length} exceeds the text's n_tokens={n_tokens}")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    stride = n_tokens // n_windows
    if stride >= length:
        slack = stride - length
        u = int(torch.randint(0, slack + 1, (1,), generator=generator)) if generator is not None else 0
        return torch.arange(n_windows, dtype=torch.long) * stride + u
    return torch.as_tensor(np.linspace(0, n_tokens - length, n_windows).round().astype(np.int64))
