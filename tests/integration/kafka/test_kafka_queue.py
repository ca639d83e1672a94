"""KafkaMessageQueue semantics beyond the contract suite, on Apache Kafka and noida-db.

Tansu runs the contract suite (tests/contract) and the offset probe: here, its group
coordinator's slower rebalances took half of this file's time (about 2 minutes) for calls
the two other brokers already check."""

from __future__ import annotations

import functools
import threading

import pytest

from sluice.kafka import KafkaMessageQueue
from sluice.queues import MessageEnvelope
from sluice.testing import wait_until
from sluice.testing.plugin import kafka_params

from .conftest import QueueFactory

pytestmark = pytest.mark.parametrize(
    "kafka_broker", [p for p in kafka_params() if p != "tansu"], indirect=True
)

WAIT_MS = 15_000
NOTHING_MS = 2_000  # a receive that must come back empty, once the queue reads its partitions


def send_all(queue: object, texts: list[str], key: str | None = None) -> list[MessageEnvelope]:
    sent = [MessageEnvelope(None, "t", text, key=key) for text in texts]
    for message in sent:
        queue.send(None, message)  # type: ignore[attr-defined]
    return sent


def drain(queue: object, count: int, complete: bool = True) -> list[MessageEnvelope]:
    got: list[MessageEnvelope] = []
    for _ in range(count):
        message = queue.receive(None, WAIT_MS)  # type: ignore[attr-defined]
        assert message is not None, f"only {len(got)} of {count} messages arrived"
        got.append(message)
        if complete:
            queue.complete(message)  # type: ignore[attr-defined]
    return got


def assert_nothing_waiting(queue: KafkaMessageQueue) -> None:
    """Nothing comes to ``queue`` (just opened). Only asked once the group has assigned it its
    partitions: before that a receive finds nothing whatever waits, and Tansu's group join
    alone outlasts NOTHING_MS."""
    assert queue.wait_assigned(), "the group did not assign the queue its partitions"
    assert queue.receive(None, NOTHING_MS) is None, "a message was delivered again"


