"""The PDF edition: the built HTML book printed by headless Chromium into one file, a bookmark per page.

``make pdf`` (``python -m covbook.book.pdf``) prints every page of ``book/_toc.yml`` in order with Chromium's
print-to-PDF (the print stylesheet in ``covbook.css`` leaves out code, toggles and sidebars) and joins them with
pypdf, each bookmarked with its title (Chromium's own outline drops the space where a heading wraps).  Not
jupyter-book's ``pdfhtml``: it needs playwright's Chromium, downloaded at first use, and a second Sphinx build.
"""

from __future__ import annotations

import argparse
import html
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["CHROMIUM_FLAGS", "find_chromium", "toc_pages", "build_pdf", "main"]

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--no-pdf-header-footer", "--run-all-compositor-stages-before-draw",
                  "--virtual-time-budget=10000")  # time for MathJax to typeset
INSTALL = "apt-get install chromium  (Debian/Ubuntu)"


def find_chromium() -> str | None:
    """The Chromium executable (``COVBOOK_CHROMIUM``, else ``chromium`` or ``chromium-browser`` on PATH)."""
    return os.environ.get("COVBOOK_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


def toc_pages(toc_file: Path) -> list[str]:
    """The book's pages (``intro``, ``generated/01_...``) in reading order: sphinx-external-toc's, depth first."""
    from sphinx_external_toc.parsing import parse_toc_yaml

    return [doc.removesuffix(".md").removesuffix(".ipynb") for doc in parse_toc_yaml(toc_file)]


def _title(page_html: Path) -> str:
    """The page's first heading (its ``<h1>``), as text."""
    m = re.search(r"<h1[^>]*>(.*?)</h1>", page_html.read_text(encoding="utf-8", errors="replace"), re.DOTALL)
    return html.unescape(re.sub(r"<[^>]+>", "", m.group(1))).replace("#", "").strip() if m else page_html.stem


def build_pdf(html_dir: Path, toc_file: Path, out: Path, *, chromium: str | None = None, log=print) -> Path:
    """Print the book in ``html_dir`` (pages from ``toc_file``) to ``out``; return ``out``."""
    from pypdf import PdfWriter

    from covbook._jsonio import atomic_write

    chromium = chromium or find_chromium()
    if chromium is None:
        raise FileNotFoundError(f"Chromium not found; install it ({INSTALL}) or set COVBOOK_CHROMIUM")
    pages = toc_pages(toc_file)
    if missing := [p for p in pages if not (html_dir / f"{p}.html").is_file()]:
        raise FileNotFoundError(f"{html_dir} lacks {', '.join(missing)}: run `covbook build` first")
    writer = PdfWriter()
    with tempfile.TemporaryDirectory(prefix="covbook-pdf-") as tmp:
        for i, page in enumerate(pages):
            part, url = Path(tmp) / f"{i:03d}.pdf", (html_dir / f"{page}.html").resolve().as_uri()
            proc = subprocess.run([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={tmp}/profile",
                                   f"--print-to-pdf={part}", url], capture_output=True, text=True, timeout=180)
            if proc.returncode or not part.is_file() or part.stat().st_size == 0:
                raise RuntimeError(f"chromium could not print {url} (exit {proc.returncode}): {proc.stderr[-2000:]}")
            writer.append(part, outline_item=_title(html_dir / f"{page}.html"), import_outline=False)
            log(f"covbook pdf: printed {page}")
        writer.add_metadata({"/Title": _title(html_dir / f"{pages[0]}.html")})
        atomic_write(out, writer.write)
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m covbook.book.pdf``: write ``_build/html/covbook.pdf`` from the built book."""
    from covbook.book.config import UsageError, project_root

    argparse.ArgumentParser(prog="python -m covbook.book.pdf",
                            description="Print the built book to _build/html/covbook.pdf (after `covbook build`).",
                            ).parse_args(argv)
    try:
        root = project_root()
        html_dir = root / "_build" / "html"
        out = build_pdf(html_dir, root / "book" / "_toc.yml", html_dir / "covbook.pdf")
    except (UsageError, FileNotFoundError, RuntimeError, subprocess.TimeoutExpired) as err:
        print(f"covbook pdf: error: {err}", file=sys.stderr)
        return 2 if isinstance(err, UsageError) else 1
    print(f"covbook pdf: wrote {out.relative_to(root)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
