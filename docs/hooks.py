"""MkDocs hooks of the documentation site: what is generated from the code at build time.

- ``<!-- sluice-cli-reference -->`` on a page becomes the reference of the ``sluice`` command,
  from its own definitions (:func:`sluice.reference.cli_reference`);
- every benchmark family's JSON results (``bench/results/*.json``) become a chart,
  ``benchmarks/<family>.svg``, drawn by ``bench/charts.py``; ``<!-- sluice-benchmark FAMILY
  -->`` on a page becomes that chart and the family's tables (its setup, the command that
  measured it, and per row the figure, the other side, the ratio and the goal), from the
  same file;
- a ``\\|`` inside a code span of a table row is a ``|`` on the site, as on GitHub (GitHub needs
  the backslash there; Python-Markdown's tables keep it, and need none inside code);
- a dependency's warning at import (pip-services' invalid escape sequences, compiled where no
  bytecode is cached) is not printed by every build.
"""

from __future__ import annotations

import importlib.util
import re
import sys
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
CLI_MARKER = "<!-- sluice-cli-reference -->"
BENCHMARK = re.compile(r"<!-- sluice-benchmark (\w+) -->")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")

warnings.filterwarnings(
    "ignore", message=r"invalid escape sequence", category=DeprecationWarning
)  # pip_services3's modules, compiled at import (see the module docstring)
warnings.filterwarnings("ignore", message=r"invalid escape sequence", category=SyntaxWarning)


def _charts_module() -> ModuleType:
    name = "sluice_bench_charts"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench/charts.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def on_files(files: Files, config: Any) -> Files:
    charts = _charts_module()
    for family in charts.families():
        files.append(
            File.generated(
                config, f"benchmarks/{family['family']}.svg", content=charts.chart(family)
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
    return unescape_code_pipes(markdown)


def unescape_code_pipes(markdown: str) -> str:
    """``\\|`` as ``|`` inside the code spans of table rows (see the module docstring)."""

    def row(line: str) -> str:
        if not line.lstrip().startswith("|"):
            return line
        return _CODE_SPAN.sub(lambda m: m.group(0).replace("\\|", "|"), line)

    return "\n".join(row(line) for line in markdown.split("\n"))


def _benchmark(family: dict[str, Any]) -> str:
    charts = _charts_module()
    image = f"![{family['title']}](benchmarks/{family['family']}.svg)"
    return f"{image}\n\n{charts.tables(family)}"
