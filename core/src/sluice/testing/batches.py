"""Batches published straight through a sink's publish path, without Spark or a broker: for
the maintenance tests and ``bench/table_health.py``, which need many small batches quickly.

:func:`publish_rows` stages the rows as one Parquet file (one per partition directory of a
partitioned dataset), as one task of the ingest's Spark job would: through
:meth:`Sink.targets`, the sink's constant columns added; it records the
batch (Kafka: the rows' offsets; MQTT: their message ids) and publishes it with
:meth:`Sink.publish`, under :meth:`Sink.exclusive`, as an ingest does.
"""

from __future__ import annotations

import uuid
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..batch import BatchSpec, OffsetRange
from ..spark.sinks.base import BatchRecord, Sink, StreamKey
from ..spark.writing import resolve

__all__ = ["publish_rows"]


def _write(directory: str, rows: pa.Table, constants: tuple[tuple[str, str], ...], fs: Any) -> None:
    for name, value in constants:
        rows = rows.append_column(name, pa.array([value] * rows.num_rows, pa.string()))
    filesystem, path = resolve(directory, fs)
    filesystem.create_dir(path, recursive=True)
    pq.write_table(rows, f"{path}/part-{uuid.uuid4().hex[:8]}.parquet", filesystem=filesystem)


def publish_rows(
    sink: Sink, spec: BatchSpec, good: pa.Table, bad: pa.Table | None = None
) -> BatchRecord:
    """Publish ``good`` (and quarantined ``bad``) rows as the batch ``spec``. The rows need
    ``partition`` and ``offset`` (Kafka) or ``message_id`` (MQTT) columns; ``bad`` also a
    ``reason``."""
    stream = StreamKey.of(spec)
    with sink.exclusive(stream):
        sink.recover()
        state = sink.state(stream)
        staging = sink.stage(spec.batch_id)
        bad_schema = bad.schema if bad is not None else pa.schema([("reason", pa.string())])
        targets = sink.targets(staging, good.schema, bad_schema)
        for directory, _, rows in targets.partitioning.split(good) if good.num_rows else ():
            where = f"{targets.data.rstrip('/')}/{directory}" if directory else targets.data
            _write(where, rows, targets.constants, targets.filesystem)
        if bad is not None and bad.num_rows:
            _write(targets.quarantine, bad, targets.constants, targets.filesystem)
        both = [t for t in (good, bad) if t is not None and t.num_rows]
        record = BatchRecord(
            spec.batch_id,
            spec.to_dict(),
            counts={"written": good.num_rows, "quarantined": bad.num_rows if bad else 0},
            planned_on=state.batches,
        )
        if spec.kind == "kafka":
            record.ranges = [
                OffsetRange(p, min(o), max(o) + 1)
                for p in sorted({p for t in both for p in t.column("partition").to_pylist()})
                for o in [
                    [
                        off
                        for t in both
                        for part, off in zip(
                            t.column("partition").to_pylist(),
                            t.column("offset").to_pylist(),
                            strict=True,
                        )
                        if part == p
                    ]
                ]
            ]
        else:
            record.message_ids = [i for t in both for i in t.column("message_id").to_pylist()]
            if bad is not None:
                ids, reasons = bad.column("message_id"), bad.column("reason")
                pairs = zip(ids.to_pylist(), reasons.to_pylist(), strict=True)
                record.quarantined_ids = dict(pairs)
        try:
            sink.publish(staging, record)
        except BaseException:
            sink.discard(staging)
            raise
        return record
