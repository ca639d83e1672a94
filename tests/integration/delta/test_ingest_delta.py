"""The Delta Lake sink on a real Spark, a real Kafka (noida-db) and real delta-rs: batches as
Delta commits with the stream's ``txn``, the quarantine table, schema evolution, reruns
recognised from the log, the audit, the CLI, and the table read by deltalake, DuckDB and
Polars."""

from __future__ import annotations

import glob
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sluice.audit import audit
from sluice.batch import plan_batch
from sluice.lineage import sink_dataset
from sluice.queues.config import ConfigError
from sluice.spark import ingest
from sluice.spark.sinks import ConcurrentIngestError, StreamKey, open_sink
from sluice.spark.sinks.delta import DeltaSink, app_id
from sluice.testing.plugin import Broker
from tests.unit.cli.runner import assert_ok, run

from ..spark.conftest import SCHEMA, KafkaTopic, reading
from ..spark.crashes import assert_exactly_once
from ..spark.test_crash_matrix import BAD
from .conftest import open_delta


def delta_rows(path: Path | str) -> list[dict[str, Any]]:
    """Every row of the table at ``path`` (a local path, or an ``s3://`` URI)."""
    rows: list[dict[str, Any]] = open_delta(path).to_pyarrow_table().to_pylist()
    return rows


def commits(path: Path | str) -> list[dict[str, Any]]:
    """The commitInfo of each commit of the table that names a batch, oldest first."""
    from sluice.spark.sinks.delta import DeltaSink

    sink = DeltaSink(f"delta://{path}")
    found = [c for c in sink.commit_infos(sink.root) if "sluice.batch-id" in c]
    return list(reversed(found))


def duckdb_rows(path: Path, query: str) -> list[tuple[Any, ...]]:
    """``query`` over ``delta_scan`` of the table, by DuckDB's delta extension (its wheel ships
    the binary: nothing is downloaded)."""
    import duckdb
    import duckdb_ext  # type: ignore[import-not-found]

    (extension,) = glob.glob(
        str(
            Path(duckdb_ext.__path__[0]) / "extensions" / f"v{duckdb.__version__}" / "*" / "delta.*"
        )
    )
    connection = duckdb.connect()
    connection.execute(f"LOAD '{extension}'")
    rows: list[tuple[Any, ...]] = connection.execute(
        query.replace("TABLE", f"delta_scan('{path}')")
    ).fetchall()
    return rows


def test_kafka_batches_are_delta_commits_with_the_streams_txn_readable_everywhere(
    spark: Any, topic: KafkaTopic, tmp_path: Path
) -> None:
    import polars as pl

    table = tmp_path / "readings"
    sink = f"delta://{table}"
    topic.send([reading(i) for i in range(30)] + BAD)
    first = topic.plan()
    result = ingest(spark, first, sink, source=topic.source, schema=SCHEMA)
    assert (result.written, result.quarantined) == (30, 2)
    # a second batch with a new field: the table gains a column, older rows read it as null
    topic.send([json.dumps({"device": "d", "temperature": 9.5, "room": "a"}).encode()] * 3)
    second = topic.plan()
    ingest(spark, second, sink, source=topic.source, schema=f"{SCHEMA}, room STRING")
    again = ingest(spark, second, sink, source=topic.source, schema=f"{SCHEMA}, room STRING")
    assert again.written == 0, "a published batch is recognised, not written again"

    from deltalake import DeltaTable

    delta = DeltaTable(str(table))
    stream = StreamKey.of(first)
    assert delta.transaction_version(app_id(stream)) == 2, "txn version = the stream's batches"
    assert [c["sluice.batch-id"] for c in commits(table)] == [first.batch_id, second.batch_id]
    rows = delta_rows(table)
    assert len(rows) == 33 and sorted(r["room"] for r in rows if r["room"]) == ["a"] * 3
    assert {r["batch_id"] for r in rows} == {first.batch_id, second.batch_id}
    bad = delta_rows(table / "_quarantine")
    assert sorted(r["offset"] for r in bad) and {r["batch_id"] for r in bad} == {first.batch_id}
    assert all(r["reason"] for r in bad)

    total = sum(i / 10 for i in range(30)) + 3 * 9.5
    assert duckdb_rows(table, "select count(*), round(sum(temperature), 6) from TABLE") == [
        (33, round(total, 6))
    ]
    where = f"select count(*) from TABLE where batch_id = '{second.batch_id}'"
    assert duckdb_rows(table, where) == [(3,)], "statistics prune by batch_id, correctly"
    frame = pl.scan_delta(str(table)).filter(pl.col("batch_id") == first.batch_id).collect()
    assert frame.height == 30 and "room" in frame.columns

    assert_exactly_once(audit(sink, topic.source), 35)
    assert plan_batch(topic.queue) is None


