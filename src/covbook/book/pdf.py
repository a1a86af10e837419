"""The PDF edition: the built HTML book printed by headless Chromium, one file with a contents page.

``make pdf`` (``python -m covbook.book.pdf``) serves ``_build/html`` on 127.0.0.1, prints every page of
``book/_toc.yml`` in order with Chromium's print-to-PDF (the print stylesheet in ``covbook.css`` leaves out
code, toggles and sidebars), and joins them with pypdf behind a contents page, each chapter a bookmark.
Not jupyter-book's ``pdfhtml``: it needs playwright's own Chromium, downloaded at first use (the book builds
offline), and a second, single-page Sphinx build; this prints the pages a reader sees with the system's Chromium.
"""

from __future__ import annotations

import functools
import html
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

__all__ = ["CHROMIUM_FLAGS", "find_chromium", "toc_pages", "build_pdf", "main"]

PDF_NAME = "covbook.pdf"
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run",
                  "--disable-extensions", "--disable-sync", "--no-default-browser-check", "--no-pdf-header-footer",
                  "--run-all-compositor-stages-before-draw", "--virtual-time-budget=10000")
INSTALL = "apt-get install chromium  (Debian/Ubuntu)"


def find_chromium() -> str | None:
    """The Chromium executable (``COVBOOK_CHROMIUM``, else ``chromium`` or ``chromium-browser`` on PATH)."""
    return os.environ.get("COVBOOK_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


def toc_pages(toc_file: Path) -> list[str]:
    """The book's pages in reading order, as docnames (``intro``, ``generated/01_...``), from ``_toc.yml`` as
    jupyter-book reads it (sphinx-external-toc)."""
    from sphinx_external_toc.parsing import parse_toc_yaml

    site = parse_toc_yaml(toc_file)

    def walk(doc: str) -> list[str]:
        below = [item for tree in site[doc].subtrees for item in tree.items if isinstance(item, str)]
        return [doc.removesuffix(".md").removesuffix(".ipynb"), *(page for item in below for page in walk(item))]

    return walk(site.root.docname)


class _Quiet(SimpleHTTPRequestHandler):
    #: URL path → file served from outside the book's folder (the contents page: the build folder is never
    #: written but for the finished PDF, since another reader, such as the browser test, may walk it meanwhile)
    extra: dict[str, str] = {}

    def translate_path(self, path: str) -> str:
        return self.extra.get(path.split("?", 1)[0].split("#", 1)[0]) or super().translate_path(path)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass


def _print(chromium: str, url: str, out: Path, timeout: float = 180) -> None:
    cmd = [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={out.parent / 'profile'}", f"--print-to-pdf={out}", url]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode or not out.is_file() or out.stat().st_size == 0:
        raise RuntimeError(f"chromium could not print {url} (exit {proc.returncode}): {proc.stderr[-2000:]}")


def _title(page_html: Path) -> str:
    """The page's first heading (its ``<h1>``), as text."""
    text = page_html.read_text(encoding="utf-8", errors="replace")
    m = re.search(r"<h1[^>]*>(.*?)</h1>", text, re.DOTALL)
    title = re.sub(r"<[^>]+>", "", m.group(1)) if m else page_html.stem
    return html.unescape(title).replace("#", "").strip()


def build_pdf(html_dir: Path, toc_file: Path, out: Path, *, chromium: str | None = None, log=print) -> Path:
    """Print the book in ``html_dir`` (pages from ``toc_file``) to ``out``; return ``out``."""
    from pypdf import PdfReader, PdfWriter

    from covbook.book.render import render

    chromium = chromium or find_chromium()
    if chromium is None:
        raise FileNotFoundError(f"Chromium not found; install it ({INSTALL}) or set COVBOOK_CHROMIUM")
    pages = [p for p in toc_pages(toc_file) if (html_dir / f"{p}.html").is_file()]
    missing = [p for p in toc_pages(toc_file) if p not in pages]
    if missing:
        raise FileNotFoundError(f"{html_dir} lacks {', '.join(missing)}: run `covbook build` first")
    with tempfile.TemporaryDirectory(prefix="covbook-pdf-") as tmp:
        work = Path(tmp)
        contents = work / "contents.html"
        handler = type("_Handler", (_Quiet,), {"extra": {"/.covbook-contents.html": str(contents)}})
        server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=str(html_dir)))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        base = f"http://127.0.0.1:{server.server_address[1]}/"
        try:
            entries, start = [], 2  # (title, first page, file); page 1 is the contents page
            for i, page in enumerate(pages):
                part = work / f"{i:03d}.pdf"
                _print(chromium, base + f"{page}.html", part)
                log(f"covbook pdf: printed {page}")
                entries.append((_title(html_dir / f"{page}.html"), start, part))
                start += len(PdfReader(part).pages)
            footer = html_dir / "intro.html"
            m = re.search(r'<p class="covbook-build">(.*?)</p>', footer.read_text(encoding="utf-8")) \
                if footer.is_file() else None
            contents.write_text(render("pdf_contents.html.j2", title=entries[0][0], entries=[e[:2] for e in entries],
                                       version_line=html.unescape(m.group(1)) if m else ""), encoding="utf-8")
            _print(chromium, base + ".covbook-contents.html", work / "contents.pdf")
        finally:
            server.shutdown()
            server.server_close()
        writer = PdfWriter()
        writer.append(str(work / "contents.pdf"))
        for title, first, part in entries:
            writer.append(str(part))
            writer.add_outline_item(title=title, page_number=first - 1)
        writer.add_metadata({"/Title": entries[0][0], "/Creator": "covbook (Chromium print-to-PDF, pypdf)"})
        tmp_out = out.with_name(f".{out.name}.tmp")
        with open(tmp_out, "wb") as fh:
            writer.write(fh)
        tmp_out.replace(out)
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m covbook.book.pdf``: write ``_build/html/covbook.pdf`` from the built book."""
    from covbook.book.config import UsageError, project_root

    if argv if argv is not None else sys.argv[1:]:
        print("usage: python -m covbook.book.pdf   (after `covbook build`)", file=sys.stderr)
        return 2
    try:
        root = project_root()
    except UsageError as err:
        print(f"covbook pdf: error: {err}", file=sys.stderr)
        return 2
    html_dir = root / "_build" / "html"
    try:
        out = build_pdf(html_dir, root / "book" / "_toc.yml", html_dir / PDF_NAME)
    except (FileNotFoundError, RuntimeError, subprocess.TimeoutExpired) as err:
        print(f"covbook pdf: error: {err}", file=sys.stderr)
        return 1
    print(f"covbook pdf: wrote {out.relative_to(root)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
