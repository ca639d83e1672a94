"""Reading exactly some offset ranges of a topic: assign, seek, read to each range's end.

Joins no consumer group and commits nothing, so it serves planning tools (``sluice peek``,
``sluice dlq replay``) and batch ingestion alike. It runs wherever it is called (the driver,
a Spark task), taking plain kafka-python keyword arguments.

A reader never resets past an offset it was asked for (invariant I3): a fetch position that
is out of range (retention deleted it while the batch was read, or the partition was
recreated shorter) raises :class:`~sluice.errors.DataLossError` naming the partition and the
offsets, unless the caller passes ``lost``: then the reader tells it which range is gone and
goes on from the log start. What a reader cannot see is also never invented: offsets without
a message (transaction markers, aborted transactions, compaction) are simply not returned.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from kafka import KafkaConsumer, TopicPartition
from kafka.consumer.fetcher import ConsumerRecord
from kafka.errors import OffsetOutOfRangeError

from ..batch import OffsetRange
from ..errors import DataLossError
from .clients import new_consumer
from .session_errors import explained_bootstrap

__all__ = [
    "LostRange",
    "RangeReader",
    "check_range_ends",
    "log_bounds",
    "out_of_range",
    "read_range_records",
    "stalled_message",
]

MAX_POLL_RECORDS = 10_000
#: How often a range reader tries an out-of-range position that is inside the log (a leader
#: that moved) before it gives up.
OUT_OF_RANGE_RETRIES = 3

#: Told of a range deleted while it was read; the reader then goes on from the log start.
LostRange = Callable[[OffsetRange], None]


def read_range_records(
    kwargs: Mapping[str, Any],
    topic: str,
    ranges: Sequence[OffsetRange],
    stall_timeout_s: float,
    lost: LostRange | None = None,
) -> Iterator[tuple[int, list[ConsumerRecord]]]:
    """(partition, records) as they are fetched: every record of ``ranges``, none beyond.

    Raises ``TimeoutError`` when nothing arrives for ``stall_timeout_s`` while a range is
    unfinished (the broker is down, or a range ends past its partition's end), and
    :class:`~sluice.errors.DataLossError` when a range's messages are gone (see the module
    docstring; ``lost`` accepts a loss instead). One consumer, closed at the end: a caller that
    reads range after range keeps a :class:`RangeReader` instead.
    """
    with RangeReader(kwargs) as reader:
        yield from reader.records(topic, ranges, stall_timeout_s, lost)


class RangeReader:
    """:func:`read_range_records` for a caller that reads range after range (a sensor routing
    batch after batch, an audit reading batch after batch): one consumer kept between reads.

    A new consumer pays its bootstrap and kafka-python's idle back-off before its first fetch
    (about 200 ms on a quiet machine, measured); a kept one reads a small range in a few ms. A
    read that fails closes the consumer (the next read makes a new one). One read at a time;
    :meth:`close` from another thread while one runs closes the consumer when it ends.
    """

    def __init__(self, kwargs: Mapping[str, Any]) -> None:
        self._kwargs = dict(kwargs)
        self._consumer: KafkaConsumer | None = None
        self._busy = threading.Lock()
        self._closed = False

    def __enter__(self) -> RangeReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._closed = True
        if self._busy.acquire(blocking=False):
            try:
                self._drop()
            finally:
                self._busy.release()

    def _drop(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            consumer.close(autocommit=False)

    def _open(self, topic: str) -> KafkaConsumer:
        if self._consumer is None:
            with explained_bootstrap(self._kwargs, f"Reading topic '{topic}'"):
                self._consumer = new_consumer(
                    **{
                        "max_poll_records": MAX_POLL_RECORDS,
                        **self._kwargs,
                        "enable_auto_commit": False,
                        "auto_offset_reset": "none",  # out of range: raise, never reset
                    },
                    group_id=None,
                )
        return self._consumer

    def records(
        self,
        topic: str,
        ranges: Sequence[OffsetRange],
        stall_timeout_s: float,
        lost: LostRange | None = None,
    ) -> Iterator[tuple[int, list[ConsumerRecord]]]:
        """As :func:`read_range_records`, through this reader's consumer."""
        ends = {TopicPartition(topic, r.partition): r.end for r in ranges if r.count > 0}
        if not ends:
            return
        if self._closed:
            raise RuntimeError("This RangeReader is closed.")
        if not self._busy.acquire(blocking=False):
            raise RuntimeError("A RangeReader reads one set of ranges at a time.")
        done = False
        try:
            yield from self._read(self._open(topic), topic, ranges, ends, stall_timeout_s, lost)
            done = True
        finally:
            if not done or self._closed:
                self._drop()
            self._busy.release()

    def _read(
        self,
        consumer: KafkaConsumer,
        topic: str,
        ranges: Sequence[OffsetRange],
        ends: dict[TopicPartition, int],
        stall_timeout_s: float,
        lost: LostRange | None,
    ) -> Iterator[tuple[int, list[ConsumerRecord]]]:
        kwargs = self._kwargs
        retries: dict[int, int] = {}
        consumer.assign(list(ends))
        consumer.resume(*ends)  # a partition kept from the last read keeps its pause
        for r in ranges:
            if r.count > 0:
                consumer.seek(TopicPartition(topic, r.partition), r.start)
        last_progress = time.monotonic()
        while ends:
            try:
                polled = consumer.poll(timeout_ms=200)
            except OffsetOutOfRangeError as exc:
                for tp, offset in exc.args[0].items():
                    if tp not in ends:
                        continue
                    resume = out_of_range(kwargs, topic, tp.partition, offset, ends[tp], lost)
                    if resume >= ends[tp]:  # the rest of the range is gone
                        del ends[tp]
                        consumer.pause(tp)
                        continue
                    retries[tp.partition] = retries.get(tp.partition, 0) + 1
                    if resume == offset and retries[tp.partition] > OUT_OF_RANGE_RETRIES:
                        raise RuntimeError(
                            f"Reading partition {tp.partition} of topic '{topic}' at offset "
                            f"{offset} failed {OUT_OF_RANGE_RETRIES} times with "
                            "OFFSET_OUT_OF_RANGE although the offset is in the log. Nothing "
                            "was committed; run the batch again."
                        ) from None
                    consumer.seek(tp, resume)
                last_progress = time.monotonic()
                continue
            for tp, records in polled.items():
                end = ends.get(tp)
                if end is None or not records:
                    continue
                if records[-1].offset >= end:
                    records = [r for r in records if r.offset < end]
                yield tp.partition, records
            for tp in [tp for tp, end in ends.items() if consumer.position(tp) >= end]:
                del ends[tp]
                consumer.pause(tp)
            if polled:
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > stall_timeout_s:
                positions = {tp.partition: (consumer.position(tp), end) for tp, end in ends.items()}
                raise TimeoutError(stalled_message(topic, positions, stall_timeout_s))


