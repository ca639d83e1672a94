"""Draw the site's Mermaid diagrams offline: ``docs/diagrams/NAME.mmd`` -> ``NAME.svg``.

The site shows the committed SVGs; nothing renders Mermaid when the site is built or read
(the build machine and the reader's browser fetch nothing). To change a diagram, edit its
``.mmd`` and run, from the root of a clone::

    npm install --prefix /tmp/mermaid mermaid@11.17.2
    .venv/bin/python docs/diagrams/render.py /tmp/mermaid/node_modules/mermaid/dist/mermaid.min.js

It renders each diagram in Debian's headless Chromium (Playwright, as the site's browser
test) with Mermaid's own code, and writes the SVG with the SHA-256 of its source, which
``tests/system/test_site.py`` checks, so a diagram whose ``.mmd`` changed without a new SVG
fails the tests.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CHROMIUM = "/usr/bin/chromium"
#: The Mermaid settings: text as SVG text (no HTML in foreignObject: the SVG is shown as an
#: image), the neutral theme on its own white background (readable in dark mode too).
CONFIG = {
    "startOnLoad": False,
    "theme": "neutral",
    "securityLevel": "strict",
    "htmlLabels": False,
    "flowchart": {"htmlLabels": False, "useMaxWidth": False, "curve": "basis"},
    "themeVariables": {"fontFamily": "DejaVu Sans, Verdana, Arial, sans-serif", "fontSize": "15px"},
}


def source_digest(source: str) -> str:
    """The marker an SVG carries of the ``.mmd`` text it was drawn from."""
    return "sluice-diagram-source sha256:" + hashlib.sha256(source.encode()).hexdigest()


def render(mermaid_js: Path, sources: list[Path]) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page()
        page.set_content("<!doctype html><html><body></body></html>")
        page.add_script_tag(content=mermaid_js.read_text())
        page.evaluate(f"mermaid.initialize({json.dumps(CONFIG)})")
        for source in sources:
            text = source.read_text()
            svg: str = page.evaluate(
                "async ([id, text]) => (await mermaid.render(id, text)).svg",
                [source.stem, text],
            )
            # A white background of its own, and the source's digest (see the docstring).
            svg = svg.replace(">", ' style="background-color: white;">', 1)
            target = source.with_suffix(".svg")
            target.write_text(f"<!-- {source_digest(text)} -->\n{svg}\n")
            print(target)
        browser.close()


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__)
        return 2
    render(Path(argv[0]), sorted(HERE.glob("*.mmd")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
