"""Every page of the built book, opened in headless Chromium, as a reader meets it.

For each page: no JavaScript console error; no request leaves the machine (the book is
served from 127.0.0.1); MathJax typeset every formula with no error; every image loaded;
every internal link and anchor resolves; no code cell is wider than the text column; no
figure is shown below 80 % of its designed size (rendered width over the image's natural
width) at 1280 px; no table scrolls sideways; one search box; the article's visible text, without its code and typeset
formulas, has no raw TeX, raw label, raw registry key or number of the wrong grammatical number
(``page_text.text_problems``, unit-tested on strings in tests/test_page_text.py).  At 400 px (a phone) the
tables' last column (the status) is on screen.  The search page finds "covariance".  One
screenshot per chapter goes to ``_build/screenshots/`` for review.

Needs Debian's ``chromium`` and ``chromium-driver`` (``apt-get install chromium
chromium-driver``); without them the test is skipped with that instruction, unless
``COVBOOK_BROWSER_REQUIRED`` is set (``.ci/run`` sets it after installing them).
It reuses the book that tests/test_notebooks.py builds (fixture ``smoke_book``).
"""

from __future__ import annotations

import functools
import os
import shutil
import threading
from collections.abc import Iterator
from html.parser import HTMLParser
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urldefrag, urlsplit

import pytest

from helpers import ROOT
from page_text import text_problems

# also `book`: it needs the built book, so it runs with the book build (make test) and never in `make unit`
pytestmark = [pytest.mark.browser, pytest.mark.book]

INSTALL = "apt-get install chromium chromium-driver  (Debian/Ubuntu; .ci/run does this when run as root)"
SCREENSHOTS = ROOT / "_build" / "screenshots"
#: the smallest shown size of a figure, as a fraction of its designed (natural) size, at 1280 px
MIN_FIGURE_SCALE = 0.8
LOCAL_SCHEMES = ("data:", "blob:", "about:", "chrome:", "chrome-extension:", "devtools:")


@functools.cache
def _registry_keys() -> frozenset[str]:
    """Names of the book's registries (input laws, positional encodings) that prose must not show raw."""
    from covbook.processes import INPUT_LAWS
    from covbook.transformer import POSITIONS

    return frozenset({*INPUT_LAWS, *(p for p in POSITIONS if p), "nope"})


def _chromium() -> tuple[str, str] | None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


def _require_browser() -> tuple[str, str]:
    found = _chromium()
    try:
        import selenium  # noqa: F401
    except ImportError:
        found = None
    if found is None:
        why = f"browser test skipped: headless Chromium, chromedriver or selenium not found; install with: {INSTALL}"
        if os.environ.get("COVBOOK_BROWSER_REQUIRED"):
            pytest.fail(why.replace("skipped", "required (COVBOOK_BROWSER_REQUIRED is set)"))
        pytest.skip(why)
    return found


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass


@pytest.fixture(scope="module")
def site(request: pytest.FixtureRequest) -> Iterator[tuple[str, Path]]:
    """The built book served on 127.0.0.1 (an ephemeral port): (base URL, HTML folder)."""
    _require_browser()
    build = request.getfixturevalue("smoke_book")
    html = request.getfixturevalue("smoke_project") / "_build" / "html"
    assert build.returncode == 0 and (html / "index.html").is_file(), build.stdout[-3000:] + build.stderr[-3000:]
    if any(item.nodeid.split("::")[0].endswith("test_pdf.py") for item in request.session.items):
        request.getfixturevalue("pdf_job")  # the PDF edition is printed while this test reads the pages
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(html)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", html
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def driver(site: tuple[str, Path]) -> Iterator[object]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    browser, chromedriver = _require_browser()
    opts = webdriver.ChromeOptions()
    opts.binary_location = browser
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,1600", "--no-first-run", "--disable-extensions",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-default-apps", "--metrics-recording-only", "--no-default-browser-check"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    drv = webdriver.Chrome(service=Service(executable_path=chromedriver), options=opts)
    drv.set_page_load_timeout(60)
    drv.set_script_timeout(60)
    try:
        yield drv
    finally:
        drv.quit()


