"""Sluice's lag and freshness as Airflow metrics, through Airflow's own ``Stats``.

Whatever Airflow sends metrics with (``[metrics] statsd_on``, ``otel_on`` or
``statsd_datadog_enabled``) carries these; with none configured they cost nothing. The stream
is part of each name, because StatsD has no tags (``.`` and characters StatsD does not take
become ``_``); OpenTelemetry and DogStatsD get ``kind``, ``topic`` and ``group`` as tags too:

- ``sluice.lag.<topic>.<group>``: messages waiting for the group after the task (gauge, Kafka);
- ``sluice.oldest_waiting_age.<topic>.<group>``: seconds the oldest waiting message has waited
  (gauge, Kafka; 0 when none waits);
- ``sluice.last_batch_timestamp.<topic>.<group>``: when the stream's newest batch was
  published, Unix time (gauge);
- ``sluice.written.<topic>.<group>``, ``sluice.quarantined.<topic>.<group>``: rows an ingest
  wrote and quarantined (counters);
- ``sluice.audit.missing.<topic>.<group>``, ``sluice.audit.doubled.<topic>.<group>``: what an
  :class:`~sluice_airflow.operators.audit.AuditOperator` found (gauges).

The numbers are measured by :mod:`sluice.metrics` (one home for lag and freshness).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from sluice.metrics import StreamLag

__all__ = ["send_counts", "send_gauges", "send_stream", "stat_name", "stream_tags"]


def _part(value: str | None) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", value or "none")


def stat_name(metric: str, topic: str, group: str | None) -> str:
    """``sluice.<metric>.<topic>.<group>``, each part in the characters StatsD takes."""
    return f"sluice.{metric}.{_part(topic)}.{_part(group)}"


def stream_tags(kind: str, topic: str, group: str | None) -> dict[str, str]:
    return {"kind": kind, "topic": topic, "group": group or ""}


def _stats() -> Any:
    from airflow.sdk.observability.stats import Stats

    return Stats


def send_stream(lag: StreamLag) -> None:
    """Gauges of a measured stream (what cannot be known, MQTT's lag, is not sent)."""
    stats, tags = _stats(), stream_tags(lag.kind, lag.topic, lag.group)
    if lag.lag is not None:
        stats.gauge(stat_name("lag", lag.topic, lag.group), lag.lag, tags=tags)
        age = lag.oldest_age or 0.0
        stats.gauge(stat_name("oldest_waiting_age", lag.topic, lag.group), age, tags=tags)
    if lag.last_batch_at is not None:
        name = stat_name("last_batch_timestamp", lag.topic, lag.group)
        stats.gauge(name, lag.last_batch_at, tags=tags)


def send_counts(kind: str, topic: str, group: str | None, counts: Mapping[str, Any]) -> None:
    """Counters of ``counts`` (``written``, ``quarantined``: an ingest summary's)."""
    stats, tags = _stats(), stream_tags(kind, topic, group)
    for key in ("written", "quarantined"):
        if counts.get(key):
            stats.incr(stat_name(key, topic, group), int(counts[key]), tags=tags)


def send_gauges(prefix: str, kind: str, topic: str, group: str | None, **values: float) -> None:
    """``sluice.<prefix>.<name>.<topic>.<group>`` gauges, one per keyword."""
    stats, tags = _stats(), stream_tags(kind, topic, group)
    for name, value in values.items():
        stats.gauge(stat_name(f"{prefix}.{name}", topic, group), value, tags=tags)
