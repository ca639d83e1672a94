"""The shared Kafka watch on real brokers: one thread per cluster, the group's backlog from
its committed offsets, a waiter woken by a new message, committed offsets read only when the
ends moved (or when asked for fresh ones), and a broker that cannot be reached named."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest
from kafka import KafkaProducer
from kafka.errors import NodeNotReadyError

from sluice.brokers import free_port
from sluice.kafka import watch as watch_module
from sluice.kafka.watch import KafkaWatch, kafka_watch, stop_watches
from sluice.spark.kafka_source import commit_offsets
from sluice.testing.plugin import Broker
from sluice.testing.topics import create_kafka_topic

TIMEOUT = 30.0


def produce(bootstrap: str, topic: str, counts: dict[int, int]) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    try:
        for partition, count in counts.items():
            for i in range(count):
                producer.send(topic, b"m%d" % i, partition=partition)
        producer.flush()
    finally:
        producer.close()


def watch_new_topic(broker: Broker, topic: str, messages: int) -> KafkaWatch:
    """The watch of ``broker``, after creating ``topic`` (one partition) holding ``messages``."""
    create_kafka_topic(broker.bootstrap, topic, 1)
    produce(broker.bootstrap, topic, {0: messages})
    return kafka_watch({"bootstrap_servers": [broker.bootstrap]})


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.05)


def watch_threads() -> int:
    return sum(t.name == "sluice-kafka-watch" for t in threading.enumerate())


def test_the_backlog_runs_from_the_committed_offsets_to_the_ends(
    kafka_broker: Broker, unique_name: str
) -> None:
    create_kafka_topic(kafka_broker.bootstrap, unique_name, 2)
    produce(kafka_broker.bootstrap, unique_name, {0: 5, 1: 3})
    kwargs = {"bootstrap_servers": [kafka_broker.bootstrap]}
    watch, group = kafka_watch(kwargs), f"{unique_name}-g"
    watcher = watch.watch(unique_name, group)
    try:
        # Tansu's ListOffsets lags: its ends come right from the exact refresh
        wait_until(lambda: watcher.backlog().message_count == 8, "all 8 messages wait")
        assert [(r.partition, r.start, r.end) for r in watcher.backlog().ranges] == [
            (0, 0, 5),
            (1, 0, 3),
        ]
        commit_offsets(kwargs, unique_name, group, {0: 2})
        fresh = watcher.backlog(fresh=True)
        assert [(r.partition, r.start, r.end) for r in fresh.ranges] == [(0, 2, 5), (1, 0, 3)]
        assert (fresh.topic, fresh.group_id) == (unique_name, group)
    finally:
        watcher.close()


def test_one_watch_and_one_thread_serve_every_watcher_of_a_cluster(
    noida_broker: Broker, unique_name: str
) -> None:
    stop_watches()  # other tests' sensors keep their watches for IDLE_WATCH_SECONDS
    kwargs = {"bootstrap_servers": [noida_broker.bootstrap]}
    topics = [f"{unique_name}-{i}" for i in range(30)]
    for i, topic in enumerate(topics):
        create_kafka_topic(noida_broker.bootstrap, topic, 1)
        produce(noida_broker.bootstrap, topic, {0: i % 4})
    watch = kafka_watch(kwargs)
    assert kafka_watch(dict(kwargs)) is watch, "the same settings share one watch"
    watchers = [watch.watch(topic, "g") for topic in topics]
    try:
        assert [w.backlog().message_count for w in watchers] == [i % 4 for i in range(30)]
        assert watch_threads() == 1
    finally:
        for w in watchers:
            w.close()
    wait_until(lambda: watch_threads() == 0, "the watch stops with its last watcher")


def test_a_new_message_wakes_the_waiter_and_only_then_are_committed_offsets_read(
    noida_broker: Broker, unique_name: str
) -> None:
    create_kafka_topic(noida_broker.bootstrap, unique_name, 1)
    watch = kafka_watch({"bootstrap_servers": [noida_broker.bootstrap]})

    async def scenario() -> tuple[int, int, bool, int]:
        watcher = watch.watch(unique_name, "g", interval=0.05)
        try:
            assert (await watcher.abacklog()).message_count == 0
            version, reads = watcher.version, watch.stats["committed_reads"]
            ticks = watch.stats["ticks"]
            asleep = asyncio.ensure_future(watcher.changed(version, TIMEOUT))
            async with asyncio.timeout(TIMEOUT):
                while watch.stats["ticks"] < ticks + 5:  # five reads of unmoved ends
                    await asyncio.sleep(0.05)
            idle_reads = watch.stats["committed_reads"] - reads
            still_asleep = not asleep.done()
            await asyncio.to_thread(produce, noida_broker.bootstrap, unique_name, {0: 1})
            assert await asyncio.wait_for(asleep, TIMEOUT)
            backlog = await watcher.abacklog()
            return (
                idle_reads,
                watch.stats["committed_reads"] - reads,
                still_asleep,
                (backlog.message_count),
            )
        finally:
            watcher.close()

    idle_reads, reads, still_asleep, waiting = asyncio.run(scenario())
    assert idle_reads == 0, "committed offsets were read while the ends did not move"
    assert still_asleep, "the waiter woke without a new message"
    assert reads >= 1 and waiting == 1


def test_without_from_beginning_a_new_group_starts_where_the_topic_ended(
    noida_broker: Broker, unique_name: str
) -> None:
    watch = watch_new_topic(noida_broker, unique_name, 3)
    watcher = watch.watch(unique_name, "new-group", from_beginning=False)
    try:
        assert watcher.backlog().message_count == 0
        produce(noida_broker.bootstrap, unique_name, {0: 2})
        wait_until(lambda: watcher.backlog().message_count == 2, "the 2 new messages wait")
        assert [(r.start, r.end) for r in watcher.backlog().ranges] == [(3, 5)]
    finally:
        watcher.close()


def test_stopping_the_watches_ends_their_threads_and_a_sensors_watch_starts_again(
    noida_broker: Broker, unique_name: str
) -> None:
    watch = watch_new_topic(noida_broker, unique_name, 2)
    # a sensor's watcher is never closed: the watch keeps it for IDLE_WATCH_SECONDS
    watcher = watch.watch(unique_name, "g", blocking=True)
    assert watcher.backlog().message_count == 2
    assert watch_threads() >= 1

    stop_watches()
    assert watch_threads() == 0
    with pytest.raises(RuntimeError, match="is not watched"):
        watcher.backlog()

    again = watch.watch(unique_name, "g", blocking=True)
    assert again.backlog().message_count == 2
    assert watch_threads() == 1
    stop_watches()


def test_an_unreachable_broker_is_named_and_the_password_is_not(unique_name: str) -> None:
    address = f"127.0.0.1:{free_port()}"
    password = f"pw-{unique_name}"
    kwargs = {
        "bootstrap_servers": [address],
        "bootstrap_timeout_ms": 500,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "svc",
        "sasl_plain_password": password,
    }
    watcher = kafka_watch(kwargs).watch(unique_name, "g")
    try:
        with pytest.raises(ConnectionError) as failure:
            watcher.backlog()
    finally:
        watcher.close()
    text = str(failure.value)
    assert address in text and "Check that the broker is up" in text
    assert password not in text


def test_an_admin_client_still_backing_off_after_an_outage_is_replaced(
    noida_broker: Broker, unique_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After an outage kafka-python's admin client refuses requests (NodeNotReadyError) until
    its reconnect backoff has passed, though the broker is back; the watch then asks a new
    client. The refusal is made by hand: a real outage leaves a backoff of no set length."""
    create_kafka_topic(noida_broker.bootstrap, unique_name, 1)
    produce(noida_broker.bootstrap, unique_name, {0: 3})
    refused: list[str] = []
    connect = watch_module._Clients.connect.__func__  # type: ignore[attr-defined]

    def backing_off(by_group: object) -> None:
        refused.append("admin")
        raise NodeNotReadyError(1)

    def connect_backing_off(cls: type, kwargs: dict[str, object]) -> object:
        clients = connect(cls, kwargs)
        clients.admin.list_group_offsets = backing_off
        return clients

    monkeypatch.setattr(watch_module._Clients, "connect", classmethod(connect_backing_off))
    # settings of its own: a new watch, whose thread connects its clients now
    watch = kafka_watch({"bootstrap_servers": [noida_broker.bootstrap], "client_id": unique_name})
    watcher = watch.watch(unique_name, "g")
    try:
        assert watcher.backlog(fresh=True).message_count == 3
        assert refused == ["admin"], "the first admin client was asked once, then replaced"
        commit_offsets({"bootstrap_servers": [noida_broker.bootstrap]}, unique_name, "g", {0: 1})
        assert watcher.backlog(fresh=True).message_count == 2, "the watch lives on"
    finally:
        watcher.close()