def test_two_queues_in_one_group_split_the_partitions(make_queue: QueueFactory) -> None:
    first = make_queue(partitions=4)
    second = make_queue(partitions=4)
    for queue in (first, second):
        queue.peek(None)  # subscribe both before any rebalance settles
    wait_until(
        lambda: all(queue.subscriptions()[0].assigned for queue in (first, second)),
        timeout=30,
        message="both consumers to own partitions",
    )
    owned = [queue.subscriptions()[0].assigned for queue in (first, second)]
    assert owned[0].isdisjoint(owned[1]) and owned[0] | owned[1] == {0, 1, 2, 3}

    sent = send_all(first, [f"m{i}" for i in range(40)])
    got: dict[str, list[str]] = {"first": [], "second": []}

    def collect(name: str, queue: object) -> None:
        while len(got["first"]) + len(got["second"]) < 40:
            message = queue.receive(None, 500)  # type: ignore[attr-defined]
            if message is not None:
                got[name].append(message.message_id)
                queue.complete(message)  # type: ignore[attr-defined]

    threads = [
        threading.Thread(target=collect, args=item)
        for item in (("first", first), ("second", second))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    everything = got["first"] + got["second"]
    assert sorted(everything) == sorted(m.message_id for m in sent), "lost or duplicated messages"
    assert got["first"] and got["second"], "one consumer got nothing"


def test_dead_letter_round_trip(make_queue: QueueFactory, unique_name: str) -> None:
    queue = make_queue()
    dead = make_queue(topic=f"{unique_name}.dlq", group_id=f"{unique_name}-dlq")
    send_all(queue, ["poison"], key="k1")
    message = drain(queue, 1, complete=False)[0]

    queue.move_to_dead_letter(message, reason="schema mismatch: no field 'id'")
    landed = drain(dead, 1)[0]

    assert landed.message == b"poison" and landed.key == b"k1"
    assert landed.message_id == message.message_id
    assert landed.header("sluice.original_topic") == unique_name.encode()
    assert landed.header("sluice.original_partition") == str(message.partition).encode()
    assert landed.header("sluice.original_offset") == str(message.offset).encode()
    assert landed.header("sluice.reason") == b"schema mismatch: no field 'id'"
    queue.close(None)
    assert_nothing_waiting(make_queue())


def test_peek_neither_commits_nor_changes_the_backlog(make_queue: QueueFactory) -> None:
    queue = make_queue()
    send_all(queue, ["a", "b"], key="k")
    wait_until(lambda: len(queue.peek_batch(None, 5)) == 2, timeout=15, message="two peekable")
    assert queue.read_message_count() == 2
    queue.peek(None)
    queue.peek_batch(None, 5)
    assert queue.read_message_count() == 2
    queue.close(None)

    again = make_queue()
    assert [m.get_message_as_string() for m in drain(again, 2)] == ["a", "b"]
    assert again.read_message_count() == 0


def test_completing_out_of_order_never_skips_an_uncompleted_message(
    make_queue: QueueFactory,
) -> None:
    """Kafka keeps one position per partition, so completing later messages cannot commit past
    an earlier one that is not completed: after a restart it comes again (with the later ones)."""
    queue = make_queue(partitions=1)
    sent = send_all(queue, ["first", "second", "third"])
    _, second, third = drain(queue, 3, complete=False)
    queue.complete(third)
    queue.complete(second)
    assert queue.read_message_count() == 3
    queue.close(None)

    restarted = make_queue(partitions=1)
    again = drain(restarted, 3)
    assert [m.message_id for m in again] == [m.message_id for m in sent]
    assert restarted.read_message_count() == 0


def test_autocommit_true_commits_on_receive(make_queue: QueueFactory) -> None:
    queue = make_queue(autocommit=True)
    send_all(queue, ["x"])
    drain(queue, 1, complete=False)
    wait_until(lambda: queue.read_message_count() == 0, timeout=15, message="the commit")
    queue.close(None)
    assert_nothing_waiting(make_queue(autocommit=True))


def test_autocommit_false_redelivers_what_was_not_completed(make_queue: QueueFactory) -> None:
    queue = make_queue(autocommit=False)
    sent = send_all(queue, ["x"])
    drain(queue, 1, complete=False)
    assert queue.read_message_count() == 1
    queue.close(None)
    assert drain(make_queue(), 1)[0].message_id == sent[0].message_id


def test_tombstones_and_null_keys(make_queue: QueueFactory) -> None:
    queue = make_queue(partitions=1)
    queue._conn().publish(
        queue.topic, [{"value": None, "key": b"deleted-id"}, {"value": b"no key"}]
    )
    sent = MessageEnvelope("c1", "deletion", None, key="gone-id")  # a tombstone from send()
    queue.send(None, sent)
    tombstone, keyless, sent_tombstone = drain(queue, 3)
    assert tombstone.message is None and tombstone.key == b"deleted-id"
    assert keyless.message == b"no key" and keyless.key is None
    assert keyless.message_id == f"{queue.topic}-0-{keyless.offset}"
    assert (sent_tombstone.message, sent_tombstone.key) == (None, b"gone-id")
    assert (sent_tombstone.message_id, sent_tombstone.correlation_id) == (sent.message_id, "c1")


def test_clear_commits_to_the_end(make_queue: QueueFactory) -> None:
    queue = make_queue()
    send_all(queue, ["1", "2", "3"])
    wait_until(lambda: queue.read_message_count() == 3, timeout=15, message="a backlog of 3")
    queue.clear(None)
    assert queue.read_message_count() == 0
    queue.close(None)
    assert_nothing_waiting(make_queue())


def test_read_partitions_runs_that_many_consumers(make_queue: QueueFactory) -> None:
    queue = make_queue(partitions=4, read_partitions=2)
    queue.peek(None)
    consumers = queue.subscriptions()
    assert len(consumers) == 2
    wait_until(lambda: all(c.assigned for c in consumers), timeout=30, message="both assigned")
    assert consumers[0].assigned | consumers[1].assigned == {0, 1, 2, 3}
    sent = send_all(queue, [str(i) for i in range(20)])
    assert sorted(m.message_id for m in drain(queue, 20)) == sorted(m.message_id for m in sent)


def test_write_partition_pins_every_message(make_queue: QueueFactory) -> None:
    queue = make_queue(partitions=3, **{"options.write_partition": 2})
    send_all(queue, ["a", "b", "c"])
    assert {m.partition for m in drain(queue, 3)} == {2}


def test_without_from_beginning_nothing_sent_after_open_is_missed(make_queue: QueueFactory) -> None:
    """A new group starts at the end of the topic as of open(), not as of its (later) group join."""
    make_queue(group_id="earlier-writer").send(None, MessageEnvelope(None, "t", "before open"))
    queue = make_queue(from_beginning=False)
    queue.send(None, MessageEnvelope(None, "t", "after open"))
    got = queue.receive(None, WAIT_MS)
    assert got is not None and got.message == b"after open"
    assert queue.receive(None, 1500) is None


def test_backlog_counts_the_partitions_of_other_group_members(make_queue: QueueFactory) -> None:
    """read_message_count is the group's backlog on the whole topic, also on the partitions
    another member of the group owns (on Tansu their end offsets cannot come from ListOffsets)."""
    first = make_queue(partitions=4)
    second = make_queue(partitions=4)
    for queue in (first, second):
        queue.peek(None)
    wait_until(
        lambda: all(queue.subscriptions()[0].assigned for queue in (first, second)),
        timeout=30,
        message="both consumers to own partitions",
    )
    # One publish: records of a partition go in one batch, which Tansu's ListOffsets miscounts.
    first._conn().publish(first.topic, [{"value": f"m{i}", "key": f"k{i}"} for i in range(12)])
    for queue in (first, second):
        wait_until(
            functools.partial(lambda q: q.read_message_count() == 12, queue),
            timeout=15,
            message="backlog 12",
        )
    done = 0
    for queue in (first, second):
        while (message := queue.receive(None, 1000)) is not None:
            queue.complete(message)
            done += 1
    assert done == 12
    assert first.read_message_count() == 0 and second.read_message_count() == 0


def test_abandon_redelivers_from_that_message_without_duplicates(make_queue: QueueFactory) -> None:
    """abandon seeks the partition back to the message and drops what was buffered after it:
    the next receives give it and the rest once each, and not the earlier message still held."""
    queue = make_queue(partitions=1)
    send_all(queue, ["a", "b", "c"])
    wait_until(lambda: len(queue.peek_batch(None, 5)) == 3, timeout=15, message="three buffered")
    a, b = drain(queue, 2, complete=False)
    queue.abandon(b)

    again = drain(queue, 2)
    assert [m.get_message_as_string() for m in again] == ["b", "c"]
    assert queue.receive(None, 1500) is None, "a message came twice"
    assert queue.read_message_count() == 3, "a is not completed: nothing may be committed past it"
    queue.complete(a)
    assert queue.read_message_count() == 0


def join_a_second_queue(make_queue: QueueFactory, first: KafkaMessageQueue) -> KafkaMessageQueue:
    """A second queue in ``first``'s group, once the rebalance gave each one of two partitions."""
    second = make_queue(partitions=2)
    second.peek(None)
    try:
        wait_until(
            lambda: all(len(q.subscriptions()[0].assigned) == 1 for q in (first, second)),
            timeout=30,
            message="the rebalance to give each queue one partition",
        )
    except TimeoutError as exc:
        states = {name: group_member_state(q) for name, q in (("first", first), ("second", second))}
        raise TimeoutError(f"{exc}; the members: {states}") from exc
    return second


def group_member_state(queue: KafkaMessageQueue) -> dict[str, object]:
    """What kafka-python's coordinator of the queue's consumer says of its group membership
    (read from another thread: a diagnosis, not a synchronised view)."""
    subscription = queue.subscriptions()[0]
    coordinator = getattr(subscription.consumer, "_coordinator", None)
    if coordinator is None:
        return {"consumer": "none"}
    task = getattr(coordinator, "_join_task", None)
    return {
        "assigned": sorted(subscription.assigned),
        "state": str(getattr(coordinator, "state", "?")),
        "generation": getattr(getattr(coordinator, "_generation", None), "generation_id", "?"),
        "rejoining": getattr(coordinator, "rejoining", "?"),
        "need_rejoin": coordinator.need_rejoin(),
        "join_task": None if task is None else ("done" if task.is_done else "pending"),
        "thread_alive": subscription.is_alive(),
    }


def test_a_rebalance_keeps_kept_partitions_and_gives_up_lost_ones(
    make_queue: QueueFactory,
) -> None:
    """kafka-python rebalances eagerly (every partition revoked, the new assignment given, kept
    partitions keep their position). A message received before the rebalance can be completed
    if its partition stayed; if the partition went to another consumer, that one delivers it
    again and commits it, so the old owner's late complete() commits nothing (it could go past
    messages the new owner has not processed). Nothing is lost, nothing kept comes twice."""
    first = make_queue(partitions=2)
    for partition in (0, 1):
        first._conn().publish(first.topic, [{"value": f"p{partition}"}], {"partition": partition})
    held = drain(first, 2, complete=False)

    second = join_a_second_queue(make_queue, first)
    lost = next(iter(second.subscriptions()[0].assigned))
    kept = 1 - lost
    for message in held:
        first.complete(message)
    committed, _, _ = first._conn().group_offsets(first.topic, first.group_id)
    assert committed[kept] == 1, "the complete() of a kept partition's message did not commit"
    assert committed[lost] is None, "the old owner committed a partition it no longer owns"

    again = drain(second, 1)[0]
    assert (again.partition, again.message) == (lost, f"p{lost}".encode())
    assert first.receive(None, 1500) is None, "a message of the kept partition came twice"
    committed, _, _ = first._conn().group_offsets(first.topic, first.group_id)
    assert committed == {0: 1, 1: 1}


def test_messages_buffered_before_a_rebalance_are_delivered_once(make_queue: QueueFactory) -> None:
    """Fetched-ahead messages of a partition the queue keeps through a rebalance stay buffered
    (kafka-python keeps its position there); those of a partition it loses go to the new owner."""
    first = make_queue(partitions=2)
    for partition in (0, 1):
        records = [{"value": f"p{partition}-{i}"} for i in range(3)]
        first._conn().publish(first.topic, records, {"partition": partition})
    wait_until(lambda: len(first.peek_batch(None, 10)) == 6, timeout=15, message="six buffered")

    second = join_a_second_queue(make_queue, first)
    kept = next(iter(first.subscriptions()[0].assigned))
    got = {
        name: [m.get_message_as_string() for m in drain(queue, 3)]
        for name, queue in (("first", first), ("second", second))
    }
    assert got["first"] == [f"p{kept}-{i}" for i in range(3)]
    assert got["second"] == [f"p{1 - kept}-{i}" for i in range(3)]
    assert first.receive(None, 1000) is None and second.receive(None, 1000) is None
