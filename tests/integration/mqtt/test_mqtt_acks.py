"""Manual acknowledgements across reconnections, and the broker's in-flight window."""

from __future__ import annotations

from collections import Counter

import pytest

from sluice.queues import MessageEnvelope
from sluice.testing import BrokerProcess, wait_until
from sluice.testing.plugin import ExternalBroker

from .conftest import QueueFactory, receive_all
from .wire import MqttProxy

FAST = {"options.reconnect_timeout": 200, "autocommit": False}


def resumed(queue: object, generation: int) -> None:
    wait_until(
        lambda: queue._conn().generation == generation,  # type: ignore[attr-defined]
        timeout=20,
        message=f"connection #{generation}",
    )


def test_an_abandoned_message_comes_back_to_the_next_connection_of_the_session(
    make_queue: QueueFactory, mosquitto_broker: BrokerProcess, unique_name: str
) -> None:
    session = {"client_id": f"{unique_name}-r", "autocommit": False}
    queue = make_queue(mosquitto_broker, **session)
    queue.send(None, MessageEnvelope(None, "t", "try later"))
    queue.abandon(receive_all(queue, 1, complete=False)[0])
    queue.close(None)  # abandoned means not acknowledged: the session keeps it

    again = make_queue(mosquitto_broker, **session)
    assert receive_all(again, 1)[0].get_message_as_string() == "try later"


@pytest.mark.parametrize("version", ["3.1.1", "5"])
def test_abandoning_a_message_of_an_earlier_connection_does_not_duplicate_it(
    make_queue: QueueFactory, private_mosquitto: BrokerProcess, unique_name: str, version: str
) -> None:
    reader = make_queue(
        private_mosquitto,
        client_id=f"{unique_name}-r",
        **FAST,
        **{"options.protocol_version": version},
    )
    reader.send(None, MessageEnvelope(None, "t", "in hand"))
    in_hand = receive_all(reader, 1, complete=False)[0]
    private_mosquitto.restart()  # the session survives and the broker sends "in hand" again
    resumed(reader, 2)
    wait_until(lambda: reader.read_message_count() == 1, timeout=10, message="the redelivery")

    reader.abandon(in_hand)  # must not put a second copy beside the redelivered one
    again = receive_all(reader, 1)[0]
    assert again.message_id == in_hand.message_id
    assert reader.receive(None, 500) is None, "the abandoned message was handed out twice"


def test_completing_a_message_of_an_earlier_connection_acknowledges_its_redelivery(
    make_queue: QueueFactory, private_mosquitto: BrokerProcess, unique_name: str
) -> None:
    session = {"client_id": f"{unique_name}-r", **FAST}
    reader = make_queue(private_mosquitto, **session)
    reader.send(None, MessageEnvelope(None, "t", "processed"))
    processed = receive_all(reader, 1, complete=False)[0]
    private_mosquitto.restart()
    resumed(reader, 2)
    wait_until(lambda: reader.read_message_count() == 1, timeout=10, message="the redelivery")

    reader.complete(processed)  # its packet id is stale; the redelivered copy is acknowledged
    assert reader.read_message_count() == 0 and reader.receive(None, 300) is None
    reader.close(None)
    assert make_queue(private_mosquitto, **session).receive(None, 1000) is None, "acknowledged"


@pytest.mark.parametrize("version", ["3.1.1", "5"])
def test_acknowledgements_in_flight_across_a_reconnection_never_name_a_stale_packet_id(
    make_queue: QueueFactory, private_mosquitto: BrokerProcess, unique_name: str, version: str
) -> None:
    """400 messages are handed out on one connection, then completed a hundred at a time:
    while it is up, after the broker hung up, between the new CONNECT and its CONNACK (the
    proxy holds the CONNACK back), and once reconnected. On the wire, every PUBACK names a
    message the broker sent on the same connection, each message is acknowledged once, none
    is handed out twice, and the session is empty afterwards."""
    proxy = MqttProxy(private_mosquitto.port, mqtt5=version == "5")
    try:
        session = {"client_id": f"{unique_name}-r", "options.protocol_version": version}
        reader = make_queue(
            ExternalBroker("proxy", "mqtt", proxy.host, proxy.port), **session, **FAST
        )
        connection = reader._conn()
        writer = make_queue(private_mosquitto, **{"options.autosubscribe": False})
        for i in range(400):
            writer.send(None, MessageEnvelope(None, "t", str(i)))
        handed = receive_all(reader, 400, complete=False)

        for message in handed[:100]:
            reader.complete(message)
        wait_until(lambda: len(proxy.acked()) == 100, message="100 PUBACKs on connection 1")
        proxy.hold_connack = True
        proxy.drop()
        wait_until(lambda: not connection.is_connected, message="the client to see the drop")
        for message in handed[100:200]:  # the connection is down
            reader.complete(message)
        wait_until(
            lambda: len(proxy.links) == 2 and proxy.links[1].connect_seen.is_set(),
            message="the client's new CONNECT",
        )
        for message in handed[200:300]:  # CONNECT sent, CONNACK not yet received
            reader.complete(message)
        proxy.links[1].release.set()
        resumed(reader, 2)
        for message in handed[300:]:  # reconnected; the broker resends what is unacknowledged
            reader.complete(message)

        wait_until(lambda: len(proxy.acked()) >= 400 or proxy.stale(), message="400 PUBACKs")
        assert proxy.stale() == [], "PUBACKs of packet ids the connection was never sent"
        acked = Counter(_message_id(payload) for payload in proxy.acked())
        assert acked == Counter(m.message_id for m in handed), "each acknowledged once"
        assert reader.receive(None, 300) is None, "a message was handed out twice"
        reader.close(None)
        assert make_queue(private_mosquitto, **session).receive(None, 1000) is None
    finally:
        proxy.close()


def _message_id(payload: bytes) -> str | None:
    envelope = MessageEnvelope.from_json(payload)
    assert envelope is not None, f"not an envelope: {payload[:40]!r}"
    return envelope.message_id


@pytest.mark.parametrize("version", ["3.1.1", "5"])
def test_the_broker_holds_back_messages_beyond_its_in_flight_window_until_completed(
    make_queue: QueueFactory, stock_mosquitto: BrokerProcess, version: str
) -> None:
    """mosquitto sends a client at most max_inflight_messages (default 20) QoS 1 messages it
    has not acknowledged, whatever Receive Maximum an MQTT 5 client asks for: with autocommit
    false, receive() finds nothing more until complete() acknowledges some."""
    queue = make_queue(stock_mosquitto, autocommit=False, **{"options.protocol_version": version})
    for i in range(25):
        queue.send(None, MessageEnvelope(None, "t", str(i)))
    held = receive_all(queue, 20, complete=False)
    assert queue.receive(None, 500) is None, "mosquitto's window is no longer 20"
    for message in held:
        queue.complete(message)
    rest = receive_all(queue, 5)
    assert [m.get_message_as_string() for m in held + rest] == [str(i) for i in range(25)]
