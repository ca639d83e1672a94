"""A partitioned Parquet dataset: hive-style directories inside each batch, and what readers
(pyarrow.dataset, pyarrow's read_table, Spark) see of them."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sluice.audit import audit
from sluice.maintenance import compact
from sluice.queues import ConfigError
from sluice.spark import ingest
from sluice.spark.sinks.parquet import good_files
from sluice.testing.plugin import Broker

from ..iceberg.test_partitioned_iceberg import DAYS, SCHEMA, reading
from .conftest import KafkaTopic, open_topic


@pytest.fixture
def topic(noida_broker: Broker, unique_name: str) -> Iterator[KafkaTopic]:
    opened = open_topic(noida_broker, unique_name, partitions=2)
    yield opened
    opened.queue.close(None)
    opened.producer.close()


def test_a_partitioned_dataset_has_hive_directories_in_each_batch_that_readers_see(
    spark: Any, topic: KafkaTopic, tmp_path: Path
) -> None:
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    sink = tmp_path / "readings"
    topic.send([reading(i) for i in range(20)] + [b"not json"])
    result = ingest(
        spark,
        topic.plan(),
        str(sink),
        source=topic.source,
        schema=SCHEMA,
        partition_by="day(ts),truncate(4,device)",
    )
    assert (result.written, result.quarantined) == (20, 1)

    batch = sink / f"batch_id={result.batch_id}"
    directories = sorted(
        str(f.parent.relative_to(batch)) for f in batch.rglob("*.parquet") if f.name[0] != "_"
    )
    days = [d.isoformat() for d in DAYS]
    assert {d for d in directories if not d.startswith("_")} == {
        f"ts_day={day}/device_trunc=dev-" for day in days
    }
    for file in batch.glob("ts_day=*/*/*.parquet"):  # one day per file, the columns kept
        rows = pq.read_table(file)
        assert len({t.date() for t in rows["ts"].to_pylist()}) == 1
        assert file.parent.parent.name == f"ts_day={rows['ts'][0].as_py().date().isoformat()}"
    # pyarrow: the directories are columns; a day's filter reads that day's files only
    dataset = ds.dataset(sink, partitioning="hive", exclude_invalid_files=True)
    assert {"batch_id", "ts_day", "device_trunc", "device", "ts"} <= set(dataset.schema.names)
    day = ds.field("ts_day") == days[1]
    assert len(list(dataset.get_fragments(filter=day))) < len(list(dataset.get_fragments()))
    assert dataset.to_table(filter=day).num_rows == len([i for i in range(20) if i % 3 == 1])
    assert pq.read_table(sink).num_rows == 20  # _quarantine and _sluice are left out
    # Spark: the same columns, the day typed as a date
    frame = spark.read.parquet(str(sink))
    types = dict(frame.dtypes)
    assert (types["ts_day"], types["device_trunc"], types["batch_id"]) == (
        "date",
        "string",
        "string",
    )
    assert frame.filter(frame.ts_day == datetime.date(2026, 1, 6)).count() == 7
    assert audit(str(sink), topic.source).ok

    # the dataset keeps its layout: no partition_by uses it, another one is refused
    topic.send([reading(20), reading(21)])
    again = ingest(spark, topic.plan(), str(sink), source=topic.source, schema=SCHEMA)
    assert len(list((sink / f"batch_id={again.batch_id}").glob("ts_day=*/*/*.parquet"))) == 2
    topic.send([reading(22)])
    with pytest.raises(ConfigError, match=r"partitioned by day\(ts\),truncate\(4,device\)"):
        ingest(spark, topic.plan(), str(sink), source=topic.source, schema=SCHEMA,
               partition_by="month(ts)")  # fmt: skip

    # compaction keeps the layout: one file per partition directory, the same rows for
    # pyarrow and Spark, and the day's query still prunes
    def seen() -> tuple[list[tuple[Any, ...]], int]:
        table = ds.dataset(sink, partitioning="hive").to_table(columns=["ts_day", "device", "ts"])
        day_count = spark.read.parquet(str(sink)).filter("ts_day = '2026-01-06'").count()
        return sorted(zip(*table.to_pydict().values(), strict=True)), day_count

    before = seen()
    assert compact(str(sink), "1MB", min_files=2).batches == 2
    (merged,) = sink.glob("batch_id=*")
    assert {f.parent.parent.name for f in good_files(merged)} == {f"ts_day={d}" for d in days}
    assert len(good_files(merged)) == len(days)
    assert seen() == before
    assert audit(str(sink), topic.source).ok
