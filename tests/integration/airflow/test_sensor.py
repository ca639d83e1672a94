"""QueueMessageSensor in a real DAG run (``dag.test()``) against a real Kafka broker: poke,
reschedule and deferrable modes return the same batch; with nothing waiting the sensor times
out, and soft_fail skips it. The publish operator feeds them."""

from __future__ import annotations

import datetime

import pytest

from sluice.batch import BatchSpec
from sluice.brokers import BrokerProcess
from sluice.testing.topics import create_kafka_topic
from tests.integration.airflow import dag_runs

SENSOR_DAG = """
from sluice_airflow.operators.publish import QueuePublishOperator
from sluice_airflow.sensors.queue import QueueMessageSensor

CONN, TOPIC, EMPTY, GROUP = {conn!r}, {topic!r}, {empty!r}, {group!r}
SENSOR = dict(
    conn_id=CONN, topic=TOPIC, config={{"group_id": GROUP}}, min_messages=4, max_messages=10,
    poke_interval=1, timeout=60,
)

with {dag} as dag:
    publish = QueuePublishOperator(
        task_id="publish",
        conn_id=CONN,
        topic=TOPIC,
        messages=[{{"value": {{"n": n}}, "key": f"k{{n}}"}} for n in range(4)],
    )
    poke = QueueMessageSensor(task_id="poke", deferrable=False, mode="poke", **SENSOR)
    reschedule = QueueMessageSensor(
        task_id="reschedule", deferrable=False, mode="reschedule", **SENSOR
    )
    deferred = QueueMessageSensor(task_id="deferred", **SENSOR)
    publish >> [poke, reschedule, deferred]
    QueueMessageSensor(
        task_id="nothing_waits",
        conn_id=CONN,
        topic=EMPTY,
        config={{"group_id": GROUP}},
        deferrable=False,
        mode="reschedule",
        poke_interval=1,
        timeout=2,
        soft_fail=True,
    )
"""


@pytest.mark.usefixtures("airflow_db")
def test_every_sensor_mode_returns_the_waiting_batch(
    noida_broker: BrokerProcess, kafka_conn: str, unique_name: str
) -> None:
    conn = kafka_conn
    topic, empty, group = unique_name, f"{unique_name}-empty", f"{unique_name}-group"
    create_kafka_topic(noida_broker.bootstrap, topic, 2)
    create_kafka_topic(noida_broker.bootstrap, empty, 1)
    run = dag_runs.run_test_dag(
        "sluice_sensor_modes", SENSOR_DAG, conn=conn, topic=topic, empty=empty, group=group
    )
    assert run.states == {
        "publish": "success",
        "poke": "success",
        "reschedule": "success",
        "deferred": "success",
        "nothing_waits": "skipped",
    }
    values = run.xcoms()
    assert values["publish"] == 4
    spec = BatchSpec.from_dict(values["poke"])
    assert (spec.topic, spec.group_id, spec.message_count) == (topic, group, 4)
    assert values["reschedule"] == values["deferred"] == values["poke"]
    assert "nothing_waits" not in values


def test_a_deferrable_sensor_returns_a_waiting_batch_without_deferring(
    noida_broker: BrokerProcess, kafka_conn: str, unique_name: str
) -> None:
    from airflow.sdk.exceptions import TaskDeferred

    from sluice.queues import MessageEnvelope, queue_from_config
    from sluice_airflow.sensors.queue import QueueMessageSensor
    from sluice_airflow.triggers.queue import QueueMessageTrigger

    create_kafka_topic(noida_broker.bootstrap, unique_name, 1)
    sensor = QueueMessageSensor(
        task_id="wait",
        conn_id=kafka_conn,
        topic=unique_name,
        config={"group_id": unique_name},
        timeout=120,
        trigger_poll_interval=0.5,
    )
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})  # type: ignore[arg-type]  # nothing waits: it defers
    assert deferred.value.method_name == "execute_complete"
    assert deferred.value.timeout == datetime.timedelta(seconds=120)
    assert isinstance(deferred.value.trigger, QueueMessageTrigger)
    assert deferred.value.trigger.serialize()[1] == {
        "conn_id": kafka_conn,
        "topic": unique_name,
        "min_messages": 1,
        "max_messages": None,
        "poll_interval": 0.5,
        "config": {"group_id": unique_name},
        "rerun_after": 600.0,
    }

    queue = queue_from_config(
        "kafka", {"connection.uri": noida_broker.bootstrap, "topic": unique_name}
    )
    queue.open(None)
    try:
        queue.send(None, MessageEnvelope(None, "reading", {"n": 1}))
    finally:
        queue.close(None)
    spec = BatchSpec.from_dict(sensor.execute({}))  # type: ignore[arg-type]
    assert (spec.topic, spec.group_id, spec.message_count) == (unique_name, unique_name, 1)
