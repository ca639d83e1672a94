"""MemoryMessageQueue, including regression tests for pip-services' MemoryMessageQueue defects."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from pip_services3_messaging.queues import MemoryMessageQueue as PipMemoryQueue
from pip_services3_messaging.queues import MessageEnvelope as PipEnvelope

from sluice.queues import MemoryMessageQueue, MessageEnvelope


@pytest.fixture
def queue() -> Iterator[MemoryMessageQueue]:
    q = MemoryMessageQueue("q")
    q.open(None)
    yield q
    q.close(None)


def test_empty_receive_after_a_send_waits_its_timeout(queue: MemoryMessageQueue) -> None:
    queue.send(None, MessageEnvelope(None, "t", "one"))
    assert queue.receive(None, 0) is not None
    started = time.monotonic()
    assert queue.receive(None, 300) is None
    assert time.monotonic() - started >= 0.28


def test_pip_services_empty_receive_returns_at_once_after_a_send() -> None:
    """Regression pin for the upstream defect: its event is never cleared."""
    pip = PipMemoryQueue("pip")
    pip.open(None)
    pip.send(None, PipEnvelope(None, "t", "one"))
    pip.receive(None, 0)
    started = time.monotonic()
    assert pip.receive(None, 1000) is None
    assert time.monotonic() - started < 0.5, "upstream fixed: the pin can go"


def test_idle_listen_does_not_spin(queue: MemoryMessageQueue) -> None:
    queue.send(None, MessageEnvelope(None, "t", "wake"))
    got: list[MessageEnvelope] = []
    listener = threading.Thread(target=queue.listen, args=(None, lambda m, q: got.append(m)))
    cpu_before = time.thread_time()
    wall_before = time.process_time()
    listener.start()
    time.sleep(1.0)  # measuring idleness needs an idle period; nothing here waits on a result
    queue.end_listen(None)
    listener.join(5)
    used = time.process_time() - wall_before - (time.thread_time() - cpu_before)
    assert len(got) == 1
    assert not listener.is_alive()
    assert used < 0.3, f"an idle listen() used {used:.2f} s of CPU in 1 s"


def test_receive_with_zero_wait_then_abandon_keeps_the_message(queue: MemoryMessageQueue) -> None:
    queue.send(None, MessageEnvelope(None, "t", "keep me"))
    message = queue.receive(None, 0)
    assert message is not None
    queue.abandon(message)
    again = queue.receive(None, 0)
    assert again is not None and again.message_id == message.message_id


def test_pip_services_receive_zero_then_abandon_drops_the_message() -> None:
    """Regression pin for the upstream defect: the lock expires with the receive's wait."""
    pip = PipMemoryQueue("pip")
    pip.open(None)
    pip.send(None, PipEnvelope(None, "t", "lost"))
    message = pip.receive(None, 0)
    pip.abandon(message)
    assert pip.read_message_count() == 0, "upstream fixed: the pin can go"


def test_expired_lock_returns_the_message() -> None:
    q = MemoryMessageQueue("q")
    q.configure({"options.lock_timeout": 100})
    q.open(None)
    q.send(None, MessageEnvelope(None, "t", "slow"))
    first = q.receive(None, 0)
    assert first is not None
    again = q.receive(None, 2000)
    assert again is not None and again.message_id == first.message_id


def test_renew_lock_keeps_the_message_hidden() -> None:
    q = MemoryMessageQueue("q")
    q.configure({"options.lock_timeout": 200})
    q.open(None)
    q.send(None, MessageEnvelope(None, "t", "busy"))
    message = q.receive(None, 0)
    assert message is not None
    q.renew_lock(message, 5000)
    assert q.receive(None, 500) is None


def test_queues_with_one_topic_share_messages_and_private_ones_do_not(unique_name: str) -> None:
    a, b, private = MemoryMessageQueue("a"), MemoryMessageQueue("b"), MemoryMessageQueue("p")
    for q in (a, b):
        q.configure({"topic": unique_name})
    for q in (a, b, private):
        q.open(None)
    a.send(None, MessageEnvelope(None, "t", "shared"))
    assert private.receive(None, 0) is None
    got = b.receive(None, 0)
    assert got is not None and got.topic == unique_name


def test_dead_letter_lands_on_the_dlq_topic_with_the_reason(unique_name: str) -> None:
    q, dlq = MemoryMessageQueue("q"), MemoryMessageQueue("dlq")
    q.configure({"topic": unique_name})
    dlq.configure({"topic": f"{unique_name}.dlq"})
    q.open(None)
    dlq.open(None)
    q.send(None, MessageEnvelope(None, "t", "poison"))
    message = q.receive(None, 0)
    assert message is not None
    q.move_to_dead_letter(message, reason="bad json")

    dead = dlq.receive(None, 0)
    assert dead is not None
    assert dead.message == b"poison"
    assert dead.header("sluice.reason") == b"bad json"
    assert dead.header("sluice.original_topic") == unique_name.encode()
    assert q.read_message_count() == 0


def test_operations_on_a_closed_queue_raise() -> None:
    q = MemoryMessageQueue("q")
    with pytest.raises(Exception, match="not opened"):
        q.send(None, MessageEnvelope(None, "t", "x"))


def test_listen_abandons_a_message_whose_receiver_fails(queue: MemoryMessageQueue) -> None:
    calls: list[str] = []

    def flaky(message: MessageEnvelope, source: MemoryMessageQueue) -> None:
        calls.append(message.message_id)
        if len(calls) == 1:
            raise RuntimeError("transient")
        source.complete(message)
        source.end_listen(None)

    queue.send(None, MessageEnvelope(None, "t", "once more"))
    listener = threading.Thread(target=queue.listen, args=(None, flaky))
    listener.start()
    listener.join(10)
    assert len(calls) == 2 and calls[0] == calls[1]
    assert queue.read_message_count() == 0
