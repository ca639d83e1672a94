"""BatchSpec: the hand-off between sensing and ingesting — which messages, as data, not payloads.

Kafka: a topic, a consumer group and per-partition ``[start, end)`` offset ranges.
MQTT: a topic filter, the persistent session's client id, a maximum number of messages and a
``sequence`` (the planning time in milliseconds) that tells the session's batches apart.

A spec is JSON-serialisable and has a ``batch_id`` derived from its content, so the same
batch planned twice has the same id, and one id names a batch everywhere: the sensor's run
key, the logs, the sink's ``batch_id=<id>`` directory and record, and the IngestResult. A
Kafka batch is its ranges, so planning the same waiting messages again gives the same id. An
MQTT batch is "what the session holds when the ingest drains it": each plan is a new batch
(a new ``sequence``), and a retried plan keeps its id. Where the broker has topic ids
(KIP-516: Apache Kafka), a Kafka spec also holds the id of the topic it was planned on, so
the same ranges of a topic deleted and created again are another batch.
:func:`plan_batch` computes one from a queue without committing or moving anything.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from .queues.base import MessageQueue

__all__ = ["BatchSpec", "OffsetRange", "limit_ranges", "plan_batch"]


@dataclass(frozen=True, order=True)
class OffsetRange:
    """Messages ``start`` (inclusive) to ``end`` (exclusive) of one partition."""

    partition: int
    start: int
    end: int

    def __post_init__(self) -> None:
        if self.partition < 0 or self.start < 0 or self.end < self.start:
            raise ValueError(f"invalid offset range {self}: need 0 <= start <= end, partition >= 0")

    @property
    def count(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class BatchSpec:
    """One batch of messages to ingest (see the module docstring)."""

    kind: Literal["kafka", "mqtt"]
    topic: str
    group_id: str | None = None  # Kafka consumer group
    ranges: tuple[OffsetRange, ...] = field(default_factory=tuple)  # Kafka
    client_id: str | None = None  # MQTT persistent session
    max_messages: int | None = None  # MQTT
    sequence: int | None = None  # MQTT: tells the batches of one session apart
    topic_id: str | None = None  # Kafka: the topic's id when planned, where the broker has ids

    @property
    def batch_id(self) -> str:
        """A stable id: the same content gives the same id, in any process, on any day."""
        canonical = json.dumps(self._content(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:20]

    @property
    def message_count(self) -> int:
        """Messages in the batch (Kafka), or at most this many (MQTT)."""
        if self.kind == "kafka":
            return sum(r.count for r in self.ranges)
        return self.max_messages or 0

    def _content(self) -> dict[str, Any]:
        content = asdict(self)
        content["ranges"] = [asdict(r) for r in sorted(self.ranges)]
        for optional in ("sequence", "topic_id"):
            if content[optional] is None:  # absent, so that ids of specs without one stay
                del content[optional]
        return content

    def to_dict(self) -> dict[str, Any]:
        return {**self._content(), "batch_id": self.batch_id}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BatchSpec:
        """Parse :meth:`to_dict` output; a ``batch_id`` not matching the content is an error."""
        fields = {k: v for k, v in data.items() if k != "batch_id"}
        known = {
            "kind",
            "topic",
            "group_id",
            "ranges",
            "client_id",
            "max_messages",
            "sequence",
            "topic_id",
        }
        unknown = set(fields) - known
        if unknown:
            raise ValueError(f"BatchSpec has unknown fields: {', '.join(sorted(unknown))}")
        if fields.get("kind") not in ("kafka", "mqtt"):
            raise ValueError(
                f"BatchSpec kind must be 'kafka' or 'mqtt', got {fields.get('kind')!r}"
            )
        ranges = tuple(sorted(OffsetRange(**r) for r in fields.pop("ranges", []) or []))
        spec = cls(ranges=ranges, **fields)
        if "batch_id" in data and data["batch_id"] != spec.batch_id:
            raise ValueError(
                f"BatchSpec batch_id {data['batch_id']!r} does not match its content "
                f"({spec.batch_id!r}): the spec was edited after it was planned."
            )
        return spec

    def limited(self, max_messages: int | None) -> BatchSpec:
        """This Kafka batch cut to at most ``max_messages``, shared evenly between partitions."""
        if max_messages is None or self.kind != "kafka":
            return self
        return replace(self, ranges=tuple(limit_ranges(list(self.ranges), max_messages)))

    def up_to(self, waiting: BatchSpec | None, max_messages: int | None = None) -> BatchSpec:
        """This Kafka batch with the messages that arrived since it was planned: ``waiting`` is a
        plan of the group's backlog now; its messages past this batch's ends (and in
        partitions it did not have) are added, at most ``max_messages`` in all (shared evenly
        between partitions), never fewer than planned. Unchanged when nothing newer waits,
        when ``waiting`` is another topic's, group's or a recreated topic's, and in a
        partition whose committed offset has passed this batch's end (another run went on).
        A new content, so a new ``batch_id``."""
        if self.kind != "kafka" or waiting is None or waiting.kind != "kafka":
            return self
        if (waiting.topic, waiting.group_id) != (self.topic, self.group_id):
            return self
        if self.topic_id and waiting.topic_id not in (None, self.topic_id):
            return self
        planned = {r.partition: r for r in self.ranges}
        newer = []
        for w in waiting.ranges:
            r = planned.get(w.partition)
            start = w.start if r is None else r.end
            if r is not None and w.start > r.end:
                continue
            if w.end > start:
                newer.append(OffsetRange(w.partition, start, w.end))
        if max_messages is not None:
            newer = limit_ranges(newer, max(0, max_messages - self.message_count))
        if not newer:
            return self
        ends = {r.partition: r for r in newer}
        ranges = [
            OffsetRange(r.partition, r.start, ends.pop(r.partition).end)
            if r.partition in ends
            else r
            for r in self.ranges
        ]
        return replace(self, ranges=tuple(sorted([*ranges, *ends.values()])))

    @classmethod
    def from_json(cls, text: str) -> BatchSpec:
        return cls.from_dict(json.loads(text))


def plan_batch(
    queue: MessageQueue, max_messages: int | None = None, min_messages: int = 1
) -> BatchSpec | None:
    """The next batch of ``queue``, or None when fewer than ``min_messages`` are waiting.

    Kafka: per partition, from the group's committed offset to the current end offset (a
    partition with no committed offset starts at the beginning with ``from_beginning``, else
    where the topic ended when the queue opened), at most ``max_messages`` in all, shared evenly
    between partitions. Nothing is committed and no consumer joins the group.
    MQTT: the queue's topic filter and session; only the broker knows how many are waiting.
    """
    planner = getattr(queue, "plan_batch", None)
    if planner is None:
        raise TypeError(f"plan_batch needs a Kafka or MQTT queue, not {type(queue).__name__}")
    spec: BatchSpec = planner(max_messages)
    if spec.kind == "kafka" and spec.message_count < max(1, min_messages):
        return None
    return spec


def limit_ranges(ranges: list[OffsetRange], budget: int) -> list[OffsetRange]:
    """Cut ``ranges`` to ``budget`` messages, sharing it evenly between partitions."""
    taken = {r.partition: 0 for r in ranges}
    remaining = budget
    while remaining > 0:
        open_ranges = [r for r in ranges if taken[r.partition] < r.count]
        if not open_ranges:
            break
        share = max(1, remaining // len(open_ranges))
        for r in open_ranges:
            grant = min(share, r.count - taken[r.partition], remaining)
            taken[r.partition] += grant
            remaining -= grant
    return [
        OffsetRange(r.partition, r.start, r.start + taken[r.partition])
        for r in ranges
        if taken[r.partition]
    ]
