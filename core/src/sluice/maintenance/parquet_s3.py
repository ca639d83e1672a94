"""Expiry of a Parquet dataset on S3 (:mod:`sluice.spark.sinks.parquet_s3`): what crashed runs
left, once it is older than the cutoff and than every live run.

A run that is killed before its commit leaves its staging (``_sluice/staging/<id>-<run>/``)
and the uploads it assembled for the batch's objects (multipart uploads never completed:
invisible to every reader, but stored, and billed, until aborted). The next run of the same
batch removes both; a batch that is never run again (its messages went into another batch
after a re-plan) keeps them until ``sluice expire``:

- it first finishes every committed batch a crash left unfinished (:meth:`recover`), so no
  upload or staged file that a committed batch still needs is left to expire;
- then it deletes each staging prefix whose newest object, and aborts each upload under the
  dataset that was initiated, before the cutoff and before every live run took its lease
  (a live run writes its staging and assembles its uploads after it took its lease, so they
  are never older than it; the server's clock may be :data:`CLOCK_SKEW` off). A lease is
  live unless released, expired, or held by a process of this machine that has ended.

Stream state, logs, manifests and the batches' objects are never touched.
"""

from __future__ import annotations

from typing import Any

from ..queues.config import ConfigError
from ..spark.sinks.lease import live
from ..spark.sinks.parquet_s3 import S3ParquetSink
from . import ExpiryResult, Progress

__all__ = ["CLOCK_SKEW", "expire_parquet_s3"]

#: Seconds the S3 server's clock (uploads' and objects' times) may differ from this machine's
#: (leases' times): S3 refuses requests signed more than 15 minutes off.
CLOCK_SKEW = 15 * 60.0


def _live_since(sink: S3ParquetSink, now: float) -> float:
    """When the oldest live lease of the dataset was taken (``now`` if none is live)."""
    since = now
    for key in sink.objects.keys(sink._key("_sluice", "runs") + "/"):
        held: Any = sink.objects.get_json(key)[0]
        if not isinstance(held, dict) or not live(held):
            continue
        since = min(since, float(held.get("since", 0.0)))  # none said: since when is unknown
    return since


def expire_parquet_s3(
    sink: S3ParquetSink, age: float, dry_run: bool, say: Progress, now: float
) -> ExpiryResult:
    result = ExpiryResult(sink.location, dry_run)
    sink.check()
    if not any(True for _ in sink.objects.keys(sink._key("_sluice") + "/")):
        raise ConfigError(f"{sink.location} holds no dataset: give the sink of an ingest.")
    sink.recover()
    cutoff = min(now - age, _live_since(sink, now) - CLOCK_SKEW)
    say(f"looking for what crashed runs left, older than {age:.0f} s, in {sink.location}")

    staging = sink._key("_sluice", "staging") + "/"
    runs: dict[str, list[tuple[str, int, float]]] = {}
    for key, size, modified in sink.objects.listing(staging):
        runs.setdefault(key[len(staging) :].split("/", 1)[0], []).append((key, size, modified))
    for run, found in sorted(runs.items()):
        if max(modified for _, _, modified in found) >= cutoff:
            result.kept_young += len(found)
            continue
        result.orphans_deleted += len(found)
        result.bytes_deleted += sum(size for _, size, _ in found)
        result.paths.append(f"s3://{sink.bucket}/{staging}{run}/")
        if not dry_run:
            sink.objects.delete_prefix(f"{staging}{run}/")

    for key, upload, initiated in sink.objects.uploads(f"{sink.prefix}/" if sink.prefix else ""):
        if initiated >= cutoff:
            result.kept_young += 1
            continue
        result.orphans_deleted += 1
        result.paths.append(f"s3://{sink.bucket}/{key} (upload {upload}, never completed)")
        if not dry_run:
            sink.objects.abort_upload(key, upload)
    say(" ".join(result.lines()[:1]))
    return result