class _Anchors(HTMLParser):
    """Element ids (and legacy ``<a name>``) of one HTML file."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for key, value in attrs:
            if value and (key == "id" or (tag == "a" and key == "name")):
                self.ids.add(value)


@functools.cache
def _ids(path: Path) -> frozenset[str]:
    parser = _Anchors()
    parser.feed(path.read_text(encoding="utf-8", errors="replace"))
    return frozenset(parser.ids)


def _target(html: Path, base: str, url: str) -> Path:
    rel = unquote(urlsplit(url).path)[len(urlsplit(base).path):]
    path = html / rel
    return path / "index.html" if rel == "" or rel.endswith("/") or path.is_dir() else path


def _pages(html: Path) -> list[str]:
    skip = ("_static", "_sources", "_images")
    return sorted(p.relative_to(html).as_posix() for p in html.rglob("*.html") if p.relative_to(html).parts[0]
                  not in skip)


_WAIT_FOR_PAGE = """
const done = arguments[arguments.length - 1];
const deadline = Date.now() + 45000;
function imagesDone() {
  for (const img of document.images) { img.loading = "eager"; }
  return [...document.images].every(i => i.complete);
}
async function mathDone() {
  if (!document.querySelector(".math")) return true;
  if (!(window.MathJax && MathJax.startup && MathJax.startup.promise)) return false;
  await MathJax.startup.promise;
  return true;
}
(async function poll() {
  try {
    if (document.readyState === "complete" && imagesDone() && await mathDone()) { done("ok"); return; }
  } catch (e) { done("error: " + e); return; }
  if (Date.now() > deadline) { done("timeout"); return; }
  setTimeout(poll, 100);
})();
"""

_INSPECT = """
return {
  math: document.querySelectorAll(".math").length,
  untypeset: [...document.querySelectorAll(".math")].filter(e => !e.querySelector("mjx-container"))
             .slice(0, 5).map(e => e.textContent.slice(0, 80)),
  mjx: document.querySelectorAll("mjx-container").length,
  merrors: [...document.querySelectorAll("mjx-merror")].slice(0, 5).map(e => e.textContent.slice(0, 120)),
  broken: [...document.images].filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.currentSrc || i.src),
  links: [...document.querySelectorAll("a[href]")].map(a => a.href),
  // code cells wider than the text column (the notebooks are formatted at 88 columns to fit)
  wide: [...document.querySelectorAll("div.cell_input div.highlight pre")]
        .filter(p => p.scrollWidth > p.clientWidth + 1)
        .map(p => p.textContent.split("\\n").reduce((a, b) => a.length >= b.length ? a : b).slice(0, 100)),
  // figures: shown width over the image's natural width (SVG: its size in CSS px)
  figures: [...document.querySelectorAll(".bd-article img")]
           .filter(i => i.naturalWidth > 0 && i.getBoundingClientRect().width > 0)
           .map(i => [i.currentSrc.split("/").pop(), i.naturalWidth, i.getBoundingClientRect().width]),
  // tables (or their scroll containers) wider than the column
  wide_tables: [...document.querySelectorAll(".bd-article table")].map(t => {
      const box = t.closest(".pst-scrollable-table-container") || t.parentElement;
      return [t.textContent.trim().slice(0, 60), t.scrollWidth, box.clientWidth,
              box.scrollWidth > box.clientWidth + 1 || t.getBoundingClientRect().right > innerWidth + 1];
    }).filter(x => x[3]),
  // visible search boxes (the sidebar's field; pydata-sphinx-theme >= 0.16 adds a second one)
  searches: [...document.querySelectorAll(".search-button-field, form.bd-search input, input.search-field")]
            .filter(e => { const r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0
                           && getComputedStyle(e).visibility !== "hidden"; }).length,
  // the article as a reader sees it, without code, code literals and typeset formulas (page_text checks it)
  text: (() => {
    const art = document.querySelector(".bd-article");
    if (!art) return "";
    const clone = art.cloneNode(true);
    clone.querySelectorAll("pre, code, kbd, script, style, mjx-container, .math, .MathJax, .cell_input, "
                           + "a.headerlink, .sd-summary-title").forEach(e => e.remove());
    const box = document.createElement("div");
    box.style.cssText = "position:absolute;left:-99999px;top:0;width:1200px";
    box.appendChild(clone);
    document.body.appendChild(box);
    const text = clone.innerText;
    box.remove();
    return text;
  })(),
  resources: performance.getEntriesByType("resource").map(e => e.name)
             .concat(performance.getEntriesByType("navigation").map(e => e.name)),
};
"""


def _requests(drv) -> list[str]:
    """URLs of every request the browser sent since the last call (DevTools performance log)."""
    import json

    urls = []
    for entry in drv.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        if msg.get("method") == "Network.requestWillBeSent":
            urls.append(msg["params"]["request"]["url"])
    return urls


def _check_page(drv, base: str, html: Path, page: str) -> list[str]:
    problems: list[str] = []
    drv.get(base + page)
    state = drv.execute_async_script(_WAIT_FOR_PAGE)
    if state != "ok":
        problems.append(f"page did not settle (images, MathJax): {state}")
    info = drv.execute_script(_INSPECT)
    errors = [e["message"] for e in drv.get_log("browser") if e["level"] == "SEVERE"]
    problems += [f"console error: {m}" for m in errors]
    remote = sorted({u for u in info["resources"] + _requests(drv)
                     if not u.startswith(base) and not u.startswith(LOCAL_SCHEMES)})
    problems += [f"request leaves the machine: {u}" for u in remote]
    if info["math"]:
        if not info["mjx"]:
            problems.append(f"{info['math']} formulas but no MathJax output (mjx-container)")
        problems += [f"formula not typeset: {t!r}" for t in info["untypeset"]]
    problems += [f"MathJax error: {t!r}" for t in info["merrors"]]
    problems += [f"image not loaded: {src}" for src in info["broken"]]
    problems += [f"code cell wider than the text column (scrolls sideways): {line!r}" for line in info["wide"]]
    problems += [f"figure shown at {shown / natural:.0%} of its size ({shown:.0f} of {natural} px): {src}"
                 for src, natural, shown in info["figures"] if shown < MIN_FIGURE_SCALE * natural]
    problems += [f"table scrolls sideways ({width} px in {box} px): {text!r}"
                 for text, width, box, _ in info["wide_tables"]]
    problems += [f"article text: {p}" for p in text_problems(info["text"], _registry_keys())]
    if page != "search.html" and info["searches"] != 1:
        problems.append(f"{info['searches']} search boxes (expected one)")
    for link in sorted(set(info["links"])):
        if not link.startswith(base):
            continue
        url, fragment = urldefrag(link)
        target = _target(html, base, url)
        if target.name == "covbook.pdf" and target.parent == html:
            continue  # the PDF edition is made after the build (make pdf); tests/test_pdf.py checks it
        if not target.is_file():
            problems.append(f"broken link: {link}")
        elif fragment and target.suffix == ".html" and unquote(fragment) not in _ids(target):
            problems.append(f"broken anchor: {link}")
    return problems


_PHONE_TABLES = """
return [...document.querySelectorAll(".bd-article table tbody tr")].map(tr => {
  const last = tr.lastElementChild, r = last.getBoundingClientRect();
  return [last.textContent.trim().slice(0, 40), r.left, r.right];
}).filter(x => x[2] > innerWidth + 1 || x[1] < -1).slice(0, 5);
"""


@pytest.fixture(scope="module")
def visits(site: tuple[str, Path], driver) -> dict[str, tuple[list[str], list]]:
    """Every page opened once (each load waits for MathJax, about a second): page → (the problems
    :func:`_check_page` finds at 1280 px, the table cells off a 400 px screen). A chapter's screenshot
    is taken at 1280 px, before the window narrows to a phone's width and back."""
    base, html = site
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for old in SCREENSHOTS.glob("*.png"):
        old.unlink()
    out = {}
    for page in _pages(html):
        problems = _check_page(driver, base, html, page)
        off: list = []
        if page.startswith("generated/") or page == "index.html":
            driver.save_screenshot(str(SCREENSHOTS / (Path(page).stem + ".png")))
        if page.startswith("generated/"):
            driver.set_window_size(400, 900)
            try:
                off = driver.execute_script(_PHONE_TABLES)
            finally:
                driver.set_window_size(1280, 1600)
        out[page] = (problems, off)
    return out


