"""Apache Iceberg's own Kafka Connect sink (``org.apache.iceberg:iceberg-kafka-connect``) in a
Connect worker of Apache Kafka's own (:mod:`.kafka_connect`), writing to an Iceberg REST
catalog (:mod:`.rest_catalog`): the peer a team that wants Kafka in Iceberg tables runs
today, for the benchmark that measures Sluice beside it (``bench/iceberg_connect.py``).

:data:`ICEBERG_SINK` is the plugin. Iceberg builds the sink's runnable distribution as a ZIP
that is not on Maven Central, and the published ``iceberg-kafka-connect`` POM leaves out
what the distribution adds: the Parquet writer (``iceberg-parquet``), S3FileIO
(``iceberg-aws`` and the AWS SDK bundle) and Hadoop's ``Configuration`` (the shaded client
jars, as :data:`.rest_catalog.REST_CATALOG_COORDINATES` has them). So the plugin lists them,
pinned. Iceberg 1.10.0's ``iceberg-kafka-connect-events`` is not served by Maven Central
(1.10.1's is), hence :data:`ICEBERG_SINK_VERSION`; the REST catalog server stays on its own
release (the REST API is the same).

:func:`sink_config` is a connector's configuration: schemaless JSON values (Kafka's
JsonConverter), one table, a commit every ``commit_interval_ms`` (Iceberg's default is
300,000), the table created by the sink from the first records, and Kafka's coordinates in
each row (``KafkaMetadataTransform``: ``_kafka_metadata_partition``, ``_offset``,
``_timestamp``, ``_topic``), which is what lets a reader count rows per offset. The catalog's
S3 keys reach the sink as ``AWS_*`` variables of the worker's environment
(:func:`start_iceberg_connect`), not in the configuration the REST API shows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .kafka_connect import JSON_CONVERTER, ConnectPlugin, ConnectWorker, start_connect
from .rest_catalog import RestCatalogServer

__all__ = [
    "ICEBERG_SINK",
    "ICEBERG_SINK_VERSION",
    "METADATA_COLUMNS",
    "SINK_CLASS",
    "sink_config",
    "start_iceberg_connect",
]

ICEBERG_SINK_VERSION = "1.10.1"
ICEBERG_SINK = ConnectPlugin(
    "iceberg-kafka-connect",
    (
        f"org.apache.iceberg:iceberg-kafka-connect:{ICEBERG_SINK_VERSION}",
        f"org.apache.iceberg:iceberg-kafka-connect-transforms:{ICEBERG_SINK_VERSION}",
        f"org.apache.iceberg:iceberg-parquet:{ICEBERG_SINK_VERSION}",
        f"org.apache.iceberg:iceberg-aws:{ICEBERG_SINK_VERSION}",
        f"org.apache.iceberg:iceberg-aws-bundle:{ICEBERG_SINK_VERSION}",
        "org.apache.hadoop:hadoop-client-api:3.4.1",
        "org.apache.hadoop:hadoop-client-runtime:3.4.1",
    ),
)
SINK_CLASS = "org.apache.iceberg.connect.IcebergSinkConnector"
METADATA_TRANSFORM = "org.apache.iceberg.connect.transforms.KafkaMetadataTransform"
#: The columns ``KafkaMetadataTransform`` adds to each row (its ``nested`` off).
METADATA_COLUMNS = (
    "_kafka_metadata_topic",
    "_kafka_metadata_partition",
    "_kafka_metadata_offset",
    "_kafka_metadata_timestamp",
)


def sink_config(
    topic: str,
    table: str,
    catalog: RestCatalogServer,
    *,
    control_topic: str,
    commit_interval_ms: int = 300_000,
    tasks: int = 1,
    metadata: bool = True,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The sink's configuration: ``topic`` into ``table`` (``namespace.name``) of
    ``catalog``, committing every ``commit_interval_ms`` through ``control_topic`` (a topic
    of one partition, created beforehand; one per connector). ``metadata``: add Kafka's
    coordinates to each row. ``extra`` replaces or adds settings."""
    config: dict[str, Any] = {
        "connector.class": SINK_CLASS,
        "tasks.max": tasks,
        "topics": topic,
        "key.converter": "org.apache.kafka.connect.storage.StringConverter",
        "value.converter": JSON_CONVERTER,
        "value.converter.schemas.enable": "false",
        "consumer.override.auto.offset.reset": "earliest",
        "iceberg.tables": table,
        "iceberg.tables.auto-create-enabled": "true",
        "iceberg.tables.evolve-schema-enabled": "true",
        "iceberg.control.topic": control_topic,
        "iceberg.control.commit.interval-ms": commit_interval_ms,
        "iceberg.catalog.type": "rest",
        "iceberg.catalog.uri": catalog.uri,
    }
    if catalog.s3_endpoint:
        config.update(
            {
                "iceberg.catalog.io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
                "iceberg.catalog.s3.endpoint": catalog.s3_endpoint,
                "iceberg.catalog.s3.path-style-access": "true",
                "iceberg.catalog.client.region": catalog.s3_region,
            }
        )
    if metadata:
        config.update({"transforms": "kafka", "transforms.kafka.type": METADATA_TRANSFORM})
    config.update(extra or {})
    return {k: str(v) for k, v in config.items()}


def start_iceberg_connect(
    bootstrap: str, catalog: RestCatalogServer, **options: Any
) -> ConnectWorker:
    """A Connect worker (:func:`.kafka_connect.start_connect`, ``options`` passed on) with
    :data:`ICEBERG_SINK` on its plugin path and ``catalog``'s S3 keys in its environment."""
    environment = {
        **catalog.s3_environment(),
        **options.pop("environment", {}),
    }
    return start_connect(bootstrap, [ICEBERG_SINK], environment=environment, **options)
