"""Manual acknowledgements across reconnections, and the broker's in-flight window."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from sluice.queues import MessageEnvelope
from sluice.testing import BrokerProcess, free_port, wait_until

from .conftest import QueueFactory, receive_all

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


@pytest.fixture
def stock_mosquitto(tmp_path: Path) -> Iterator[BrokerProcess]:
    """mosquitto with its stock limits (the shared fixtures raise max_inflight_messages)."""
    exe = shutil.which("mosquitto", path=f"{os.environ.get('PATH', '')}:/usr/sbin")
    assert exe, "needs Debian's mosquitto"
    port = free_port()
    conf = tmp_path / "mosquitto.conf"
    conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\nuser root\n")
    broker = BrokerProcess(
        "mosquitto", "mqtt", port, [exe, "-c", str(conf)], tmp_path, tmp_path / "log"
    )
    yield broker.start()
    broker.stop()


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
