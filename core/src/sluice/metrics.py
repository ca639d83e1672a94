"""How far behind a stream is: lag, the age of the oldest waiting message, the last batch.

The one home of these measurements. ``sluice lag --json``, ``sluice watch --prometheus``, the
Airflow operators' metrics and the Dagster sensor's observations and lag check all report a
:class:`StreamLag` measured here:

- **lag** (Kafka): per partition, the group's committed offset (where a group that never
  committed starts: the log start), the partition's end (the last stable offset when reading
  committed records) and the messages between them;
- **age of the oldest waiting message** (Kafka): per partition, the timestamp of the record at
  the committed offset, the next one the group reads (read with the range reader of
  :mod:`sluice.kafka.ranges`, which joins no group and commits nothing); the stream's is the
  oldest of them. It is the record's own timestamp: the producer's create time unless the
  topic has ``message.timestamp.type=LogAppendTime``. None when nothing waits;
- **the last successful batch** (any sink): the newest batch the sink's stream state knows
  and its record's ``published_at``: one state file and one record, never a scan of the
  sink's history;
- **MQTT**: a broker keeps a persistent session's queue to itself. Lag and the age of the
  oldest waiting message cannot be known without taking the session from the ingest (and
  mosquitto hands a client at most ``max_inflight_messages`` of them; a device's raw payload
  carries no timestamp). What is known is the last successful batch, from the sink: a
  :class:`StreamLag` of an MQTT stream has ``partitions`` None and says why in ``unknown``.

:data:`SCHEMA_VERSION` versions :meth:`StreamLag.to_dict` (the JSON of ``sluice lag --json``,
documented in docs/guides/observability.md); a field is only ever added within a version.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .batch import OffsetRange

if TYPE_CHECKING:
    from .kafka.connection import KafkaConnection

__all__ = [
    "MQTT_UNKNOWN",
    "SCHEMA_VERSION",
    "KafkaLagProbe",
    "PartitionLag",
    "StreamLag",
    "kafka_lag",
    "last_batch",
    "measure",
    "oldest_timestamps",
]

#: Version of :meth:`StreamLag.to_dict`'s layout.
SCHEMA_VERSION = 1

MQTT_UNKNOWN = (
    "MQTT brokers do not tell how many messages a persistent session holds, nor when they "
    "were published, without taking the session from the ingest"
)


@dataclass
class PartitionLag:
    """One Kafka partition: committed offset (None: the group never committed here), end,
    the messages between, and the timestamp (seconds) of the first of them."""

    partition: int
    committed: int | None
    end: int
    lag: int
    oldest_timestamp: float | None = None


@dataclass
class StreamLag:
    """A stream (Kafka topic and group, or MQTT topic filter and session) at one moment."""

    kind: str
    topic: str
    group: str | None
    measured_at: float
    partitions: list[PartitionLag] | None = None  # None: lag cannot be known (``unknown``)
    unknown: str | None = None
    sink: str | None = None
    last_batch_id: str | None = None
    last_batch_at: float | None = None  # seconds since the epoch
    error: str | None = None  # the measurement failed: why (no secrets)

    @property
    def lag(self) -> int | None:
        """Messages waiting in every partition (None: not known)."""
        return None if self.partitions is None else sum(p.lag for p in self.partitions)

    @property
    def oldest_timestamp(self) -> float | None:
        stamps = [p.oldest_timestamp for p in self.partitions or () if p.oldest_timestamp]
        return min(stamps) if stamps else None

    @property
    def oldest_age(self) -> float | None:
        """Seconds the oldest waiting message has waited (None: none waits, or not known)."""
        oldest = self.oldest_timestamp
        return None if oldest is None else max(0.0, self.measured_at - oldest)

    @property
    def last_batch_age(self) -> float | None:
        """Seconds since the last successful batch was published (None: no batch yet)."""
        at = self.last_batch_at
        return None if at is None else max(0.0, self.measured_at - at)

    def behind(self, max_lag: int | None = None, max_age: float | None = None) -> list[str]:
        """Why the stream is further behind than ``max_lag`` messages or ``max_age`` seconds
        of the oldest waiting message (empty: it is not). A limit that cannot be measured
        (MQTT) is a reason too: a check of it cannot pass."""
        reasons: list[str] = []
        where = f"{self.kind} topic '{self.topic}'"
        if self.error is not None:
            return [f"{where}: the lag could not be measured: {self.error}"]
        if (max_lag is not None or max_age is not None) and self.partitions is None:
            return [f"{where}: lag and waiting time cannot be measured: {self.unknown}"]
        lag, age = self.lag, self.oldest_age
        if max_lag is not None and lag is not None and lag > max_lag:
            worst = max(self.partitions or [], key=lambda p: p.lag)
            reasons.append(
                f"{where}: {lag} messages wait for group '{self.group}', more than {max_lag} "
                f"(partition {worst.partition}: {worst.lag})"
            )
        if max_age is not None and age is not None and age > max_age:
            reasons.append(
                f"{where}: the oldest waiting message has waited {age:.0f} s, more than "
                f"{max_age:.0f} s"
            )
        return reasons

    def to_dict(self) -> dict[str, Any]:
        """The JSON of ``sluice lag --json`` (layout :data:`SCHEMA_VERSION`)."""
        return {
            "version": SCHEMA_VERSION,
            "kind": self.kind,
            "topic": self.topic,
            "group": self.group,
            "measured_at": round(self.measured_at, 3),
            "lag": self.lag,
            "oldest_waiting_timestamp": _rounded(self.oldest_timestamp),
            "oldest_waiting_age_seconds": _rounded(self.oldest_age),
            "partitions": None
            if self.partitions is None
            else [
                {
                    "partition": p.partition,
                    "committed": p.committed,
                    "end": p.end,
                    "lag": p.lag,
                    "oldest_waiting_timestamp": _rounded(p.oldest_timestamp),
                }
                for p in self.partitions
            ],
            "unknown": self.unknown,
            "sink": self.sink,
            "last_batch_id": self.last_batch_id,
            "last_batch_at": _rounded(self.last_batch_at),
            "last_batch_age_seconds": _rounded(self.last_batch_age),
            "error": self.error,
        }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def oldest_timestamps(
    kwargs: Mapping[str, Any], topic: str, ranges: Sequence[OffsetRange], timeout_s: float
) -> dict[int, float]:
    """{partition: timestamp in seconds} of the first record of each of ``ranges`` (the
    record at the committed offset, or the first one after it when that offset holds none:
    a transaction marker, a compacted record). Reads a record or so per partition."""
    from .kafka.ranges import read_range_records

    wanted = {r.partition for r in ranges if r.count > 0}
    found: dict[int, float] = {}
    if not wanted:
        return found
    small = {**kwargs, "max_poll_records": max(1, len(wanted)), "max_partition_fetch_bytes": 65536}
    reader = read_range_records(small, topic, [r for r in ranges if r.count > 0], timeout_s)
    try:
        for partition, records in reader:
            if records and partition not in found:
                found[partition] = records[0].timestamp / 1000.0
            if wanted <= set(found):
                break
    finally:
        getattr(reader, "close", lambda: None)()  # a generator: closes the reader's consumer
    return found


class KafkaLagProbe:
    """Measures one Kafka stream again and again on one open connection (:meth:`close` it).

    ``config``: the stream's queue config (connection keys, ``topic``, ``group_id``)."""

    def __init__(self, config: Mapping[str, Any], oldest: bool = True) -> None:
        from .kafka.connection import KafkaConnection
        from .queues import queue_from_config

        values = queue_from_config("kafka", {**config, "options.create_topic": False}).config
        self.topic, self.group = str(values["topic"]), str(values["group_id"])
        self._values, self._oldest = values, oldest
        self._connection: KafkaConnection | None = KafkaConnection()
        self._connection.use_config(values)
        self._connection.open(None)

    def measure(self) -> StreamLag:
        """The stream now; :class:`~sluice.errors.TopicNotFoundError` if the topic does not
        exist, ``ConnectionError`` when the broker cannot be reached."""
        from .errors import TopicNotFoundError
        from .kafka.config import bootstrap_servers, unretried_consumer_config

        if self._connection is None:
            raise RuntimeError("The lag probe is closed.")
        now = time.time()
        committed, beginnings, ends = self._connection.group_offsets(self.topic, self.group)
        if not ends:
            raise TopicNotFoundError(self.topic, ",".join(bootstrap_servers(self._values)))
        partitions, ranges = [], []
        for partition, end in sorted(ends.items()):
            done = committed.get(partition)
            start = done if done is not None else beginnings.get(partition, 0)
            partitions.append(PartitionLag(partition, done, end, max(0, end - start)))
            if end > start:
                ranges.append(OffsetRange(partition, start, end))
        if self._oldest and ranges:
            timeout = float(self._values["options.request_timeout"]) / 1000
            stamps = oldest_timestamps(
                unretried_consumer_config(self._values), self.topic, ranges, timeout
            )
            for p in partitions:
                p.oldest_timestamp = stamps.get(p.partition)
        return StreamLag("kafka", self.topic, self.group, now, partitions)

    def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close(None)


