"""One real Airflow deployment per test session, running the example DAGs against real brokers.

The deployment (the ``deployment`` package) uses the session's PostgreSQL, LocalExecutor and the
DAGs folder ``dags_examples/airflow``; the DAGs read their topics, groups and sink from the
``SLUICE_EXAMPLE_*`` variables set here, and their connections from ``AIRFLOW_CONN_*``:

- ``sluice_kafka_default``: noida-db over SASL/PLAIN (noida accepts any password, so one is
  set to check it never leaks);
- ``sluice_mqtt_default``: a mosquitto that only admits the user with the right password
  (plaintext on loopback: the connection opts in with ``options.allow_plaintext_credentials``).

The scheduled examples (``scheduled_to_parquet.py``) run every 10 s once unpaused.

Spark runs in the task processes on ``local[1]``.
"""

from __future__ import annotations

import json
import secrets
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from sluice.queues import MessageEnvelope, queue_from_config
from sluice.testing import BrokerProcess
from sluice.testing.postgres import PostgresServer
from sluice.testing.topics import create_kafka_topic

from .deployment import AirflowDeployment

ROOT = Path(__file__).resolve().parents[3]
DAGS_FOLDER = ROOT / "dags_examples" / "airflow"
KAFKA_PARTITIONS = 2


@dataclass
class ExampleSystem:
    """The deployment, the brokers and topics the example DAGs use, and what was published."""

    deployment: AirflowDeployment
    kafka: BrokerProcess
    mqtt: BrokerProcess
    kafka_topic: str
    mqtt_topic: str
    sink: Path
    kafka_password: str
    mqtt_password: str
    published_kafka: list[str] = field(default_factory=list)
    published_mqtt: list[str] = field(default_factory=list)
    #: Trigger kwargs (decrypted) seen while sensors waited: their rows go when they fire.
    trigger_kwargs_seen: list[str] = field(default_factory=list)

    @property
    def passwords(self) -> tuple[str, ...]:
        """The brokers' passwords, and the metadata database's (its server's own)."""
        database = self.deployment.postgres
        return self.kafka_password, self.mqtt_password, *([database.password] if database else [])

    def publish_kafka(self, count: int) -> list[str]:
        """``count`` readings to the Kafka topic (spread over its partitions by key)."""
        devices = [f"k-{len(self.published_kafka) + i:04d}" for i in range(count)]
        queue = queue_from_config(
            "kafka", {"connection.uri": self.kafka.bootstrap, "topic": self.kafka_topic}
        )
        queue.open(None)
        try:
            for device in devices:
                queue.send(None, MessageEnvelope(None, "reading", _reading(device), key=device))
        finally:
            queue.close(None)
        self.published_kafka += devices
        return devices

    def publish_mqtt(self, count: int) -> list[str]:
        """``count`` readings to the MQTT topic at QoS 1 (queued for the DAG's session)."""
        devices = [f"m-{len(self.published_mqtt) + i:04d}" for i in range(count)]
        queue = queue_from_config(
            "mqtt",
            {
                "connection.host": self.mqtt.host,
                "connection.port": self.mqtt.port,
                "credential.username": "sluice",
                "credential.password": self.mqtt_password,
                "options.allow_plaintext_credentials": True,  # loopback: a network we trust
                "topic": self.mqtt_topic,
                "options.qos": 1,
            },
        )
        queue.open(None)
        try:
            for device in devices:
                queue.send(None, MessageEnvelope(None, "reading", _reading(device)))
        finally:
            queue.close(None)
        self.published_mqtt += devices
        return devices

    def dataset(self, dag_id: str) -> pa.Table | None:
        """The Parquet dataset a DAG wrote (None while there is none, or a write is under way)."""
        path = self.sink / dag_id
        if not path.exists():
            return None
        try:
            return ds.dataset(path, format="parquet", partitioning="hive").to_table()
        except (OSError, pa.ArrowInvalid):
            return None

    def kafka_end_offsets(self) -> dict[int, int]:
        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(bootstrap_servers=self.kafka.bootstrap)
        try:
            parts = [TopicPartition(self.kafka_topic, p) for p in range(KAFKA_PARTITIONS)]
            return {tp.partition: int(end) for tp, end in consumer.end_offsets(parts).items()}
        finally:
            consumer.close()


