"""The published edition of a chapter: an executed notebook that reads well outside the book.

The book's prose uses MyST roles that only Sphinx understands: ``{claim}`id```,
``{glue:text}`name:fmt```, ``{cite:t}`key```, ``{cite:p}`key```, ``{numref}`label``` and
``{prf:ref}`label```.  In Jupyter, Colab or Binder they would show as raw markup, so the
edition a reader downloads or launches (``_sources/generated/*.ipynb`` of the built book and
the ``executed-notebooks`` branch) is rewritten by :func:`standalone`:

- every role becomes plain Markdown text: a claim its measured value and verdict, a glued
  name its value (formatted as the role asks), a citation "Author (year)", a figure reference
  "Figure N" (the figures of the chapter in order), a theorem reference its label; each is a
  link into the online book when its address is known (``book_url``);
- papermill's injected-parameters cell is removed, so the reader's own edit of the
  ``parameters`` cell is what runs;
- the kernel is the standard ``python3`` (what Colab and Binder provide; a checkout's
  ``covbook`` kernel is for the book's own runs).

Imports nothing beyond the standard library.
"""

from __future__ import annotations

import ast
import copy
import json
import math
import re
from pathlib import Path

__all__ = ["ROLE", "standalone", "glued_values", "figure_numbers", "bib_labels", "standalone_file"]

ROLE = re.compile(r"\{(?P<role>claim|glue:text|glue|cite:t|cite:p|cite|numref|prf:ref|doc|ref)\}`(?P<text>[^`]+)`")
_BIB_ENTRY = re.compile(r"@\w+\s*\{\s*(?P<key>[^,\s]+)\s*,(?P<body>.*?)\n\}", re.DOTALL)
_BIB_FIELD = re.compile(r"(?P<name>author|year)\s*=\s*[{\"](?P<value>[^\n]*?)[}\"]\s*,?\s*$", re.MULTILINE)


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def glued_values(nb: dict) -> dict[str, object]:
    """``{name: value}`` of every ``glue`` in the notebook's outputs (myst-nb's ``scrapbook`` metadata)."""
    out: dict[str, object] = {}
    for cell in nb.get("cells", []):
        for o in cell.get("outputs", []) or []:
            name = (o.get("metadata") or {}).get("scrapbook", {}).get("name")
            text = (o.get("data") or {}).get("text/plain")
            if name is None or text is None:
                continue
            text = "".join(text) if isinstance(text, list) else text
            try:
                out[name] = ast.literal_eval(text)
            except (ValueError, SyntaxError):
                out[name] = text.strip("'\"")
    return out


def figure_numbers(nb: dict) -> dict[str, int]:
    """``{label: n}``: the chapter's figures (code cells with ``mystnb.figure.name``) numbered in order."""
    labels: dict[str, int] = {}
    for cell in nb.get("cells", []):
        name = ((cell.get("metadata") or {}).get("mystnb") or {}).get("figure", {}).get("name")
        if name and name not in labels:
            labels[name] = len(labels) + 1
    return labels


def bib_labels(bib_text: str) -> dict[str, tuple[str, str]]:
    """``{key: (authors, year)}`` from a BibTeX file: "Xu and Fang", "Vaswani et al.".

    >>> bib_labels("@misc{k,\\n  author = {Xu, Haoren and Fang, Guanhua},\\n  year = {2026}\\n}")
    {'k': ('Xu and Fang', '2026')}
    """
    out = {}
    for m in _BIB_ENTRY.finditer(bib_text):
        fields = {f["name"]: f["value"] for f in _BIB_FIELD.finditer(m["body"])}
        names = [a.split(",")[0].strip(" {}") for a in fields.get("author", "").split(" and ") if a.strip()]
        who = names[0] if len(names) == 1 else " and ".join(names) if len(names) == 2 else f"{names[0]} et al." \
            if names else m["key"]
        out[m["key"]] = (who, fields.get("year", "n.d."))
    return out


def _number(value: object, spec: str) -> str:
    if spec:
        try:
            return format(value, spec)
        except (TypeError, ValueError):
            pass
    if isinstance(value, float) and math.isfinite(value):
        return f"{value:.4g}"
    return str(value)


def _link(text: str, url: str | None) -> str:
    return f"[{text}]({url})" if url else text


