"""The PDF edition of the book (``make pdf``: covbook.book.pdf), made from the smoke build.

Every chapter's title and a sample of the glued numbers of the prose are in the PDF's text;
the PDF holds a figure for every figure of the HTML book (each an SVG image in the pages, which
Chromium embeds as a form XObject, or a raster image); every page is a bookmark, titled and in order.

Needs Debian's ``chromium``; skipped with that hint without it, unless ``COVBOOK_BROWSER_REQUIRED``
is set (``.ci/run`` sets it after installing Chromium).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from covbook.book.pdf import INSTALL, find_chromium, toc_pages

pytestmark = pytest.mark.book


@pytest.fixture(scope="module")
def pdf(request: pytest.FixtureRequest) -> Path:
    if find_chromium() is None:
        why = f"PDF test skipped: Chromium not found; install it with: {INSTALL}"
        if os.environ.get("COVBOOK_BROWSER_REQUIRED"):
            pytest.fail(why.replace("skipped", "required (COVBOOK_BROWSER_REQUIRED is set)"))
        pytest.skip(why)
    build = request.getfixturevalue("smoke_book")
    root = request.getfixturevalue("smoke_project")
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    proc = request.getfixturevalue("pdf_job")  # `python -m covbook.book.pdf`, started by the browser test's pass
    returncode = proc.wait(timeout=1800)
    assert returncode == 0, proc.log.read_text()[-3000:]
    out = root / "_build" / "html" / "covbook.pdf"
    assert out.is_file()
    return out


def _text(pdf: Path) -> str:
    """The PDF's text, read by PDFium (pypdfium2: about 1 s for the book, where pypdf's extractor takes ~17 s)."""
    import pypdfium2 as pdfium

    doc = pdfium.PdfDocument(pdf)
    try:
        text = "\n".join(doc[i].get_textpage().get_text_range() for i in range(len(doc)))
    finally:
        doc.close()
    return re.sub(r"\s+", " ", text)


def _html(root: Path, page: str) -> str:
    return (root / "_build" / "html" / f"{page}.html").read_text(encoding="utf-8")


def _plain(fragment: str) -> str:
    import html

    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", "", fragment))).strip()


def _figures(pdf: Path) -> int:
    """Images in the PDF: raster images and form XObjects (Chromium draws an SVG image as one)."""
    from pypdf import PdfReader

    seen = set()
    for page in PdfReader(pdf).pages:
        xobjects = (page.get("/Resources") or {}).get("/XObject") or {}
        for obj in xobjects.values():
            ref = getattr(obj, "idnum", id(obj))
            if obj.get_object().get("/Subtype") in ("/Image", "/Form"):
                seen.add(ref)
    return len(seen)


def _title(root: Path, page: str) -> str:
    m = re.search(r"<h1[^>]*>(.*?)</h1>", _html(root, page), re.DOTALL)
    return _plain(m.group(1)).replace("#", "").strip()


def test_pdf_has_every_chapter_and_the_glued_numbers(pdf: Path, smoke_project: Path) -> None:
    text = _text(pdf)
    pages = toc_pages(smoke_project / "book" / "_toc.yml")
    for page in pages:
        title = _title(smoke_project, page)
        assert title[:40] in text, f"chapter title {title!r} of {page} not in the PDF's text"
    glued = []
    for page in pages:
        if page.startswith("generated/0") or page.startswith("generated/1"):
            spans = re.findall(r'<span class="pasted-text">(.*?)</span>', _html(smoke_project, page))
            found = [_plain(s) for s in spans]
            glued += [g for g in found if len(g) >= 4 and re.search(r"\d", g)][:3]
    assert len(glued) >= 10, glued
    missing = [g for g in glued if g not in text]
    assert not missing, f"glued numbers not in the PDF's text: {missing}"


def test_pdf_bookmarks_every_page_in_order(pdf: Path, smoke_project: Path) -> None:
    from pypdf import PdfReader

    reader = PdfReader(pdf)
    marks = [(o.title, reader.get_destination_page_number(o)) for o in reader.outline]
    pages = toc_pages(smoke_project / "book" / "_toc.yml")
    assert [title for title, _ in marks] == [_title(smoke_project, page) for page in pages]
    first = [n for _, n in marks]
    assert first[0] == 0 and first == sorted(set(first)) and first[-1] < len(reader.pages)
    assert reader.metadata.title == marks[0][0]


def test_pdf_embeds_every_figure(pdf: Path, smoke_project: Path) -> None:
    n_html = 0
    for page in toc_pages(smoke_project / "book" / "_toc.yml"):
        n_html += len(re.findall(r'<img [^>]*src="[^"]*_images/', _html(smoke_project, page)))
    assert n_html >= 30  # the book's figures
    assert _figures(pdf) >= n_html, f"{_figures(pdf)} images in the PDF, {n_html} in the HTML book"
