"""kafka-python 3.0.12 can lose a finished join (sluice.kafka.subscription.mend_lost_join and
finish_answered_joins, which tests/integration/kafka/test_group_join.py shows on each broker)."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

from sluice.kafka.subscription import mend_lost_join


@dataclass
class Task:
    is_done: bool


@dataclass
class Coordinator:
    """The state kafka-python's ConsumerCoordinator is left in, as far as the mend reads it."""

    rejoining: bool
    _join_task: Task | None
    wants_rejoin: bool = False
    group_id: str = "g"
    asked: list[bool] = field(default_factory=list)

    def need_rejoin(self) -> bool:
        return self.wants_rejoin

    def request_rejoin(self) -> None:
        self.asked.append(True)


@dataclass
class Consumer:
    _coordinator: Any


def test_a_join_left_unfinished_with_its_answer_in_hand_is_joined_again() -> None:
    # the SyncGroup answer came (task done), the poll timed out, and nothing asks to rejoin
    for task in (Task(is_done=True), None):
        coordinator = Coordinator(rejoining=True, _join_task=task)
        assert mend_lost_join(Consumer(coordinator)) is True
        assert coordinator.asked == [True]


def test_a_stable_member_or_a_join_in_flight_is_left_alone() -> None:
    cases = [
        Coordinator(rejoining=False, _join_task=None),  # stable
        Coordinator(rejoining=True, _join_task=Task(is_done=False)),  # JoinGroup in flight
        Coordinator(rejoining=True, _join_task=Task(is_done=True), wants_rejoin=True),  # retried
    ]
    for coordinator in cases:
        assert mend_lost_join(Consumer(coordinator)) is False
        assert coordinator.asked == []
    assert mend_lost_join(Consumer(None)) is False  # no group


def test_kafka_python_still_has_the_state_the_mend_reads() -> None:
    """When kafka-python renames these, the mend must be revisited (or dropped if fixed)."""
    from kafka.coordinator.base import BaseCoordinator

    for name in (
        "need_rejoin",
        "request_rejoin",
        "join_group_async",
        "_enable_heartbeat",
        "_on_join_complete_async",
        "_do_join_and_sync_async",
    ):
        assert hasattr(BaseCoordinator, name), name
    source = inspect.getsource(BaseCoordinator)
    for state in ("self._join_task", "self.rejoining", "self.rejoin_needed", "self._lock"):
        assert state in source, state
