"""The one-job writer of good and quarantined rows (sluice.spark.writing) on a real Spark."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sluice.spark.writing import ATTEMPTS_DIR, BATCH_BYTES, WriteTargets, write_outcomes


def frame(spark: Any, rows: list[tuple[int, str | None]], partitions: int = 2) -> Any:
    data = [(n, f"v{n}".encode(), reason) for n, reason in rows]
    schema = "n INT, value BINARY, reason STRING"
    return spark.createDataFrame(data, schema).repartition(partitions)


def read_rows(directory: Path) -> list[dict[str, Any]]:
    files = sorted(directory.glob("*.parquet"))
    return [row for f in files for row in pq.read_table(f).to_pylist()]


def test_good_and_bad_rows_land_in_their_directories_with_their_own_columns(
    spark: Any, tmp_path: Path
) -> None:
    rows = [(n, "bad record" if n % 10 == 0 else None) for n in range(100)]
    targets = WriteTargets(str(tmp_path / "data"), str(tmp_path / "quarantine"))

    counts = write_outcomes(frame(spark, rows), ["n", "value"], ["n", "reason"], targets)

    assert (counts.good, counts.bad) == (90, 10)
    assert counts.value_bytes == sum(len(f"v{n}") for n, _ in rows)
    good, bad = read_rows(tmp_path / "data"), read_rows(tmp_path / "quarantine")
    assert sorted(r["n"] for r in good) == [n for n in range(100) if n % 10]
    assert set(good[0]) == {"n", "value"}
    assert sorted(r["n"] for r in bad) == list(range(0, 100, 10))
    assert {r["reason"] for r in bad} == {"bad record"}
    assert len(list((tmp_path / "data").glob("*.parquet"))) == 2  # one file per task
    assert not (tmp_path / "data" / ATTEMPTS_DIR).exists()


def test_large_messages_reach_the_writers_in_smaller_batches_and_the_session_is_left_as_it_was(
    spark: Any, tmp_path: Path
) -> None:
    """Each Arrow batch a writing task gets becomes one row group of its file, so the row groups
    show the batch size Spark used."""
    rows_setting = "spark.sql.execution.arrow.maxRecordsPerBatch"
    bytes_setting = "spark.sql.execution.arrow.maxBytesPerBatch"
    spark.conf.set(rows_setting, "5000")
    spark.conf.unset(bytes_setting)
    before = spark.conf.get(bytes_setting)
    targets = WriteTargets(str(tmp_path / "data"), str(tmp_path / "quarantine"))
    largest = BATCH_BYTES // 2 // 10  # ten such messages fill a batch
    try:
        counts = write_outcomes(
            frame(spark, [(n, None) for n in range(100)], partitions=1),
            ["n", "value"],
            ["n", "reason"],
            targets,
            largest,
        )
        assert counts.good == 100
        [written] = (tmp_path / "data").glob("*.parquet")
        groups = pq.ParquetFile(written).metadata.num_row_groups
        assert 10 <= groups <= 12, f"batches of about 9 rows expected, got {groups} row groups"
        assert spark.conf.get(rows_setting) == "5000"
        assert spark.conf.get(bytes_setting) == before
    finally:
        spark.conf.unset(rows_setting)


def test_a_chunk_without_bad_rows_writes_no_quarantine_file(spark: Any, tmp_path: Path) -> None:
    targets = WriteTargets(str(tmp_path / "data"), str(tmp_path / "quarantine"))

    counts = write_outcomes(
        frame(spark, [(n, None) for n in range(20)]), ["n"], ["n", "reason"], targets
    )

    assert (counts.good, counts.bad) == (20, 0)
    assert not list(tmp_path.glob("quarantine/**/*.parquet"))


def test_files_of_an_attempt_that_returned_nothing_are_never_published(
    spark: Any, tmp_path: Path
) -> None:
    """A failed or speculative task attempt leaves its file in _attempts without returning it
    to the driver (local Spark retries no task, so the stray file is put there by hand)."""
    stray = tmp_path / "data" / ATTEMPTS_DIR / "part-failed-attempt.parquet"
    stray.parent.mkdir(parents=True)
    pq.write_table(pa.table({"n": [1, 2, 3], "value": [b"x", b"y", b"z"]}), stray)
    targets = WriteTargets(str(tmp_path / "data"), str(tmp_path / "quarantine"))

    counts = write_outcomes(
        frame(spark, [(n, None) for n in range(10)]), ["n", "value"], [], targets
    )

    assert counts.good == 10
    assert sorted(r["n"] for r in read_rows(tmp_path / "data")) == list(range(10))
    assert not stray.parent.exists()


def test_a_failing_job_publishes_nothing_and_leaves_no_attempts(spark: Any, tmp_path: Path) -> None:
    def explode(batches: Any) -> Any:
        for batch in batches:
            yield batch
            raise RuntimeError("the task failed after its first batch")

    failing = frame(spark, [(n, None) for n in range(100)], partitions=1)
    failing = failing.mapInArrow(explode, failing.schema)
    targets = WriteTargets(str(tmp_path / "data"), str(tmp_path / "quarantine"))

    with pytest.raises(Exception, match="the task failed after its first batch"):
        write_outcomes(failing, ["n", "value"], ["n", "reason"], targets)

    assert not list(tmp_path.rglob("*.parquet"))


def test_a_session_builds_the_classification_of_equal_rules_once(spark: Any) -> None:
    """Building the columns takes about 0.1 s of round trips to the JVM; a long-lived
    session's later ingests of the same rules reuse them, other rules get their own."""
    from sluice.spark.classify import Classification, Rules, parse_schema
    from sluice.spark.records import RAW_SCHEMA_DDL

    first = Classification.for_session(spark, Rules(parse_schema("a STRING, b DOUBLE")))
    again = Classification.for_session(spark, Rules(parse_schema("a STRING, b DOUBLE")))
    other = Classification.for_session(spark, Rules(parse_schema("a STRING, b BIGINT")))

    assert again is first
    assert other is not first
    raw = spark.createDataFrame(
        [(None, b'{"a": "y", "b": 1.5}', "t", 0, 7, None, [], None)], RAW_SCHEMA_DDL
    )
    assert first.apply(raw).first()["reason"] is None
    assert "'b' is not bigint" in other.apply(raw).first()["reason"]


def test_the_driver_writes_a_small_batch_as_one_task_would(spark: Any, tmp_path: Path) -> None:
    """``on_driver``: Spark classifies, the driver writes: the same rows and counts as Spark's
    tasks write, in one file per output instead of one per task."""
    rows = [(n, "bad record" if n % 10 == 0 else None) for n in range(100)]
    written = {}
    for on_driver in (False, True):
        root = tmp_path / str(on_driver)
        targets = WriteTargets(str(root / "data"), str(root / "quarantine"))
        counts = write_outcomes(
            frame(spark, rows), ["n", "value"], ["n", "reason"], targets, on_driver=on_driver
        )
        good, bad = read_rows(root / "data"), read_rows(root / "quarantine")
        written[on_driver] = (counts, sorted(r["n"] for r in good), sorted(r["n"] for r in bad))
        files = len(list((root / "data").glob("*.parquet")))
        assert files == (1 if on_driver else 2), f"on_driver={on_driver}: {files} files"
        assert not (root / "data" / ATTEMPTS_DIR).exists()
    assert written[True] == written[False]
    assert (written[True][0].good, written[True][0].bad) == (90, 10)
