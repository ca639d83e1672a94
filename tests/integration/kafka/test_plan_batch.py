"""plan_batch against real brokers: the waiting messages as ranges, with nothing committed."""

from __future__ import annotations

from sluice.batch import OffsetRange, plan_batch
from sluice.queues import MessageEnvelope

from .conftest import QueueFactory


def send(queue: object, count: int, partition: int) -> None:
    for i in range(count):
        queue._conn().publish(queue.topic, [{"value": f"m{i}"}], {"partition": partition})  # type: ignore[attr-defined]


def test_plan_covers_committed_to_end_and_commits_nothing(make_queue: QueueFactory) -> None:
    queue = make_queue(partitions=3)
    send(queue, 4, partition=0)
    send(queue, 2, partition=2)

    spec = plan_batch(queue)

    assert spec is not None
    assert spec.ranges == (OffsetRange(0, 0, 4), OffsetRange(2, 0, 2))
    assert (spec.topic, spec.group_id) == (queue.topic, queue.group_id)
    assert plan_batch(queue) == spec, "planning again must give the same batch (nothing moved)"
    assert plan_batch(queue).batch_id == spec.batch_id  # type: ignore[union-attr]
    assert queue.read_message_count() == 6


def test_plan_starts_at_the_committed_offsets(make_queue: QueueFactory) -> None:
    queue = make_queue(partitions=1)
    send(queue, 5, partition=0)
    for _ in range(2):
        message = queue.receive(None, 15000)
        assert message is not None
        queue.complete(message)
    spec = plan_batch(queue)
    assert spec is not None and spec.ranges == (OffsetRange(0, 2, 5),)


def test_min_and_max_messages(make_queue: QueueFactory) -> None:
    queue = make_queue(partitions=2)
    send(queue, 10, partition=0)
    send(queue, 10, partition=1)
    assert plan_batch(queue, min_messages=21) is None
    limited = plan_batch(queue, max_messages=6)
    assert limited is not None and limited.ranges == (OffsetRange(0, 0, 3), OffsetRange(1, 0, 3))


def test_a_new_group_without_from_beginning_plans_what_came_after_open(
    make_queue: QueueFactory,
) -> None:
    make_queue(group_id="earlier").send(None, MessageEnvelope(None, "t", "before", key="k"))
    queue = make_queue(partitions=3, from_beginning=False)
    assert plan_batch(queue) is None
    queue.send(None, MessageEnvelope(None, "t", "after", key="k"))
    spec = plan_batch(queue)
    assert spec is not None and spec.message_count == 1
