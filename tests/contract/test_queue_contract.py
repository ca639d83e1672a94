"""The queue contract: every transport (memory, Kafka on each broker, MQTT) runs these tests.

A case a transport cannot support is skipped by its capability flag, never by its name.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from sluice.queues import MessageEnvelope, MessageQueue
from sluice.testing import wait_until

from .conftest import QueueKit

WAIT_MS = 15_000  # a receive that must succeed; Tansu's group join alone takes ~3 s
NOTHING_MS = 1_500  # a receive that must come back empty


def envelope(text: str, key: str | None = None) -> MessageEnvelope:
    return MessageEnvelope("corr-1", "contract", text, key=key)


def send_all(
    queue: MessageQueue, texts: list[str], key: str | None = None
) -> list[MessageEnvelope]:
    sent = [envelope(text, key=key) for text in texts]
    for message in sent:
        queue.send(None, message)
    return sent


def require(queue: MessageQueue, capability: str) -> None:
    if not getattr(queue.get_capabilities(), capability):
        pytest.skip(f"{type(queue).__name__} does not have {capability}")


def receive(queue: MessageQueue, wait_ms: int = WAIT_MS) -> MessageEnvelope:
    message: MessageEnvelope | None = queue.receive(None, wait_ms)
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
    sent = send_all(queue, ["m0", "m1", "m2"], key="same-key")

    batch = wait_until(
        lambda: [] if len(queue.peek_batch(None, 10)) != 3 else queue.peek_batch(None, 10),
        timeout=WAIT_MS / 1000,
        message="three peekable messages",
    )

    assert [m.message_id for m in batch] == [m.message_id for m in sent]
    assert len(queue.peek_batch(None, 2)) == 2


def assert_nothing_redelivered(queue: MessageQueue, *keys: str) -> None:
    """Nothing waits for ``queue`` (just opened) on ``keys``.

    A receive that comes back empty proves nothing while the consumer is not reading yet
    (Tansu's group join alone outlasts NOTHING_MS). So a marker goes out on each key first:
    with per-key order, anything redelivered on a key comes before that key's marker. Once
    the markers are in, the queue reads every partition, and nothing else may come.
    """
    markers = [envelope(f"marker {key}", key=key) for key in keys]
    for marker in markers:
        queue.send(None, marker)
    for _ in markers:
        got = receive(queue)
        assert got.message_id in {m.message_id for m in markers}, (
            f"{got.get_message_as_string()!r} was delivered again"
        )
        queue.complete(got)
    assert queue.receive(None, NOTHING_MS) is None, "a message was delivered again"


def test_complete_then_restart_does_not_redeliver(queue_kit: QueueKit) -> None:
    queue = queue_kit.open_queue()
    queue.send(None, envelope("done", key="k"))
    queue.complete(receive(queue))
    queue.close(None)

    assert_nothing_redelivered(queue_kit.open_queue(), "k")


def restart_with_a_message_not_completed(
    queue_kit: QueueKit, *capabilities: str
) -> tuple[MessageQueue, MessageEnvelope]:
    """A consumer receives a message and closes without completing it; a new consumer (returned)
    receives it again (returned). Skipped unless the transport has ``capabilities``."""
    queue = queue_kit.open_queue()
    for capability in ("can_persist", *capabilities):
        require(queue, capability)
    sent = envelope("not completed", key="k")
    queue.send(None, sent)
    assert receive(queue).message_id == sent.message_id
    queue.close(None)

    restarted = queue_kit.open_queue()
    again = receive(restarted)
    assert again.message_id == sent.message_id
    return restarted, again


def test_restart_without_complete_redelivers(queue_kit: QueueKit) -> None:
    restarted, again = restart_with_a_message_not_completed(queue_kit)
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


def listen_and_complete(queue: MessageQueue) -> tuple[list[MessageEnvelope], Callable[[], None]]:
    """Start ``queue.listen`` on a thread with a receiver that completes what it gets. Returns
    the list it appends to, and a function that ends listening and checks listen() returned."""
    got: list[MessageEnvelope] = []

    def on_message(message: MessageEnvelope, source: MessageQueue) -> None:
        got.append(message)
        source.complete(message)

    listener = threading.Thread(target=queue.listen, args=(None, on_message))
    listener.start()

    def stop() -> None:
        queue.end_listen(None)
        listener.join(10)
        assert not listener.is_alive(), "listen() did not return after end_listen()"

    return got, stop


def test_listen_delivers_until_end_listen(queue_kit: QueueKit) -> None:
    queue = queue_kit.open_queue()
    got, stop_listening = listen_and_complete(queue)
    send_all(queue, ["l0", "l1", "l2"], key="k")
    wait_until(lambda: len(got) == 3, timeout=WAIT_MS / 1000, message="three listened messages")
    stop_listening()

    assert sorted(m.get_message_as_string() or "" for m in got) == ["l0", "l1", "l2"]


def test_listen_keeps_key_order_and_its_completes_commit(queue_kit: QueueKit) -> None:
    queue = queue_kit.open_queue()
    require(queue, "can_order")
    got, stop_listening = listen_and_complete(queue)
    sent = [envelope("first", key="a")]
    queue.send(None, sent[0])
    wait_until(lambda: got, timeout=WAIT_MS / 1000, message="the listener to get a message")
    for i in range(3):  # sent while the listener is known to be listening
        for key in ("a", "b"):
            sent.append(envelope(f"{key}{i}", key=key))
            queue.send(None, sent[-1])
    wait_until(
        lambda: len(got) >= len(sent), timeout=WAIT_MS / 1000, message="every listened message"
    )
    stop_listening()

    for key in ("a", "b"):
        in_order = [m.message_id for m in sent if m.key == key.encode()]
        assert [m.message_id for m in got if m.key == key.encode()] == in_order, (
            f"key {key}: listened out of order or twice"
        )
    queue.close(None)
    assert_nothing_redelivered(queue_kit.open_queue(), "a", "b")


def test_abandon_after_a_restart_makes_the_message_come_back(queue_kit: QueueKit) -> None:
    restarted, redelivered = restart_with_a_message_not_completed(queue_kit, "can_abandon")
    restarted.abandon(redelivered)
    again = receive(restarted)

    assert again.message_id == redelivered.message_id
    restarted.complete(again)
    assert restarted.receive(None, NOTHING_MS) is None, "the abandoned message came twice"


def test_move_to_dead_letter_lands_on_the_dead_letter_topic(queue_kit: QueueKit) -> None:
    queue = queue_kit.open_queue()
    require(queue, "can_dead_letter")
    dead_letters = queue_kit.open_dead_letter_queue()
    sent = envelope("poison", key="k")
    queue.send(None, sent)
    got = receive(queue)

    queue.move_to_dead_letter(got, reason="no field 'id'")
    landed = receive(dead_letters)

    assert landed.message_id == sent.message_id
    assert landed.get_message_as_string() == "poison"
    assert landed.header("sluice.original_topic") == (got.topic or "").encode()
    assert landed.header("sluice.reason") == b"no field 'id'"
    dead_letters.complete(landed)
    queue.close(None)
    assert_nothing_redelivered(queue_kit.open_queue(), "k")


def test_a_closed_queue_opens_again_and_sees_waiting_messages(queue_kit: QueueKit) -> None:
    queue = queue_kit.open_queue()
    require(queue, "can_persist")
    sent = send_all(queue, ["w0", "w1"], key="k")
    queue.close(None)
    assert not queue.is_open()

    queue.open(None)

    assert queue.is_open()
    got = [receive(queue) for _ in sent]
    assert sorted(m.message_id for m in got) == sorted(m.message_id for m in sent)
    for message in got:
        queue.complete(message)
    later = envelope("after reopening", key="k")
    queue.send(None, later)
    assert receive(queue).message_id == later.message_id


def test_send_as_object_round_trips_json(queue_kit: QueueKit) -> None:
    queue = queue_kit.open_queue()
    queue.send_as_object("corr-7", "reading", {"sensor": "s1", "value": 21.5})

    got = receive(queue)

    assert got.message_type == "reading"
    assert got.get_message_as() == {"sensor": "s1", "value": 21.5}


def test_read_message_count_is_the_backlog(queue_kit: QueueKit) -> None:
    queue = queue_kit.open_queue()
    require(queue, "can_message_count")
    send_all(queue, ["c0", "c1", "c2"])

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
    send_all(queue, ["x0", "x1", "x2"], key="k")
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
