"""MqttMessageQueue on a real mosquitto: sessions, QoS, wildcards, acks, envelopes, dead letters."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import paho.mqtt.client as paho
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from sluice.mqtt import MqttMessageQueue
from sluice.queues import MessageEnvelope
from sluice.testing import BrokerProcess, wait_until

from .conftest import QueueFactory, receive_all


@pytest.fixture
def raw_messages(
    mosquitto_broker: BrokerProcess, unique_name: str
) -> Iterator[list[paho.MQTTMessage]]:
    """What a plain MQTT 5 client subscribed to ``sluice/<test>/#`` receives."""
    received: list[paho.MQTTMessage] = []
    subscribed = threading.Event()
    client = paho.Client(CallbackAPIVersion.VERSION2, protocol=paho.MQTTv5)
    client.on_message = lambda c, u, m: received.append(m)
    client.on_subscribe = lambda *args: subscribed.set()
    client.connect(mosquitto_broker.host, mosquitto_broker.port)
    client.loop_start()
    try:
        client.subscribe(f"sluice/{unique_name}/#", 1)
        assert subscribed.wait(5)
        yield received
    finally:
        client.disconnect()
        client.loop_stop()


@pytest.mark.parametrize("version", ["3.1.1", "5"])
def test_persistent_session_receives_what_was_published_while_away(
    make_queue: QueueFactory, mosquitto_broker: BrokerProcess, unique_name: str, version: str
) -> None:
    session = {"client_id": f"{unique_name}-reader", "options.protocol_version": version}
    reader = make_queue(mosquitto_broker, **session)
    reader.close(None)  # away: the broker keeps the session and queues QoS 1 messages

    writer = make_queue(mosquitto_broker, client_id=f"{unique_name}-writer")
    sent = [MessageEnvelope(None, "t", f"offline {i}") for i in range(5)]
    for message in sent:
        writer.send(None, message)

    back = make_queue(mosquitto_broker, **session)
    assert back.get_capabilities().can_persist
    got = receive_all(back, 5)
    assert [m.message_id for m in got] == [m.message_id for m in sent]


@pytest.mark.parametrize("version", ["3.1.1", "5"])
def test_a_clean_session_does_not_receive_what_was_published_while_away(
    make_queue: QueueFactory, mosquitto_broker: BrokerProcess, unique_name: str, version: str
) -> None:
    clean = {
        "client_id": f"{unique_name}-c",
        "options.protocol_version": version,
        "options.clean_session": True,
    }
    first = make_queue(mosquitto_broker, **clean)
    assert not first.get_capabilities().can_persist
    first.close(None)
    make_queue(mosquitto_broker).send(None, MessageEnvelope(None, "t", "missed"))
    assert make_queue(mosquitto_broker, **clean).receive(None, 1000) is None


@pytest.mark.parametrize("version", ["3.1.1", "5"])
@pytest.mark.parametrize("qos", [0, 1, 2])
def test_each_qos_round_trips(
    make_queue: QueueFactory, mosquitto_broker: BrokerProcess, qos: int, version: str
) -> None:
    queue = make_queue(
        mosquitto_broker, **{"options.qos": qos, "options.protocol_version": version}
    )
    sent = [MessageEnvelope(None, "t", f"qos {qos} #{i}") for i in range(3)]
    for message in sent:
        queue.send(None, message)
    got = receive_all(queue, 3)
    assert [(m.message_id, m.message) for m in got] == [(m.message_id, m.message) for m in sent]
    assert all(m.get_reference() is None for m in got), "complete() lets go of the delivery"