def log_bounds(
    kwargs: Mapping[str, Any], topic: str, partitions: Sequence[int]
) -> dict[int, tuple[int, int]]:
    """(log start, log end) of ``partitions``, asked now, through a consumer that never
    fetches (kafka-python 3.0 loses ListOffsets answers that arrive during a fetch)."""
    tps = [TopicPartition(topic, p) for p in partitions]
    with explained_bootstrap(kwargs, f"Asking for the bounds of topic '{topic}'"):
        consumer = new_consumer(**{**kwargs, "enable_auto_commit": False}, group_id=None)
    try:
        starts, ends = consumer.beginning_offsets(tps), consumer.end_offsets(tps)
        return {tp.partition: (starts[tp], ends[tp]) for tp in tps}
    finally:
        consumer.close(autocommit=False)


def out_of_range(
    kwargs: Mapping[str, Any],
    topic: str,
    partition: int,
    offset: int,
    end: int,
    lost: LostRange | None,
) -> int:
    """Where a range reader whose position ``offset`` (reading up to ``end``) is out of range
    goes on: the log start when retention deleted ``[offset, log start)`` and ``lost`` accepts
    it, ``offset`` itself when it is inside the log after all (try again). Raises
    :class:`DataLossError` otherwise. Every range reader calls this."""
    log_start, log_end = log_bounds(kwargs, topic, [partition])[partition]
    if offset < log_start:
        gone = OffsetRange(partition, offset, min(log_start, end))
        if lost is None:
            raise DataLossError(
                f"Data loss: offsets {gone.start}-{gone.end - 1} of partition {partition} of "
                f"topic '{topic}' were deleted by retention while the batch was read (the log "
                f"now starts at {log_start}). Nothing was written or committed. To skip the "
                "missing messages and record the loss in the batch record, ingest with "
                "fail_on_data_loss=False (CLI: --accept-data-loss)."
            )
        lost(gone)
        return min(log_start, end)
    if offset >= log_end:
        raise DataLossError(
            f"Data loss: partition {partition} of topic '{topic}' now ends at offset {log_end}, "
            f"below offset {offset} that the batch reads: the topic was deleted and recreated "
            "(or truncated) while the batch was read. Nothing was written or committed; run "
            "the batch again to see what is left."
        )
    return offset


def check_range_ends(kwargs: Mapping[str, Any], topic: str, ranges: Sequence[OffsetRange]) -> None:
    """For a reader that cannot report an out-of-range position itself (Spark's Kafka source
    with ``failOnDataLoss`` off), after it read ``ranges``: a partition that now ends below a
    range's end was recreated or truncated while it was read, :func:`out_of_range`'s
    :class:`DataLossError`. (Offsets deleted by retention while it read are holes below the
    log start, which the ingest's reconciliation finds for every reader.)"""
    todo = [r for r in ranges if r.count > 0]
    if not todo:
        return
    bounds = log_bounds(kwargs, topic, sorted({r.partition for r in todo}))
    for r in todo:
        log_end = bounds[r.partition][1]
        if log_end < r.end:
            out_of_range(kwargs, topic, r.partition, r.end - 1, r.end, None)


def stalled_message(topic: str, positions: Mapping[int, tuple[int, int]], timeout_s: float) -> str:
    """The error of a range reader that got no message for ``timeout_s`` while waiting for
    ``positions`` ({partition: (position, range end)}); every reader raises the same."""
    waiting = ", ".join(
        f"partition {partition} at offset {position} of {end}"
        for partition, (position, end) in sorted(positions.items())
    )
    return (
        f"Reading topic '{topic}' stalled: no message for {timeout_s:.0f} s while waiting for "
        f"{waiting}. Check that the broker is up and that the batch was planned on this "
        "topic (options.request_timeout sets this limit). Nothing was committed."
    )
