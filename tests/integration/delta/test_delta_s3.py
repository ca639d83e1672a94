"""The Delta sink on S3 without Spark (the batches go through the sink's publish path,
``sluice.testing.batches``): on the tests' S3 server (SeaweedFS) and on a second S3
implementation (moto's server), two runs of a stream at once, a Delta commit whose answer is
lost, ``sluice compact`` and ``sluice expire`` beside a live run, the audit; and the stores
and settings the sink refuses, each with what to do."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from sluice.audit import audit
from sluice.batch import BatchSpec
from sluice.maintenance import compact, expire
from sluice.queues.config import ConfigError
from sluice.spark.failpoints import armed
from sluice.spark.sinks import ConcurrentIngestError, StreamKey, open_sink
from sluice.spark.sinks.delta import DeltaSink, app_id
from sluice.testing.batches import publish_rows
from sluice.testing.plugin import S3Bucket

from ..spark.test_compaction import mqtt_rows, small_mqtt_sink
from .conftest import DeltaPlace
from .test_ingest_delta import commits

S3_PLACES = ["seaweedfs", "moto"]


def spec(n: int, client: str = "maintenance") -> BatchSpec:
    return BatchSpec("mqtt", "sensors/#", client_id=client, max_messages=10, sequence=n)


@pytest.mark.parametrize("place", S3_PLACES)
def test_batches_maintenance_and_the_audit_on_s3(
    place: str, delta_place: Callable[[str], DeltaPlace]
) -> None:
    where = delta_place(place)
    location = where.sink("t")
    specs = small_mqtt_sink(location)
    stream = StreamKey.of(specs[0])
    assert (where.table("t").transaction_version(app_id(stream)), len(commits(where.uri("t")))) == (
        4,
        4,
    )
    compacted = compact(location, "1MB", min_files=2)
    assert compacted.tables["table"] == {"before": 4, "after": 1}, compacted.lines()
    # a file in no commit, written while a run of another stream holds its lease: that run's
    # (kept while it runs), or a crashed run's once it has ended
    orphan = "t/sluice/crashed-0000000000/0123456789ab/part-0.parquet"
    assert where.bucket is not None
    later = time.time() + 8 * 86400
    with open_sink(location).exclusive(StreamKey.of(spec(0, "live"))):
        where.bucket.client().put_object(Bucket=where.bucket.name, Key=orphan, Body=b"PAR1")
        kept = expire(location, now=later)
    assert kept.orphans_deleted == 0 and kept.kept_young == 1, kept.lines()
    expired = expire(location, now=later)
    assert expired.orphans_deleted == 1, expired.lines()
    assert orphan not in where.bucket.keys("t/sluice/")

    report = audit(location)
    assert report.ok, "\n".join(report.lines())
    assert (report.streams[0].messages, report.streams[0].batches) == (18, 4)
    small_mqtt_sink(location, 1, first=4)  # the next batch lands once
    assert DeltaSink(location).state(stream).batches == 5
    report = audit(location)
    assert report.ok and report.streams[0].messages == 23, "\n".join(report.lines())


@pytest.mark.parametrize("place", S3_PLACES)
def test_a_second_run_of_a_stream_on_s3_is_refused_and_touches_nothing(
    place: str, delta_place: Callable[[str], DeltaPlace]
) -> None:
    where = delta_place(place)
    location = where.sink("t")
    small_mqtt_sink(location, 1)
    stream = StreamKey.of(spec(1))
    first, second = DeltaSink(location), DeltaSink(location)
    with first.exclusive(stream):
        with pytest.raises(ConcurrentIngestError, match=r"lease s3://.*/t/_sluice/runs/"):
            publish_rows(second, spec(1), *mqtt_rows(1))
        # the first run goes on and publishes; the refused one left nothing
        staging = first.stage(spec(1).batch_id)
        assert not [k for k in where.files("t", "sluice") if spec(1).batch_id[:8] in k]
        first.discard(staging)
    publish_rows(first, spec(1), *mqtt_rows(1))
    report = audit(location)
    assert report.ok and report.streams[0].batches == 2, "\n".join(report.lines())


def test_a_state_object_another_run_replaced_before_the_commit_is_the_committers_again(
    delta_place: Callable[[str], DeltaPlace], caplog: pytest.LogCaptureFixture
) -> None:
    """A run paused past its lease, resumed, writes the same next state object as the run that
    holds the stream now, between that run's write and its Delta commit: the log names the
    committing run, whose state the object holds again."""
    where = delta_place("seaweedfs")
    location = where.sink("t")
    small_mqtt_sink(location, 1)
    sink = DeltaSink(location)
    stream = StreamKey.of(spec(1))
    path = sink._stream_dir(stream.slug) / "2.json"

    def another_run_writes_it() -> None:
        DeltaSink(location).store.write_json(path, {"state": {}, "pending": {"run": "paused"}})

    with armed("publish.after_intent", another_run_writes_it):
        publish_rows(sink, spec(1), *mqtt_rows(1))
    assert "was replaced by another run: written again" in caplog.text
    fresh = DeltaSink(location)
    assert (fresh.store.read_json(path) or {})["pending"]["run"] != "paused"
    assert fresh.state(stream).batches == 2
    report = audit(location)
    assert report.ok and report.streams[0].batches == 2, "\n".join(report.lines())


def test_a_delta_commit_whose_answer_is_lost_is_resolved_by_reading_the_log(
    s3_bucket: S3Bucket,
) -> None:
    """The PUT of the batch's Delta log entry reaches the server; its answer does not. The run
    learns from the log that its commit happened (invariant I8): its publish returns, once."""
    location = f"delta://{s3_bucket.uri('t')}"
    small_mqtt_sink(location, 1)

    def lose_the_answer() -> None:
        s3_bucket.proxy.fail("drop", "PUT", r"^t/_delta_log/\d+\.json$")

    with armed("publish.after_intent", lose_the_answer):
        publish_rows(DeltaSink(location), spec(1), *mqtt_rows(1))
    # object_store sent the PUT again, which failed its If-None-Match on the entry it had
    # written: delta-rs took it for a conflict, and the sink read the log
    assert s3_bucket.proxy.injected, "the answer was lost"

    assert [c["sluice.batch-id"] for c in commits(s3_bucket.uri("t"))] == [
        spec(0).batch_id,
        spec(1).batch_id,
    ], "the batch is committed once"
    report = audit(location)
    assert report.ok and report.streams[0].batches == 2, "\n".join(report.lines())
    with pytest.raises(ConcurrentIngestError):  # its rerun is recognised: nothing twice
        publish_rows(DeltaSink(location), spec(1), *mqtt_rows(1))


def test_a_store_that_ignores_conditional_writes_is_refused_before_anything_is_written(
    moto_s3_bucket: S3Bucket,
) -> None:
    """moto's server behind the proxy, which strips ``If-None-Match``: an S3 server that
    ignores conditional writes."""
    moto_s3_bucket.proxy.unconditional = True
    sink = open_sink(f"delta://{moto_s3_bucket.uri('t')}")
    with pytest.raises(ConfigError, match="ignores conditional writes") as refused:
        sink.check()
    assert "cannot hold a Delta table" in str(refused.value)
    assert not moto_s3_bucket.keys(), "nothing was written"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("AWS_S3_LOCKING_PROVIDER", "dynamodb"),
        ("AWS_S3_ALLOW_UNSAFE_RENAME", "true"),
        ("AWS_CONDITIONAL_PUT", "disabled"),
    ],
)
def test_settings_that_would_commit_unsafely_are_refused_by_name(
    name: str, value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=f"{name}={value} is set: .*[Uu]nset it"):
        open_sink("delta://s3://bucket/t")


@pytest.mark.parametrize("store", ["hdfs://nn/t", "oss://bucket/t", "wasbs://c@a.blob/t"])
def test_stores_the_sink_does_not_write_are_refused_saying_why(store: str) -> None:
    with pytest.raises(ConfigError, match=r"not yet on .*conditional writes"):
        open_sink(f"delta://{store}")


def test_a_quarantine_in_another_bucket_is_refused() -> None:
    with pytest.raises(ConfigError, match="in the same bucket"):
        open_sink("delta://s3://bucket/t?quarantine=s3://other/q")


def test_an_s3_location_names_both_tables_in_its_bucket() -> None:
    from pathlib import PurePosixPath

    from sluice.spark.sinks.delta import parse_delta_uri

    target = parse_delta_uri("delta://s3://lake/a/readings?quarantine=s3://lake/bad")
    assert (target.table, target.quarantine, target.bucket) == (
        PurePosixPath("/lake/a/readings"),
        PurePosixPath("/lake/bad"),
        "lake",
    )
    assert target.uri(target.table) == "s3://lake/a/readings"
    default = parse_delta_uri("delta://s3://lake/readings")
    assert default.uri(default.quarantine) == "s3://lake/readings/_quarantine"
    with pytest.raises(ConfigError, match="names no table in a bucket"):
        parse_delta_uri("delta://s3://lake")