def test_wildcard_filters(
    make_queue: QueueFactory, mosquitto_broker: BrokerProcess, unique_name: str
) -> None:
    base = f"sluice/{unique_name}"
    plus = make_queue(mosquitto_broker, topic=f"{base}/+/temp")
    hash_ = make_queue(mosquitto_broker, topic=f"{base}/#")
    for room, kind in (("kitchen", "temp"), ("hall", "humidity"), ("hall", "temp")):
        writer = make_queue(mosquitto_broker, topic=f"{base}/{room}/{kind}")
        writer.send(None, MessageEnvelope(None, kind, room))

    temps = receive_all(plus, 2)
    assert sorted(m.topic or "" for m in temps) == [f"{base}/hall/temp", f"{base}/kitchen/temp"]
    assert plus.receive(None, 500) is None
    assert sorted(m.topic or "" for m in receive_all(hash_, 3)) == [
        f"{base}/hall/humidity",
        f"{base}/hall/temp",
        f"{base}/kitchen/temp",
    ]
    with pytest.raises(ValueError, match=r"topic filter"):
        hash_.send(None, MessageEnvelope(None, "t", "where to?"))


@pytest.mark.parametrize("version", ["3.1.1", "5"])
def test_unacknowledged_messages_come_back_to_the_session_acknowledged_ones_do_not(
    make_queue: QueueFactory, mosquitto_broker: BrokerProcess, unique_name: str, version: str
) -> None:
    session = {
        "client_id": f"{unique_name}-r",
        "autocommit": False,
        "options.protocol_version": version,
    }
    reader = make_queue(mosquitto_broker, **session)
    for text in ("done", "not done", "never handed out"):
        reader.send(None, MessageEnvelope(None, "t", text))
    done, not_done = receive_all(reader, 2, complete=False)
    reader.complete(done)
    wait_until(lambda: reader.read_message_count() == 1, timeout=5, message="the third buffered")
    reader.close(None)

    again = receive_all(make_queue(mosquitto_broker, **session), 2)
    assert [m.get_message_as_string() for m in again] == ["not done", "never handed out"]
    assert again[0].message_id == not_done.message_id


def test_abandon_hands_the_message_out_again_first(
    make_queue: QueueFactory, mosquitto_broker: BrokerProcess, unique_name: str
) -> None:
    session = {"client_id": f"{unique_name}-r", "autocommit": False}
    queue = make_queue(mosquitto_broker, **session)
    for text in ("first", "second"):
        queue.send(None, MessageEnvelope(None, "t", text))
    first = receive_all(queue, 1, complete=False)[0]
    queue.abandon(first)
    queue.abandon(first)  # twice: still handed out once
    assert [m.get_message_as_string() for m in receive_all(queue, 2)] == ["first", "second"]
    assert queue.receive(None, 500) is None
    queue.close(None)
    assert make_queue(mosquitto_broker, **session).receive(None, 1000) is None, "completed"


def test_abandon_after_autocommit_still_hands_the_message_out_again(
    make_queue: QueueFactory, mosquitto_broker: BrokerProcess
) -> None:
    queue = make_queue(mosquitto_broker)  # autocommit: acknowledged when received
    queue.send(None, MessageEnvelope(None, "t", "retry"))
    queue.abandon(receive_all(queue, 1, complete=False)[0])
    assert receive_all(queue, 1)[0].get_message_as_string() == "retry"


def test_an_uncompleted_qos2_message_is_not_redelivered(
    make_queue: QueueFactory, mosquitto_broker: BrokerProcess, unique_name: str
) -> None:
    """paho-mqtt 2.2 sends PUBREC itself when a QoS 2 PUBLISH arrives (even with
    manual_ack=True) and delivers on PUBREL, so the broker counts the message delivered and
    a new connection of the session gets only a PUBREL, which paho drops. Hence can_persist
    is QoS 1 only. If this test fails, paho started deferring PUBREC: revisit can_persist."""
    session = {"client_id": f"{unique_name}-r", "autocommit": False, "options.qos": 2}
    reader = make_queue(mosquitto_broker, **session)
    assert not reader.get_capabilities().can_persist
    reader.send(None, MessageEnvelope(None, "t", "exactly once"))
    receive_all(reader, 1, complete=False)
    reader.close(None)
    assert make_queue(mosquitto_broker, **session).receive(None, 1500) is None