def _reading(device: str) -> dict[str, Any]:
    return {"device": device, "temperature": 20.5, "ts": "2026-01-01T12:00:00Z"}


# Module scope: one file uses it, and a deployment left running until the session ends
# (scheduler, triggerer, dag processor, api server, the scheduled DAG's runs every 10 s) took
# about a tenth of the machine's CPU from every later test file.
@pytest.fixture(scope="module")
def example_system(
    noida_broker: BrokerProcess,
    mosquitto_auth_broker: BrokerProcess,
    postgres_server: PostgresServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ExampleSystem]:
    """The example DAGs in a running Airflow deployment (all paused, as Airflow creates them)."""
    run = uuid.uuid4().hex[:8]
    kafka_topic = f"sluice-system-{run}"
    create_kafka_topic(noida_broker.bootstrap, kafka_topic, KAFKA_PARTITIONS)
    kafka_password = f"kafka-{secrets.token_hex(8)}"
    mqtt_password = mosquitto_auth_broker.users["sluice"]
    sink = tmp_path_factory.mktemp("datasets")
    connections = {
        "AIRFLOW_CONN_SLUICE_KAFKA_DEFAULT": {
            "conn_type": "sluice_kafka",
            "host": noida_broker.host,
            "port": noida_broker.port,
            "login": "svc-sluice",
            "password": kafka_password,
            "extra": {"connection.protocol": "sasl_plaintext", "options.session_timeout": 6000},
        },
        "AIRFLOW_CONN_SLUICE_MQTT_DEFAULT": {
            "conn_type": "sluice_mqtt",
            "host": mosquitto_auth_broker.host,
            "port": mosquitto_auth_broker.port,
            "login": "sluice",
            "password": mqtt_password,
            # mosquitto listens in plaintext on loopback, a network the deployment trusts
            "extra": {"options.allow_plaintext_credentials": True},
        },
    }
    env = {name: json.dumps(value) for name, value in connections.items()}
    env.update(
        {
            "SLUICE_EXAMPLE_KAFKA_TOPIC": kafka_topic,
            "SLUICE_EXAMPLE_MQTT_TOPIC": f"sluice/system/{run}/readings",
            "SLUICE_EXAMPLE_SINK": str(sink),
            "SLUICE_EXAMPLE_KAFKA_GROUP": f"sluice-system-{run}-sensor",
            "SLUICE_EXAMPLE_KAFKA_EVENT_GROUP": f"sluice-system-{run}-events",
            "SLUICE_EXAMPLE_MQTT_CLIENT_ID": f"sluice-system-{run}",
            # The scheduled examples: a run every 10 s, their own group and session.
            "SLUICE_EXAMPLE_INGEST_SCHEDULE": "10",
            "SLUICE_EXAMPLE_KAFKA_SCHEDULED_GROUP": f"sluice-system-{run}-scheduled",
            "SLUICE_EXAMPLE_MQTT_SCHEDULED_CLIENT_ID": f"sluice-system-{run}-scheduled",
            "SLUICE_SPARK_MASTER": "local[1]",
            # Each ingest task starts a JVM for a few dozen records: quick start over peak speed.
            "JAVA_TOOL_OPTIONS": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
        }
    )
    deployment = AirflowDeployment(
        home=tmp_path_factory.mktemp("airflow-home"),
        dags_folder=DAGS_FOLDER,
        extra_env=env,
        postgres=postgres_server,
    )
    with deployment:
        yield ExampleSystem(
            deployment=deployment,
            kafka=noida_broker,
            mqtt=mosquitto_auth_broker,
            kafka_topic=kafka_topic,
            mqtt_topic=env["SLUICE_EXAMPLE_MQTT_TOPIC"],
            sink=sink,
            kafka_password=kafka_password,
            mqtt_password=mqtt_password,
        )
