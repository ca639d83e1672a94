"""Parquet datasets on S3 (``s3://BUCKET/PREFIX``) against a real S3 server: the layout, the
commit by one conditional write, what readers see, and a stream's state read without
listing its history."""

from __future__ import annotations

import json
from typing import Any

import pyarrow.dataset as ds
import pyarrow.fs as pafs

from sluice.audit import audit
from sluice.batch import plan_batch
from sluice.spark import ingest
from sluice.testing.plugin import S3Bucket

from ..spark.conftest import SCHEMA, KafkaTopic, reading
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
