"""The benchmarks' JSON results (bench/results/*.json, bench/benchjson.py) and their charts
(bench/charts.py), which the documentation site draws at build time."""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
PNG = b"\x89PNG\r\n\x1a\n"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("path", sorted(BENCH.glob("results/*.json")), ids=lambda p: p.stem)
def test_every_results_file_is_labelled_and_charted(path: Path) -> None:
    family = json.loads(path.read_text())
    assert family["family"] == path.stem
    for label in ("title", "measured", "machine", "load", "provenance"):
        assert family[label], f"{path.name}: no {label}"
    for row in family["rows"]:
        assert {"what", "sluice", "other", "ratio", "goal", "command"} <= set(row)
    assert any("chart" in row for row in family["rows"]), "every family gets a chart"
    assert load("charts").chart(family).startswith(PNG)


def test_a_benchmarks_json_output_is_what_the_charts_draw(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    benchjson = load("benchjson")
    monkeypatch.setattr(sys, "argv", ["bench/sinks.py", "--json", "x.json"])
    chart = {"unit": "s", "sides": ["sink", "Parquet"], "values": {"Delta": [13.6, 13.2]}}
    rows = [benchjson.row("200,000 messages", "13.6 s", "13.2 s", "1.03x", "<= 1.2x", "c", chart)]
    benchjson.write(tmp_path / "sinks.json", "sinks", "Sinks", rows)
    charts = load("charts")
    [family] = charts.families(tmp_path)
    assert family["provenance"] == "written by bench/sinks.py --json x.json"
    assert charts.chart(family).startswith(PNG)
    family["rows"][0].pop("chart")
    with pytest.raises(ValueError, match="no row has a chart"):
        charts.chart(family)


def test_freshness_json_rows_chart_each_side_against_the_anchor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.unit.test_bench_freshness import load_freshness

    freshness = load_freshness()
    batch = freshness.Batch("b1", 10.0, 9.0, [1.0, 2.0], [0, 1])
    results = [
        freshness.Result("a. Airflow, event-driven DAG", [30.0, 40.0], [batch], 2, 0, 0, []),
        freshness.Result("b. Dagster, sensor", [], [], 2, 0, 2, []),  # nothing visible: no row
    ]
    args = argparse.Namespace(rate=1000.0, seconds=120.0, connect=False)
    sys.path.insert(0, str(BENCH))  # benchjson, as the script finds it
    try:
        rows = freshness.json_rows(results, args)
        monkeypatch.setattr(sys, "argv", ["bench/freshness.py", "--json", "f.json"])
        load("benchjson").write(tmp_path / "freshness.json", "freshness", "Freshness", rows)
    finally:
        sys.path.remove(str(BENCH))
    [row] = rows
    assert row["command"] == "bench/freshness.py --rate 1000 --seconds 120"
    p50 = freshness.percentile([30.0, 40.0], 50)
    assert row["chart"]["values"] == {"a. Airflow": [p50, 300.0]}
    [family] = load("charts").families(tmp_path)
    assert load("charts").chart(family).startswith(PNG)
