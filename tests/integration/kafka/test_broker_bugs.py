"""Bugs of the brokers we test on, pinned so we notice when they are fixed.

Sluice works around each one; the contract suite passing on the broker shows the workaround.
"""

from __future__ import annotations

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from sluice.testing import BrokerProcess
from sluice.testing.topics import create_kafka_topic


def ten_messages(bootstrap: str, topic: str) -> None:
    create_kafka_topic(bootstrap, topic, 1)
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for i in range(10):
        producer.send(topic, f"m{i}".encode(), partition=0)
    producer.flush()
    producer.close()


def test_tansu_list_offsets_bug_is_still_there(
    tansu_broker: BrokerProcess, unique_name: str
) -> None:
    """Tansu 0.6 answers ListOffsets(latest) with 1 for a partition holding 10 messages, so
    ``end_offsets``/``seek_to_end`` are wrong there. KafkaMessageQueue takes the larger of it and
    the high watermark of fetch responses (``sluice.kafka.queue._end_offsets``)."""
    ten_messages(tansu_broker.bootstrap, unique_name)
    tp = TopicPartition(unique_name, 0)
    consumer = KafkaConsumer(bootstrap_servers=tansu_broker.bootstrap)
    try:
        listed = consumer.end_offsets([tp])[tp]
        consumer.assign([tp])
        consumer.seek(tp, 0)
        fetched = sum(len(batch) for batch in consumer.poll(timeout_ms=5000).values())
        highwater = consumer.highwater(tp)
    finally:
        consumer.close()
    assert fetched == 10 and highwater == 10
    assert listed != 10, "Tansu's ListOffsets is fixed: the high-watermark workaround can go"


def test_noida_list_offsets_is_right(noida_broker: BrokerProcess, unique_name: str) -> None:
    ten_messages(noida_broker.bootstrap, unique_name)
    tp = TopicPartition(unique_name, 0)
    consumer = KafkaConsumer(bootstrap_servers=noida_broker.bootstrap)
    try:
        assert consumer.end_offsets([tp])[tp] == 10
    finally:
        consumer.close()
