"""The documentation site: ``mkdocs build --strict`` (no broken link, no missing page, no page
left out of the navigation, every docstring readable) with nothing printed but its own lines,
then the built site in a real browser: headless Chromium (Debian's ``/usr/bin/chromium``,
driven by Playwright; no browser is ever downloaded), 1280 px wide, follows the navigation
from the home page to every page. Each page shows its title and loads its images (the
diagrams and benchmark charts included), logs no console error, shows no raw Mermaid and no
literal Sphinx role (``:func:``), has no code block that scrolls sideways or whose first line
the copy button covers, and has section headings if it is long. A screenshot of each page
goes to a directory the test prints (``.ci-artifacts/site/`` in the clone, or
``$SLUICE_ARTIFACTS/site/``), the benchmark charts' page in light and dark mode. A new user
reaches object storage, Avro with a registry and the configuration reference in at most two
clicks from the home page.

The site is served from a loopback port by a server in this process; the browser runs with
its background networking off, so nothing leaves the machine.
"""

from __future__ import annotations

import functools
import os
import re
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from .site import ROOT, build, nav_entries

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
#: What a new user must reach in at most two clicks from the home page.
TWO_CLICKS = ("guides/object-storage/", "guides/formats/", "reference/configuration/")
VIEWPORT = {"width": 1280, "height": 900}
#: A page with more words than this needs section headings (a table of contents).
LONG_PAGE_WORDS = 600
#: What a build may print: MkDocs' own progress lines.
QUIET = re.compile(r"INFO\s+-\s+(Cleaning site directory|Building documentation to directory|"
                   r"Documentation built in)")  # fmt: skip