def standalone(
    nb: dict, chapter: str, *, claims: dict[str, dict[str, dict]], bib: dict[str, tuple[str, str]],
    book_url: str | None = None,
) -> dict:
    """A copy of the executed notebook ``nb`` of ``chapter`` with its roles resolved (module docstring).

    ``claims`` maps chapter names to ``{id: claim record}`` (the claims JSON of the run), ``bib``
    citation keys to ``(authors, year)`` (:func:`bib_labels`), ``book_url`` is the online book's
    root (links are left out when it is None).
    """
    out = copy.deepcopy(nb)
    glued, figures = glued_values(nb), figure_numbers(nb)
    base = book_url.rstrip("/") + "/" if book_url else None
    page = f"{base}generated/{chapter}.html" if base else None
    chapters = sorted(claims)

    def claim(text: str) -> str:
        from covbook.book.checks import split_target

        try:
            chap, cid = split_target(text, f"generated/{chapter}", chapters)
            c = claims[chap][cid]
        except (KeyError, ValueError):
            return f"`{text}`"
        mark = "✓" if c.get("passed") else "✗"
        value = c.get("measured")
        shown = _number(value, "") if isinstance(value, (int, float)) else str(value)
        prefix = chap.split("_", 1)[0]
        url = f"{base}generated/reproduction.html#claim-{prefix}-{cid}" if base else None
        return _link(f"**{shown}** {mark}", url)

    def resolve(m: re.Match) -> str:
        role, text = m["role"], m["text"].strip()
        if role == "claim":
            return claim(text)
        if role.startswith("glue"):
            name, _, spec = text.partition(":")
            return _number(glued[name], spec) if name in glued else f"`{name}`"
        if role.startswith("cite"):
            keys = [k.strip() for k in text.split(",")]
            url = f"{base}bibliography.html" if base else None
            parts = [bib.get(k, (k, "n.d.")) for k in keys]
            if role == "cite:t":
                return "; ".join(_link(f"{who} ({year})", url) for who, year in parts)
            return "(" + "; ".join(_link(f"{who}, {year}", url) for who, year in parts) + ")"
        if role == "numref":
            label = re.sub(r"^.*<(.+)>$", r"\1", text)
            n = figures.get(label)
            return _link(f"Figure {n}" if n else "the figure", f"{page}#{label}" if page else None)
        if role == "prf:ref":
            label = re.sub(r"^.*<(.+)>$", r"\1", text)
            return _link("the theorem" if label.startswith("thm") else label, f"{page}#{label}" if page else None)
        return re.sub(r"^(.*)<.+>$", r"\1", text).strip() or text  # {doc}, {ref}: the link text

    cells = []
    for cell in out.get("cells", []):
        tags = (cell.get("metadata") or {}).get("tags") or []
        if "injected-parameters" in tags:
            continue
        if cell.get("cell_type") == "markdown":
            cell["source"] = ROLE.sub(resolve, _source(cell))
        if "parameters" in tags:
            cell["metadata"]["tags"] = [t for t in tags if t != "remove-cell"]
        cells.append(cell)
    out["cells"] = cells
    meta = out.setdefault("metadata", {})
    meta["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    meta.pop("papermill", None)
    return out


def _claims_of(generated: Path) -> dict[str, dict[str, dict]]:
    out: dict[str, dict[str, dict]] = {}
    for f in sorted((generated / "claims").glob("[0-9][0-9]_*.json")):
        try:
            out[f.stem] = {c["id"]: c for c in json.loads(f.read_text(encoding="utf-8"))}
        except (json.JSONDecodeError, KeyError, TypeError):
            continue
    return out


def standalone_file(src: Path, dst: Path, root: Path, book_url: str | None = None) -> None:
    """Write the published edition of the executed notebook ``src`` to ``dst`` (atomically)."""
    bib_file = root / "book" / "references.bib"
    bib = bib_labels(bib_file.read_text(encoding="utf-8")) if bib_file.is_file() else {}
    nb = json.loads(src.read_text(encoding="utf-8"))
    new = standalone(nb, src.stem, claims=_claims_of(root / "book" / "generated"), bib=bib, book_url=book_url)
    tmp = dst.with_name(f".{dst.name}.tmp")
    tmp.write_text(json.dumps(new, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(dst)