def test_serialize_envelope_false_publishes_the_payload_only(
    make_queue: QueueFactory, mosquitto_broker: BrokerProcess, raw_messages: list[paho.MQTTMessage]
) -> None:
    queue = make_queue(mosquitto_broker, **{"options.serialize_envelope": False})
    sent = MessageEnvelope("c", "t", b"\x00raw")
    queue.send(None, sent)
    wait_until(lambda: raw_messages, timeout=5, message="the raw payload")
    assert [m.payload for m in raw_messages] == [b"\x00raw"]
    got = receive_all(queue, 1)[0]
    assert got.message == b"\x00raw" and got.message_id != sent.message_id
    assert (got.correlation_id, got.message_type) == (None, None)


def test_serialize_envelope_true_publishes_the_envelope_json(
    make_queue: QueueFactory, mosquitto_broker: BrokerProcess, raw_messages: list[paho.MQTTMessage]
) -> None:
    queue = make_queue(mosquitto_broker)
    sent = MessageEnvelope("c", "t", b"\x00bytes", headers={"h": "v"})
    queue.send(None, sent)
    wait_until(lambda: raw_messages, timeout=5, message="the envelope")
    assert MessageEnvelope.from_json(raw_messages[0].payload) is not None
    got = receive_all(queue, 1)[0]
    assert (got.message_id, got.correlation_id, got.message_type, got.message) == (
        sent.message_id,
        "c",
        "t",
        b"\x00bytes",
    )
    assert got.header("h") == b"v" and got.topic == queue.topic and got.timestamp


def test_mqtt5_carries_the_headers_of_raw_payloads_as_user_properties(
    make_queue: QueueFactory, mosquitto_broker: BrokerProcess, raw_messages: list[paho.MQTTMessage]
) -> None:
    queue = make_queue(
        mosquitto_broker,
        **{"options.serialize_envelope": False, "options.protocol_version": "5"},
    )
    queue.send(None, MessageEnvelope(None, "t", b"raw", headers={"source": "s1"}))
    wait_until(lambda: raw_messages, timeout=5, message="the raw payload")
    assert raw_messages[0].properties.UserProperty == [("source", "s1")]
    assert receive_all(queue, 1)[0].header("source") == b"s1"
    with pytest.raises(ValueError, match=r"Header 'bin' is not UTF-8.*serialize_envelope"):
        queue.send(None, MessageEnvelope(None, "t", b"raw", headers={"bin": b"\xff"}))


def test_a_payload_that_is_not_an_envelope_is_still_received(
    make_queue: QueueFactory, mosquitto_broker: BrokerProcess
) -> None:
    queue = make_queue(mosquitto_broker, **{"options.protocol_version": "5"})
    properties = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
    properties.UserProperty = [("device", "d7")]
    queue._conn().publish(queue.topic, b'{"temp": 21.5}', qos=1, properties=properties)
    got = receive_all(queue, 1)[0]
    assert got.message == b'{"temp": 21.5}' and got.get_message_as() == {"temp": 21.5}
    assert got.header("device") == b"d7" and got.topic == queue.topic


@pytest.mark.parametrize("serialize", [True, False])
@pytest.mark.parametrize("version", ["3.1.1", "5"])
def test_move_to_dead_letter(
    make_queue: QueueFactory,
    mosquitto_broker: BrokerProcess,
    unique_name: str,
    raw_messages: list[paho.MQTTMessage],
    version: str,
    serialize: bool,
) -> None:
    options = {
        "options.protocol_version": version,
        "options.serialize_envelope": serialize,
        "client_id": f"{unique_name}-q",
        "autocommit": False,
    }
    queue = make_queue(mosquitto_broker, **options)
    dead = make_queue(
        mosquitto_broker, topic=queue.dead_letter_topic, **{"options.protocol_version": version}
    )
    assert queue.dead_letter_topic == f"sluice/{unique_name}/dlq"
    queue.send(None, MessageEnvelope("c1", "reading", b"not json"))
    queue.move_to_dead_letter(receive_all(queue, 1, complete=False)[0], reason="invalid JSON")

    landed = receive_all(dead, 1)[0]
    assert landed.message == b"not json"
    assert landed.header("sluice.reason") == b"invalid JSON"
    assert landed.header("sluice.original_topic") == f"sluice/{unique_name}".encode()
    on_the_wire = wait_until(
        lambda: [m for m in raw_messages if m.topic == queue.dead_letter_topic], timeout=5
    )[0]
    if version == "5":
        assert ("sluice.reason", "invalid JSON") in on_the_wire.properties.UserProperty
    is_envelope = MessageEnvelope.from_json(on_the_wire.payload) is not None
    assert is_envelope == (serialize or version == "3.1.1"), "3.1.1 wraps it in an envelope"
    queue.close(None)
    assert make_queue(mosquitto_broker, **options).receive(None, 1000) is None, "acknowledged"


