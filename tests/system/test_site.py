"""The documentation site: ``mkdocs build --strict`` (no broken link, no missing page, no page
left out of the navigation, every docstring readable), then the built site in a real browser:
headless Chromium (Debian's ``/usr/bin/chromium``, driven by Playwright; no browser is ever
downloaded) follows the navigation from the home page to every page, and each page shows its
title and loads its images (the benchmark charts included). A new user reaches object storage,
Avro with a registry and the configuration reference in at most two clicks from the home page.

The site is served from a loopback port by a server in this process; the browser runs with
its background networking off, so nothing leaves the machine.
"""

from __future__ import annotations

import functools
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


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("site") / "site"
    built = build(folder)
    assert built.returncode == 0, f"mkdocs build --strict failed:\n{built.stderr[-6000:]}"
    return folder


def test_the_site_builds_strictly_with_every_page_and_chart(site: Path) -> None:
    for _, path in nav_entries():
        built = site / "index.html" if path == "index.md" else site / path[:-3] / "index.html"
        assert built.is_file(), f"{path} was not built"
    charts = sorted(p.name for p in (site / "benchmarks").glob("*.png"))
    results = sorted(f"{p.stem}.png" for p in (ROOT / "bench/results").glob("*.json"))
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


def test_every_page_renders_its_title_and_images(browser: Browser, served: str) -> None:
    page = browser.new_page()
    offsite: list[str] = []
    page.on(
        "request",
        lambda request: (
            None if request.url.startswith((served, "data:")) else offsite.append(request.url)
        ),
    )
    page.goto(served)
    todo, seen = _nav_links(page, served), {served}
    while todo:
        url = todo.pop(0)
        if url in seen:
            continue
        seen.add(url)
        response = page.goto(url)
        assert response is not None and response.ok, f"{url}: {response and response.status}"
        title = page.locator("article h1").first
        assert title.is_visible() and title.inner_text().strip(), f"{url}: no title"
        images = page.eval_on_selector_all(
            "article img", "imgs => imgs.map(i => [i.src, i.complete && i.naturalWidth > 0])"
        )
        broken = [src for src, ok in images if not ok]
        assert not broken, f"{url}: images that did not load: {broken}"
        todo += [link for link in _nav_links(page, served) if link not in seen]
    expected = {page_url(served, path) for _, path in nav_entries()}
    assert expected <= seen, f"pages the navigation never reached: {sorted(expected - seen)}"
    charts = page.goto(served + "benchmarks/")
    assert charts is not None and charts.ok
    widths = page.eval_on_selector_all("article img", "imgs => imgs.map(i => i.naturalWidth)")
    assert len(widths) >= 9 and all(w > 0 for w in widths), widths
    assert not offsite, f"the site asked the network for {offsite[:5]}"


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
