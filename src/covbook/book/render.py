"""The generated pages' prose: Jinja2 templates in ``templates/`` (Jinja2 ships with Sphinx).

Filters: ``g`` (``format`` spec, ``.2g`` by default), ``num`` (:func:`covbook.claims.fmt`, ``—`` for
none), ``seeds`` (:func:`seed_text`), ``noun`` and ``count`` (``1 seed``, ``2 seeds``), ``cell`` (text
for a Markdown table cell), ``oneline`` (a wrapped paragraph on one line) and ``theorems(labels)``
(:func:`link_theorems`: the chapters' sphinx-proof boxes, found by :func:`theorem_labels`).
"""

from __future__ import annotations

import os
import re
from functools import cache
from pathlib import Path

from covbook._jsonio import atomic_write

__all__ = ["TEMPLATES", "render", "write_page", "noun", "seed_text", "theorem_labels", "link_theorems"]

TEMPLATES = Path(__file__).with_name("templates")
_LABEL = re.compile(r":label:\s*([A-Za-z0-9][A-Za-z0-9_.-]*)")
_MENTION = re.compile(r"\b(?:(?:Theorem|Proposition|Lemma|Corollary|Remark|Definition)s?\s+)?"
                      r"([A-Za-z]+-[0-9]{2}-[A-Za-z0-9-]+)\b")


def noun(n: int, word: str) -> str:
    """``word`` in the number a count of ``n`` takes.

    >>> noun(1, "seed"), noun(2, "seed")
    ('seed', 'seeds')
    """
    return word if n == 1 else word + "s"


def seed_text(seeds: list[int]) -> str:
    """``0–9`` for a run of consecutive seeds, else the seeds listed.

    >>> seed_text([0, 1, 2]), seed_text([7, 9])
    ('0–2', '7, 9')
    """
    seeds = list(seeds)
    return (f"{seeds[0]}–{seeds[-1]}" if seeds == list(range(seeds[0], seeds[-1] + 1)) else
            ", ".join(map(str, seeds)))


def theorem_labels(folder: str | os.PathLike) -> set[str]:
    """Labels (``:label: ...``) in the chapters of ``folder``: ``NN_*.md`` sources or executed ``NN_*.ipynb``."""
    return {label for path in Path(folder).glob("[0-9][0-9]_*") if path.suffix in (".md", ".ipynb")
            for label in _LABEL.findall(path.read_text(encoding="utf-8"))}


def link_theorems(text: str, labels: set[str]) -> str:
    """Replace each mention of a known label (with its "Theorem"/"Proposition" word) by ``{prf:ref}``.

    >>> link_theorems("slope −1 (Theorem thm-01-a); see thm-09-gone", {"thm-01-a"})
    'slope −1 ({prf:ref}`thm-01-a`); see thm-09-gone'
    """
    return _MENTION.sub(lambda m: f"{{prf:ref}}`{m[1]}`" if m[1] in labels else m[0], text)


@cache
def _environment():
    import jinja2  # with the [book] extra (Sphinx's own dependency), which `covbook build` needs anyway

    from covbook.claims import fmt

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), undefined=jinja2.StrictUndefined,  # noqa: S701
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, autoescape=False)
    env.filters.update(g=lambda x, spec=".2g": format(x, spec), num=lambda x: "—" if x is None else fmt(x),
                       seeds=seed_text, noun=noun, count=lambda n, word: f"{n} {noun(n, word)}",
                       cell=lambda text: text.replace("|", "\\|").replace("\n", " "),  # one Markdown table cell
                       oneline=lambda text: " ".join(text.split()), theorems=link_theorems)
    return env


def render(template: str, **context: object) -> str:
    """The page ``templates/<template>`` rendered with ``context`` (an undefined name is an error)."""
    return _environment().get_template(template).render(**context)


def write_page(path: Path, text: str) -> Path:
    """Write the page ``text`` to ``path`` atomically (:func:`covbook._jsonio.atomic_write`); returns ``path``."""
    atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
    return path
