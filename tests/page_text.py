"""What a reader must never meet in a page's article text: a pure function over the visible text.

:func:`text_problems` takes the text a browser shows in a page's article, without its code, its
typeset formulas and its code literals (tests/test_browser.py extracts it), and returns one line
per problem:

- raw TeX: a ``$`` touching text, a backslash command (``\\frac``, ``\\eta``) or a TeX sub- or
  superscript group (``e^{uW}``, ``a_{ij}``): a formula that was not typeset;
- a raw label: ``thm-…``, ``rem-…`` and the other label prefixes of the chapters (``fig-06-…``),
  which belong in a reference (rendered as the box's or figure's name), never in the text;
- a raw registry key: a snake_case identifier (``two_point``, ``stream_mean_normalised_error``)
  or a slash-joined list of lowercase names one of which is a key (``nope/rotary``,
  ``gaussian/two_point/laplace``), or a proper name written as its lowercase key (``laplace``);
- a number followed by a count noun of the wrong number: ``1 steps``, ``1 distinct cycles``,
  ``2 cycle`` (a singular noun that modifies the next word, as in ``2 step sizes``, is fine).

tests/test_page_text.py tests it on strings; the browser test applies it to every page.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["text_problems", "COUNT_NOUNS"]

#: Count nouns the book uses after a number: singular → plural.
COUNT_NOUNS = {
    "batch": "batches", "case": "cases", "chapter": "chapters", "character": "characters", "claim": "claims",
    "context": "contexts", "coordinate": "coordinates", "cycle": "cycles", "degree": "degrees",
    "dimension": "dimensions", "draw": "draws", "entry": "entries", "epoch": "epochs", "error": "errors",
    "example": "examples", "failure": "failures", "head": "heads", "hour": "hours", "iteration": "iterations",
    "layer": "layers", "minute": "minutes", "model": "models", "notebook": "notebooks", "orbit": "orbits",
    "page": "pages", "pair": "pairs", "parameter": "parameters", "period": "periods", "point": "points",
    "position": "positions", "prompt": "prompts", "query": "queries", "replicate": "replicates", "run": "runs",
    "sample": "samples", "second": "seconds", "seed": "seeds", "sequence": "sequences", "state": "states",
    "statement": "statements", "step": "steps", "stream": "streams", "task": "tasks", "test": "tests",
    "time": "times", "token": "tokens", "trial": "trials", "value": "values", "window": "windows", "word": "words",
}
_PLURALS = {p: s for s, p in COUNT_NOUNS.items()}
#: Words after a number that end the phrase (the count does not reach a noun after them).
_STOP = {"of", "in", "and", "or", "to", "at", "for", "from", "by", "on", "with", "per", "out", "than", "is", "are",
         "was", "were", "the", "a", "an", "as", "if", "but", "not", "no", "that", "this", "it", "its", "so", "be"}
#: Prefixes of the chapters' labels (``thm-05-one-step``, ``fig-06-tracking``).
_LABEL = re.compile(r"(?<![\w-])(?:(?:thm|rem|lem|prop|cor|def|fig|eq|tbl|alg|exm)-\d{2}-[a-z0-9][a-z0-9-]*"
                    r"|(?:thm|rem)-[a-z0-9][a-z0-9-]*)")
_TEX = (
    (re.compile(r"\$[^$\n]{1,200}?\$|\$(?=\S)|(?<=\S)\$"), "a dollar sign of TeX math"),
    (re.compile(r"\\[A-Za-z]{2,}"), "a TeX command"),
    (re.compile(r"[\^_]\{"), "a TeX sub- or superscript group"),
)
_IDENT = re.compile(r"(?<![A-Za-z0-9_])[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+(?![A-Za-z0-9_])")
_SLASHED = re.compile(r"(?<![\w/-])[a-z][a-z0-9_]*(?:/[a-z][a-z0-9_]*)+(?![\w/-])")
_PROPER = {"gaussian": "Gaussian", "laplace": "Laplace"}
_COUNT = re.compile(r"(?<![\w.,/^·×−+-])(\d+)(?![\w.,/^%])\s+([a-z]+)(?:\s+([a-z]+))?(?:\s+([a-z]+))?")


def _in_slashes(text: str, m: re.Match) -> bool:
    """The match is one name of a slash-joined list (reported once, as the list)."""
    return text[m.start() - 1:m.start()] == "/" or text[m.end():m.end() + 1] == "/"


_LIBRARY_PREFIX = re.compile(r"(?<![\w.])covbook(?:\.\w+)*\.$")


def _library_name_at(text: str, m: re.Match) -> bool:
    """The identifier ends a dotted name of the library (``covbook.theory.reach_allowance``): a citation of
    the code that computes a number, as a basis gives it, not a registry key standing in for words."""
    return _LIBRARY_PREFIX.search(text[max(0, m.start() - 80):m.start()]) is not None


def _snake(token: str) -> bool:
    """An identifier a program wrote: two or more underscores, or two letters before the first."""
    return token.count("_") >= 2 or len(token.split("_", 1)[0]) >= 2


def _count_problem(number: str, words: list[str | None]) -> str | None:
    """The number's noun is the first word, or the second after one modifier ("1 distinct cycles")."""
    one = int(number) == 1
    for i in (0, 1):
        noun, follower = words[i], words[i + 1]
        if noun is None or noun in _STOP:
            return None
        if noun in _PLURALS:
            return f"'{number} … {noun}': 1 takes the singular ({_PLURALS[noun]})" if one else None
        if noun in COUNT_NOUNS:
            if one or (follower is not None and follower not in _STOP):
                return None  # singular after 1, or a noun that modifies the next word: "2 step sizes"
            return f"'{number} … {noun}': {number} takes the plural ({COUNT_NOUNS[noun]})"
    return None


def text_problems(text: str, keys: Iterable[str] = ()) -> list[str]:
    """One line per problem a reader would see in ``text`` (the article's visible text, without code).

    Parameters
    ----------
    text
        The visible article text of one page: typeset formulas, code cells and code literals removed.
    keys
        Registry keys that must not appear as text when joined by slashes (``nope``, ``rotary``).

    Examples
    --------
    >>> [p.split(":")[0] for p in text_problems("The slope after 1 steps is $-1$ (thm-05-one-step).")]
    ['raw TeX (a dollar sign of TeX math)', 'raw label', 'wrong number']
    >>> text_problems("After 12 steps and 1 step, 2 step sizes remain.")
    []
    """
    keys = {k.lower() for k in keys}
    out: list[str] = []
    for pattern, what in _TEX:
        for m in pattern.finditer(text):
            out.append(f"raw TeX ({what}): {text[max(0, m.start() - 20):m.end() + 20].strip()!r}")
    out += [f"raw label: {m.group()!r}" for m in _LABEL.finditer(text)]
    for m in _SLASHED.finditer(text):
        parts = m.group().split("/")
        if any(p in keys or "_" in p or p in _PROPER for p in parts):
            out.append(f"raw registry keys joined by slashes: {m.group()!r}")
    out += [f"raw registry key: {m.group()!r}" for m in _IDENT.finditer(text)
            if _snake(m.group()) and not _in_slashes(text, m) and not _library_name_at(text, m)]
    for word, proper in _PROPER.items():
        out += [f"raw registry key: {word!r} (the name is {proper})"
                for m in re.finditer(rf"(?<![\w-]){word}(?![\w-])", text) if not _in_slashes(text, m)]
    for m in _COUNT.finditer(text):
        problem = _count_problem(m.group(1), [m.group(2), m.group(3), m.group(4)])
        if problem:
            out.append(f"wrong number: {problem}")
    return out
