"""Rows as lean as the anchors' (issue 46): a table holds the payload's fields and Kafka's
coordinates, the message only when asked (``keep_message``), and keeps its choice."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from sluice.audit import audit
from sluice.errors import DataLossError
from sluice.queues import ConfigError
from sluice.spark import ingest
from sluice.spark.kafka_source import READERS, SPARK_READER
from sluice.testing.plugin import Broker

from .conftest import SCHEMA, KafkaTopic, dataset_rows, open_topic, quarantine_rows, reading
from .crashes import with_reader

FIELDS = [field.split()[0] for field in SCHEMA.split(", ")]
LEAN = [*FIELDS, "partition", "offset", "timestamp"]
#: The layout before keep_message existed, and with keep_message=True.
FULL = [*FIELDS, "key", "value", "topic", "partition", "offset", "timestamp", "headers"]
FULL.append("message_id")
BAD = [b"not json", b'{"temperature": "warm"}']


def good_files(sink: Path) -> list[Path]:
    return sorted(p for p in sink.glob("batch_id=*/*.parquet"))


@pytest.mark.parametrize("reader", [*READERS, SPARK_READER])
def test_a_new_table_holds_the_fields_and_the_coordinates_encoded_in_deltas(
    spark: Any, topic: KafkaTopic, tmp_path: Path, reader: str
) -> None:
    """Every reader's writer (pyarrow in Python tasks, Spark's own for the spark reader)."""
    topic.send([reading(i) for i in range(40)] + BAD)
    source = with_reader(topic.source, reader)

    result = ingest(spark, topic.plan(), tmp_path, source=source, schema=SCHEMA)

    assert (result.written, result.quarantined) == (40, 2)
    files = good_files(tmp_path)
    assert files and all(pq.read_schema(f).names == LEAN for f in files)
    rows = dataset_rows(tmp_path)
    assert sorted((r["partition"], r["offset"]) for r in rows) == sorted(
        (p, o) for p in range(3) for o in range(sum(1 for r in rows if r["partition"] == p))
    )
    assert all(r["timestamp"] is not None for r in rows)
    # the quarantine keeps the whole message: dead letters and replays send it again
    bad = quarantine_rows(tmp_path)
    assert {r["value"] for r in bad} == set(BAD)
    assert {"key", "value", "topic", "headers", "message_id", "reason"} <= set(bad[0])
    # offsets and timestamps in deltas, about a byte a row instead of eight
    for file in files:
        metadata = pq.read_metadata(file)
        for group in range(metadata.num_row_groups):
            columns = {
                metadata.row_group(group).column(i).path_in_schema: metadata.row_group(group)
                .column(i)
                .encodings
                for i in range(metadata.num_columns)
            }
            assert "DELTA_BINARY_PACKED" in columns["offset"], columns
            assert "DELTA_BINARY_PACKED" in columns["timestamp"], columns
    recorded = json.loads((tmp_path / "_sluice" / "message_columns.json").read_text())
    assert recorded == {"keep_message": []}


def test_keep_message_gives_the_whole_message_as_before(
    spark: Any, topic: KafkaTopic, tmp_path: Path
) -> None:
    topic.send([reading(i) for i in range(10)])

    ingest(spark, topic.plan(), tmp_path, source=topic.source, schema=SCHEMA, keep_message=True)

    (file,) = good_files(tmp_path)
    assert pq.read_schema(file).names == FULL
    rows = dataset_rows(tmp_path)
    assert {r["value"] for r in rows} == {reading(i) for i in range(10)}
    assert all(r["topic"] == topic.name and r["message_id"] for r in rows)


def test_a_list_keeps_those_columns(spark: Any, topic: KafkaTopic, tmp_path: Path) -> None:
    topic.send([reading(i) for i in range(10)])
    spec = topic.plan()
    with pytest.raises(ConfigError, match=r"'payload', which is not a column of a message"):
        ingest(spark, spec, tmp_path, source=topic.source, keep_message=["payload"])

    ingest(
        spark, spec, tmp_path, source=topic.source, schema=SCHEMA, keep_message=["headers", "key"]
    )

    (file,) = good_files(tmp_path)
    kept = [*FIELDS, "key", "partition", "offset", "timestamp", "headers"]
    assert pq.read_schema(file).names == kept


def test_a_table_keeps_its_choice_and_refuses_another(
    spark: Any, topic: KafkaTopic, tmp_path: Path
) -> None:
    full, lean = tmp_path / "full", tmp_path / "lean"
    topic.send([reading(i) for i in range(10)])
    first = topic.plan()
    ingest(spark, first, full, source=topic.source, schema=SCHEMA, keep_message=True)
    ingest(spark, first, lean, source=topic.source, schema=SCHEMA)
    topic.send([reading(i) for i in range(10, 20)])
    second = topic.plan()

    # asked for the other: refused before anything is read or committed
    with pytest.raises(ConfigError, match=r"made with keep_message=True.*leave keep_message out"):
        ingest(spark, second, full, source=topic.source, schema=SCHEMA, keep_message=False)
    with pytest.raises(ConfigError, match=r"made with keep_message=False.*\['key'\] was given"):
        ingest(spark, second, lean, source=topic.source, schema=SCHEMA, keep_message=["key"])
    assert topic.plan() == second, "nothing was committed"
    # not asked: each table's own choice
    ingest(spark, second, full, source=topic.source, schema=SCHEMA)
    ingest(spark, second, lean, source=topic.source, schema=SCHEMA)
    assert all(pq.read_schema(f).names == FULL for f in good_files(full))
    assert all(pq.read_schema(f).names == LEAN for f in good_files(lean))
    assert len(good_files(full)) >= 2 and len(good_files(lean)) >= 2


def test_a_dataset_written_before_the_choice_existed_keeps_the_whole_message(
    spark: Any, topic: KafkaTopic, tmp_path: Path
) -> None:
    topic.send([reading(i) for i in range(10)])
    ingest(spark, topic.plan(), tmp_path, source=topic.source, schema=SCHEMA, keep_message=True)
    (tmp_path / "_sluice" / "message_columns.json").unlink()  # as such a dataset has none
    topic.send([reading(i) for i in range(10, 20)])
    spec = topic.plan()
    with pytest.raises(ConfigError, match="made with keep_message=True"):
        ingest(spark, spec, tmp_path, source=topic.source, schema=SCHEMA, keep_message=False)

    ingest(spark, spec, tmp_path, source=topic.source, schema=SCHEMA)

    files = good_files(tmp_path)
    assert len(files) >= 2 and all(pq.read_schema(f).names == FULL for f in files)


def test_the_audit_passes_on_a_lean_table_and_fails_when_a_row_is_removed(
    spark: Any, topic: KafkaTopic, tmp_path: Path
) -> None:
    topic.send([reading(i) for i in range(30)] + BAD)
    ingest(spark, topic.plan(), tmp_path, source=topic.source, schema=SCHEMA)
    report = audit(tmp_path, topic.source)
    assert report.ok, "\n".join(report.lines())
    assert sum(p.written + p.quarantined for p in report.streams[0].partitions) == 32

    file = next(f for f in good_files(tmp_path) if pq.read_metadata(f).num_rows > 1)
    table = pq.read_table(file)
    removed = table.slice(0, 1).to_pylist()[0]
    pq.write_table(table.slice(1), file)

    report = audit(tmp_path, topic.source)
    assert not report.ok
    (partition,) = [p for p in report.streams[0].partitions if p.missing]
    assert partition.partition == removed["partition"]
    assert [(r.start, r.count) for r in partition.missing] == [(removed["offset"], 1)]


def test_a_recreated_topic_is_recognised_by_its_fingerprint_with_a_lean_table(
    spark: Any, noida_broker: Broker, unique_name: str, tmp_path: Path
) -> None:
    """noida-db has no topic ids: the fingerprint of the last message written, taken before
    the value was left out of the row and kept in the batch's record, finds the new topic."""
    from sluice.batch import BatchSpec, OffsetRange

    topic = open_topic(noida_broker, unique_name, partitions=1)
    try:
        topic.send([reading(i) for i in range(30)])
        ingest(spark, topic.plan(), tmp_path, source=topic.source, schema=SCHEMA)
        assert all("value" not in pq.read_schema(f).names for f in good_files(tmp_path))
        topic.recreate(1)
        topic.send([reading(100 + i) for i in range(40)])
        spec = BatchSpec(
            "kafka", topic.name, group_id=f"{topic.name}-group", ranges=(OffsetRange(0, 30, 40),)
        )
        with pytest.raises(DataLossError, match=r"recreated .*offset 29 is not the one"):
            ingest(spark, spec, tmp_path, source=topic.source, schema=SCHEMA)
    finally:
        topic.close()
