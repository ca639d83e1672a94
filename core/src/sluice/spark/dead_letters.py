"""Dead letters of a published Kafka batch, sent once however often the ingest is rerun.

A batch's quarantined rows are republished to the dead-letter topic after the batch is
published and before its offsets are committed, each with its origin (topic, partition,
offset), the reason and the batch id in headers. Before sending, the sink records where the
dead-letter topic ended; a rerun that finds that record but no "done" mark (a crash in
between) reads the dead-letter topic from there and sends only the rows whose origin it does
not find under this batch id. Reading is bounded by what was appended since the first try.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..batch import OffsetRange
from ..kafka.offsets import topic_ends
from ..kafka.ranges import read_range_records
from ..kafka.records import dead_letter_headers
from .failpoints import failpoint
from .sinks.base import BatchRecord, Sink

__all__ = ["BATCH_HEADER", "send_kafka_dead_letters"]

BATCH_HEADER = "sluice.batch_id"


def send_kafka_dead_letters(
    config: Mapping[str, Any], kwargs: Mapping[str, Any], sink: Sink, record: BatchRecord
) -> int:
    """Send the dead letters of ``record`` not sent yet; the number sent."""
    topic = record.dead_letter_topic
    if topic is None or not record.counts.get("quarantined"):
        return 0
    progress = sink.dead_letter_progress(record.batch_id)
    if progress is not None and progress.get("done"):
        return 0
    if progress is None:
        progress = {"topic": topic, "starts": _ends(kwargs, topic), "done": False}
        sink.save_dead_letter_progress(record.batch_id, progress)
        sent: set[tuple[int, int]] = set()
    else:
        starts = {int(p): int(o) for p, o in progress["starts"].items()}
        sent = _sent(kwargs, topic, starts, record.batch_id)
    rows = [
        row
        for row in sink.quarantine_table(record.batch_id).to_pylist()
        if (row["partition"], row["offset"]) not in sent
    ]
    if rows:
        _publish(config, topic, record.batch_id, rows)
    failpoint("dead_letters.after_send")
    sink.save_dead_letter_progress(record.batch_id, {**progress, "done": True})
    return len(rows)


def _ends(kwargs: Mapping[str, Any], topic: str) -> dict[str, int]:
    return {str(p): end for p, end in topic_ends(kwargs, topic).items()}


def _sent(
    kwargs: Mapping[str, Any], topic: str, starts: dict[int, int], batch_id: str
) -> set[tuple[int, int]]:
    """Origins (partition, offset) of the dead letters of ``batch_id`` already in ``topic``."""
    ends = topic_ends(kwargs, topic)
    ranges = [OffsetRange(p, min(starts.get(p, 0), end), end) for p, end in ends.items()]
    found: set[tuple[int, int]] = set()
    wanted = batch_id.encode()
    for _, records in read_range_records(kwargs, topic, ranges, stall_timeout_s=30):
        for r in records:
            headers = dict(r.headers or [])
            if headers.get(BATCH_HEADER) == wanted:
                origin = headers["sluice.original_partition"], headers["sluice.original_offset"]
                found.add((int(origin[0]), int(origin[1])))
    return found


def _publish(
    config: Mapping[str, Any], topic: str, batch_id: str, rows: list[dict[str, Any]]
) -> None:
    from ..kafka.connection import KafkaConnection

    records = [
        {
            "key": row["key"],
            "value": row["value"],
            "headers": [
                *[(h["key"], h["value"]) for h in row["headers"] or []],
                *dead_letter_headers(row["topic"], row["partition"], row["offset"], row["reason"]),
                (BATCH_HEADER, batch_id.encode()),
            ],
        }
        for row in rows
    ]
    connection = KafkaConnection()
    connection.use_config(dict(config))
    connection.open(None)
    try:
        connection.publish(topic, records)
    finally:
        connection.close(None)