class _Gate(threading.Event):
    """The watch's wake-up event, whose first wait holds the watch's thread until opened."""

    def __init__(self) -> None:
        super().__init__()
        self.opened = threading.Event()

    def wait(self, timeout: float | None = None) -> bool:
        self.opened.wait()
        return super().wait(timeout)


def test_a_watcher_closed_with_its_question_pending_leaves_the_others_served(
    noida_broker: Broker, unique_name: str
) -> None:
    """A trigger cancelled while it awaited its backlog (an asset no longer watched, a test's
    trigger closed) closes its watcher with the question still queued; the watch's thread
    then died on the forgotten topic (KeyError), failing every other watcher of the cluster."""
    for topic in (f"{unique_name}-a", f"{unique_name}-b"):
        create_kafka_topic(noida_broker.bootstrap, topic, 1)
    produce(noida_broker.bootstrap, f"{unique_name}-b", {0: 2})
    watch = KafkaWatch({"bootstrap_servers": [noida_broker.bootstrap]})
    watch._wake = gate = _Gate()
    closed = watch.watch(f"{unique_name}-a", "g")
    kept = watch.watch(f"{unique_name}-b", "g")
    try:
        pending = watch._request((f"{unique_name}-a", "g"), False)
        closed.close()
        gate.opened.set()
        with pytest.raises(RuntimeError, match="no longer watched"):
            pending.result(TIMEOUT)
        assert kept.backlog().message_count == 2
    finally:
        kept.close()
        watch.stop()


def test_a_question_cancelled_while_pending_leaves_the_others_served(
    noida_broker: Broker, unique_name: str
) -> None:
    """A trigger cancelled while it awaited its backlog cancels the question with it
    (``asyncio.wrap_future``); answering it raised InvalidStateError in the watch's thread,
    which died and failed every other watcher of the cluster."""
    create_kafka_topic(noida_broker.bootstrap, unique_name, 1)
    produce(noida_broker.bootstrap, unique_name, {0: 3})
    watch = KafkaWatch({"bootstrap_servers": [noida_broker.bootstrap]})
    watch._wake = gate = _Gate()
    watcher = watch.watch(unique_name, "g")
    try:
        assert watch._request((unique_name, "g"), False).cancel()
        gate.opened.set()
        assert watcher.backlog().message_count == 3
        assert watcher.backlog(fresh=True).message_count == 3, "the thread still answers"
    finally:
        watcher.close()
        watch.stop()