def test_dead_letters_of_a_wildcard_queue(
    make_queue: QueueFactory, mosquitto_broker: BrokerProcess, unique_name: str
) -> None:
    base = f"sluice/{unique_name}"
    queue = make_queue(mosquitto_broker, topic=f"{base}/+/temp")
    dead = make_queue(mosquitto_broker, topic=queue.dead_letter_topic)
    make_queue(mosquitto_broker, topic=f"{base}/hall/temp").send(
        None, MessageEnvelope(None, "t", "bad")
    )
    queue.move_to_dead_letter(receive_all(queue, 1, complete=False)[0], reason="bad")
    landed = receive_all(dead, 1)[0]
    assert landed.topic == f"{base}/dlq"
    assert landed.header("sluice.original_topic") == f"{base}/hall/temp".encode()


def test_peek_batch_read_message_count_and_clear_use_the_local_buffer(
    make_queue: QueueFactory, mosquitto_broker: BrokerProcess, unique_name: str
) -> None:
    session = {"client_id": f"{unique_name}-r", "autocommit": False}
    queue = make_queue(mosquitto_broker, **session)
    for i in range(3):
        queue.send(None, MessageEnvelope(None, "t", str(i)))
    wait_until(lambda: queue.read_message_count() == 3, timeout=5, message="three buffered")
    assert [m.get_message_as_string() for m in queue.peek_batch(None, 2)] == ["0", "1"]
    assert queue.read_message_count() == 3, "peeking takes nothing"
    queue.clear(None)
    assert queue.read_message_count() == 0 and queue.receive(None, 300) is None
    queue.close(None)
    assert make_queue(mosquitto_broker, **session).receive(None, 1000) is None, "clear acks"


def test_listen_hands_out_until_end_listen_and_retries_a_failed_message(
    make_queue: QueueFactory, mosquitto_broker: BrokerProcess
) -> None:
    queue = make_queue(mosquitto_broker, autocommit=False, **{"options.listen_interval": 100})
    seen: list[str] = []

    def receiver(message: MessageEnvelope, source: MqttMessageQueue) -> None:
        seen.append(message.get_message_as_string() or "")
        if seen.count("flaky") == 1 and seen[-1] == "flaky":
            raise RuntimeError("first attempt fails")
        source.complete(message)

    listening = threading.Thread(target=queue.listen, args=(None, receiver))
    listening.start()
    for text in ("flaky", "fine"):
        queue.send(None, MessageEnvelope(None, "t", text))
    wait_until(lambda: len(seen) == 3, timeout=10, message="three deliveries")
    queue.end_listen(None)
    listening.join(5)
    assert not listening.is_alive()
    assert seen == ["flaky", "flaky", "fine"]


def test_plan_batch_needs_a_persistent_session(
    make_queue: QueueFactory, mosquitto_broker: BrokerProcess, unique_name: str
) -> None:
    from sluice.batch import plan_batch

    with pytest.raises(ValueError, match="persistent session"):
        plan_batch(make_queue(mosquitto_broker))
    spec = plan_batch(make_queue(mosquitto_broker, client_id=f"{unique_name}-s"), max_messages=100)
    assert spec is not None
    assert (spec.kind, spec.topic, spec.client_id, spec.max_messages) == (
        "mqtt",
        f"sluice/{unique_name}",
        f"{unique_name}-s",
        100,
    )
