"""Two ingests at once in one SparkSession keep each other's settings.

A write sets what it needs in the session's runtime configuration (Spark's Parquet writer:
``spark.sql.parquet.outputTimestampType`` TIMESTAMP_MICROS; the Python writer: the Arrow
batch size) and puts the session's own value back afterwards. Two ingests in one session (a
driver's threads: Dagster's in-process executor, a Spark Connect client) undid each other's
setting: the first to finish put the old value back while the other was still writing, and
Spark's writer then wrote INT96 timestamps. Now a setting stays while any block that asked
for it runs (:func:`sluice.spark.writing.session_conf`).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from sluice.brokers import BrokerProcess
from sluice.spark import ingest
from sluice.spark.writing import session_conf
from sluice.testing.waiting import wait_until

from .conftest import SCHEMA, KafkaTopic, opened_topic, reading

pytestmark = pytest.mark.kafka

TIMESTAMPS = "spark.sql.parquet.outputTimestampType"


@pytest.fixture
def int96_session(spark: Any) -> Iterator[Any]:
    """The session with Spark's Parquet writer at its own default (INT96 timestamps), as a
    session Sluice did not make has it (``spark_session`` sets TIMESTAMP_MICROS)."""
    before = spark.conf.get(TIMESTAMPS, None)
    spark.conf.unset(TIMESTAMPS)
    try:
        yield spark
    finally:
        if before is not None:
            spark.conf.set(TIMESTAMPS, before)


def _in_frame(thread: threading.Thread, name: str, module: str = "") -> bool:
    """Whether ``thread`` runs a function ``name`` (of a file whose path holds ``module``)
    now: how the test knows a thread reached a call that blocks."""
    frame = sys._current_frames().get(thread.ident or -1)
    while frame is not None:
        if frame.f_code.co_name == name and module in frame.f_code.co_filename:
            return True
        frame = frame.f_back
    return False


def test_a_setting_stays_while_any_block_that_asked_for_it_runs(int96_session: Any) -> None:
    spark = int96_session
    original = spark.conf.get(TIMESTAMPS, None)
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen: list[str | None] = []

    def first() -> None:
        with session_conf(spark, {TIMESTAMPS: "TIMESTAMP_MICROS"}):
            first_in.set()
            assert second_in.wait(30)
        first_out.set()

    def second() -> None:
        assert first_in.wait(30)
        with session_conf(spark, {TIMESTAMPS: "TIMESTAMP_MICROS"}):
            second_in.set()
            assert first_out.wait(30)
            seen.append(spark.conf.get(TIMESTAMPS, None))  # the first has left

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert seen == ["TIMESTAMP_MICROS"], "the first block's exit undid the second's setting"
    assert spark.conf.get(TIMESTAMPS, None) == original, "the last to leave puts it back"


def test_another_value_of_a_held_setting_waits_until_it_is_free(spark: Any) -> None:
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    original = spark.conf.get(key)
    inside: list[str] = []
    waiter = threading.Thread(target=lambda: _hold(spark, key, "500", inside))
    with session_conf(spark, {key: "10000"}):
        waiter.start()
        wait_until(lambda: _in_frame(waiter, "wait_for"), 30, 0.01, "the second block to wait")
        assert spark.conf.get(key) == "10000" and inside == []
    waiter.join(30)
    assert inside == ["500"]
    assert spark.conf.get(key) == original


def _hold(spark: Any, key: str, value: str, inside: list[str]) -> None:
    with session_conf(spark, {key: value}):
        inside.append(spark.conf.get(key))


@pytest.fixture
def second_topic(apache_kafka_broker: BrokerProcess, unique_name: str) -> Iterator[KafkaTopic]:
    yield from opened_topic(apache_kafka_broker, f"{unique_name}-b")


class _Gate:
    """Holds a thread's first Parquet write (``DataFrameWriter.parquet``, inside its
    ingest's settings) until the test lets it go: the interleaving of two ingests, made
    certain."""

    def __init__(self) -> None:
        self.arrived = threading.Event()
        self.go = threading.Event()
        self.passed = False


def test_two_ingests_at_once_in_one_session_keep_spark_writers_timestamps(
    int96_session: Any,
    cold_spark: Any,
    topic: KafkaTopic,
    second_topic: KafkaTopic,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ingest A starts writing (Spark's own writer: ``options.reader`` spark in a cold
    session), ingest B starts writing, A finishes, B goes on. A's end put the session's INT96
    back while B was about to write, and B's files had INT96 timestamps."""
    from pyspark.sql.readwriter import DataFrameWriter

    spark = int96_session
    for each in (topic, second_topic):
        each.send([reading(i) for i in range(100)] + [b"not json"])
    gates = {"ingest-a": _Gate(), "ingest-b": _Gate()}
    parquet = DataFrameWriter.parquet

    def gated(writer: Any, *args: Any, **kwargs: Any) -> Any:
        gate = gates.get(threading.current_thread().name)
        if gate is not None and not gate.passed:
            gate.passed = True
            gate.arrived.set()
            assert gate.go.wait(120), "the test never let the write go"
        return parquet(writer, *args, **kwargs)

    monkeypatch.setattr(DataFrameWriter, "parquet", gated)
    original = spark.conf.get(TIMESTAMPS, None)
    results: dict[str, Any] = {}
    sinks = {"ingest-a": tmp_path / "a", "ingest-b": tmp_path / "b"}

    def run(each: KafkaTopic) -> None:
        name = threading.current_thread().name
        results[name] = ingest(
            spark, each.plan(), str(sinks[name]), source=f"{each.source}?reader=spark",
            schema=SCHEMA,
        )  # fmt: skip

    a = threading.Thread(target=run, args=(topic,), name="ingest-a")
    b = threading.Thread(target=run, args=(second_topic,), name="ingest-b")
    try:
        a.start()
        assert gates["ingest-a"].arrived.wait(120), "ingest A never wrote"
        b.start()
        assert gates["ingest-b"].arrived.wait(120), "ingest B never wrote"
        gates["ingest-a"].go.set()
        a.join(180)
        assert not a.is_alive()
        gates["ingest-b"].go.set()
        b.join(180)
    finally:
        for gate in gates.values():
            gate.go.set()

    assert set(results) == {"ingest-a", "ingest-b"}, "an ingest failed"
    for name, result in results.items():
        assert (result.mode, result.written, result.quarantined) == ("spark", 100, 1), name
    for name, sink in sinks.items():
        stamps = {}
        for path in sorted(sink.rglob("*.parquet")):
            schema = pq.ParquetFile(path).schema
            columns = {schema.column(i).name: schema.column(i) for i in range(len(schema))}
            if "timestamp" in columns:
                stamps[path.relative_to(sink)] = columns["timestamp"].physical_type
        assert stamps, f"{name} wrote no file with timestamps"
        assert set(stamps.values()) == {"INT64"}, f"{name} wrote INT96 timestamps: {stamps}"
    assert spark.conf.get(TIMESTAMPS, None) == original
