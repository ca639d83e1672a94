"""The Kafka sensing loop of both triggers: what to emit, as the cluster's shared watch shows.

:class:`~sluice_airflow.triggers.queue.QueueMessageTrigger` and the routed triggers' shared
poller (:mod:`sluice_airflow.triggers.routed`) ask the same question the same way: the
group's backlog from the cluster's :class:`~sluice.kafka.watch.KafkaWatch`, what to emit
now by :func:`sluice.sensing.next_emission`, and how long to wait before asking again (a
batch in flight: its commit is looked for every ``poll_interval``; otherwise only new
messages change the answer, so the loop waits for the ends to move). A topic that does not
exist is a warning, and the loop keeps watching for it (an AssetWatcher lives as long as
its DAG; the topic may be created later).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from sluice.cursor import BatchCursor, BatchRequest, RunState, run_state_from_offsets
from sluice.errors import TopicNotFoundError
from sluice.kafka.watch import METADATA_EVERY, Watcher
from sluice.sensing import next_emission

__all__ = ["STATUS_EVERY", "Sensing", "kafka_requests"]

#: Seconds between two looks of a waiting trigger with no batch in flight.
STATUS_EVERY = 30.0


@dataclass(frozen=True)
class Sensing:
    """A watcher's settings for :func:`sluice.sensing.next_emission`."""

    topic: str
    poll_interval: float
    rerun_after: float
    min_messages: int
    max_messages: int | None


async def kafka_requests(
    watcher: Watcher,
    sensing: Sensing,
    cursor: Callable[[], BatchCursor],
    say: Callable[[str, int], None],
) -> AsyncIterator[tuple[BatchCursor, BatchRequest]]:
    """Each batch to emit and the cursor after it, as ``watcher`` shows the backlog.

    The caller keeps the cursor (``cursor()`` is read before each decision) and takes the
    new one once the batch is emitted; one that cannot emit yet (the routed poller, when the
    broker did not answer its read) leaves its cursor as it was and asks again later. ``say``
    gets each "waiting: ..." line and its log level.
    """
    in_flight = False
    while True:
        version = watcher.version
        try:
            backlog = await watcher.abacklog(fresh=in_flight)
        except TopicNotFoundError as exc:
            say(f"waiting: {exc}", logging.WARNING)
            await watcher.changed(version, max(sensing.poll_interval, METADATA_EVERY))
            continue
        waiting = backlog if backlog.message_count else None
        after, decision = next_emission(
            cursor(),
            waiting,
            time.time(),
            sensing.rerun_after,
            sensing.min_messages,
            sensing.max_messages,
            sensing.topic,
        )
        if isinstance(decision, BatchRequest):
            in_flight = True
            yield after, decision
            continue
        say(decision, logging.INFO)
        state = run_state_from_offsets(cursor(), waiting, time.time(), sensing.rerun_after)
        in_flight = state is RunState.ACTIVE
        await watcher.changed(version, sensing.poll_interval if in_flight else STATUS_EVERY)