LITERAL_ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|data|attr|exc|obj|const):`")
RAW_MERMAID = re.compile(r"^\s*(?:flowchart|graph|sequenceDiagram)\b", re.MULTILINE)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    folder = tmp_path_factory.mktemp("site") / "site"
    done = build(folder)
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stderr[-6000:]}"
    return folder, done.stdout + done.stderr


@pytest.fixture(scope="module")
def site(built: tuple[Path, str]) -> Path:
    return built[0]


@pytest.fixture(scope="module")
def screenshots() -> Path:
    """Where the pages' screenshots go (CI keeps the directory as an artifact)."""
    base = Path(os.environ.get("SLUICE_ARTIFACTS") or ROOT / ".ci-artifacts")
    folder = base / "site"
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.png"):
        old.unlink()
    print(f"\nscreenshots of the site's pages: {folder}")
    return folder


def test_the_build_is_quiet(built: tuple[Path, str]) -> None:
    """Nothing but MkDocs' progress: no warning of a dependency, no traceback."""
    noise = [line for line in built[1].splitlines() if line.strip() and not QUIET.search(line)]
    assert not noise, "the build printed:\n" + "\n".join(noise[:40])


def test_each_diagram_is_drawn_from_its_source() -> None:
    """docs/diagrams/NAME.svg carries the digest of NAME.mmd it was drawn from: a diagram
    edited without drawing it again (docs/diagrams/render.py) fails here."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("render", ROOT / "docs/diagrams/render.py")
    assert spec is not None and spec.loader is not None
    render = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(render)
    sources = sorted((ROOT / "docs/diagrams").glob("*.mmd"))
    assert sources, "the batch's diagram"
    for source in sources:
        svg = source.with_suffix(".svg")
        assert svg.is_file(), f"{source.name} has no SVG: run docs/diagrams/render.py"
        marker = render.source_digest(source.read_text())
        assert marker in svg.read_text()[:300], (
            f"{svg.name} was drawn from another {source.name}: run docs/diagrams/render.py"
        )


def test_the_site_builds_strictly_with_every_page_and_chart(site: Path) -> None:
    for _, path in nav_entries():
        built = site / "index.html" if path == "index.md" else site / path[:-3] / "index.html"
        assert built.is_file(), f"{path} was not built"
    charts = sorted(p.name for p in (site / "benchmarks").glob("*.svg"))
    results = sorted(f"{p.stem}.svg" for p in (ROOT / "bench/results").glob("*.json"))
    assert charts == results, "one chart per benchmark family's results"
    cli = (site / "reference/cli/index.html").read_text()
    for command in ("sluice ingest", "sluice brokers up", "sluice dlq replay", "--max-quarantined"):
        assert command in cli, f"the generated command reference lacks {command!r}"
    assert "sluice.batch.plan_batch" in (site / "reference/python-api/index.html").read_text()


def page_url(served: str, path: str) -> str:
    """The URL of the page built from ``docs/<path>`` (MkDocs' directory URLs)."""
    return served if path == "index.md" else f"{served}{path.removesuffix('.md')}/"


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    handler = functools.partial(_Quiet, directory=str(site))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def browser(served: str) -> Iterator[Browser]:
    if not CHROMIUM.is_file():
        pytest.fail("Debian's chromium is missing: make setup installs it")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
        try:
            yield chromium
        finally:
            chromium.close()


def _nav_links(page: Page, base: str) -> list[str]:
    """The site's own pages the navigation of ``page`` links to (absolute URLs)."""
    hrefs: list[str] = page.eval_on_selector_all(
        "nav.md-nav a.md-nav__link[href], nav.md-tabs a.md-tabs__link[href]",
        "links => links.map(a => a.href)",
    )
    own = {urljoin(h, urlsplit(h).path) for h in hrefs if h.startswith(base)}
    return sorted(own)


#: Per page, in the browser: what a reader would see wrong (see the module docstring).
PAGE_PROBLEMS = """() => {
  const article = document.querySelector("article");
  const found = [];
  for (const block of article.querySelectorAll("pre > code")) {
    if (block.closest("table")) continue;  // a cell's code: the table scrolls, not prose
    const pre = block.parentElement;
    if (block.scrollWidth > block.clientWidth + 1 || pre.scrollWidth > pre.clientWidth + 1)
      found.push("a code block scrolls sideways: " + block.innerText.split("\\n")[0]);
    // Material's copy button: in a nav of code buttons (9.6+), or alone (before)
    const button = pre.querySelector(".md-code__nav, button.md-clipboard");
    if (!button) {
      found.push("a code block without its copy button: " + block.innerText.split("\\n")[0]);
      continue;
    }
    const text = block.innerText;
    const walker = document.createTreeWalker(block, NodeFilter.SHOW_TEXT);
    const range = document.createRange();
    let node, first = true, covered = false;
    const b = button.getBoundingClientRect();
    let seen = 0;
    const end = text.indexOf("\\n") < 0 ? text.length : text.indexOf("\\n");
    while ((node = walker.nextNode()) && seen < end) {
      const take = Math.min(node.length, end - seen);
      seen += node.length;
      if (!node.data.slice(0, take).trim()) continue;  // a space that wraps hangs: no glyph
      range.setStart(node, 0); range.setEnd(node, take);
      for (const r of range.getClientRects()) {
        if (r.width && r.right > b.left && r.left < b.right && r.bottom > b.top && r.top < b.bottom)
          covered = true;
      }
    }
    if (covered) found.push("the copy button covers the first line of: " + text.split("\\n")[0]);
  }
  for (const el of article.querySelectorAll("pre.mermaid, div.mermaid, code.language-mermaid"))
    found.push("raw Mermaid: " + el.innerText.slice(0, 60));
  const words = article.innerText.split(/\\s+/).length;
  const headings = article.querySelectorAll("h2, h3").length;
  return {found, words, headings, text: article.innerText};
}"""


def test_every_page_renders_right(browser: Browser, served: str, screenshots: Path) -> None:
    page = browser.new_page(viewport=VIEWPORT)
    offsite: list[str] = []
    errors: list[str] = []
    page.on(
        "request",
        lambda request: (
            None if request.url.startswith((served, "data:")) else offsite.append(request.url)
        ),
    )
    page.on(
        "console", lambda m: errors.append(f"{page.url}: {m.text}") if m.type == "error" else None
    )
    page.on("pageerror", lambda exc: errors.append(f"{page.url}: {exc}"))
    page.goto(served)
    todo, seen = _nav_links(page, served), {served}
    problems: list[str] = []
    while todo:
        url = todo.pop(0)
        if url in seen:
            continue
        seen.add(url)
        response = page.goto(url)
        assert response is not None and response.ok, f"{url}: {response and response.status}"
        page.wait_for_load_state("networkidle")
        title = page.locator("article h1").first
        assert title.is_visible() and title.inner_text().strip(), f"{url}: no title"
        images = page.eval_on_selector_all(
            "article img", "imgs => imgs.map(i => [i.src, i.complete && i.naturalWidth > 0])"
        )
        problems += [f"{url}: an image did not load: {src}" for src, ok in images if not ok]
        report = page.evaluate(PAGE_PROBLEMS)
        problems += [f"{url}: {problem}" for problem in report["found"]]
        if LITERAL_ROLE.search(report["text"]):
            problems.append(f"{url}: a literal Sphinx role: {LITERAL_ROLE.search(report['text'])}")
        if RAW_MERMAID.search(report["text"]):
            problems.append(f"{url}: raw Mermaid text")
        if report["words"] > LONG_PAGE_WORDS and report["headings"] < 2:
            problems.append(f"{url}: {report['words']} words and {report['headings']} headings")
        name = urlsplit(url).path.strip("/").replace("/", "_") or "index"
        page.screenshot(path=str(screenshots / f"{name}.png"), full_page=True)
        todo += [link for link in _nav_links(page, served) if link not in seen]
    expected = {page_url(served, path) for _, path in nav_entries()}
    assert expected <= seen, f"pages the navigation never reached: {sorted(expected - seen)}"
    assert not problems, "\n".join(problems)
    assert not errors, f"console errors: {errors}"
    assert not offsite, f"the site asked the network for {offsite[:5]}"


def test_the_benchmark_charts_are_readable_at_1280_px(
    browser: Browser, served: str, screenshots: Path
) -> None:
    """Each chart is shown at (nearly) the size it was drawn for, its lettering readable, in
    light and in dark mode."""
    for scheme in ("light", "dark"):
        page = browser.new_page(viewport=VIEWPORT, color_scheme=scheme)
        response = page.goto(served + "benchmarks/")
        assert response is not None and response.ok
        page.wait_for_load_state("networkidle")
        sizes = page.eval_on_selector_all(
            "article img[src$='.svg']",
            "imgs => imgs.map(i => [i.src, i.naturalWidth, i.getBoundingClientRect().width])",
        )
        results = list((ROOT / "bench/results").glob("*.json"))
        assert len(sizes) == len(results), sizes
        for src, natural, shown in sizes:
            assert natural > 0, f"{src} did not load"
            assert shown >= 0.85 * natural, f"{src} is squeezed: {shown:.0f} of {natural} px"
        page.screenshot(path=str(screenshots / f"benchmarks-{scheme}.png"), full_page=True)
        for index, chart in enumerate(page.locator("article img[src$='.svg']").all()):
            chart.screenshot(path=str(screenshots / f"chart-{index}-{scheme}.png"))
        page.close()


def test_two_clicks_reach_object_storage_avro_and_the_configuration(
    browser: Browser, served: str
) -> None:
    """Breadth first over the links a reader can click (navigation and page text), from the
    home page: each target within two clicks."""
    page = browser.new_page()
    depth = {served: 0}
    frontier = [served]
    for clicks in (1, 2):
        following: list[str] = []
        for url in frontier:
            page.goto(url)
            hrefs = page.eval_on_selector_all(
                "a[href]", "links => links.filter(a => a.offsetParent !== null).map(a => a.href)"
            )
            for href in hrefs:
                link = urljoin(href, urlsplit(href).path)
                if link.startswith(served) and link not in depth:
                    depth[link] = clicks
                    following.append(link)
        frontier = following
    for target in TWO_CLICKS:
        assert served + target in depth, f"{target} is more than two clicks from the home page"
    trails = {page_url("", path): trail for trail, path in nav_entries()}
    for target in TWO_CLICKS:  # and in the navigation: a tab, then the page
        assert len(trails[target]) <= 2, f"{target} is {trails[target]} deep in the navigation"
    avro = page.goto(served + "guides/formats/")
    assert avro is not None and "Avro with a Schema Registry" in page.content()
