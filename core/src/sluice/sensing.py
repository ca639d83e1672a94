"""Sensing: noticing that a batch waits, without committing or acknowledging anything.

What every sensor of Sluice shares (Airflow's sensor and trigger, Dagster's sensor):

- :func:`sensing_config`: the settings a sensing queue needs on top of its connection's
  (Kafka: read through the group from the beginning; MQTT: a persistent QoS 1 session that
  acknowledges nothing, so the messages it sees are redelivered to the ingest).
- :func:`plan_waiting` / :func:`wait_for_batch`: the next :class:`~sluice.batch.BatchSpec`
  once at least ``min_messages`` wait. Kafka counts the group's backlog at the broker; MQTT
  cannot see a backlog, so it counts what the session delivered to the sensing queue
  (at most the broker's in-flight window: 20 on a default mosquitto).
- :class:`EmittedRanges`: a watcher that plans again before the last batch was ingested
  (and committed) would see the same messages twice; it remembers where the ranges it
  emitted ended, per partition, and only emits what starts at or after them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .batch import BatchSpec, OffsetRange, limit_ranges, plan_batch
from .queues.base import MessageQueue
from .queues.config import ConfigError

__all__ = ["EmittedRanges", "plan_waiting", "sensing_config", "wait_for_batch"]


def sensing_config(kind: str, config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` with what a sensing queue of ``kind`` needs (see the module docstring).

    Kafka: ``from_beginning`` true unless set (a group that never committed starts at the
    beginning, so a sensor that opens a new queue on every poke still sees the backlog).
    MQTT: ``autocommit`` false and ``options.qos`` 1 unless set; a ``client_id`` is required
    (the persistent session the ingest drains).
    """
    values = dict(config)
    values["autocommit"] = False
    if kind == "kafka":
        values.setdefault("from_beginning", True)
    elif kind == "mqtt":
        values.setdefault("options.qos", 1)
        if not values.get("client_id"):
            raise ConfigError(
                "An MQTT batch needs a persistent session: set config key 'client_id' (in the "
                "connection's extra or the task's config) to a stable id of your choosing."
            )
    return values


def plan_waiting(
    queue: MessageQueue, min_messages: int = 1, max_messages: int | None = None
) -> BatchSpec | None:
    """The next batch of an opened Kafka or MQTT queue once ``min_messages`` wait, else None."""
    min_messages = max(1, min_messages)
    spec = plan_batch(queue, max_messages=max_messages, min_messages=min_messages)
    if spec is not None and spec.kind == "mqtt" and queue.read_message_count() < min_messages:
        return None
    return spec


def wait_for_batch(
    queue: MessageQueue,
    min_messages: int = 1,
    max_messages: int | None = None,
    wait_seconds: float = 0.0,
    check_every: float = 0.05,
) -> BatchSpec | None:
    """:func:`plan_waiting`, checked again for up to ``wait_seconds``: an MQTT session's queued
    messages arrive a moment after the queue opens."""
    deadline = time.monotonic() + wait_seconds
    while True:
        spec = plan_waiting(queue, min_messages, max_messages)
        if spec is not None or time.monotonic() >= deadline:
            return spec
        time.sleep(min(check_every, max(0.0, deadline - time.monotonic())))


@dataclass
class EmittedRanges:
    """Where the Kafka ranges emitted so far ended, per partition (see the module docstring).

    ``fresh(spec)`` cuts ``spec`` to what was not emitted yet; ``record(spec)`` notes an emitted
    one. The state is JSON (``to_json``/``from_json``) for a Dagster cursor or Airflow's asset
    state store.
    """

    topic: str | None = None
    group_id: str | None = None
    ends: dict[int, int] = field(default_factory=dict)

    def _same_stream(self, spec: BatchSpec) -> bool:
        return (self.topic, self.group_id) == (spec.topic, spec.group_id)

    def fresh(
        self, spec: BatchSpec | None, min_messages: int = 1, max_messages: int | None = None
    ) -> BatchSpec | None:
        """The part of ``spec`` (planned without a limit) not emitted yet, cut to
        ``max_messages``; None when fewer than ``min_messages`` are new.

        A partition whose log now ends before the recorded end was recreated (or its offsets
        reset): its recorded end no longer means anything and is ignored.
        """
        if spec is None or spec.kind != "kafka":
            return spec
        ends = self.ends if self._same_stream(spec) else {}
        ranges = []
        for r in spec.ranges:
            emitted = ends.get(r.partition, 0)
            start = max(r.start, emitted) if emitted <= r.end else r.start
            if r.end > start:
                ranges.append(OffsetRange(r.partition, start, r.end))
        if max_messages is not None:
            ranges = limit_ranges(ranges, max_messages)
        fresh = BatchSpec(spec.kind, spec.topic, group_id=spec.group_id, ranges=tuple(ranges))
        return fresh if fresh.message_count >= max(1, min_messages) else None

    def record(self, spec: BatchSpec) -> None:
        """Note that ``spec`` was emitted."""
        if spec.kind != "kafka":
            return
        if not self._same_stream(spec):
            self.topic, self.group_id, self.ends = spec.topic, spec.group_id, {}
        for r in spec.ranges:
            self.ends[r.partition] = max(self.ends.get(r.partition, 0), r.end)

    def to_json(self) -> str:
        ends = {str(p): e for p, e in sorted(self.ends.items())}
        return json.dumps({"topic": self.topic, "group_id": self.group_id, "ends": ends})

    @classmethod
    def from_json(cls, text: str | None) -> EmittedRanges:
        if not text:
            return cls()
        data = json.loads(text)
        ends = {int(p): int(e) for p, e in (data.get("ends") or {}).items()}
        return cls(data.get("topic"), data.get("group_id"), ends)
