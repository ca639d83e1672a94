"""BatchSpec and OffsetRange: stable ids, JSON round trips, and evenly limited ranges."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from sluice.batch import BatchSpec, OffsetRange, limit_ranges

SPEC = BatchSpec(
    "kafka", "orders", group_id="g", ranges=(OffsetRange(1, 5, 9), OffsetRange(0, 0, 3))
)


def test_batch_id_depends_on_content_not_on_order_or_process() -> None:
    reordered = BatchSpec(
        "kafka", "orders", group_id="g", ranges=(OffsetRange(0, 0, 3), OffsetRange(1, 5, 9))
    )
    assert SPEC.batch_id == reordered.batch_id
    other = BatchSpec(
        "kafka", "orders", group_id="g", ranges=(OffsetRange(0, 0, 4), OffsetRange(1, 5, 9))
    )
    assert SPEC.batch_id != other.batch_id
    code = (
        "from sluice.batch import BatchSpec, OffsetRange as R; "
        "print(BatchSpec('kafka', 'orders', group_id='g', ranges=(R(1,5,9), R(0,0,3))).batch_id)"
    )
    assert subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip() == (SPEC.batch_id)


def test_json_round_trip() -> None:
    text = SPEC.to_json()
    assert json.loads(text)["batch_id"] == SPEC.batch_id
    assert BatchSpec.from_json(text) == BatchSpec(
        "kafka", "orders", group_id="g", ranges=tuple(sorted(SPEC.ranges))
    )
    assert SPEC.message_count == 7


def test_an_edited_spec_is_rejected() -> None:
    doc = SPEC.to_dict()
    doc["ranges"][0]["end"] = 100
    with pytest.raises(ValueError, match="does not match its content"):
        BatchSpec.from_dict(doc)


@pytest.mark.parametrize(
    ("doc", "error"),
    [
        ({"kind": "amqp", "topic": "t"}, "kind must be 'kafka' or 'mqtt'"),
        ({"kind": "kafka", "topic": "t", "partitions": 3}, "unknown fields: partitions"),
        (
            {"kind": "kafka", "topic": "t", "ranges": [{"partition": 0, "start": 5, "end": 2}]},
            "invalid offset range",
        ),
    ],
)
def test_bad_specs_say_what_is_wrong(doc: dict[str, object], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        BatchSpec.from_dict(doc)


def test_mqtt_spec() -> None:
    spec = BatchSpec("mqtt", "plant/+/temp", client_id="ingest-1", max_messages=500)
    assert BatchSpec.from_json(spec.to_json()) == spec
    assert spec.message_count == 500


def test_limit_shares_the_budget_evenly_between_partitions() -> None:
    ranges = [OffsetRange(0, 0, 100), OffsetRange(1, 10, 12), OffsetRange(2, 0, 100)]
    limited = limit_ranges(ranges, 50)
    assert sum(r.count for r in limited) == 50
    assert {r.partition: r.count for r in limited} == {0: 24, 1: 2, 2: 24}
    assert all(r.start == original.start for r, original in zip(limited, ranges, strict=True))
    assert limit_ranges(ranges, 1000) == ranges
    assert limit_ranges(ranges, 0) == []


def _kafka(*ranges: tuple[int, int, int], topic_id: str | None = None) -> BatchSpec:
    return BatchSpec(
        "kafka",
        "orders",
        group_id="g",
        ranges=tuple(OffsetRange(*r) for r in ranges),
        topic_id=topic_id,
    )


def test_up_to_takes_what_arrived_since_the_plan() -> None:
    planned = _kafka((0, 0, 3), (1, 5, 9))
    # the backlog now: partition 0 grew to 7, partition 1 to 12, partition 2 appeared
    latest = planned.up_to(_kafka((0, 0, 7), (1, 5, 12), (2, 0, 4)))
    assert latest.ranges == (OffsetRange(0, 0, 7), OffsetRange(1, 5, 12), OffsetRange(2, 0, 4))
    assert latest.batch_id != planned.batch_id
    assert latest.message_count == 7 + 7 + 4


def test_up_to_grows_a_batch_to_max_messages_and_never_cuts_it() -> None:
    planned = _kafka((0, 0, 3), (1, 5, 9))  # 7 messages
    latest = planned.up_to(_kafka((0, 0, 100), (1, 5, 100)), max_messages=11)
    assert latest.ranges == (OffsetRange(0, 0, 5), OffsetRange(1, 5, 11))
    assert planned.up_to(_kafka((0, 0, 100)), max_messages=5) == planned  # already above


@pytest.mark.parametrize(
    "waiting",
    [
        None,  # nothing waits (the planned batch was committed by another run)
        _kafka((0, 0, 3), (1, 5, 9)),  # nothing new
        BatchSpec("kafka", "orders", group_id="other", ranges=(OffsetRange(0, 0, 9),)),
        BatchSpec("kafka", "payments", group_id="g", ranges=(OffsetRange(0, 0, 9),)),
        _kafka((0, 0, 9), topic_id="new-id"),  # the topic was recreated since
        _kafka((0, 4, 9), (1, 10, 12)),  # committed past the batch's ends: another run went on
    ],
)
def test_up_to_keeps_the_batch_when_nothing_newer_belongs_to_it(waiting: BatchSpec | None) -> None:
    planned = _kafka((0, 0, 3), (1, 5, 9), topic_id="old-id")
    assert planned.up_to(waiting) == planned


def test_up_to_leaves_an_mqtt_batch_alone() -> None:
    mqtt = BatchSpec("mqtt", "a/#", client_id="c", max_messages=5)
    assert mqtt.up_to(_kafka((0, 0, 9))) == mqtt
