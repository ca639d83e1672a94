"""Sensing: noticing that a batch waits, without committing or acknowledging anything.

What every sensor of Sluice shares (Airflow's sensor and trigger, Dagster's sensor):

- :func:`sensing_config`: the settings a sensing queue needs on top of its connection's
  (Kafka: read through the group from the beginning; MQTT: a persistent QoS 1 session that
  acknowledges nothing, so the messages it sees are redelivered to the ingest).
- :func:`plan_waiting` / :func:`wait_for_batch`: the next :class:`~sluice.batch.BatchSpec`
  once at least ``min_messages`` wait. Kafka counts the group's backlog at the broker; MQTT
  cannot see a backlog, so it counts what the session delivered to the sensing queue
  (at most the broker's in-flight window: 20 on a default mosquitto).
- :func:`plan_now`: one look from a connection's config (a sensing queue opened, planned
  on, closed), for a sensor's poke and for a scheduled ingest that plans its own batch.
- :func:`next_emission`: what a sensor that fires again and again (an Airflow
  ``AssetWatcher``, a Dagster sensor) emits next, from its :class:`~sluice.cursor.BatchCursor`.

The one sensing model
---------------------

The group's committed offsets are the truth of what was ingested; what a sensor emitted is
only what it *asked for*. A sensor keeps one batch in flight and remembers it (the
:class:`~sluice.cursor.BatchCursor`: the last batch, its attempt number, when it was
emitted, and where its ranges end). It plans every *new* batch from the committed offsets
(``[committed, end)`` per partition, cut to ``max_messages``), so a batch never starts after
an offset that no batch has written. What it does at each check, given what became of the
last batch's run:

- **Nothing emitted yet** (or the cursor is of another topic or group): emit the batch
  planned from the committed offsets once at least ``min_messages`` wait.
- **The run is in flight** (queued or running): emit nothing, however much arrives.
- **The run finished** (its offsets are committed): emit the next batch, planned from the
  committed offsets, once at least ``min_messages`` wait.
- **The run failed** and the committed offsets are still behind the batch's ends in some
  partition: emit the *same* batch again (same ranges, so the same ``batch_id``: the ingest
  finds and replaces its own output, never writes it twice) with the next attempt number.
  New messages wait for the batch after it. If the offsets show the batch landed after all
  (the run committed, then failed), the next batch is planned instead.

How a sensor knows the run state:

- Dagster's sensor sees its runs (queued, started, succeeded, failed, cancelled).
- Airflow's trigger cannot see DAG runs, so it reads the broker
  (:func:`~sluice.cursor.run_state_from_offsets`): the run *finished* when the group's
  committed offsets reached the batch's ends in every partition; until then it is *in
  flight* for ``rerun_after`` seconds after the emission (a lease), and *failed* once that
  lease ran out. The trigger checks every ``poll_interval``; its cursor lives in the watched
  asset's state store, so a triggerer restart keeps it (and the lease's start).
  ``rerun_after`` must exceed the longest ingest run, or a slow run's batch is emitted again
  while it runs; too long a lease only delays the retry of a failed run.

MQTT has no offsets: a batch is "drain the persistent session" and each plan is a new batch.
A run that fails leaves its messages unacknowledged in the session, so the next batch takes
them again; a sensor therefore never re-emits an MQTT batch after a failure, it plans the
next one. Airflow's trigger holds the session until ``min_messages`` wait in it and emits;
then it hands the session to the ingest and watches the topic with a client of its own,
emitting the session's next batch each time ``min_messages`` more have arrived, and takes the
session again to look at what is left in it once ``rerun_after`` seconds passed without an
emission. Dagster's sensor asks for one MQTT batch at a time (its run state is known).

While nothing is emitted, a sensor says so at a steady interval: ``waiting: N of M messages
on TOPIC`` (:func:`waiting_status`), or which batch is in flight.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from .batch import BatchSpec, plan_batch
from .cursor import BatchCursor, BatchRequest, RunState, run_state_from_offsets
from .queues.base import MessageQueue
from .queues.config import ConfigError
from .queues.uri import queue_from_config, source_from

__all__ = [
    "DEFAULT_RERUN_AFTER",
    "count_waiting",
    "extend_to_latest",
    "next_emission",
    "plan_now",
    "plan_waiting",
    "sensing_config",
    "wait_for_batch",
    "waiting_status",
]

#: Seconds after an emission until a watcher takes a batch whose offsets are still not
#: committed as failed, and emits it again (see the module docstring).
DEFAULT_RERUN_AFTER = 600.0


def sensing_config(kind: str, config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` with what a sensing queue of ``kind`` needs (see the module docstring).

    Kafka: ``from_beginning`` true unless set (a group that never committed starts at the
    beginning, so a sensor that opens a new queue on every poke still sees the backlog).
    A Kafka sensing queue never creates its topic (``options.create_topic`` false).
    MQTT: ``autocommit`` false and ``options.qos`` 1 unless set; a ``client_id`` is required
    (the persistent session the ingest drains).
    """
    values = dict(config)
    values["autocommit"] = False
    if kind == "kafka":
        values.setdefault("from_beginning", True)
        values["options.create_topic"] = False  # a misspelt topic is an error, not a new topic
    elif kind == "mqtt":
        values.setdefault("options.qos", 1)
        if not values.get("client_id"):
            raise ConfigError(
                "An MQTT batch needs a persistent session: set config key 'client_id' (in the "
                "connection's extra or the task's config) to a stable id of your choosing."
            )
    return values


