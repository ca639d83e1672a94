"""Faults of an object store, on the real S3 server: requests that fail with 500/503 (the
proxy answers them; a healthy server cannot be made to), an answer lost after the commit
happened, the server restarted mid-write, a second run of a stream, and settings that
cannot work, refused before Spark starts with what to fix."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

import pytest

from sluice.audit import audit
from sluice.batch import BatchSpec, OffsetRange, plan_batch
from sluice.queues import ConfigError
from sluice.spark import ingest
from sluice.spark.failpoints import armed
from sluice.spark.sinks import ConcurrentIngestError, open_sink
from sluice.testing.plugin import S3Bucket

from ..spark.conftest import SCHEMA, KafkaTopic, reading
from ..spark.crashes import assert_exactly_once
from .conftest import rows


def send_and_plan(topic: KafkaTopic, start: int, count: int = 20) -> BatchSpec:
    topic.send([reading(start + i) for i in range(count)] + [b"not json"])
    return topic.plan()


def test_500s_and_503s_are_retried_and_a_store_that_keeps_failing_loses_nothing(
    spark: Any, topic: KafkaTopic, s3_bucket: S3Bucket
) -> None:
    sink, proxy = s3_bucket.uri("lake"), s3_bucket.proxy
    options = {"source": topic.source, "schema": SCHEMA}
    proxy.fail("503", "PUT", "/log/", times=2)  # the commit itself
    proxy.fail("500", "PUT", "/part-", times=1)  # a data file of a task
    proxy.fail("503", "GET", "state.json", times=2)
    first = ingest(spark, send_and_plan(topic, 0), sink, **options)
    assert first.committed and len(proxy.injected) == 5, proxy.injected

    proxy.fail("503", "PUT", "/log/", times=1000)
    with pytest.raises(Exception, match=r"/log/0+2\.json.*SlowDown|SlowDown.*/log/"):
        ingest(spark, send_and_plan(topic, 20), sink, **options)
    proxy.clear()
    ingest(spark, topic.plan(), sink, **options)

    assert_exactly_once(audit(sink, topic.source), 42)
    assert sorted(r["temperature"] for r in rows(sink)) == [i / 10 for i in range(40)]
    assert plan_batch(topic.queue) is None
    assert not [k for k in s3_bucket.keys("lake/_sluice/staging/")], "no staging left"


def test_a_commit_whose_answer_was_lost_is_recognised_as_its_own(
    spark: Any, topic: KafkaTopic, s3_bucket: S3Bucket
) -> None:
    """The commit's PUT reaches the server, the answer does not: the retry meets its own
    entry (If-None-Match fails) and reads it back instead of giving up."""
    sink = s3_bucket.uri("lake")
    s3_bucket.proxy.fail("drop", "PUT", "/log/")
    result = ingest(spark, send_and_plan(topic, 0), sink, source=topic.source, schema=SCHEMA)

    assert result.committed and s3_bucket.proxy.injected[0].startswith("drop PUT")
    assert len([k for k in s3_bucket.keys("lake/_sluice/streams/") if "/log/" in k]) == 1
    assert_exactly_once(audit(sink, topic.source), 21)


def test_a_completion_whose_answer_was_lost_or_whose_upload_was_aborted_still_publishes(
    spark: Any, topic: KafkaTopic, s3_bucket: S3Bucket
) -> None:
    """After the commit, the batch's objects are completed. The first batch's completion
    reaches the server and its answer is lost: the retry completes it again (SeaweedFS and
    AWS answer as before; MinIO says NoSuchUpload, and the object at the key tells). The
    second batch's uploads are aborted after its commit, as a lifecycle rule
    (AbortIncompleteMultipartUpload) would: its objects are built again from the staging."""
    sink, proxy, client = s3_bucket.uri("lake"), s3_bucket.proxy, s3_bucket.client()
    options = {"source": topic.source, "schema": SCHEMA}

    def drop_the_completion() -> None:  # the next POST on a batch's object: its completion
        proxy.fail("drop", "POST", r"/batch_id(=|%3D)[^/]+/part-")  # the path is quoted

    def lifecycle_aborts() -> None:
        pending = client.list_multipart_uploads(Bucket=s3_bucket.name, Prefix="lake/")
        for upload in pending.get("Uploads", []):
            client.abort_multipart_upload(
                Bucket=s3_bucket.name, Key=upload["Key"], UploadId=upload["UploadId"]
            )
            aborted.append(upload["Key"])

    aborted: list[str] = []
    with armed("publish.after_rename", drop_the_completion):
        first = ingest(spark, send_and_plan(topic, 0), sink, **options)
    assert first.committed and [i for i in proxy.injected if i.startswith("drop POST")]
    with armed("publish.after_rename", lifecycle_aborts):
        second = ingest(spark, send_and_plan(topic, 20), sink, **options)
    assert second.committed and len(aborted) == 2, aborted  # good rows and quarantine

    assert sorted(r["temperature"] for r in rows(sink)) == [i / 10 for i in range(40)]
    assert len(rows(sink, quarantine=True)) == 2
    assert not client.list_multipart_uploads(Bucket=s3_bucket.name).get("Uploads")
    assert not [k for k in s3_bucket.keys("lake/_sluice/staging/")], "no staging left"
    assert_exactly_once(audit(sink, topic.source), 42)


@pytest.mark.parametrize("kind", ["parquet", "iceberg"])
def test_the_s3_server_restarted_mid_write_loses_and_doubles_nothing(
    spark: Any, topic: KafkaTopic, s3_bucket: S3Bucket, kind: str, request: pytest.FixtureRequest
) -> None:
    sink = (
        s3_bucket.uri("lake")
        if kind == "parquet"
        else request.getfixturevalue("s3_sqlite_lake").sink()
    )
    options = {"source": topic.source, "schema": SCHEMA}
    spec = send_and_plan(topic, 0, 200)
    with armed("stage.after_write", s3_bucket.server.restart):
        try:
            ingest(spark, spec, sink, **options)
        except Exception as exc:  # a clear error, then the rerun finishes
            assert "S3" in str(exc) or "AWS" in str(exc), exc
    ingest(spark, spec, sink, **options)

    assert_exactly_once(audit(sink, topic.source), 201)
    assert plan_batch(topic.queue) is None


def test_a_second_run_is_refused_and_a_run_that_lost_its_lease_is_refused_at_its_commit(
    spark: Any, topic: KafkaTopic, s3_bucket: S3Bucket
) -> None:
    sink = s3_bucket.uri("lake")
    options = {"source": topic.source, "schema": SCHEMA}
    spec = send_and_plan(topic, 0)
    seen: list[str] = []

    def second_run() -> None:
        if seen:  # the nested runs pass this failpoint too
            return
        with pytest.raises(ConcurrentIngestError, match="is running on this sink") as refused:
            ingest(spark, spec, sink, **options)
        seen.append(str(refused.value))

    def lease_runs_out() -> None:
        """Between the first run's last check and its commit, its lease runs out (a paused
        process): another run takes the stream and commits first."""
        if len(seen) > 1:
            return
        seen.append("stolen")
        for key in s3_bucket.keys("lake/_sluice/runs/"):
            s3_bucket.client().delete_object(Bucket=s3_bucket.name, Key=key)
        send_and_plan(topic, 20)
        ingest(spark, topic.plan(), sink, **options)

    with (
        armed("stage.after_write", second_run),
        armed("publish.after_intent", lease_runs_out),
        pytest.raises(ConcurrentIngestError, match="committed batch 1 of the stream"),
    ):
        ingest(spark, spec, sink, **options)

    assert seen, "the second run was refused while the first held the stream"
    assert not [k for k in s3_bucket.keys("lake/_sluice/staging/")], "the loser's files are gone"
    assert_exactly_once(audit(sink, topic.source), 42)  # the winner's batch, whole
    assert plan_batch(topic.queue) is None


def test_a_lease_whose_release_failed_does_not_refuse_the_next_run_of_its_process(
    s3_bucket: S3Bucket,
) -> None:
    """The store fails while a run releases its lease (the nemesis' s3-restart found it): the
    lease stays, naming this process, which knows that run has ended; the next run of the
    stream takes it at once instead of being refused for the lease's TTL. A run that is still
    going keeps it."""
    from sluice.spark.sinks import StreamKey
    from sluice.spark.sinks.lease import hold
    from sluice.spark.sinks.objects import Objects
    from sluice.spark.sinks.s3 import S3Settings

    objects = Objects(S3Settings.resolve(), s3_bucket.name)
    objects._client = objects.settings.client(attempts=2)  # a failing release fails quickly
    stream, key = StreamKey("kafka", "t", "g"), "lake/_sluice/runs/stream.json"
    with hold(objects, key, stream) as first:
        with pytest.raises(ConcurrentIngestError), hold(objects, key, stream):
            pass  # refused: the first run is still going
        s3_bucket.proxy.fail("503", "PUT", "/runs/", times=2)
    assert len(s3_bucket.proxy.injected) == 2, s3_bucket.proxy.injected
    s3_bucket.proxy.clear()
    left, _ = objects.get_json(key)
    assert left["run"] == first.run and not left["released"], "the release failed"

    with hold(objects, key, stream) as second:  # at once, not after the TTL
        assert second.run != first.run and second.clean


def _lease_objects(s3_bucket: S3Bucket) -> tuple[Any, str, Any]:
    """The lease's objects (a client of its own), its key and its stream."""
    from sluice.spark.sinks import StreamKey
    from sluice.spark.sinks.objects import Objects
    from sluice.spark.sinks.s3 import S3Settings

    objects = Objects(S3Settings.resolve(), s3_bucket.name)
    return objects, "lake/_sluice/runs/stream.json", StreamKey("kafka", "t", "g")


def test_a_lease_whose_creation_answer_was_lost_is_recognised_as_its_own(
    s3_bucket: S3Bucket,
) -> None:
    """The PUT that creates the lease reaches the server, its answer does not: the retry
    meets the run's own lease (If-None-Match fails) and knows it by the run's token, instead
    of refusing the run as "another ingest ... (pid <its own pid>)"."""
    from sluice.spark.sinks.lease import hold

    objects, key, stream = _lease_objects(s3_bucket)
    s3_bucket.proxy.fail("drop", "PUT", "/runs/")
    with hold(objects, key, stream) as lease:
        assert s3_bucket.proxy.injected == [f"drop PUT {key}"], s3_bucket.proxy.injected
        held, etag = objects.get_json(key)
        assert held["run"] == lease.run and lease.etag == etag
    left, _ = objects.get_json(key)
    assert left["run"] == lease.run and left["released"], "released at the end of the run"


def test_a_lease_renewal_whose_answer_was_lost_keeps_the_lease(
    s3_bucket: S3Bucket, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One renewal's PUT lands but its answer is lost: the retry's If-Match names the ETag
    before it and fails. The run finds its own token in the lease and carries on (not "taken
    by another run"), renews again, and releases the lease at its end."""
    from sluice.spark.sinks import lease as lease_module
    from sluice.testing.waiting import wait_until

    monkeypatch.setattr(lease_module, "TTL", 2.0)  # a renewal every 0.5 s
    objects, key, stream = _lease_objects(s3_bucket)
    proxy = s3_bucket.proxy
    with lease_module.hold(objects, key, stream) as lease:
        proxy.fail("drop", "PUT", "/runs/")
        wait_until(lambda: proxy.injected, timeout=10, message="the renewal's dropped answer")
        puts = proxy.counts["PUT"]
        # the retry that met the new ETag, then a renewal more after it (or the lease lost)
        wait_until(lambda: lease.lost or proxy.counts["PUT"] >= puts + 2, message="renewals")
        assert not lease.lost, "the run's own renewal was taken for another run's lease"
        wait_until(lambda: lease.etag == objects.get_json(key)[1], message="the lease's ETag")
    left, _ = objects.get_json(key)
    assert left["run"] == lease.run and left["released"], "the lease was left unreleased"


@pytest.mark.parametrize(
    ("problem", "expected"),
    [
        ("missing-bucket", "does not exist"),
        ("wrong-secret", "SignatureDoesNotMatch"),
        ("unknown-key", "does not know the access key id"),
        ("wrong-endpoint", "Cannot reach the S3 endpoint"),
    ],
)
@pytest.mark.parametrize("kind", ["parquet", "iceberg"])
def test_bad_settings_fail_before_spark_saying_what_to_fix(
    s3_bucket: S3Bucket,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    problem: str,
    expected: str,
    kind: str,
) -> None:
    from sluice.brokers import free_port

    bucket, secret = s3_bucket.name, "wrong-" + s3_bucket.server.secret_key[:10]
    if problem == "missing-bucket":
        bucket = "no-such-bucket-here"
    elif problem == "wrong-secret":
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    elif problem == "unknown-key":
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIANOBODYKNOWS")
    else:
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    if kind == "parquet":
        sink = f"s3://{bucket}/lake"
    else:
        monkeypatch.setenv("PYICEBERG_CATALOG__BADS3__URI", f"sqlite:///{tmp_path / 'c.db'}")
        monkeypatch.setenv("PYICEBERG_CATALOG__BADS3__WAREHOUSE", f"s3://{bucket}/warehouse")
        sink = "iceberg://bads3/ns.readings"
    spec = BatchSpec("kafka", "t", group_id="g", ranges=(OffsetRange(0, 0, 1),))
    started = time.monotonic()
    with pytest.raises(ConfigError, match=expected) as refused:
        ingest(None, spec, sink, source="kafka://127.0.0.1:1")  # no Spark is touched
    assert time.monotonic() - started < 30
    message = str(refused.value)
    assert s3_bucket.server.secret_key not in message and secret not in message
    assert bucket in message or "endpoint" in message
    with contextlib.suppress(Exception):
        open_sink(sink)
