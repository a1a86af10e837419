"""The published edition of a chapter: an executed notebook that reads well outside the book (Jupyter, Colab).

:func:`standalone` turns each Sphinx role of the prose into Markdown (a claim its value and verdict, a glued name
its value, a citation "Author (year)", a figure reference "Figure N", a theorem reference its label), linked into
the online book when its address is known; drops papermill's injected-parameters cell (the reader's
``parameters`` cell is what runs); sets the standard ``python3`` kernel; and fills the setup cell to install
covbook where it is missing (Colab).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from covbook._jsonio import atomic_write
from covbook.claims import Claim, anchor, fmt, load_claims

__all__ = ["ROLE", "SETUP_PLACEHOLDER", "SETUP_CELL", "INSTALL_CELL", "fill_setup_source", "standalone", "bib_labels",
           "run_claims", "book_context", "standalone_file"]

#: The line of the notebooks' setup cell that publishing replaces by the install source.
SETUP_PLACEHOLDER = "COVBOOK_SOURCE = None"
#: The first code cell of every chapter (tagged ``remove-cell``); publishing replaces it by :data:`INSTALL_CELL`.
SETUP_CELL = f"""\
# Setup: a published notebook opened outside a checkout installs covbook here.
{SETUP_PLACEHOLDER}  # set when the executed notebooks are published"""
#: The setup cell of a published notebook (``templates/install_cell.py``): outside a checkout it installs covbook's
#: runtime from ``COVBOOK_SOURCE`` (:func:`fill_setup_source`) and shows pip's output when that fails.
INSTALL_CELL = (Path(__file__).with_name("templates") / "install_cell.py").read_text(encoding="utf-8").rstrip("\n")

ROLE = re.compile(r"\{(?P<role>claim|glue:text|glue|cite:t|cite:p|cite|numref|prf:ref|doc|ref)\}`(?P<text>[^`]+)`")


def fill_setup_source(source: str, install_source: str) -> str:
    """A code cell with the setup placeholder becomes :data:`INSTALL_CELL` installing from ``install_source``;
    any other cell is returned unchanged."""
    filled = INSTALL_CELL.replace(SETUP_PLACEHOLDER, f"COVBOOK_SOURCE = {json.dumps(install_source)}")
    return filled if SETUP_PLACEHOLDER in source else source


def bib_labels(bib_text: str) -> dict[str, tuple[str, str]]:
    """``{key: (authors, year)}`` from a BibTeX file, as pybtex reads it: "Xu and Fang", "Akyürek et al.".

    >>> bib_labels("@misc{k,\\n  author = {Xu, Haoren and Fang, Guanhua},\\n  year = {2026}\\n}")
    {'k': ('Xu and Fang', '2026')}
    """
    from pybtex.backends.plaintext import Backend  # not render_as("text"): a plugin look-up per name (20 ms)
    from pybtex.database import parse_string
    from pybtex.richtext import Text

    out, plain = {}, Backend()
    for key, entry in parse_string(bib_text, "bibtex").entries.items():
        names = [Text.from_latex(" ".join(p.prelast_names + p.last_names)).render(plain)
                 for p in entry.persons.get("author", [])]
        who = " and ".join(names) if len(names) <= 2 else f"{names[0]} et al."
        out[key] = (who or key, entry.fields.get("year", "n.d."))
    return out


