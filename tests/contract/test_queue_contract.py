"""The queue contract: every transport (memory, Kafka on each broker, MQTT) runs these tests.

A case a transport cannot support is skipped by its capability flag, never by its name.
"""

from __future__ import annotations

import threading
import time

import pytest

from sluice.queues import MessageEnvelope, MessageQueue
from sluice.testing import wait_until

from .conftest import QueueKit

WAIT_MS = 15_000  # a receive that must succeed; Tansu's group join alone takes ~3 s
NOTHING_MS = 1_500  # a receive that must come back empty


def envelope(text: str, key: str | None = None) -> MessageEnvelope:
    return MessageEnvelope("corr-1", "contract", text, key=key)


def require(queue: MessageQueue, capability: str) -> None:
    if not getattr(queue.get_capabilities(), capability):
        pytest.skip(f"{type(queue).__name__} does not have {capability}")


def receive(queue: MessageQueue, wait_ms: int = WAIT_MS) -> MessageEnvelope:
    message = queue.receive(None, wait_ms)
    assert message is not None, f"nothing received within {wait_ms} ms"
    return message


def test_send_then_receive_keeps_payload_and_metadata(queue_kit: QueueKit) -> None:
    queue = queue_kit.open_queue()
    sent = MessageEnvelope("corr-42", "reading", b"\x00\xffbinary")
    queue.send(None, sent)

    got = receive(queue)

    assert got.message == b"\x00\xffbinary"
    assert got.message_type == "reading"
    assert got.correlation_id == "corr-42"
    assert got.message_id == sent.message_id
    queue.complete(got)


def test_receive_waits_for_a_message_sent_later(queue_kit: QueueKit) -> None:
    queue = queue_kit.open_queue()
    sender = queue_kit.open_queue()
    waiting = threading.Event()
    result: list[MessageEnvelope | None] = []

    def wait_for_one() -> None:
        waiting.set()
        result.append(queue.receive(None, WAIT_MS))

    thread = threading.Thread(target=wait_for_one)
    thread.start()
    waiting.wait(5)
    sender.send(None, envelope("late"))
    thread.join(WAIT_MS / 1000 + 5)

    assert result and result[0] is not None, (
        "receive() did not return the message sent while it waited"
    )
    assert result[0].get_message_as_string() == "late"


def test_empty_receive_waits_its_timeout(queue_kit: QueueKit) -> None:
    queue = queue_kit.open_queue()
    started = time.monotonic()
    assert queue.receive(None, NOTHING_MS) is None
    assert time.monotonic() - started >= NOTHING_MS / 1000 * 0.9


def test_peek_with_nothing_returns_none(queue_kit: QueueKit) -> None:
    queue = queue_kit.open_queue()
    require(queue, "can_peek")
    assert queue.peek(None) is None
    assert queue.peek_batch(None, 5) == []


def test_peek_does_not_remove(queue_kit: QueueKit) -> None:
    queue = queue_kit.open_queue()
    require(queue, "can_peek")
    queue.send(None, envelope("peeked"))

    first = wait_until(
        lambda: queue.peek(None), timeout=WAIT_MS / 1000, message="a peekable message"
    )
    again = queue.peek(None)
    got = receive(queue)

    assert again is not None and again.message_id == first.message_id
    assert got.message_id == first.message_id


def test_peek_batch_returns_up_to_n_in_order(queue_kit: QueueKit) -> None:
    queue = queue_kit.open_queue()
    require(queue, "can_peek_batch")
    sent = [envelope(f"m{i}", key="same-key") for i in range(3)]
    for message in sent:
        queue.send(None, message)

    batch = wait_until(
        lambda: len(queue.peek_batch(None, 10)) == 3 and queue.peek_batch(None, 10),
        timeout=WAIT_MS / 1000,
        message="three peekable messages",
    )

    assert [m.message_id for m in batch] == [m.message_id for m in sent]
    assert len(queue.peek_batch(None, 2)) == 2


