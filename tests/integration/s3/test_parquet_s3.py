"""Parquet datasets on S3 (``s3://BUCKET/PREFIX``) against a real S3 server: the layout, the
commit by one conditional write, what readers see, and a stream's state read without
listing its history."""

from __future__ import annotations

import json
from typing import Any

import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pytest

from sluice.audit import audit
from sluice.batch import plan_batch
from sluice.queues import ConfigError
from sluice.spark import ingest
from sluice.spark.failpoints import armed
from sluice.spark.sinks.s3 import StoreError
from sluice.testing.plugin import S3Bucket

from ..spark.conftest import SCHEMA, KafkaTopic, reading
from ..spark.crashes import assert_exactly_once
from .conftest import rows

BAD = [b"not json", b'{"temperature": "warm"}']


def test_kafka_batches_land_whole_in_an_s3_dataset_that_plain_readers_read_too(
    spark: Any, topic: KafkaTopic, s3_bucket: S3Bucket
) -> None:
    sink = s3_bucket.uri("lake/readings")
    topic.send([reading(i) for i in range(30)] + BAD)
    first = ingest(spark, topic.plan(), sink, source=topic.source, schema=SCHEMA, mode="driver")
    topic.send([reading(30 + i) for i in range(30)])
    second = ingest(spark, topic.plan(), sink, source=topic.source, schema=SCHEMA, mode="executors")

    assert (first.written, first.quarantined, second.written) == (30, 2, 30)
    assert first.output == f"{sink}/batch_id={first.batch_id}"
    assert sorted(r["temperature"] for r in rows(sink)) == [i / 10 for i in range(60)]
    assert sorted(r["value"] for r in rows(sink, quarantine=True)) == sorted(BAD)
    # a plain pyarrow reader of the prefix reads the same good rows (it skips _-names)
    filesystem = pafs.S3FileSystem(
        endpoint_override=s3_bucket.endpoint,
        access_key=s3_bucket.server.access_key,
        secret_key=s3_bucket.server.secret_key,
        region="us-east-1",
    )
    plain = ds.dataset(
        f"{s3_bucket.name}/lake/readings", filesystem=filesystem, partitioning="hive"
    ).to_table()
    assert plain.num_rows == 60
    keys = s3_bucket.keys("lake/readings/")
    assert not [k for k in keys if "/_sluice/staging/" in k], "no staging left"
    logs = sorted(k for k in keys if "/log/" in k)
    assert [k.rsplit("/", 1)[-1] for k in logs] == ["000000000001.json", "000000000002.json"]
    manifest = json.loads(
        s3_bucket.client()
        .get_object(
            Bucket=s3_bucket.name, Key=f"lake/readings/batch_id={first.batch_id}/_sluice_batch.json"
        )["Body"]
        .read()
    )
    assert manifest["batch_id"] == first.batch_id and len(manifest["files"]["quarantine"]) >= 1
    assert plan_batch(topic.queue) is None
    report = audit(sink, topic.source)
    assert report.ok, "\n".join(report.lines())
    for result, quarantined in ((first, 1), (second, 0)):  # one object each, whatever the tasks
        inside = [
            k for k in keys if f"/batch_id={result.batch_id}/" in k and k.endswith(".parquet")
        ]
        assert len([k for k in inside if "/_quarantine/" not in k]) == 1, inside
        assert len([k for k in inside if "/_quarantine/" in k]) == quarantined, inside

    stray = f"lake/readings/batch_id={second.batch_id}/part-by-hand.parquet"
    s3_bucket.client().copy_object(
        Bucket=s3_bucket.name, Key=stray, CopySource={"Bucket": s3_bucket.name, "Key": inside[0]}
    )
    report = audit(sink, topic.source)
    assert not report.ok and report.unlisted == [f"s3://{s3_bucket.name}/{stray}"]
    assert "in no committed batch" in "\n".join(report.problems())


