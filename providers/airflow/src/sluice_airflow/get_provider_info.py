"""Provider metadata for Airflow's ProvidersManager (entry point ``apache_airflow_provider``).

Kept free of Airflow imports: the ProvidersManager reads it in every Airflow process.
"""

from __future__ import annotations

from typing import Any

KAFKA_CONN_TYPE = "sluice_kafka"
MQTT_CONN_TYPE = "sluice_mqtt"

_CREDENTIAL_LABELS = {
    "login": "Username (SASL / MQTT)",
    "password": "Password",
    "extra": "Sluice config keys (JSON)",
}

#: The connection form of each connection type: standard fields hidden, relabelled, hinted.
UI_FIELD_BEHAVIOUR: dict[str, dict[str, Any]] = {
    KAFKA_CONN_TYPE: {
        "hidden-fields": ["schema"],
        "relabeling": {"host": "Bootstrap server(s)", "port": "Port", **_CREDENTIAL_LABELS},
        "placeholders": {
            "host": "localhost  (or h1:9092,h2:9092, or kafka://h1:9092)",
            "port": "9092",
            "login": "SASL user name (leave empty for no SASL)",
            "extra": '{"group_id": "airflow-ingest", "credential.mechanism": "scram-sha-512", '
            '"connection.protocol": "sasl_ssl", "options.session_timeout": 10000}',
        },
    },
    MQTT_CONN_TYPE: {
        "hidden-fields": ["schema"],
        "relabeling": {"host": "Broker host", "port": "Port", **_CREDENTIAL_LABELS},
        "placeholders": {
            "host": "localhost  (or mqtts://broker:8883)",
            "port": "1883",
            "login": "MQTT user name (optional)",
            "extra": '{"client_id": "airflow-ingest", "options.qos": 1, '
            '"options.protocol_version": "5"}',
        },
    },
}


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "sluice-airflow",
        "name": "Sluice",
        "description": "Sluice: Kafka and MQTT message batches into PySpark, exactly once.",
        "integrations": [
            {
                "integration-name": "Sluice",
                "external-doc-url": "https://pypi.org/project/sluice-airflow/",
                "tags": ["software"],
            }
        ],
        "hooks": [{"integration-name": "Sluice", "python-modules": ["sluice_airflow.hooks.queue"]}],
        "triggers": [
            {
                "integration-name": "Sluice",
                "python-modules": [
                    "sluice_airflow.triggers.queue",
                    "sluice_airflow.triggers.routed",
                ],
            }
        ],
        "sensors": [
            {"integration-name": "Sluice", "python-modules": ["sluice_airflow.sensors.queue"]}
        ],
        "operators": [
            {
                "integration-name": "Sluice",
                "python-modules": [
                    "sluice_airflow.operators.audit",
                    "sluice_airflow.operators.maintenance",
                    "sluice_airflow.operators.publish",
                    "sluice_airflow.operators.spark",
                ],
            }
        ],
        "connection-types": [
            {
                "connection-type": KAFKA_CONN_TYPE,
                "hook-class-name": "sluice_airflow.hooks.queue.QueueHook",
                "hook-name": "Sluice Kafka queue",
                "ui-field-behaviour": UI_FIELD_BEHAVIOUR[KAFKA_CONN_TYPE],
            },
            {
                "connection-type": MQTT_CONN_TYPE,
                "hook-class-name": "sluice_airflow.hooks.queue.MqttQueueHook",
                "hook-name": "Sluice MQTT queue",
                "ui-field-behaviour": UI_FIELD_BEHAVIOUR[MQTT_CONN_TYPE],
            },
        ],
        "queues": ["sluice_airflow.queues.sluice.SluiceMessageQueueProvider"],
    }
