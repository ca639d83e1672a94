"""MqttMessageQueue on a real mosquitto: sessions, QoS, wildcards, acks, envelopes, dead letters."""

from __future__ import annotations

import threading

import paho.mqtt.client as paho
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from sluice.mqtt import MqttMessageQueue
from sluice.queues import ConfigError, MessageEnvelope, UnknownConfigKeyWarning
from sluice.testing import BrokerProcess, wait_until

from .conftest import QueueFactory, receive_all


@pytest.mark.parametrize("version", ["3.1.1", "5"])
def test_persistent_session_receives_what_was_published_while_away(
    make_queue: QueueFactory, mosquitto_broker: BrokerProcess, unique_name: str, version: str
) -> None:
    session = {
        "client_id": f"{unique_name}-reader",
        "options.protocol_version": version,
        "options.autosubscribe": True,
    }
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


def test_a_clean_session_does_not_receive_what_was_published_while_away(
    make_queue: QueueFactory, mosquitto_broker: BrokerProcess, unique_name: str
) -> None:
    clean = {
        "client_id": f"{unique_name}-c",
        "options.clean_session": True,
        "options.autosubscribe": True,
    }
    first = make_queue(mosquitto_broker, **clean)
    assert not first.get_capabilities().can_persist
    first.close(None)
    make_queue(mosquitto_broker).send(None, MessageEnvelope(None, "t", "missed"))
    assert make_queue(mosquitto_broker, **clean).receive(None, 1000) is None


@pytest.mark.parametrize("qos", [0, 1, 2])
def test_each_qos_round_trips(
    make_queue: QueueFactory, mosquitto_broker: BrokerProcess, qos: int
) -> None:
    queue = make_queue(mosquitto_broker, **{"options.qos": qos, "options.autosubscribe": True})
    queue.send(None, MessageEnvelope(None, "t", f"qos {qos}"))
    assert receive_all(queue, 1)[0].message == f"qos {qos}".encode()


def test_wildcard_filters(
    make_queue: QueueFactory, mosquitto_broker: BrokerProcess, unique_name: str
) -> None:
    base = f"sluice/{unique_name}"
    plus = make_queue(mosquitto_broker, topic=f"{base}/+/temp", **{"options.autosubscribe": True})
    hash_ = make_queue(mosquitto_broker, topic=f"{base}/#", **{"options.autosubscribe": True})
    for room, kind in (("kitchen", "temp"), ("hall", "humidity"), ("hall", "temp")):
        writer = make_queue(mosquitto_broker, topic=f"{base}/{room}/{kind}")
        writer.send(None, MessageEnvelope(None, kind, room))

    temps = receive_all(plus, 2)
    assert sorted(m.topic or "" for m in temps) == [f"{base}/hall/temp", f"{base}/kitchen/temp"]
    assert plus.receive(None, 500) is None
    assert len(receive_all(hash_, 3)) == 3


def test_unacknowledged_messages_come_back_to_the_session_acknowledged_ones_do_not(
    make_queue: QueueFactory, mosquitto_broker: BrokerProcess, unique_name: str
) -> None:
    session = {"client_id": f"{unique_name}-r", "autocommit": False, "options.autosubscribe": True}
    reader = make_queue(mosquitto_broker, **session)
    sent = [MessageEnvelope(None, "t", text) for text in ("done", "not done")]
    for message in sent:
        reader.send(None, message)
    done, not_done = receive_all(reader, 2, complete=False)
    reader.complete(done)
    reader.close(None)

    again = receive_all(make_queue(mosquitto_broker, **session), 1)
    assert again[0].message_id == not_done.message_id


def test_serialize_envelope_false_publishes_the_payload_only(
    make_queue: QueueFactory, mosquitto_broker: BrokerProcess, unique_name: str
) -> None:
    raw: list[bytes] = []
    subscribed = threading.Event()
    client = paho.Client(CallbackAPIVersion.VERSION2)
    client.on_message = lambda c, u, m: raw.append(m.payload)
    client.on_subscribe = lambda *args: subscribed.set()
    client.connect(mosquitto_broker.host, mosquitto_broker.port)
    client.loop_start()
    try:
        client.subscribe(f"sluice/{unique_name}", 1)
        assert subscribed.wait(5)
        queue = make_queue(
            mosquitto_broker, **{"options.serialize_envelope": False, "options.autosubscribe": True}
        )
        queue.send(None, MessageEnvelope(None, "t", b"\x00raw"))
        wait_until(lambda: raw, timeout=5, message="the raw payload")
        assert raw == [b"\x00raw"]
        assert receive_all(queue, 1)[0].message == b"\x00raw"
    finally:
        client.disconnect()
        client.loop_stop()


def test_a_payload_that_is_not_an_envelope_is_still_received(
    make_queue: QueueFactory, mosquitto_broker: BrokerProcess
) -> None:
    queue = make_queue(mosquitto_broker, **{"options.autosubscribe": True})
    queue._conn().publish(queue.topic, b'{"temp": 21.5}', qos=1)
    got = receive_all(queue, 1)[0]
    assert got.message == b'{"temp": 21.5}' and got.get_message_as() == {"temp": 21.5}


@pytest.mark.parametrize("version", ["3.1.1", "5"])
def test_move_to_dead_letter(
    make_queue: QueueFactory, mosquitto_broker: BrokerProcess, unique_name: str, version: str
) -> None:
    options = {"options.protocol_version": version, "options.autosubscribe": True}
    queue = make_queue(mosquitto_broker, **options)
    dead = make_queue(mosquitto_broker, topic=queue.dead_letter_topic, **options)
    original = MessageEnvelope("c1", "reading", b"not json")
    queue.send(None, original)
    queue.move_to_dead_letter(receive_all(queue, 1, complete=False)[0], reason="invalid JSON")

    landed = receive_all(dead, 1)[0]
    assert (landed.message_id, landed.message) == (original.message_id, b"not json")
    assert landed.header("sluice.reason") == b"invalid JSON"
    assert landed.header("sluice.original_topic") == f"sluice/{unique_name}".encode()


def test_peek_batch_and_clear_use_the_local_buffer(
    make_queue: QueueFactory, mosquitto_broker: BrokerProcess
) -> None:
    queue = make_queue(mosquitto_broker, **{"options.autosubscribe": True})
    for i in range(3):
        queue.send(None, MessageEnvelope(None, "t", str(i)))
    wait_until(lambda: queue.read_message_count() == 3, timeout=5, message="three buffered")
    assert [m.get_message_as_string() for m in queue.peek_batch(None, 2)] == ["0", "1"]
    queue.clear(None)
    assert queue.read_message_count() == 0 and queue.receive(None, 300) is None


def test_config_errors_name_the_key() -> None:
    with pytest.raises(ConfigError, match=r"'options.qos'.*one of 0, 1, 2"):
        MqttMessageQueue().configure({"options.qos": 3})
    with pytest.raises(ConfigError, match=r"'options.retain' expects bool"):
        MqttMessageQueue().configure({"options.retain": "sometimes"})
    with pytest.warns(
        UnknownConfigKeyWarning, match=r"'options.keepalive'.*'options.keepalive_timeout'"
    ):
        MqttMessageQueue().configure({"options.keepalive": 5})
    queue = MqttMessageQueue()
    queue.configure({"queue": "pip/alias", "connection.protocol": "mqtt"})
    assert queue.topic == "pip/alias"


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
