"""What a reader that does not go through Sluice sees of a Parquet dataset on S3: DuckDB (its
httpfs extension, from its wheel) listing ``batch_id=*/*.parquet`` and
``batch_id=*/_quarantine/*.parquet`` in a loop, as Trino, pandas or a user's query would,
while ingests are SIGKILLed at every step and run again. It must never see part of a
committed batch, nor an object of a run that did not commit."""

from __future__ import annotations

import glob
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sluice.audit import audit
from sluice.batch import plan_batch
from sluice.spark import ingest
from sluice.spark.failpoints import OBJECT_STORE_FAILPOINTS
from sluice.spark.sinks import open_sink
from sluice.spark.sinks.parquet_s3 import S3ParquetSink
from sluice.testing.plugin import S3Bucket

from ..spark.conftest import SCHEMA, KafkaTopic, reading
from ..spark.crashes import assert_exactly_once, run_child
from ..spark.test_crash_matrix import BAD, KAFKA_POINTS

Files = dict[str, int]  # object (s3://...) -> rows
#: Seconds between two scans (the machine's two cores also run Spark and the S3 server).
PACE = 0.2


@dataclass(frozen=True)
class Scan:
    """One reading of the prefix: the good rows' objects, then the quarantine's."""

    data: Files
    quarantine: Files


def duckdb_for(bucket: S3Bucket) -> Any:
    """A DuckDB connection that reads the bucket's server directly (not through the test's
    fault proxy)."""
    import duckdb
    import duckdb_ext  # type: ignore[import-not-found]

    root = Path(duckdb_ext.__path__[0]) / "extensions" / f"v{duckdb.__version__}"
    (extension,) = glob.glob(str(root / "*" / "httpfs.*"))
    server = bucket.server
    connection = duckdb.connect()
    connection.execute(f"LOAD '{extension}'")
    connection.execute(
        f"CREATE SECRET lake (TYPE s3, KEY_ID '{server.access_key}', SECRET "
        f"'{server.secret_key}', REGION '{server.region}', ENDPOINT "
        f"'{server.host}:{server.port}', URL_STYLE 'path', USE_SSL false)"
    )
    return connection


class PlainReader:
    """DuckDB reading the dataset at ``root`` (``s3://bucket/prefix``) over and over, in a
    thread, until stopped."""

    def __init__(self, bucket: S3Bucket, root: str) -> None:
        self.connection = duckdb_for(bucket)
        self.root = root
        self.scans: list[Scan] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._loop, name="plain reader", daemon=True)

    def _rows(self, pattern: str) -> Files:
        import duckdb

        query = (
            f"select filename, count(*) from read_parquet('{self.root}/{pattern}', "
            "filename=true) group by filename"
        )
        try:
            return dict(self.connection.execute(query).fetchall())
        except duckdb.IOException as exc:
            if "No files found" in str(exc):
                return {}
            raise

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                scan = Scan(
                    self._rows("batch_id=*/*.parquet"),
                    self._rows("batch_id=*/_quarantine/*.parquet"),
                )
            except Exception as exc:
                self.errors.append(f"{type(exc).__name__}: {exc}")
                scan = None
            with self._changed:
                if scan is not None:
                    self.scans.append(scan)
                self._changed.notify_all()
            self._stop.wait(PACE)

    def __enter__(self) -> PlainReader:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)

    def wait_for_scans(self, more: int, timeout: float = 60.0) -> None:
        """Wait until ``more`` whole scans have begun and ended from now on."""
        deadline = time.monotonic() + timeout
        with self._changed:
            target = len(self.scans) + more + 1  # the one under way may have begun earlier
            while len(self.scans) < target:
                left = deadline - time.monotonic()
                assert left > 0, f"the reader made no progress: {self.errors[-3:]}"
                self._changed.wait(left)


def batch_of(name: str) -> str:
    return name.split("/batch_id=", 1)[1].split("/", 1)[0]


def check_scan(scan: Scan, sink: S3ParquetSink, root: str) -> list[str]:
    """What is wrong with ``scan``: an object no batch's manifest lists (a run that did not
    commit), or a batch not whole (some of its objects, or rows other than its record's)."""
    wrong = []
    for kind, seen, count in (
        ("data", scan.data, "written"),
        ("quarantine", scan.quarantine, "quarantined"),
    ):
        batches: dict[str, Files] = {}
        for name, rows in seen.items():
            batches.setdefault(batch_of(name), {})[name] = rows
        for batch, found in batches.items():
            manifest = sink._manifest(batch)
            if manifest is None:
                wrong.append(f"{kind} of batch {batch}, which never committed: {found}")
                continue
            inside = "" if kind == "data" else "_quarantine/"
            listed = {f"{root}/batch_id={batch}/{inside}{n}" for n in manifest["files"][kind]}
            if set(found) != listed:
                wrong.append(f"{kind} of batch {batch}: {sorted(found)}, committed {listed}")
            elif sum(found.values()) != manifest["counts"][count]:
                wrong.append(f"{kind} of batch {batch}: {sum(found.values())} rows of {count}")
            if (
                kind == "data"
                and manifest["counts"]["quarantined"]
                and batch not in {batch_of(n) for n in scan.quarantine}
            ):
                wrong.append(f"the good rows of batch {batch} before its quarantined ones")
    return wrong


#: Every failpoint of a Kafka ingest into the Parquet sink on S3.
POINTS = [*KAFKA_POINTS, *OBJECT_STORE_FAILPOINTS]
MODES = ("executors", "driver")


@pytest.mark.timeout(900)
def test_a_plain_reader_never_sees_part_of_a_batch_nor_an_uncommitted_one(
    spark: Any, topic: KafkaTopic, s3_bucket: S3Bucket
) -> None:
    """Each round an ingest is killed at one failpoint (every one in turn), the reader reads
    the prefix twice while the crash's leftovers are there, and the rerun finishes the batch.
    Every other round the writing tasks write a file per Kafka partition (``executors``),
    which the sink merges into one object (before, a batch's files were copied in one by one
    after its commit); the others write one file (``driver``), which the server copies."""
    sink = s3_bucket.uri("lake")
    options = {"source": topic.source, "schema": SCHEMA, "dead_letter": True}
    sent = 0
    with PlainReader(s3_bucket, sink) as reader:
        for number, point in enumerate(POINTS):
            options["mode"] = MODES[number % 2]
            topic.send([reading(sent + i) for i in range(30)] + BAD)
            sent += 30
            spec = topic.plan()
            code, stderr = run_child(
                spark, {"spec": spec.to_dict(), "sink": sink, **options}, point
            )
            assert code == -9, f"the ingest did not die at {point}: {stderr[-2000:]}"
            reader.wait_for_scans(2)
            ingest(spark, spec, sink, **options)
            reader.wait_for_scans(1)

    opened = open_sink(sink)
    assert isinstance(opened, S3ParquetSink)
    wrong = [w for scan in reader.scans for w in check_scan(scan, opened, sink)]
    assert not wrong, "\n".join(wrong[:20])
    assert not reader.errors, reader.errors[:5]
    batches = {r.batch_id for r in opened.records()}
    assert len(batches) == len(POINTS)
    seen = {batch_of(n) for scan in reader.scans for n in scan.data}
    assert seen == batches, "the reader saw every batch"
    assert_exactly_once(audit(sink, topic.source), sent + len(BAD) * len(POINTS))
    assert plan_batch(topic.queue) is None
