"""End offsets that are right on every broker we test on.

Some brokers (Tansu 0.6) answer ListOffsets(latest) wrongly; the high watermark that every
fetch response carries is right. So the end of a partition is the larger of the two, and
where no fetch has told us the high watermark yet, one small fetch from the listed end does.
"""

from __future__ import annotations

import time

from kafka import KafkaConsumer, TopicPartition

FETCH_TIMEOUT_S = 5.0


def end_offsets(consumer: KafkaConsumer, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
    """ListOffsets corrected by the high watermark of ``consumer``'s fetches where it has one."""
    ends: dict[TopicPartition, int] = dict(consumer.end_offsets(tps)) if tps else {}
    assigned = consumer.assignment()
    for tp in tps:
        highwater = consumer.highwater(tp) if tp in assigned else None
        ends[tp] = max(ends.get(tp) or 0, highwater or 0)
    return ends


def topic_end_offsets(consumer: KafkaConsumer, topic: str) -> dict[int, int]:
    """End offset per partition of ``topic`` through an idle, group-less ``consumer`` ({} if none).

    The consumer is assigned every partition at its listed end and fetches until each partition's
    high watermark is known (one fetch that returns little or nothing on a correct broker).
    """
    tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
    if not tps:
        return {}
    listed = consumer.end_offsets(tps)
    consumer.assign(tps)
    for tp in tps:
        consumer.seek(tp, listed[tp])
    deadline = time.monotonic() + FETCH_TIMEOUT_S
    while time.monotonic() < deadline and any(consumer.highwater(tp) is None for tp in tps):
        consumer.poll(timeout_ms=100)
    return {tp.partition: offset for tp, offset in end_offsets(consumer, tps).items()}
