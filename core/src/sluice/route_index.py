"""Which tables a routed batch writes to, known before it is ingested.

A sensor of a routed topic (Dagster's queue sensor over a routed asset, Airflow's routed
trigger) plans a batch as any sensor does (:mod:`sluice.sensing`), then reads that batch's
messages once and routes each one (:meth:`sluice.routes.Routes.route`, what the ingest and
the audit do): :func:`batch_places` counts the messages each place gets, a route table or
:data:`HOME` (the ingest's own sink: the messages no route takes). The sensor then tells only
the assets of those places about the batch.

Reading commits nothing and joins no group (:class:`sluice.kafka.ranges.RangeReader`), so
sensing stays free of side effects; it costs one read of each batch it asks for (a batch
asked for again after a failed run is read again). A range that retention deleted meanwhile
is left out: the ingest finds and records the loss. MQTT batches are not read at sensing: the
messages are in the ingest's persistent session, and only a drain of it sees them
(:func:`batch_places` refuses them).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .batch import BatchSpec
from .queues.config import ConfigError
from .routes import Routes

if TYPE_CHECKING:
    from .kafka.ranges import RangeReader

__all__ = ["HOME", "batch_places", "places_reader"]

#: The place of the messages no route takes: the ingest's own sink.
HOME = "(no route)"


def batch_places(
    config: Mapping[str, Any],
    spec: BatchSpec,
    routes: Routes,
    stall_timeout_s: float = 30.0,
    reader: RangeReader | None = None,
) -> dict[str, int]:
    """How many messages of the Kafka batch ``spec`` each place gets (a route table's
    location, or :data:`HOME`), reading them from the cluster ``config`` names (queue config
    keys: ``connection.uri``, credentials...). A sensor that routes batch after batch passes
    the :func:`places_reader` it keeps (a new consumer per batch costs ~200 ms)."""
    if spec.kind != "kafka":
        raise ConfigError(
            "A routed MQTT batch cannot be read at sensing (its messages wait in the ingest's "
            "session): sense it as one batch and let the ingest route it."
        )
    own = reader is None
    if reader is None:
        reader = places_reader(config, spec.topic)
    places: Counter[str] = Counter()
    try:
        for _, records in reader.records(
            spec.topic, spec.ranges, stall_timeout_s, lost=lambda gone: None
        ):
            for record in records:
                decision = routes.route(record.key, record.value, record.headers, record.topic)
                places[decision.table or HOME] += 1
    finally:
        if own:
            reader.close()
    return dict(places)


def places_reader(config: Mapping[str, Any], topic: str) -> RangeReader:
    """A reader of the cluster ``config`` names for :func:`batch_places`, to keep and close."""
    from .kafka.config import credentials, unretried_consumer_config
    from .kafka.logs import hide_secret
    from .kafka.ranges import RangeReader
    from .queues.uri import queue_from_config

    values = queue_from_config("kafka", {**dict(config), "topic": topic}).config
    hide_secret(credentials(values)[1])
    return RangeReader({**unretried_consumer_config(values), "enable_auto_commit": False})
