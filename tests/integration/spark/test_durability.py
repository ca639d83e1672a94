"""Durable before commit (invariant I9): what a published batch stands on is on stable
storage before the offsets that vouch for it are committed.

A power loss cannot be made on demand and a SIGKILL keeps the page cache, so these tests
watch the ``fsync`` calls themselves: the driver's, in-process, against the moment the
offsets are committed; and a writing task's, by running the task's function in-process."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import sluice.spark.kafka_source as kafka_source
from sluice.spark import ingest
from sluice.spark.fingerprints import message_fingerprint
from sluice.spark.records import RAW_SCHEMA
from sluice.spark.writing import _task_writer

from .conftest import SCHEMA, KafkaTopic, reading


@pytest.fixture
def synced(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The paths this process ``fsync``s, in order ("COMMIT" where offsets are committed)."""
    seen: list[str] = []
    real_fsync = os.fsync

    def fsync(handle: int) -> None:
        seen.append(os.readlink(f"/proc/self/fd/{handle}"))
        real_fsync(handle)

    monkeypatch.setattr(os, "fsync", fsync)
    commit: Callable[..., None] = kafka_source.commit_offsets

    def commit_offsets(*args: Any) -> None:
        seen.append("COMMIT")
        commit(*args)

    monkeypatch.setattr(kafka_source, "commit_offsets", commit_offsets)
    yield seen


def test_a_parquet_batch_is_synced_before_its_offsets_are_committed(
    spark: Any, topic: KafkaTopic, tmp_path: Path, synced: list[str]
) -> None:
    topic.send([reading(i) for i in range(30)] + [b"not json"])
    spec = topic.plan()

    ingest(spark, spec, tmp_path, source=topic.source, schema=SCHEMA)

    assert "COMMIT" in synced
    before = set(synced[: synced.index("COMMIT")])
    batch = tmp_path / f"batch_id={spec.batch_id}"
    stream = next((tmp_path / "_sluice" / "streams").glob("*.json"))
    staged = tmp_path / "_sluice" / "staging"
    expected = {
        str(tmp_path),  # the rename that published the batch
        str(stream.parent),  # the stream state's directory entry
        str(tmp_path / "_sluice" / "intents"),
    }
    assert expected <= before, sorted(expected - before)
    state = str(stream.parent / f".{stream.name}.")  # synced, then renamed into place
    assert any(p.startswith(state) for p in before), "the stream's state is synced"
    record = {p for p in before if p.endswith("_sluice_batch.json")}
    assert record and all(p.startswith(str(staged)) for p in record), "synced before the rename"
    assert list(batch.glob("*.parquet")), "the batch was published"
    quarantine_dir = {p for p in before if p.endswith("/_quarantine")}
    assert quarantine_dir, "the quarantine directory's entries are synced too"


def test_a_writing_task_syncs_its_files_before_it_reports_them(
    tmp_path: Path, synced: list[str]
) -> None:
    attempts = {"good": str(tmp_path / "good"), "bad": str(tmp_path / "bad")}
    task = _task_writer(["key", "value"], ["key", "reason"], attempts, message_fingerprint)
    rows = {name: [None] for name in RAW_SCHEMA.names} | {
        "value": [b"{}"],
        "partition": [0],
        "offset": [7],
        "reason": [None],
    }
    schema = RAW_SCHEMA.append(pa.field("reason", pa.string()))
    batch = pa.RecordBatch.from_pydict(rows, schema=schema)

    (report,) = list(task(iter([batch])))

    written = [r for r in report.to_pylist() if r["output"] == "good"]
    assert written and written[0]["rows"] == 1
    path = f"{attempts['good']}/{written[0]['file']}"
    assert synced == [path], "the file is synced once, before the task returns"
    offsets = next(r for r in report.to_pylist() if r["output"] is None)["offsets"]
    assert '"0": {"intervals": [[7, 8]], "rows": 1' in offsets
