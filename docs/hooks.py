"""MkDocs hooks of the documentation site: what is generated from the code at build time.

- ``<!-- sluice-cli-reference -->`` on a page becomes the reference of the ``sluice`` command,
  from its own definitions (:func:`sluice.reference.cli_reference`);
- every benchmark family's JSON results (``bench/results/*.json``) become a chart,
  ``benchmarks/<family>.png``, drawn by ``bench/charts.py``; ``<!-- sluice-benchmark FAMILY
  -->`` on a page becomes that chart and the family's table (the figure, the other side, the
  ratio, the goal, the command), from the same file.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
CLI_MARKER = "<!-- sluice-cli-reference -->"
BENCHMARK = re.compile(r"<!-- sluice-benchmark (\w+) -->")


def _charts_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sluice_bench_charts", ROOT / "bench/charts.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def on_files(files: Files, config: Any) -> Files:
    charts = _charts_module()
    for family in charts.families():
        files.append(
            File.generated(
                config, f"benchmarks/{family['family']}.png", content=charts.chart(family)
            )
        )
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    if CLI_MARKER in markdown:
        from sluice.reference import cli_reference

        markdown = markdown.replace(CLI_MARKER, cli_reference())
    if BENCHMARK.search(markdown):
        found = {family["family"]: family for family in _charts_module().families()}
        markdown = BENCHMARK.sub(lambda match: _benchmark(found[match.group(1)]), markdown)
    return markdown


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _benchmark(family: dict[str, Any]) -> str:
    lines = [
        f"![{family['title']}](benchmarks/{family['family']}.png)",
        "",
        f"*Measured {family['measured']} on a {family['machine']}, {family['load']}"
        + (f", broker: {family['broker']}" if family.get("broker") else "")
        + f"; {family['provenance']}.*",
        "",
        "| what | Sluice | the other side | ratio | goal | command |",
        "|---|---|---|---|---|---|",
    ]
    for row in family["rows"]:
        cells = [row["what"], row["sluice"], row["other"], row["ratio"], row["goal"]]
        command = f"`{row['command']}`" if row["command"].startswith("bench/") else row["command"]
        lines.append("| " + " | ".join([*map(_cell, cells), _cell(command)]) + " |")
    return "\n".join(lines) + "\n"
