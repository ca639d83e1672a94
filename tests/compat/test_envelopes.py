"""pip-services' own MessageEnvelope goes in; what comes out works in pip-services code."""

from __future__ import annotations

import json
from collections.abc import Callable
from types import SimpleNamespace

import pytest
from pip_services3_messaging.queues import IMessageQueue
from pip_services3_messaging.queues import MessageEnvelope as PipEnvelope
from pip_services3_messaging.test import TestMessageReceiver as PipReceiver

from sluice.testing import wait_until

from .conftest import WAIT_MS

OpenQueue = Callable[..., IMessageQueue]


def test_pip_envelope_round_trip(open_queue: OpenQueue) -> None:
    queue = open_queue()
    sent = PipEnvelope("corr-1", "OrderPlaced", {"order": 7, "items": ["a", "b"]})
    queue.send(None, sent)

    received = queue.receive(None, WAIT_MS)

    assert isinstance(received, PipEnvelope)
    assert (received.correlation_id, received.message_type) == ("corr-1", "OrderPlaced")
    assert received.message_id == sent.message_id
    assert received.message == sent.message
    assert received.get_message_as() == {"order": 7, "items": ["a", "b"]}
    assert json.loads(received.get_message_as_string()) == {"order": 7, "items": ["a", "b"]}
    assert sent.sent_time is not None  # set on send, as pip-services' queues do
    doc = received.to_json()
    copy = PipEnvelope.from_json(json.dumps(doc))  # pip-services' own parser reads it back
    assert (copy.message_id, copy.message, copy.message_type) == (
        sent.message_id,
        sent.message,
        "OrderPlaced",
    )
    queue.complete(received)


def test_send_as_object_and_text(open_queue: OpenQueue) -> None:
    queue = open_queue()
    queue.send_as_object("corr-2", "Reading", {"celsius": 21.5})
    queue.send(None, PipEnvelope(None, "Note", "plain text"))

    first, second = queue.receive(None, WAIT_MS), queue.receive(None, WAIT_MS)

    assert first is not None and second is not None
    assert first.get_message_as() == {"celsius": 21.5}
    assert second.get_message_as_string() == "plain text"
    assert second.correlation_id is None


def test_any_object_with_the_envelope_fields(open_queue: OpenQueue) -> None:
    queue = open_queue()
    look_alike = SimpleNamespace(
        message_id="m-42", message_type="Raw", correlation_id="c-42", message=b"\x00\xffbytes"
    )
    queue.send(None, look_alike)

    received = queue.receive(None, WAIT_MS)

    assert received is not None
    assert (received.message_id, received.message_type, received.correlation_id) == (
        "m-42",
        "Raw",
        "c-42",
    )
    assert received.message == b"\x00\xffbytes"
    with pytest.raises(TypeError, match=r"message_id.*MessageEnvelope"):
        queue.send(None, "not an envelope")


def test_peek_then_listen_with_pip_receiver(open_queue: OpenQueue) -> None:
    queue = open_queue()
    queue.send(None, PipEnvelope("corr-3", "Tick", "one"))
    wait_until(lambda: queue.peek(None) is not None, timeout=WAIT_MS / 1000)
    peeked = queue.peek(None)
    assert isinstance(peeked, PipEnvelope) and peeked.get_message_as_string() == "one"

    receiver = PipReceiver()
    queue.begin_listen(None, receiver)
    try:
        wait_until(lambda: receiver.message_count == 1, timeout=WAIT_MS / 1000)
    finally:
        queue.end_listen(None)
    (message,) = receiver.messages
    assert (message.correlation_id, message.get_message_as_string()) == ("corr-3", "one")