def test_a_field_that_changes_type_is_refused_naming_it(
    spark: Any, topic: KafkaTopic, tmp_path: Path
) -> None:
    sink = f"delta://{tmp_path / 't'}"
    topic.send([reading(i) for i in range(3)])
    ingest(spark, topic.plan(), sink, source=topic.source, schema=SCHEMA)
    topic.send([json.dumps({"device": "d", "temperature": "hot"}).encode()])
    with pytest.raises(ConfigError, match="'temperature' is double in the table and string"):
        ingest(
            spark,
            topic.plan(),
            sink,
            source=topic.source,
            schema="device STRING, temperature STRING",
        )


def test_sluice_ingest_and_audit_on_a_delta_sink(
    spark: Any, noida_broker: Broker, unique_name: str, tmp_path: Path
) -> None:
    topic = f"{noida_broker.url}/{unique_name}"
    assert_ok(run("publish", topic, "--sample", "iot", "--count", "30", "--malformed", "3"))
    uri = f"{topic}?group_id={unique_name}"
    sink = f"delta://{tmp_path / 'iot'}?quarantine={tmp_path / 'rejected'}"
    schema = "device STRING, temperature DOUBLE, humidity DOUBLE, ts STRING"
    assert_ok(run("ingest", uri, "--sink", sink, "--schema", schema))

    assert len(delta_rows(tmp_path / "iot")) == 27
    assert len(delta_rows(tmp_path / "rejected")) == 3
    out = assert_ok(run("audit", sink, "--source", noida_broker.url))
    assert "committed 30, written 27, quarantined 3, doubled 0, missing 0" in out
    assert out.strip().endswith("OK: every message is in the sink once.")
    # the table's own path names it too (a directory holding a _delta_log)
    assert isinstance(open_sink(str(tmp_path / "iot")), DeltaSink)


def test_one_run_per_stream_and_uris(tmp_path: Path) -> None:
    sink = DeltaSink(f"delta://{tmp_path / 't'}")
    stream = StreamKey("kafka", "t", "g")
    second = DeltaSink(str(tmp_path / "t"))
    with (
        sink.exclusive(stream),
        pytest.raises(ConcurrentIngestError, match="Another ingest"),
        second.exclusive(stream),
    ):
        pass
    with sink.exclusive(StreamKey("kafka", "t", "other")):
        pass  # another stream is not held
    with pytest.raises(ConfigError, match="local"):
        DeltaSink("delta://hdfs://nn/lake/t")
    with pytest.raises(ConfigError, match="unknown option"):
        DeltaSink(f"delta://{tmp_path}?partition=x")
    assert sink.state(stream).batches == 0 and sink.find("nothing") is None
    lineage = sink_dataset(f"delta://{tmp_path / 't'}?quarantine=/elsewhere")
    assert (lineage.dataset.namespace, lineage.dataset.name) == ("file", str(tmp_path / "t"))
    assert lineage.storage == "delta"
    assert pa.Table.equals(
        sink.row_coordinates("b", False).slice(0, 0), sink.row_coordinates("b", False)
    )


