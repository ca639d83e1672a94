"""The JSON results a benchmark writes with ``--json PATH``: the layout of
``bench/results/*.json``, which ``bench/charts.py`` draws and the documentation site shows.

A file is one benchmark family: ``version``, ``family``, ``title``, when (``measured``, a
UTC date) and where (``machine``: cores and system, ``load``: the load average while it ran)
it was measured, ``broker`` (the Kafka broker, where one took part), ``provenance`` (the
command), and ``rows``: each the figure (``sluice``), the other side (``other``), the
``ratio``, the ``goal``, the ``command``, and optionally a ``chart`` (``unit``, the two
``sides``' names, and per case the two values).
"""

from __future__ import annotations

import json
import os
import platform
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def row(
    what: str,
    sluice: str,
    other: str,
    ratio: str,
    goal: str,
    command: str,
    chart: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One row of a family's table (see the module docstring)."""
    found: dict[str, Any] = {
        "what": what, "sluice": sluice, "other": other, "ratio": ratio, "goal": goal,
        "command": command,
    }  # fmt: skip
    if chart is not None:
        found["chart"] = chart
    return found


def write(
    path: str | Path,
    family: str,
    title: str,
    rows: list[dict[str, Any]],
    broker: str | None = None,
    load_note: str | None = None,
) -> None:
    """Write the family's results to ``path`` (``bench/results/<family>.json`` to publish);
    ``broker`` names the Kafka broker the figures came from, where one took part;
    ``load_note`` is said beside the load (what else ran on the machine)."""
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    document = {
        "version": 1,
        "family": family,
        "title": title,
        "measured": datetime.now(UTC).date().isoformat(),
        "machine": f"{os.cpu_count()}-core {platform.system()} {platform.machine()}",
        "load": f"load average {load} at the end" + (f"; {load_note}" if load_note else ""),
        "provenance": f"written by {' '.join(['bench/' + Path(sys.argv[0]).name, *sys.argv[1:]])}",
        "rows": rows,
    }
    if broker is not None:
        document["broker"] = broker
    Path(path).write_text(json.dumps(document, indent=2) + "\n")
    print(f"results written to {path}")