def test_every_page_reads_cleanly(site: tuple[str, Path], visits) -> None:
    pages = list(visits)
    assert "index.html" in pages and any(p.startswith("generated/") for p in pages)
    failures = {page: problems for page, (problems, _) in visits.items() if problems}
    report = "\n".join(f"{page}:\n  " + "\n  ".join(p[:300] for p in probs[:15]) for page, probs in failures.items())
    assert not failures, f"{len(failures)} of {len(pages)} pages have problems:\n{report}"


def test_search_finds_covariance(site: tuple[str, Path], driver) -> None:
    base, _ = site
    driver.get(base + "search.html?q=covariance")
    found = driver.execute_async_script("""
        const done = arguments[arguments.length - 1];
        const deadline = Date.now() + 45000;
        (function poll() {
          const hits = document.querySelectorAll("#search-results ul.search li, ul.search li");
          if (hits.length) { done(hits.length); return; }
          if (Date.now() > deadline) { done(0); return; }
          setTimeout(poll, 200);
        })();
    """)
    errors = [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors
    assert found > 0, "the search page found no page for 'covariance'"


def test_tables_fit_a_phone(visits) -> None:
    """At 400 px the tables stack (covbook.css): every table's last cell (the status) is on screen."""
    bad = {page: off for page, (_, off) in visits.items() if off}
    assert any(p.startswith("generated/") for p in visits)
    assert not bad, f"table cells off a 400 px screen: {bad}"

