"""Sluice for Dagster: queue resources, a queue sensor with run keys, an ingest schedule, a
Spark ingest job and asset.

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

Observability: the topic as an external asset upstream of the table, the checks ``audit``
(``sluice audit`` of the stream) and ``lag`` (fails when the table falls behind), and the
sensor's lag observations::

    events_topic = topic_asset(KafkaQueueResource(bootstrap="broker:9092", topic="events"))
    events = make_ingest_asset("events", "kafka", sink="/lake/events", deps=[events_topic])
    checks = [make_audit_check(events), make_lag_check(events, max_lag=10_000, max_age=600)]

Keeping the table fast: ``make_maintenance_job("events_maintenance", sink="/lake/events")``
(``sluice compact`` then ``sluice expire``) and ``make_maintenance_schedule(job, "0 3 * * *")``.

One topic, many tables: ``make_routed_assets("events", "kafka", "/lake/events_other",
routes={"by": "field:type", "tables": {...}})`` is an asset per table, and
``make_queue_sensor`` over it asks for the assets whose tables get messages of each batch
(``make_routed_audit_checks`` audits each table).

Or, instead of the sensor, a run every hour for what has arrived (skipped when nothing has)::

    schedules=[make_ingest_schedule("events_hourly", "kafka", "0 * * * *",
                                    asset_selection=[events])]
"""

from .assets import make_ingest_asset
from .jobs import make_ingest_job
from .maintenance import make_maintenance_job, make_maintenance_schedule
from .observability import (
    make_audit_check,
    make_lag_check,
    make_routed_audit_checks,
    topic_asset,
)
from .ops import IngestConfig, ingest_run_config, make_ingest_op
from .resources import (
    KafkaQueueResource,
    MqttQueueResource,
    QueueResource,
    QueueUnavailableError,
    SparkResource,
)
from .routed import make_routed_assets
from .schedules import make_ingest_schedule
from .schema_registry import SchemaRegistryResource
from .sensors import make_queue_sensor

__all__ = [
    "IngestConfig",
    "KafkaQueueResource",
    "MqttQueueResource",
    "QueueResource",
    "QueueUnavailableError",
    "SchemaRegistryResource",
    "SparkResource",
    "ingest_run_config",
    "make_audit_check",
    "make_ingest_asset",
    "make_ingest_job",
    "make_ingest_op",
    "make_ingest_schedule",
    "make_lag_check",
    "make_maintenance_job",
    "make_maintenance_schedule",
    "make_queue_sensor",
    "make_routed_assets",
    "make_routed_audit_checks",
    "topic_asset",
]