def standalone(nb: dict, chapter: str, *, claims: dict[str, dict[str, Claim]], bib: dict[str, tuple[str, str]],
               book_url: str | None = None, install_source: str | None = None) -> dict:
    """A copy of the executed notebook ``nb`` of ``chapter`` (as nbformat reads it) with its roles resolved.

    ``claims``: the run's claims by chapter and id, ``bib``: ``(authors, year)`` by citation key (:func:`book_context`);
    ``book_url``: the online book's root (None: no links); ``install_source`` fills the setup cell (None: left).
    """
    from myst_nb.core.variables import format_plain_text
    from nbformat import from_dict

    from covbook.book.checks import split_target

    out = from_dict(nb)  # a copy
    glued: dict[str, str] = {}  # each glue's text (myst-nb's: its name and mime prefix in the scrapbook metadata)
    for output in (o for cell in out.cells for o in cell.get("outputs", [])):
        if glue := output.get("metadata", {}).get("scrapbook"):
            glued[glue["name"]] = "".join(output["data"].get(f"{glue.get('mime_prefix', '')}text/plain", ""))
    names = [cell.get("metadata", {}).get("mystnb", {}).get("figure", {}).get("name") for cell in out.cells]
    figures = {name: i for i, name in enumerate(dict.fromkeys(n for n in names if n), 1)}  # label: Figure i
    base = book_url.rstrip("/") + "/" if book_url else None

    def link(text: str, path: str) -> str:
        return f"[{text}]({base}{path})" if base else text

    def resolve(m: re.Match) -> str:
        role, text = m["role"], m["text"].strip()
        label = re.sub(r"^.*<(.+)>$", r"\1", text)
        if role == "claim":
            try:
                chap, cid = split_target(text, f"generated/{chapter}", sorted(claims))
                c = claims[chap][cid]
            except (KeyError, ValueError):
                return f"`{text}`"
            mark = {"pass": "✓", "FAIL": "✗", "compatible": "≈"}[c.verdict]
            return link(f"**{fmt(c.measured)}** {mark}", f"generated/reproduction.html#{anchor(chap, cid)}")
        if role.startswith("glue"):
            name, _, spec = text.partition(":")
            return format_plain_text(glued[name], spec) if name in glued else f"`{name}`"
        if role.startswith("cite"):
            parts = [bib.get(k.strip(), (k.strip(), "n.d.")) for k in text.split(",")]
            if role == "cite:t":
                return "; ".join(link(f"{who} ({year})", "bibliography.html") for who, year in parts)
            return "(" + "; ".join(link(f"{who}, {year}", "bibliography.html") for who, year in parts) + ")"
        if role == "numref":
            n = figures.get(label)
            return link(f"Figure {n}" if n else "the figure", f"generated/{chapter}.html#{label}")
        if role == "prf:ref":
            return link("the theorem" if label.startswith("thm") else label, f"generated/{chapter}.html#{label}")
        return re.sub(r"^(.*)<.+>$", r"\1", text).strip() or text  # {doc}, {ref}: the link text

    out.cells = [c for c in out.cells if "injected-parameters" not in c.get("metadata", {}).get("tags", [])]
    for cell in out.cells:
        tags = cell.get("metadata", {}).get("tags", [])
        if cell.cell_type == "markdown":
            cell.source = ROLE.sub(resolve, cell.source)
        elif cell.cell_type == "code" and install_source:
            cell.source = fill_setup_source(cell.source, install_source)
        if "parameters" in tags:
            cell.metadata.tags = [t for t in tags if t != "remove-cell"]
    out.setdefault("metadata", {})["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    out.metadata.pop("papermill", None)
    return out


def run_claims(root: Path, warn=lambda file, err: None) -> dict[str, dict[str, Claim]]:
    """Each chapter's claims by id: the run's measurements (``book/generated/claims``) judged by their rules; a
    file that cannot be judged is left out after ``warn(file, err)`` (``covbook check`` reports it too)."""
    claims: dict[str, dict[str, Claim]] = {}
    for f in sorted((root / "book" / "generated" / "claims").glob("[0-9][0-9]_*.json")):
        try:
            claims[f.stem] = {c.id: c for c in load_claims(f, root)}
        except (ValueError, TypeError) as err:
            warn(f, err)
    return claims


def book_context(root: Path) -> tuple[dict[str, dict[str, Claim]], dict[str, tuple[str, str]]]:
    """What the published notebooks cite: :func:`run_claims` and the labels of ``book/references.bib``."""
    bib_file = root / "book" / "references.bib"
    return run_claims(root), bib_labels(bib_file.read_text(encoding="utf-8")) if bib_file.is_file() else {}


def standalone_file(src: Path, dst: Path, root: Path, book_url: str | None = None, install_source: str | None = None,
                    context: tuple[dict, dict] | None = None) -> bool:
    """Write the published edition of the executed notebook ``src`` to ``dst`` (atomically, with nbformat;
    ``context``: :func:`book_context` of ``root``, read here when not given); True when a setup cell was filled."""
    import nbformat

    claims, bib = context if context is not None else book_context(root)
    nb = nbformat.v4.reads(src.read_text(encoding="utf-8"))  # as nbformat.read, without its slow validation
    new = standalone(nb, src.stem, claims=claims, bib=bib, book_url=book_url, install_source=install_source)
    atomic_write(dst, lambda tmp: Path(tmp).write_text(nbformat.v4.writes(new) + "\n", encoding="utf-8"))
    return bool(install_source) and any(c.cell_type == "code" and SETUP_PLACEHOLDER in c.source for c in nb.cells)
