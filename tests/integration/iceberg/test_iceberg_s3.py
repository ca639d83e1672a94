"""Iceberg tables whose warehouse is on a real S3 server: SQL catalogs on SQLite (S3 settings
in the catalog's properties, no AWS_* variable) and PostgreSQL (only the standard AWS_*
variables, AWS_ENDPOINT_URL included, which pyiceberg itself does not read). Spark's tasks
write the data files through pyarrow's S3 file system, pyiceberg's FileIO the metadata."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from sluice.audit import audit
from sluice.batch import plan_batch
from sluice.spark import ingest
from sluice.testing.plugin import S3Bucket

from ..spark.conftest import SCHEMA, KafkaTopic, reading
from .conftest import Lake, data_files, table_rows

BAD = [b"not json", b'{"temperature": "warm"}']


@pytest.fixture(params=["sqlite", "postgres"])
def s3_lake(request: pytest.FixtureRequest) -> Lake:
    found: Lake = request.getfixturevalue(f"s3_{request.param}_lake")
    return found


def test_kafka_batches_into_an_iceberg_table_on_s3(
    spark: Any,
    topic: KafkaTopic,
    s3_lake: Lake,
    s3_bucket: S3Bucket,
    caplog: pytest.LogCaptureFixture,
) -> None:
    sink = s3_lake.sink()
    topic.send([reading(i) for i in range(30)] + BAD)
    with caplog.at_level(logging.DEBUG):
        first = ingest(spark, topic.plan(), sink, source=topic.source, schema=SCHEMA)
        topic.send([reading(30 + i) for i in range(30)])
        second = ingest(
            spark, topic.plan(), sink, source=topic.source, schema=SCHEMA, mode="executors"
        )

    assert (first.written, first.quarantined, second.written) == (30, 2, 30)
    rows = table_rows(s3_lake)
    assert sorted(r["temperature"] for r in rows) == [i / 10 for i in range(60)]
    files = data_files(s3_lake)
    assert files and all(f.startswith(f"s3://{s3_bucket.name}/warehouse/") for f in files)
    assert s3_lake.table().metadata_location.startswith(f"s3://{s3_bucket.name}/warehouse/")
    keys = s3_bucket.keys("warehouse/")
    assert any(k.endswith(".metadata.json") for k in keys)
    assert len(table_rows(s3_lake, "readings__quarantine")) == 2
    assert plan_batch(topic.queue) is None
    report = audit(sink, topic.source)
    assert report.ok, "\n".join(report.lines())
    assert s3_bucket.server.secret_key not in caplog.text