def plan_waiting(
    queue: MessageQueue, min_messages: int = 1, max_messages: int | None = None
) -> BatchSpec | None:
    """The next batch of an opened Kafka or MQTT queue once ``min_messages`` wait, else None."""
    min_messages = max(1, min_messages)
    spec = plan_batch(queue, max_messages=max_messages, min_messages=min_messages)
    if spec is not None and spec.kind == "mqtt" and queue.read_message_count() < min_messages:
        return None
    return spec


def count_waiting(queue: MessageQueue) -> int:
    """Messages waiting on an opened Kafka queue (the group's backlog) or delivered to an MQTT
    sensing queue (see the module docstring), for a log line."""
    spec = plan_batch(queue)
    if spec is None or spec.kind != "kafka":
        return int(queue.read_message_count())
    return spec.message_count


def wait_for_batch(
    queue: MessageQueue,
    min_messages: int = 1,
    max_messages: int | None = None,
    wait_seconds: float = 0.0,
    check_every: float = 0.05,
) -> BatchSpec | None:
    """:func:`plan_waiting`, checked again for up to ``wait_seconds``: an MQTT session's queued
    messages arrive a moment after the queue opens."""
    deadline = time.monotonic() + wait_seconds
    while True:
        spec = plan_waiting(queue, min_messages, max_messages)
        if spec is not None or time.monotonic() >= deadline:
            return spec
        time.sleep(min(check_every, max(0.0, deadline - time.monotonic())))


def plan_now(
    kind: str,
    config: Mapping[str, Any],
    min_messages: int = 1,
    max_messages: int | None = None,
    wait_seconds: float = 0.0,
) -> tuple[BatchSpec | None, int]:
    """The batch waiting now on the queue of ``kind`` that ``config`` names, and how many
    messages wait (for a log line when too few do).

    Opens a queue with :func:`sensing_config`, plans with :func:`wait_for_batch` (MQTT: waits
    up to ``wait_seconds`` for the session's queued messages) and closes it: nothing is
    committed or acknowledged, so an MQTT session's messages go to the ingest's connection.
    Kafka plans from the group's committed offsets, so planning again after a failed ingest
    gives its messages again, never a range that starts after an unwritten message. A Kafka
    topic that does not exist raises :class:`~sluice.errors.TopicNotFoundError` (as
    ``sluice peek`` says), so a misspelt topic never looks like an empty one.
    """
    queue = queue_from_config(kind, sensing_config(kind, config))
    queue.open(None)
    try:
        spec = wait_for_batch(queue, min_messages, max_messages, wait_seconds)
        check_topic = getattr(queue, "check_topic", None)  # Kafka queues have one
        if spec is None and check_topic is not None:
            check_topic()  # before counting: a consumer's count may auto-create the topic
        count = count_waiting(queue) if spec is None else spec.message_count
    finally:
        queue.close(None)  # MQTT: unacknowledged messages stay in the session
    return spec, count


def extend_to_latest(
    spec: BatchSpec, source: str | Mapping[str, Any], max_messages: int | None = None
) -> BatchSpec:
    """A Kafka ``spec`` with the messages that arrived on its topic since it was planned (one
    plan of the group's backlog now, :meth:`~sluice.batch.BatchSpec.up_to`): a run taken
    from an event reads what waits when it runs, as Spark's ``availableNow`` does, instead
    of leaving what came while it was queued and started to the next run. ``source`` is the
    ingest's (a URI or config keys); the spec gives the topic and group. An MQTT spec is
    returned as it is: its ingest drains the session anyway."""
    if spec.kind != "kafka":
        return spec
    scheme, config = source_from(source, spec.kind)
    planning = {**config, "topic": spec.topic, "group_id": spec.group_id}
    queue = queue_from_config(scheme, sensing_config("kafka", planning))
    queue.open(None)
    try:
        waiting = plan_batch(queue)
    finally:
        queue.close(None)
    return spec.up_to(waiting, max_messages)


def waiting_status(count: int, min_messages: int, topic: str) -> str:
    """The line a waiting sensor logs: ``waiting: N of M messages on TOPIC``."""
    return f"waiting: {count} of {max(1, min_messages)} messages on {topic}"


def next_emission(
    cursor: BatchCursor,
    waiting: BatchSpec | None,
    now: float,
    rerun_after: float = DEFAULT_RERUN_AFTER,
    min_messages: int = 1,
    max_messages: int | None = None,
    topic: str | None = None,
) -> tuple[BatchCursor, BatchRequest | str]:
    """What a watcher that cannot see its runs emits now (the rules are in the module
    docstring), and its cursor afterwards.

    ``waiting`` is what the broker holds: Kafka, the group's whole backlog (planned from the
    committed offsets, not cut to a size; None when empty); MQTT, the session's next batch
    when at least ``min_messages`` wait, else None. Returns the cursor unchanged and a reason
    (for the log, :func:`waiting_status` when too few wait on ``topic``) when nothing is
    emitted.
    """
    state = run_state_from_offsets(cursor, waiting, now, rerun_after)
    if state is RunState.ACTIVE and cursor.last is not None:
        age = max(0.0, now - (cursor.emitted_at or now))
        return cursor, (
            f"waiting: batch {cursor.last.batch_id} (attempt {cursor.attempt}, "
            f"{cursor.last.message_count} message(s)) emitted {age:.0f} s ago is not committed "
            f"yet; it is emitted again if it is not committed within {rerun_after - age:.0f} s"
        )
    decision = cursor.next_request(waiting, state, max_messages, min_messages)
    if isinstance(decision, str):
        if waiting is not None and waiting.kind == "kafka":
            decision = waiting_status(waiting.message_count, min_messages, waiting.topic)
        elif waiting is None and topic is not None:
            decision = waiting_status(0, min_messages, topic)
        return cursor, decision
    return cursor.advance(decision, now), decision
