"""sluice.sensing: settings of a sensing queue, and emitted-range bookkeeping."""

from __future__ import annotations

import pytest

from sluice.batch import BatchSpec, OffsetRange
from sluice.queues.config import ConfigError
from sluice.sensing import EmittedRanges, sensing_config


def kafka(*ranges: tuple[int, int, int], topic: str = "t", group: str = "g") -> BatchSpec:
    return BatchSpec("kafka", topic, group_id=group, ranges=tuple(OffsetRange(*r) for r in ranges))


def test_kafka_sensing_reads_the_backlog_and_commits_nothing() -> None:
    assert sensing_config("kafka", {"group_id": "g"}) == {
        "group_id": "g",
        "autocommit": False,
        "from_beginning": True,
    }
    assert sensing_config("kafka", {"from_beginning": False})["from_beginning"] is False


def test_mqtt_sensing_needs_a_session_and_acknowledges_nothing() -> None:
    with pytest.raises(ConfigError, match="'client_id'"):
        sensing_config("mqtt", {"topic": "a/#"})
    assert sensing_config("mqtt", {"client_id": "c"}) == {
        "client_id": "c",
        "autocommit": False,
        "options.qos": 1,
    }


def test_emitted_ranges_are_never_emitted_again() -> None:
    emitted = EmittedRanges()
    first = emitted.fresh(kafka((0, 0, 5), (1, 0, 3)))
    assert first == kafka((0, 0, 5), (1, 0, 3))
    emitted.record(first)
    # nothing committed yet, nothing new: nothing to emit
    assert emitted.fresh(kafka((0, 0, 5), (1, 0, 3))) is None
    # new messages in partition 1 only
    assert emitted.fresh(kafka((0, 0, 5), (1, 0, 7))) == kafka((1, 3, 7))
    # after the ingest committed partition 0 up to 5
    assert emitted.fresh(kafka((0, 5, 6), (1, 0, 3))) == kafka((0, 5, 6))


def test_min_and_max_apply_to_what_is_new() -> None:
    emitted = EmittedRanges()
    emitted.record(kafka((0, 0, 10)))
    assert emitted.fresh(kafka((0, 0, 12)), min_messages=3) is None
    assert emitted.fresh(kafka((0, 0, 20), (1, 0, 10)), max_messages=6) == kafka(
        (0, 10, 13), (1, 0, 3)
    )


def test_a_recreated_topic_or_another_group_starts_afresh() -> None:
    emitted = EmittedRanges()
    emitted.record(kafka((0, 0, 10)))
    assert emitted.fresh(kafka((0, 0, 4))) == kafka((0, 0, 4))  # the log now ends before 10
    assert emitted.fresh(kafka((0, 0, 10), group="other")) == kafka((0, 0, 10), group="other")


def test_state_survives_json() -> None:
    emitted = EmittedRanges()
    emitted.record(kafka((0, 0, 10), (2, 4, 8)))
    again = EmittedRanges.from_json(emitted.to_json())
    assert again == emitted
    assert EmittedRanges.from_json(None) == EmittedRanges()


def test_mqtt_specs_pass_through() -> None:
    spec = BatchSpec("mqtt", "a/#", client_id="c", max_messages=5)
    emitted = EmittedRanges()
    emitted.record(spec)
    assert emitted.fresh(spec) == spec
