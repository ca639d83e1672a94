"""Sluice for Dagster: queue resources, a queue sensor with run keys, a Spark ingest job and
asset.

::

    from sluice_dagster import (KafkaQueueResource, SparkResource, make_ingest_asset,
                                make_queue_sensor)

    events = make_ingest_asset("events", resource_key="kafka", sink="/lake/events",
                               schema="id INT, name STRING")
    defs = Definitions(
        assets=[events],
        sensors=[make_queue_sensor("events_sensor", "kafka", asset_selection=[events])],
        resources={"kafka": KafkaQueueResource(bootstrap="broker:9092", topic="events"),
                   "spark": SparkResource()},
    )
"""

from .assets import make_ingest_asset
from .jobs import make_ingest_job
from .ops import IngestConfig, ingest_run_config, make_ingest_op
from .resources import (
    KafkaQueueResource,
    MqttQueueResource,
    QueueResource,
    QueueUnavailableError,
    SparkResource,
)
from .sensors import make_queue_sensor

__all__ = [
    "IngestConfig",
    "KafkaQueueResource",
    "MqttQueueResource",
    "QueueResource",
    "QueueUnavailableError",
    "SparkResource",
    "ingest_run_config",
    "make_ingest_asset",
    "make_ingest_job",
    "make_ingest_op",
    "make_queue_sensor",
]
