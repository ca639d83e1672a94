"""The queue sensor and the ingest job on a real mosquitto that wants a password: batches of
the persistent session, ingested and acknowledged, and the password nowhere to be seen."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterInstance, EnvVar, serialize_value

from sluice.batch import BatchSpec
from sluice.testing import BrokerProcess
from sluice_dagster import (
    MqttQueueResource,
    SparkResource,
    ingest_run_config,
    make_ingest_job,
    make_queue_sensor,
)
from sluice_dagster.testing import SensorTicker

from .conftest import publish_mqtt, sink_ids, spec_of

pytestmark = pytest.mark.mqtt

PASSWORD_ENV = "SLUICE_TEST_DAGSTER_MQTT_PASSWORD"


def test_mqtt_batches_are_ingested_and_acknowledged_without_showing_the_password(
    mosquitto_auth_broker: BrokerProcess,
    unique_name: str,
    spark: Any,
    instance: DagsterInstance,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    password = mosquitto_auth_broker.users["sluice"]
    monkeypatch.setenv(PASSWORD_ENV, password)
    sink = tmp_path / "readings"
    job = make_ingest_job("readings", "mqtt", str(sink), schema="id INT, name STRING")
    sensor = make_queue_sensor("readings_sensor", "mqtt", job=job, min_messages=3)
    queue = MqttQueueResource(
        host=mosquitto_auth_broker.host,
        port=mosquitto_auth_broker.port,
        topic=f"{unique_name}/#",
        client_id=unique_name,
        username="sluice",
        password=EnvVar(PASSWORD_ENV),
        options={"allow_plaintext_credentials": "true"},  # loopback: a network we trust
    )

    ticker = SensorTicker(sensor, {"mqtt": queue}, instance)
    assert "no messages waiting" in ticker.skip()  # the session starts here
    publish_mqtt(
        {
            "connection.host": mosquitto_auth_broker.host,
            "connection.port": mosquitto_auth_broker.port,
            "credential.username": "sluice",
            "credential.password": password,
            "options.allow_plaintext_credentials": True,
        },
        f"{unique_name}/line-1",
        range(3),
    )

    request = ticker.request()
    spec = BatchSpec.from_dict(spec_of(request, "readings_ingest"))
    assert (spec.kind, spec.client_id, spec.topic) == ("mqtt", unique_name, f"{unique_name}/#")
    assert request.run_key == spec.batch_id

    result = job.execute_in_process(
        run_config=request.run_config,
        tags=request.tags,
        instance=instance,
        resources={"mqtt": queue, "spark": SparkResource()},
    )
    assert result.success
    assert sink_ids(sink) == [0, 1, 2]
    [output] = [e for e in result.events_for_node("readings_ingest") if e.is_successful_output]
    metadata = output.step_output_data.metadata
    assert (metadata["read"].value, metadata["written"].value) == (3, 3)

    recorded = [serialize_value(record) for record in instance.all_logs(result.run_id)]
    recorded.append(serialize_value(instance.get_run_by_id(result.run_id)))
    assert recorded and not [text for text in recorded if password in text]

    assert "no messages waiting" in ticker.skip(), "the batch was acknowledged"

    publish_mqtt(
        {
            "connection.host": mosquitto_auth_broker.host,
            "connection.port": mosquitto_auth_broker.port,
            "credential.username": "sluice",
            "credential.password": password,
            "options.allow_plaintext_credentials": True,
        },
        f"{unique_name}/line-2",
        range(3, 6),
    )
    following = ticker.request()
    batch_id = following.tags["sluice/batch_id"]
    assert batch_id != spec.batch_id, "each batch of the session has an id of its own"
    assert following.run_key == batch_id, "one id: the run key is the batch id"


def test_a_refused_password_is_reported_without_the_password(
    mosquitto_auth_broker: BrokerProcess,
    unique_name: str,
    spark: Any,
    instance: DagsterInstance,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    wrong = "not-the-sluice-password-7d1e"
    monkeypatch.setenv(PASSWORD_ENV, wrong)
    job = make_ingest_job("readings", "mqtt", str(tmp_path / "readings"))
    sensor = make_queue_sensor("readings_sensor", "mqtt", job=job)
    queue = MqttQueueResource(
        uri=mosquitto_auth_broker.url,
        topic=f"{unique_name}/#",
        client_id=unique_name,
        username="sluice",
        password=EnvVar(PASSWORD_ENV),
        options={"allow_plaintext_credentials": "true"},  # loopback: a network we trust
    )

    message = SensorTicker(sensor, {"mqtt": queue}, instance).skip()
    assert mosquitto_auth_broker.bootstrap in message and "credential" in message
    assert wrong not in message

    spec = BatchSpec("mqtt", f"{unique_name}/#", client_id=unique_name)
    failed = job.execute_in_process(
        run_config=ingest_run_config(spec, "readings_ingest"),
        instance=instance,
        resources={"mqtt": queue, "spark": SparkResource()},
        raise_on_error=False,
    )
    assert not failed.success
    [failure] = failed.get_step_failure_events()
    assert failure.step_failure_data.error is not None
    assert "credentials" in failure.step_failure_data.error.to_string()
    recorded = [serialize_value(record) for record in instance.all_logs(failed.run_id)]
    assert not [text for text in recorded if wrong in text]