def test_a_partitioned_dataset_on_s3_is_one_object_per_batch_and_directory(
    spark: Any, topic: KafkaTopic, s3_bucket: S3Bucket
) -> None:
    """``partition_by`` on S3: a batch's good rows are one object per hive directory (the
    writing tasks' files of a directory merged), completed together after the commit. When
    one directory's completion fails, a plain reader sees the batch's other directories,
    whole, and not that one, until the batch is finished (here by the audit)."""
    from ..iceberg.test_partitioned_iceberg import DAYS
    from ..iceberg.test_partitioned_iceberg import SCHEMA as TIMED
    from ..iceberg.test_partitioned_iceberg import reading as timed_reading
    from .test_plain_readers import duckdb_for

    sink, proxy = s3_bucket.uri("lake"), s3_bucket.proxy
    options = {"source": topic.source, "schema": TIMED, "partition_by": "day(ts)"}
    topic.send([timed_reading(i) for i in range(30)] + [b"not json"])
    first = ingest(spark, topic.plan(), sink, mode="executors", **options)

    days = [d.isoformat() for d in DAYS]
    objects = sorted(
        k.split(f"batch_id={first.batch_id}/", 1)[1]
        for k in s3_bucket.keys(f"lake/batch_id={first.batch_id}/")
        if k.endswith(".parquet")
    )
    run = objects[0].rsplit("/", 1)[1]
    assert objects == sorted([f"_quarantine/{run}"] + [f"ts_day={d}/{run}" for d in days])
    duckdb = duckdb_for(s3_bucket)

    def per_day() -> dict[str, int]:
        query = (
            f"select ts_day, count(*) from read_parquet('{sink}/batch_id=*/ts_day=*/*.parquet', "
            "hive_partitioning=true) group by ts_day"
        )
        return {str(day): rows for day, rows in duckdb.execute(query).fetchall()}

    assert per_day() == dict.fromkeys(days, 10)

    def fail_one_directory() -> None:  # after the quarantine's completion: the good rows'
        proxy.fail("503", "POST", f"ts_day(=|%3D){days[0]}/", times=100)

    topic.send([timed_reading(i) for i in range(30, 60)])
    second = topic.plan()
    with armed("publish.midway", fail_one_directory), pytest.raises(StoreError):
        ingest(spark, second, sink, **options)
    proxy.clear()
    assert per_day() == {days[0]: 10, days[1]: 20, days[2]: 20}, "the others whole, not it"
    audit(sink, topic.source)  # it finishes the batch first
    assert per_day() == dict.fromkeys(days, 20)
    ingest(spark, second, sink, **options)  # finds it published: commits its offsets
    assert_exactly_once(audit(sink, topic.source), 61)
    assert plan_batch(topic.queue) is None

    topic.send([timed_reading(60)])
    with pytest.raises(ConfigError, match="is partitioned by day"):
        ingest(spark, topic.plan(), sink, **{**options, "partition_by": "bucket(4,device)"})


def test_on_moto_too_a_batch_appears_whole_after_its_commit_and_an_uncommitted_one_never(
    spark: Any, topic: KafkaTopic, moto_s3_bucket: S3Bucket
) -> None:
    """moto's S3 server (a second implementation): a run killed after assembling its objects,
    before its commit, then one killed after its commit, before completing them; nothing of
    either is listed until the rerun finishes the committed one, whole, and the uncommitted
    run's uploads are aborted."""
    from ..spark.crashes import run_child

    bucket = moto_s3_bucket
    sink = bucket.uri("lake")
    options = {"source": topic.source, "schema": SCHEMA, "mode": "executors"}
    topic.send([reading(i) for i in range(30)] + BAD)
    spec = topic.plan()
    for point in ("publish.after_intent", "publish.after_rename"):
        code, stderr = run_child(spark, {"spec": spec.to_dict(), "sink": sink, **options}, point)
        assert code == -9, f"the ingest did not die at {point}: {stderr[-2000:]}"
        assert not [k for k in bucket.keys("lake/batch_id=") if k.endswith(".parquet")]
    pending = bucket.client().list_multipart_uploads(Bucket=bucket.name).get("Uploads", [])
    # the committed run's good rows and quarantine; it aborted the first run's when it began
    assert len({u["UploadId"] for u in pending}) == 2, pending

    ingest(spark, spec, sink, **options)
    objects = [k for k in bucket.keys(f"lake/batch_id={spec.batch_id}/") if k.endswith(".parquet")]
    assert len(objects) == 2, objects  # the good rows, the quarantine: one object each
    assert not bucket.client().list_multipart_uploads(Bucket=bucket.name).get("Uploads")
    assert_exactly_once(audit(sink, topic.source), 32)
    assert plan_batch(topic.queue) is None
