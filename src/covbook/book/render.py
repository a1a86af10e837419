"""The generated pages' prose: Jinja2 templates in ``templates/`` (Jinja2 ships with Sphinx).

Filters: ``g`` (``format`` spec, ``.2g`` by default), ``num`` (:func:`covbook.claims.fmt`, ``—`` for
none), ``seeds`` (:func:`seed_text`), ``noun`` and ``count`` (``1 seed``, ``2 seeds``), ``cell`` (text
for a Markdown table cell) and ``oneline`` (a wrapped paragraph on one line).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

__all__ = ["TEMPLATES", "render", "write_page", "noun", "seed_text", "cell"]

TEMPLATES = Path(__file__).with_name("templates")


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


def cell(text: str) -> str:
    """``text`` in one Markdown table cell: ``|`` escaped, newlines as spaces."""
    return text.replace("|", "\\|").replace("\n", " ")


def _num(x: float | None) -> str:
    from covbook.claims import fmt

    return "—" if x is None else fmt(x)


@cache
def _environment():
    import jinja2  # with the [book] extra (Sphinx's own dependency), which `covbook build` needs anyway

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), undefined=jinja2.StrictUndefined,  # noqa: S701
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, autoescape=False)
    env.filters.update(g=lambda x, spec=".2g": format(x, spec), num=_num, seeds=seed_text, noun=noun, cell=cell,
                       count=lambda n, word: f"{n} {noun(n, word)}", oneline=lambda text: " ".join(text.split()))
    return env


def render(template: str, **context: object) -> str:
    """The page ``templates/<template>`` rendered with ``context`` (an undefined name is an error)."""
    return _environment().get_template(template).render(**context)


def write_page(path: Path, text: str) -> Path:
    """Write the page ``text`` to ``path`` atomically (:func:`covbook._jsonio.atomic_write`); returns ``path``."""
    from covbook._jsonio import atomic_write

    atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
    return path