def kafka_lag(config: Mapping[str, Any], oldest: bool = True) -> StreamLag:
    """The Kafka stream of queue ``config`` now (:class:`KafkaLagProbe`, measured once)."""
    probe = KafkaLagProbe(config, oldest)
    try:
        return probe.measure()
    finally:
        probe.close()


def last_batch(sink: str, kind: str, topic: str, group: str | None) -> tuple[str, float] | None:
    """(batch id, published at) of the stream's newest batch in ``sink``, from its stream
    state and that batch's record (bounded: never the list of batches); None before the
    first."""
    from .spark.sinks import StreamKey, open_sink

    opened = open_sink(sink)
    state = opened.state(StreamKey(kind, topic, group))
    if not state.recent_batches:
        return None
    record = opened.find(state.recent_batches[-1])
    if record is None:
        return None
    return record.batch_id, record.published_at


def stream_of(kind: str, config: Mapping[str, Any]) -> tuple[str, str | None]:
    """(topic, group) of a queue ``config``: Kafka's group, MQTT's session client id."""
    owner = config.get("group_id") if kind == "kafka" else config.get("client_id")
    return str(config.get("topic")), (str(owner) if owner is not None else None)


def measure(
    kind: str,
    config: Mapping[str, Any],
    sink: str | None = None,
    oldest: bool = True,
    probe: KafkaLagProbe | None = None,
) -> StreamLag:
    """The stream of queue ``config`` (``kind`` kafka or mqtt) now, with its last batch in
    ``sink`` when one is given. Raises what the broker or the sink raise."""
    if kind == "kafka":
        lag = probe.measure() if probe is not None else kafka_lag(config, oldest)
    elif kind == "mqtt":
        topic, group = stream_of(kind, config)
        lag = StreamLag("mqtt", topic, group, time.time(), unknown=MQTT_UNKNOWN)
    else:
        raise ValueError(f"Cannot measure {kind!r} streams (only kafka and mqtt).")
    if sink is not None:
        lag.sink = str(sink)
        found = last_batch(str(sink), kind, lag.topic, lag.group)
        if found is not None:
            lag.last_batch_id, lag.last_batch_at = found
    return lag
