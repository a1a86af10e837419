"""covbook.book.pdf without Chromium: a stand-in printer checks what the PDF build prints and writes.

The real printing is tests/test_pdf.py's (the smoke book through Debian's Chromium); here a fake
``chromium`` (a Python script) reads the page it is asked to print and writes a one-page PDF, so the
build's own logic is tested in a second: every page of the table of contents is printed in order, each
is bookmarked with its heading, and the book's folder is not written except for the finished PDF (the
browser test reads it at the same time).
"""

from __future__ import annotations

import sys
from pathlib import Path

from covbook.book.pdf import build_pdf

FAKE = """#!{python}
import os, sys, urllib.request
from pypdf import PdfWriter
out = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("--print-to-pdf="))
url = sys.argv[-1]
page = urllib.request.urlopen(url, timeout=10).read().decode()
with open({log!r}, "a") as fh:
    files = sum(len(f) for _, _, f in os.walk({html!r}))  # the book's folder while a page is printed
    fh.write(url.rsplit("/", 1)[-1] + " " + str(files) + "\\n")
w = PdfWriter()
w.add_blank_page(width=595, height=842)
with open(out, "wb") as fh:
    w.write(fh)
"""


def _book(tmp_path: Path) -> tuple[Path, Path]:
    html = tmp_path / "html"
    (html / "generated").mkdir(parents=True)
    for page, title in (("intro", "A book"), ("generated/01_x", "One"), ("generated/02_y", "Two")):
        (html / f"{page}.html").write_text(f"<html><body><h1>{title}</h1></body></html>")
    toc = tmp_path / "_toc.yml"
    toc.write_text("format: jb-book\nroot: intro\nchapters:\n- file: generated/01_x\n- file: generated/02_y.ipynb\n")
    return html, toc


def test_pdf_prints_every_page_and_writes_only_the_pdf(tmp_path: Path) -> None:
    html, toc = _book(tmp_path)
    log = tmp_path / "printed.txt"
    fake = tmp_path / "chromium"
    fake.write_text(FAKE.format(python=sys.executable, log=str(log), html=str(html)))
    fake.chmod(0o755)
    before = sorted(p.relative_to(html) for p in html.rglob("*"))
    out = build_pdf(html, toc, html / "covbook.pdf", chromium=str(fake), log=lambda _: None)
    after = sorted(p.relative_to(html) for p in html.rglob("*"))
    assert after == sorted([*before, Path("covbook.pdf")])  # nothing else written into the book's folder
    printed = log.read_text().split("\n")[:-1]
    assert printed == ["intro.html 3", "01_x.html 3", "02_y.html 3"]
    from pypdf import PdfReader

    reader = PdfReader(out)
    assert len(reader.pages) == 3  # one per page of the book
    assert [(o.title, reader.get_destination_page_number(o)) for o in reader.outline] == [
        ("A book", 0), ("One", 1), ("Two", 2)]
    assert reader.metadata.title == "A book"
