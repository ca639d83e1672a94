"""New kafka-python consumers, without kafka-python's wait before their first metadata request.

A kafka-python 3 client bootstraps with a metadata request for no topic, then waits its
cluster's ``retry_backoff_ms`` (100 ms, and the consumer's own setting does not reach it)
before it asks for the topics it needs: every short-lived consumer paid 105 ms for its first
``partitions_for_topic``, ``committed`` or position, two or three times in each batch (3 ms
without the wait, measured on Apache Kafka). The bootstrap is not a failed request, so the
wait is skipped once after it; a refresh that fails still backs off as before.
"""

from __future__ import annotations

import contextlib
from typing import Any

from kafka import KafkaConsumer

__all__ = ["new_consumer", "skip_bootstrap_backoff"]


def new_consumer(**kwargs: Any) -> KafkaConsumer:
    """``KafkaConsumer(**kwargs)`` whose first metadata request after its bootstrap goes at once."""
    return skip_bootstrap_backoff(KafkaConsumer(**kwargs))


def skip_bootstrap_backoff(consumer: KafkaConsumer) -> KafkaConsumer:
    """Let ``consumer``'s next metadata refresh go without the back-off its bootstrap started
    (a kafka-python without that state is left as it is).

    A consumer that bootstraps in its constructor (no ``api_version`` given) leaves its
    metadata marked stale, and its refresh loop sent a refresh for no topic a few
    milliseconds later, which started the back-off again: the first request that needs a
    topic (ListOffsets, a fetch) then waited up to 100 ms, nine times in ten. That refresh
    would learn nothing the bootstrap did not (a new consumer has no topics yet), so the
    mark is cleared with the back-off; the first request naming a topic refreshes at once."""
    cluster = getattr(getattr(consumer, "_client", None), "cluster", None)
    if cluster is None or not hasattr(cluster, "_last_refresh_ms"):
        return consumer
    with getattr(cluster, "_lock", contextlib.nullcontext()):
        if hasattr(cluster, "_need_update") and not getattr(cluster, "_topics", None):
            cluster._need_update = False
        cluster._last_refresh_ms = 0
    return consumer
