"""Pieces of ingest that need no broker and no Spark."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sluice.batch import BatchSpec, OffsetRange
from sluice.queues import ConfigError
from sluice.spark import ingest
from sluice.spark.reading import split_ranges

CHANGES = BatchSpec("kafka", "changes", group_id="g", ranges=[OffsetRange(0, 0, 1)])


def test_split_ranges_cuts_each_range_into_tasks_of_at_most_size() -> None:
    assert split_ranges([OffsetRange(0, 0, 5), OffsetRange(1, 10, 12)], 2) == [
        OffsetRange(0, 0, 2),
        OffsetRange(0, 2, 4),
        OffsetRange(0, 4, 5),
        OffsetRange(1, 10, 12),
    ]


def test_hand_over_files_keep_row_groups_under_the_batch_byte_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spark's Parquet reader holds a whole row group in the JVM's heap: a chunk of large
    messages handed over as one row group (256 MiB of 5 MiB messages) ran a 1 GiB driver out
    of heap (bench/scale.py). Here the bound is 1 MiB and the messages 300 kB."""
    import importlib
    from types import SimpleNamespace

    import pyarrow.parquet as pq

    ingest_module = importlib.import_module("sluice.spark.ingest")  # the module, not ingest()
    from sluice.spark.records import RecordColumns
    from sluice.spark.sinks.base import Staging

    # raising=False: a module without the bound fails on the row groups below, not here
    monkeypatch.setattr(ingest_module, "BATCH_BYTES", 1 << 20, raising=False)
    columns = RecordColumns()
    for offset in range(10):
        value = bytes([offset]) * 300_000
        columns.keys.append(None)
        columns.values.append(value)
        columns.offsets.append(offset)
        columns.timestamps.append(None)
        columns.headers.append(None)
        columns.topics.append("t")
        columns.partitions.append(0)
        columns.message_ids.append(None)
    job = ingest_module._Job.__new__(ingest_module._Job)
    job.session = None  # no session: _cores() falls back to this machine's
    job.formats = SimpleNamespace(multi_row=False)  # all _hand_over asks of it
    staging = Staging("b", tmp_path / "data", tmp_path / "scratch")
    staging.scratch.mkdir()
    files = job._hand_over(columns.to_batch(), staging, 0)
    metadata = [pq.ParquetFile(f).metadata for f in files]
    groups = [m.row_group(i) for m in metadata for i in range(m.num_row_groups)]
    assert sum(g.num_rows for g in groups) == 10
    assert max(g.total_byte_size for g in groups) <= 1 << 20


@pytest.mark.parametrize(
    ("sink", "options", "message"),
    [
        ("{tmp}/dataset", {}, "needs an Iceberg table .* or a Delta table .*only appends"),
        ("iceberg://lake/ns.t", {"value_format": "protobuf"}, "envelopes in JSON .* or in Avro"),
        ("iceberg://lake/ns.t", {"schema": "id INT"}, "leave schema and payload_column out"),
        ("iceberg://lake/ns.t", {"key_columns": "id"}, "key_columns must be a list"),
        ("iceberg://lake/ns.t?partition_by=id", {}, "does not partition the table yet"),
        ("{tmp}/dataset", {"write_mode": "merge"}, "write_mode must be one of 'append', "),
    ],
    ids=["parquet", "protobuf", "schema", "key-string", "partitioned", "unknown-mode"],
)
def test_upsert_is_refused_where_it_cannot_be_done(
    tmp_path: Path, sink: str, options: dict[str, Any], message: str
) -> None:
    """Before Spark or the broker is touched (spark=None)."""
    options = {"write_mode": "upsert", **options}
    with pytest.raises(ConfigError, match=message):
        ingest(None, CHANGES, sink.format(tmp=tmp_path), source="kafka://127.0.0.1:9", **options)


def test_key_columns_without_upsert_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="key_columns is only for write_mode='upsert'"):
        ingest(None, CHANGES, tmp_path, source="kafka://127.0.0.1:9", key_columns=["id"])