def test_complete_then_restart_does_not_redeliver(queue_kit: QueueKit) -> None:
    queue = queue_kit.open_queue()
    queue.send(None, envelope("done"))
    queue.complete(receive(queue))
    queue.close(None)

    restarted = queue_kit.open_queue()
    assert restarted.receive(None, NOTHING_MS * 2) is None


def test_restart_without_complete_redelivers(queue_kit: QueueKit) -> None:
    queue = queue_kit.open_queue()
    require(queue, "can_persist")
    sent = envelope("not completed")
    queue.send(None, sent)
    assert receive(queue).message_id == sent.message_id
    queue.close(None)

    restarted = queue_kit.open_queue()
    again = receive(restarted)
    assert again.message_id == sent.message_id
    restarted.complete(again)


def test_abandon_makes_the_message_come_back(queue_kit: QueueKit) -> None:
    queue = queue_kit.open_queue()
    require(queue, "can_abandon")
    sent = envelope("retry me")
    queue.send(None, sent)
    queue.abandon(receive(queue))

    again = receive(queue)

    assert again.message_id == sent.message_id
    queue.complete(again)
    assert queue.receive(None, NOTHING_MS) is None


def test_listen_delivers_until_end_listen(queue_kit: QueueKit) -> None:
    queue = queue_kit.open_queue()
    got: list[str] = []

    def on_message(message: MessageEnvelope, source: MessageQueue) -> None:
        got.append(message.get_message_as_string() or "")
        source.complete(message)

    listener = threading.Thread(target=queue.listen, args=(None, on_message))
    listener.start()
    for i in range(3):
        queue.send(None, envelope(f"l{i}", key="k"))
    wait_until(lambda: len(got) == 3, timeout=WAIT_MS / 1000, message="three listened messages")
    queue.end_listen(None)
    listener.join(10)

    assert not listener.is_alive(), "listen() did not return after end_listen()"
    assert sorted(got) == ["l0", "l1", "l2"]


def test_send_as_object_round_trips_json(queue_kit: QueueKit) -> None:
    queue = queue_kit.open_queue()
    queue.send_as_object("corr-7", "reading", {"sensor": "s1", "value": 21.5})

    got = receive(queue)

    assert got.message_type == "reading"
    assert got.get_message_as() == {"sensor": "s1", "value": 21.5}


def test_read_message_count_is_the_backlog(queue_kit: QueueKit) -> None:
    queue = queue_kit.open_queue()
    require(queue, "can_message_count")
    for i in range(3):
        queue.send(None, envelope(f"c{i}"))

    wait_until(
        lambda: queue.read_message_count() == 3, timeout=WAIT_MS / 1000, message="a backlog of 3"
    )
    queue.complete(receive(queue))
    wait_until(
        lambda: queue.read_message_count() == 2, timeout=WAIT_MS / 1000, message="a backlog of 2"
    )


def test_clear_discards_waiting_messages(queue_kit: QueueKit) -> None:
    queue = queue_kit.open_queue()
    require(queue, "can_clear")
    for i in range(3):
        queue.send(None, envelope(f"x{i}", key="k"))
    wait_until(
        lambda: len(queue.peek_batch(None, 10)) == 3,
        timeout=WAIT_MS / 1000,
        message="three messages to clear",
    )

    queue.clear(None)

    assert queue.receive(None, NOTHING_MS) is None


def test_messages_with_one_key_arrive_in_send_order(queue_kit: QueueKit) -> None:
    queue = queue_kit.open_queue()
    require(queue, "can_order")
    for i in range(30):
        queue.send(None, envelope(str(i), key=f"key-{i % 3}"))

    by_key: dict[bytes | None, list[int]] = {}
    for _ in range(30):
        message = receive(queue)
        by_key.setdefault(message.key, []).append(int(message.get_message_as_string() or -1))
        queue.complete(message)

    received = sorted(n for numbers in by_key.values() for n in numbers)
    assert received == list(range(30))
    for key, numbers in by_key.items():
        assert numbers == sorted(numbers), f"messages of key {key!r} out of order: {numbers}"
