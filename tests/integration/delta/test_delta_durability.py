"""Durable before commit (invariant I9) on a Delta sink: the Delta commit's log entry, the log
directory, the stream state the commit names and the quarantine commit are synced before the
Kafka offsets are committed (delta-rs renames a commit into place without syncing it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sluice.spark import ingest

from ..spark.conftest import SCHEMA, KafkaTopic, reading
from ..spark.test_durability import synced

__all__ = ["synced"]  # the fixture: the paths fsynced, in order, and where offsets commit


def test_a_delta_batch_is_synced_before_its_offsets_are_committed(
    spark: Any, topic: KafkaTopic, tmp_path: Path, synced: list[str]
) -> None:
    table = tmp_path / "t"
    topic.send([reading(i) for i in range(30)] + [b"not json"])
    ingest(spark, topic.plan(), f"delta://{table}", source=topic.source, schema=SCHEMA)

    assert "COMMIT" in synced
    before = synced[: synced.index("COMMIT")]
    logs = sorted((table / "_delta_log").glob("*.json"))
    quarantine_logs = sorted((table / "_quarantine" / "_delta_log").glob("*.json"))
    expected = {str(logs[-1]), str(table / "_delta_log"), str(quarantine_logs[-1])}
    assert expected <= set(before), sorted(expected - set(before))
    (state,) = (table / "_sluice" / "streams").glob("*/*.json")
    synced_state = [i for i, p in enumerate(before) if p.startswith(f"{state.parent}/.")]
    assert synced_state, "the stream's state is synced"
    assert synced_state[0] < before.index(str(logs[-1])), "the state is synced before the commit"
