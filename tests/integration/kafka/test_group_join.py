"""A group join whose answer came while no poll waited is finished with that answer
(sluice.kafka.subscription.finish_answered_joins), on every broker."""

from __future__ import annotations

from typing import Any

import pytest
from kafka import KafkaConsumer

from sluice.kafka.subscription import finish_answered_joins
from sluice.testing.plugin import Broker
from sluice.testing.topics import create_kafka_topic
from sluice.testing.waiting import wait_until


def consumer_with_an_unheard_answer(bootstrap: str, topic: str, mended: bool) -> KafkaConsumer:
    """A consumer whose join got its SyncGroup answer after its last poll gave up waiting:
    each poll waits 0 ms, and the answer is awaited without polling."""
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=f"{topic}-group",
        enable_auto_commit=False,
        session_timeout_ms=6000,
    )
    if mended:
        finish_answered_joins(consumer)
    consumer.subscribe([topic])
    coordinator = consumer._coordinator

    def answered() -> bool:
        task = coordinator._join_task
        if task is None or task.failed():  # not started, or MEMBER_ID_REQUIRED: poll again
            consumer.poll(timeout_ms=0)
            return False
        return bool(task.succeeded())

    wait_until(answered, timeout=30, message="a join answered while no poll waited")
    return consumer


def count_join_attempts(consumer: KafkaConsumer) -> list[int]:
    coordinator = consumer._coordinator
    attempt = coordinator._do_join_and_sync_async
    attempts: list[int] = []

    async def counted() -> Any:
        attempts.append(1)
        return await attempt()

    coordinator._do_join_and_sync_async = counted
    return attempts


@pytest.mark.parametrize("mended", [False, True], ids=["kafka-python", "mended"])
def test_a_join_answered_while_no_poll_waited_is_finished_not_started_again(
    kafka_broker: Broker, unique_name: str, mended: bool
) -> None:
    create_kafka_topic(kafka_broker.bootstrap, unique_name, 2)
    consumer = consumer_with_an_unheard_answer(kafka_broker.bootstrap, unique_name, mended)
    try:
        attempts = count_join_attempts(consumer)

        consumer.poll(timeout_ms=200)

        if mended:
            assert {tp.partition for tp in consumer.assignment()} == {0, 1}
            assert attempts == []
        else:  # kafka-python 3.0.12 throws the answer away and joins again (pinned: a fix shows)
            assert attempts
    finally:
        consumer.close(autocommit=False)
