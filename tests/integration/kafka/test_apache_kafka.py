"""Apache Kafka itself, as sluice.brokers starts it: one KRaft node, and a three-node cluster
with replication factor 3 and ``min.insync.replicas`` 2 whose nodes can be killed, paused and
restarted one by one."""

from __future__ import annotations

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType
from kafka.errors import KafkaError

from sluice.brokers import BrokerAddress, BrokerProcess, KafkaCluster
from sluice.testing.topics import create_kafka_topic
from sluice.testing.waiting import wait_until


def round_trip(bootstrap: str, topic: str, count: int = 20) -> list[bytes]:
    """Produce ``count`` records with acks=all to ``topic``, read them back from the start."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", retries=1000)
    try:
        for i in range(count):
            producer.send(topic, f"m{i}".encode()).get(timeout=30)
    finally:
        producer.close()
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=20000
    )
    try:
        partitions = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic)]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        got: list[bytes] = []
        for record in consumer:
            got.append(record.value)
            if len(got) == count:
                break
        return got
    finally:
        consumer.close()


def describe(bootstrap: str, topic: str) -> tuple[list[int], str]:
    """Each partition's replica count, and the topic's ``min.insync.replicas``."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        (described,) = admin.describe_topics([topic])
        replicas = [len(p["replica_nodes"]) for p in described["partitions"]]
        resource = ConfigResource(ConfigResourceType.TOPIC, topic, ["min.insync.replicas"])
        configs = admin.describe_configs([resource], config_filter="all")
        return replicas, configs["topic"][topic]["min.insync.replicas"]["value"]
    finally:
        admin.close()


def led_by_others(bootstrap: str, topic: str, node: int) -> bool:
    """Whether every partition of ``topic`` has a leader, and not ``node``."""
    try:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    except KafkaError:
        return False
    try:
        (described,) = admin.describe_topics([topic])
    except KafkaError:  # it may ask the dead node first
        return False
    finally:
        admin.close()
    found = {p["leader_id"] for p in described["partitions"]}
    return node not in found and -1 not in found


def test_one_node_round_trips_with_acks_all(
    apache_kafka_broker: BrokerProcess, unique_name: str
) -> None:
    assert apache_kafka_broker.name == "kafka"
    create_kafka_topic(apache_kafka_broker.bootstrap, unique_name, 2)
    assert sorted(round_trip(apache_kafka_broker.bootstrap, unique_name)) == sorted(
        f"m{i}".encode() for i in range(20)
    )
    assert describe(apache_kafka_broker.bootstrap, unique_name) == ([1, 1], "1")


def test_three_nodes_replicate_three_times_with_two_in_sync(
    kafka_cluster: KafkaCluster, unique_name: str
) -> None:
    assert isinstance(kafka_cluster, BrokerAddress)
    assert len(kafka_cluster.bootstrap.split(",")) == 3
    # Sluice's own create_queue: the cluster's default replication unless told
    create_kafka_topic(kafka_cluster.bootstrap, unique_name, 3)
    assert describe(kafka_cluster.bootstrap, unique_name) == ([3, 3, 3], "2")
    create_kafka_topic(kafka_cluster.bootstrap, f"{unique_name}-one", 1, replication_factor=1)
    assert describe(kafka_cluster.bootstrap, f"{unique_name}-one") == ([1], "2")
    assert sorted(round_trip(kafka_cluster.bootstrap, unique_name)) == sorted(
        f"m{i}".encode() for i in range(20)
    )


def test_a_cluster_keeps_taking_acks_all_writes_with_one_node_down(
    kafka_cluster: KafkaCluster, unique_name: str
) -> None:
    create_kafka_topic(kafka_cluster.bootstrap, unique_name, 1)
    third = kafka_cluster.node(3)
    pid = third.pid
    kafka_cluster.kill(3)
    assert third.pid is None and pid is not None
    try:
        survivors = ",".join(n.bootstrap for n in kafka_cluster.nodes[:2])
        # the controller moves leadership off node 3 once its broker session expires (9 s)
        wait_until(
            lambda: led_by_others(survivors, unique_name, 3),
            timeout=60,
            interval=0.5,
            message="a leader other than the killed node 3",
        )
        # two replicas in sync of three: min.insync.replicas=2 still holds
        assert len(round_trip(survivors, unique_name, 5)) == 5
    finally:
        kafka_cluster.start_node(3)
    assert third.pid is not None and third.pid != pid
    kafka_cluster.pause(2)
    kafka_cluster.resume(2)
    # its first 5 records again: all 10 are there on the three nodes
    assert len(round_trip(kafka_cluster.bootstrap, unique_name, 5)) == 5
