"""KafkaMessageQueue semantics beyond the contract suite, on noida-db and on Tansu."""

from __future__ import annotations

import threading

from sluice.queues import MessageEnvelope
from sluice.testing import wait_until

from .conftest import QueueFactory

WAIT_MS = 15_000


def send_all(queue: object, texts: list[str], key: str | None = None) -> list[MessageEnvelope]:
    sent = [MessageEnvelope(None, "t", text, key=key) for text in texts]
    for message in sent:
        queue.send(None, message)  # type: ignore[attr-defined]
    return sent


def drain(queue: object, count: int, complete: bool = True) -> list[MessageEnvelope]:
    got = []
    for _ in range(count):
        message = queue.receive(None, WAIT_MS)  # type: ignore[attr-defined]
        assert message is not None, f"only {len(got)} of {count} messages arrived"
        got.append(message)
        if complete:
            queue.complete(message)  # type: ignore[attr-defined]
    return got


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
    assert make_queue().receive(None, 2000) is None, "the dead-lettered message came back"


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
    assert make_queue(autocommit=True).receive(None, 2000) is None


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
    tombstone, keyless = drain(queue, 2)
    assert tombstone.message is None and tombstone.key == b"deleted-id"
    assert keyless.message == b"no key" and keyless.key is None
    assert keyless.message_id == f"{queue.topic}-0-{keyless.offset}"


def test_clear_commits_to_the_end(make_queue: QueueFactory) -> None:
    queue = make_queue()
    send_all(queue, ["1", "2", "3"])
    wait_until(lambda: queue.read_message_count() == 3, timeout=15, message="a backlog of 3")
    queue.clear(None)
    assert queue.read_message_count() == 0
    queue.close(None)
    assert make_queue().receive(None, 2000) is None


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
