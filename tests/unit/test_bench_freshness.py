"""bench/freshness.py's measuring parts, on files written here: a batch directory the sink
watcher finds, the latencies it gives (a message never seen counted at the end, not left
out) and the ingest task's phases read from a task log."""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path
from types import ModuleType

import pyarrow as pa
import pyarrow.parquet as pq

BENCH = Path(__file__).resolve().parents[2] / "bench"


def load_freshness() -> ModuleType:
    sys.path.insert(0, str(BENCH))  # its percentiles module
    try:
        spec = importlib.util.spec_from_file_location("bench_freshness", BENCH / "freshness.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # its dataclasses look their module up
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCH))


def test_a_published_batch_gives_each_message_its_latency(tmp_path: Path) -> None:
    freshness = load_freshness()
    now = time.time()
    produced = [now - 30.0, now - 20.0, now - 10.0]
    batch = tmp_path / "batch_id=b1"
    batch.mkdir()
    table = pa.table({"device": ["m-0", "m-1"], "temperature": produced[:2]})
    pq.write_table(table, batch / "part-0.parquet")
    (batch / "_sluice_batch.json").write_text(json.dumps({"published_at": now - 1.0}))
    watcher = freshness.SinkWatcher(tmp_path)
    watcher.look()
    [found] = watcher.batches.values()
    assert found.sequences == [0, 1] and found.published_at == now - 1.0
    publisher = freshness.Publisher("unused", "t", rate=1.0, seconds=3.0, humidity=False)
    publisher.produced = produced
    latencies, twice, missing = freshness.summarise(watcher, publisher)
    assert (twice, missing) == (0, 1)
    assert [round(v) for v in latencies[:2]] == [round(found.visible - p) for p in produced[:2]]
    assert latencies[2] >= 10.0  # message 2, never visible: at least its age at the end


def test_the_task_phases_come_from_the_first_line_of_each(tmp_path: Path) -> None:
    freshness = load_freshness()
    lines = [
        ("2026-01-01T00:00:01Z", "starting Spark ($SLUICE_SPARK_MASTER)"),
        ("2026-01-01T00:00:31Z", "starting: checking that Spark's Python workers can run"),
        ("2026-01-01T00:00:40Z", "reading: 0 of 10 messages"),
        ("2026-01-01T00:00:41Z", "reading: 10 of 10 messages"),
        ("2026-01-01T00:00:41Z", "read: 10 of 10 messages"),
        ("2026-01-01T00:00:50Z", "written: batch b1 is published"),
    ]
    log = tmp_path / "attempt=1.log"
    text = "\n".join(json.dumps({"timestamp": t, "event": e}) for t, e in lines)
    log.write_text(text + "\nnot json\n")
    phases = freshness.task_phases(tmp_path / "attempt=*.log")
    assert phases["session"] - phases["spark"] == 30.0
    assert phases["read"] - phases["reading"] == 1.0
    assert "committed" not in phases
