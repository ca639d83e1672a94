"""``sluice expire`` and ``sluice compact`` on a Parquet dataset on S3: the uploads and staging
of crashed runs are removed once old, never what a committed batch or a live run needs."""

from __future__ import annotations

import time
from typing import Any

import pytest

from sluice.audit import audit
from sluice.batch import plan_batch
from sluice.maintenance import compact, expire
from sluice.queues import ConfigError
from sluice.spark import ingest
from sluice.spark.failpoints import armed
from sluice.testing.plugin import S3Bucket

from ..spark.conftest import SCHEMA, KafkaTopic, reading
from ..spark.crashes import DAYS_LATER, assert_exactly_once, run_child
from .conftest import rows


def uploads(bucket: S3Bucket, prefix: str = "") -> list[str]:
    """The keys of the uploads in progress (never completed) in the bucket."""
    answer = bucket.client().list_multipart_uploads(Bucket=bucket.name, Prefix=prefix)
    return sorted(u["Key"] for u in answer.get("Uploads", []))


def test_expiry_aborts_a_crashed_runs_uploads_and_finishes_a_committed_batch_first(
    spark: Any, topic: KafkaTopic, s3_bucket: S3Bucket
) -> None:
    """Batch A is killed after it assembled its objects, before its commit, and never run
    again (the next plan takes its messages and more: batch B); B is killed after its commit,
    before its objects are complete. Days later an expiry completes B's and aborts A's."""
    sink = s3_bucket.uri("lake")
    options = {"source": topic.source, "schema": SCHEMA}
    topic.send([reading(i) for i in range(20)] + [b"not json"])
    first = topic.plan()
    code, _ = run_child(
        spark, {"spec": first.to_dict(), "sink": sink, **options}, "publish.after_intent"
    )
    assert code == -9
    topic.send([reading(20 + i) for i in range(20)])
    second = topic.plan()
    assert second.batch_id != first.batch_id
    code, _ = run_child(
        spark, {"spec": second.to_dict(), "sink": sink, **options}, "publish.after_rename"
    )
    assert code == -9
    crashed = uploads(s3_bucket, f"lake/batch_id={first.batch_id}/")
    committed = uploads(s3_bucket, f"lake/batch_id={second.batch_id}/")
    assert len(crashed) == 2 and len(committed) == 2, "good rows and quarantine, each"
    visible = [k for k in s3_bucket.keys("lake/batch_id=") if k.endswith(".parquet")]
    assert visible == [], "nothing visible yet"

    young = expire(sink)  # now: all of it is younger than a week
    assert young.orphans_deleted == 0 and young.kept_young >= 2
    assert uploads(s3_bucket, f"lake/batch_id={first.batch_id}/") == crashed
    dry = expire(sink, dry_run=True, now=time.time() + DAYS_LATER)
    assert sum(f"batch_id={first.batch_id}/" in p for p in dry.paths) == 2, dry.paths
    assert not [p for p in dry.paths if f"batch_id={second.batch_id}" in p], dry.paths
    assert uploads(s3_bucket, "lake/") == crashed, "a dry run aborts nothing"

    done = expire(sink, now=time.time() + DAYS_LATER)
    assert done.orphans_deleted >= 3, done.lines()  # A's 2 uploads and its staged files
    assert uploads(s3_bucket, "lake/") == []
    assert not [k for k in s3_bucket.keys("lake/_sluice/staging/")], "no staging left"
    assert len(rows(sink)) == 40, "B, completed by the expiry's recovery, holds A's messages"
    ingest(spark, second, sink, **options)  # finds B published: commits its offsets
    assert_exactly_once(audit(sink, topic.source), 41)
    assert plan_batch(topic.queue) is None


def test_expiry_during_a_live_run_removes_nothing_of_it(
    spark: Any, topic: KafkaTopic, s3_bucket: S3Bucket
) -> None:
    """An expiry whose clock is days ahead runs while an ingest has assembled its objects and
    not yet committed: the run's lease says since when it runs, and what it made is younger."""
    sink = s3_bucket.uri("lake")
    topic.send([reading(i) for i in range(20)] + [b"not json"])
    seen = []

    def expire_now() -> None:
        seen.append(expire(sink, now=time.time() + DAYS_LATER))

    with armed("publish.after_intent", expire_now):
        result = ingest(spark, topic.plan(), sink, source=topic.source, schema=SCHEMA)

    assert result.committed and seen
    assert seen[0].orphans_deleted == 0 and seen[0].kept_young >= 2, seen[0].lines()
    assert len(rows(sink)) == 20
    assert_exactly_once(audit(sink, topic.source), 21)


def test_compaction_of_a_dataset_on_s3_is_refused_saying_why(s3_bucket: S3Bucket) -> None:
    with pytest.raises(ConfigError, match="not compacted: each batch is one file"):
        compact(s3_bucket.uri("lake"))
