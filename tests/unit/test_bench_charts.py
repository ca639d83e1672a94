"""The benchmarks' JSON results (bench/results/*.json, bench/benchjson.py) and their charts
(bench/charts.py), which the documentation site draws at build time."""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def is_svg(data: bytes) -> bool:
    return data.lstrip().startswith(b"<?xml") and b"<svg" in data[:2000]


@pytest.mark.parametrize("path", sorted(BENCH.glob("results/*.json")), ids=lambda p: p.stem)
def test_every_results_file_is_labelled_and_charted(path: Path) -> None:
    family = json.loads(path.read_text())
    assert family["family"] == path.stem
    for label in ("title", "measured", "machine", "load", "provenance"):
        assert family[label], f"{path.name}: no {label}"
    for row in family["rows"]:
        assert {"what", "sluice", "other", "ratio", "goal", "command"} <= set(row)
    assert any("chart" in row for row in family["rows"]), "every family gets a chart"
    charts = load("charts")
    assert is_svg(charts.chart(family))
    # its own questions, not the fallback: the presenter reads this file as it is
    found = charts.PRESENTERS[family["family"]](family)
    assert found and all(panel.bars or panel.series for panel in found)
    for panel in found:
        for bar in panel.bars:
            assert not re.match(r"\(\w\)", bar.name), f"a side named by its letter: {bar.name}"
    tables = charts.tables(family)
    assert "--json" not in tables and charts.reproduce(family).startswith("bench/")


def test_values_are_rounded_as_a_reader_reads_them() -> None:
    rounded = load("charts").rounded
    assert [rounded(v) for v in (137558.92, 0.0284, 3.714, 17.77, 1.0)] == [
        "137,559", "0.0284", "3.71", "17.8", "1",
    ]  # fmt: skip


def test_the_ingest_tables_name_the_sides_instead_of_their_letters() -> None:
    charts = load("charts")
    [family] = [f for f in charts.families() if f["family"] == "ingest"]
    tables = charts.tables(family)
    assert "i: " not in tables and "(e/h)" not in tables
    assert charts.INGEST_SIDES["i"] in tables


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
    assert is_svg(charts.chart(family))
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
    args = argparse.Namespace(rate=1000.0, seconds=120.0, connect=False, broker="kafka")
    sys.path.insert(0, str(BENCH))  # benchjson, as the script finds it
    try:
        rows = freshness.json_rows(results, args)
        monkeypatch.setattr(sys, "argv", ["bench/freshness.py", "--json", "f.json"])
        load("benchjson").write(
            tmp_path / "freshness.json", "freshness", "Freshness", rows, "Apache Kafka 4.4.0"
        )
    finally:
        sys.path.remove(str(BENCH))
    [row] = rows
    assert row["command"] == "bench/freshness.py --broker kafka --rate 1000 --seconds 120"
    p50 = freshness.percentile([30.0, 40.0], 50)
    assert row["chart"]["values"] == {"a. Airflow": [p50, 300.0]}
    [family] = load("charts").families(tmp_path)
    assert family["broker"] == "Apache Kafka 4.4.0"
    assert is_svg(load("charts").chart(family))


def test_trigger_latency_json_rows_hold_the_fleet_and_the_latencies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the module gives Airflow a home when none is set: one of this test's, put back after it
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    monkeypatch.setattr(sys, "path", list(sys.path))  # it puts the repository first
    sys.path.insert(0, str(BENCH))  # its percentiles, clock_trigger and benchjson modules
    try:
        spec = importlib.util.spec_from_file_location("bench_trigger", BENCH / "trigger_latency.py")
        assert spec is not None and spec.loader is not None
        trigger = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = trigger  # its dataclasses look their module up
        spec.loader.exec_module(trigger)
        monkeypatch.setattr(sys, "argv", ["bench/trigger_latency.py", "--idle", "500"])
        cpu = {
            "QueueMessageTrigger": [trigger.CpuSample(500, 0.065, 19, 538.0)],
            "KafkaSharedStreamTrigger": [trigger.CpuSample(500, 0.281, 209, 488.0)],
        }
        latency = {
            "QueueMessageTrigger": [(0.6, 0.7), (0.7, 0.8)],
            "KafkaSharedStreamTrigger": [(12.0, 13.0), (13.0, 14.0)],
        }
        results = {"QueueMessageTrigger (default)": [0.1, 0.2], "AwaitMessageTrigger": [0.001]}
        args = argparse.Namespace(topics=50, idle_seconds=30.0, samples=2)
        rows = trigger.json_rows(results, cpu, latency, {"QueueMessageTrigger": [0.5]}, args)
        load("benchjson").write(tmp_path / "trigger_fleet.json", "trigger_fleet", "T", rows)
    finally:
        sys.path.remove(str(BENCH))
        sys.modules.pop("bench_trigger", None)
    fleet, first, in_process = rows
    assert fleet["sluice"] == "QueueMessageTrigger: 0.065, 19 threads, 538 MiB"
    assert fleet["chart"]["values"] == {"threads": [19, 209]}
    assert first["ratio"].endswith("x") and "triggerer's own p50 500 ms" in first["sluice"]
    assert in_process["other"].startswith("AwaitMessageTrigger: p50 1.0 ms")
    [family] = load("charts").families(tmp_path)
    assert is_svg(load("charts").chart(family))


def test_an_ingest_run_over_several_sizes_charts_each_goal_at_every_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ingest = load("ingest")
    monkeypatch.syspath_prepend(str(BENCH))  # json_results imports benchjson as a script does
    results = [
        ingest.SizeResult(
            n,
            {"e": [n / 90.0], "h": [n / 100.0], "i": [n / rate], "j": [n / 100.0]},
            {"e": 90.0, "h": 100.0, "i": rate, "j": 100.0},
            {"i": 21.0, "j": 20.0},
        )
        for n, rate in ((20_000, 120.0), (2_000_000, 80.0))
    ]
    args = argparse.Namespace(
        broker="kafka", messages="20000,2000000", repeats=1, warm_rounds=1, sides="ehij", big=0
    )
    ingest.json_results(str(tmp_path / "ingest.json"), results, args, "Apache Kafka")
    charts = load("charts")
    [family] = charts.families(tmp_path)
    row = charts._row(family, "no options / hand-written Spark job")
    assert row["ratio"].startswith("1.20x / 0.80x throughput")
    assert row["goal"] == ">= 1.0"
    panels = {p.question: p for p in charts.PRESENTERS["ingest"](family)}
    default = panels["Sluice with no options against a Spark user's own job, at every size"]
    assert [(b.name, round(b.value, 2)) for b in default.bars] == [
        ("20,000 messages", 1.2), ("2,000,000 messages", 0.8),
    ]  # fmt: skip
    assert [g.value for g in default.goals] == [1.0]
    what = "What does exactly-once cost? Against an at-least-once ingest of the same pieces"
    costs = panels[what]
    assert [round(b.value, 2) for b in costs.bars] == [1.11, 1.11]  # e's time over h's
    on_disk = panels["Bytes on disk per message: Sluice's default table against the Spark job's"]
    assert [round(b.value, 2) for b in on_disk.bars] == [1.05, 1.05]
    assert is_svg(charts.chart(family))