def test_files_of_sparks_own_writer_land_in_the_table_as_the_other_readers_do(
    cold_spark: Any, topic: KafkaTopic, tmp_path: Path
) -> None:
    """options.reader 'spark' in a cold session stages files written by Spark's Parquet
    writer (no Python worker: :mod:`sluice.spark.jvm_writer`) and a small quarantine the
    driver wrote with pyarrow; the Delta table takes them like the other readers' files."""
    from deltalake import DeltaTable

    table = tmp_path / "readings"
    topic.send([reading(i) for i in range(30)] + BAD)
    source = f"{topic.source}?reader=spark"
    result = ingest(cold_spark, topic.plan(), f"delta://{table}", source=source, schema=SCHEMA)
    assert (result.mode, result.written, result.quarantined) == ("spark", 30, 2)
    assert sorted(r["temperature"] for r in delta_rows(table)) == [i / 10 for i in range(30)]
    quarantine = table / "_quarantine"
    assert sorted(r["value"] for r in delta_rows(quarantine)) == sorted(BAD)
    written_by = [
        {
            str(pq.read_metadata(f.removeprefix("file://")).created_by).split(" version")[0]
            for f in DeltaTable(str(path)).file_uris()
        }
        for path in (table, quarantine)
    ]
    # the rows by Spark's writer; the few small quarantined ones by the driver (pyarrow)
    assert written_by == [{"parquet-mr"}, {"parquet-cpp-arrow"}]
    assert plan_batch(topic.queue) is None
    assert audit(f"delta://{table}", topic.source).ok


def test_a_lean_table_keeps_its_columns_and_a_full_one_the_message(
    spark: Any, topic: KafkaTopic, tmp_path: Path
) -> None:
    """The default table holds the fields, Kafka's coordinates and batch_id; the choice is
    recorded beside the table before it is made, followed on append and refused when
    contradicted; keep_message=True gives the whole message."""
    lean, full = tmp_path / "lean", tmp_path / "full"
    topic.send([reading(i) for i in range(20)] + BAD)
    first = topic.plan()
    ingest(spark, first, f"delta://{lean}", source=topic.source, schema=SCHEMA)
    ingest(spark, first, f"delta://{full}", source=topic.source, schema=SCHEMA, keep_message=True)

    fields = [f.split()[0] for f in SCHEMA.split(", ")]
    coordinates = ["partition", "offset", "timestamp"]
    assert open_delta(lean).schema().to_arrow().names == [*fields, *coordinates, "batch_id"]
    message = ["key", "value", "topic", *coordinates, "headers", "message_id"]
    assert open_delta(full).schema().to_arrow().names == [*fields, *message, "batch_id"]
    assert {r["value"] for r in delta_rows(lean / "_quarantine")} == set(BAD)
    recorded = json.loads((lean / "_sluice" / "message_columns.json").read_text())
    assert recorded == {"keep_message": []}

    topic.send([reading(i) for i in range(20, 30)])
    second = topic.plan()
    with pytest.raises(ConfigError, match="made with keep_message=False"):
        ingest(spark, second, f"delta://{lean}", source=topic.source, keep_message=True)
    ingest(spark, second, f"delta://{lean}", source=topic.source, schema=SCHEMA)
    rows = delta_rows(lean)
    assert len(rows) == 30 and set(rows[0]) == {*fields, *coordinates, "batch_id"}
    assert_exactly_once(audit(f"delta://{lean}", topic.source), 32)


def test_a_table_made_outside_sluice_gets_lean_rows_and_records_them(
    spark: Any, topic: KafkaTopic, tmp_path: Path
) -> None:
    """A Delta table someone made before Sluice's first batch (with columns of their own) is
    no table Sluice wrote: its first batch records the default choice, lean rows."""
    from deltalake import write_deltalake

    made = tmp_path / "made"
    write_deltalake(str(made), pa.table({"device": pa.array([], pa.string())}))
    topic.send([reading(i) for i in range(5)])
    ingest(spark, topic.plan(), f"delta://{made}", source=topic.source, schema=SCHEMA)

    names = open_delta(made).schema().to_arrow().names
    assert "value" not in names and {"partition", "offset", "timestamp"} <= set(names)
    recorded = json.loads((made / "_sluice" / "message_columns.json").read_text())
    assert recorded == {"keep_message": []}
    assert_exactly_once(audit(f"delta://{made}", topic.source), 5)
