"""Compaction and expiry of a Delta sink (:mod:`sluice.spark.sinks.delta`), on delta-rs.

- Compaction is delta-rs's ``optimize.compact``: one commit per table (the table and its
  quarantine table) that replaces small files by files of the target size, then a
  checkpoint. The stream's ``txn`` versions are part of the table's state, which a compaction
  and a checkpoint carry forward; the stream state and batch records live under ``_sluice/``,
  which no Delta operation touches. An ingest that commits meanwhile is a conflict delta-rs
  resolves for appends (a compaction only removes files an append did not add).
- Expiry first finishes the batches crashed runs left pending (:meth:`DeltaSink.recover`, as
  for Parquet and Iceberg sinks), then runs delta-rs's ``vacuum`` in its "lite" mode (files a
  commit removed, older than the cutoff) and the log's clean-up. Files of crashed runs (under
  ``sluice/`` in each table, never in the log) and of killed compactions (at the table's root,
  not in the log) are removed only when they are older than the minimum age and than the
  start of every run lock held now (on S3: every live lease), as for Parquet datasets; the
  quarantine files a stream's pending batch names are kept, whatever their age.

Both work on a local table and on one on S3 (:mod:`sluice.spark.sinks.tablestore`): delta-rs
commits there with ``If-None-Match: *`` as an ingest does.
"""

from __future__ import annotations

import math
from pathlib import PurePath
from typing import Any

from ..spark.failpoints import failpoint
from ..spark.sinks.delta import DeltaSink
from . import CompactionResult, ExpiryResult, Progress


def _tables(sink: DeltaSink) -> list[tuple[str, PurePath, Any]]:
    found = []
    for name, path in (("table", sink.target.table), ("quarantine", sink.target.quarantine)):
        table = sink._load(path)
        if table is not None:
            found.append((name, path, table))
    return found


# Where a compaction can be killed (tests): after each table's optimize commit and checkpoint.
_COMMITTED = {"table": "compact.after_commit", "quarantine": "compact.after_quarantine_commit"}
_CHECKPOINTED = {"table": "compact.after_checkpoint"}


def compact_delta(sink: DeltaSink, target: int, min_files: int, say: Progress) -> CompactionResult:
    from ..queues.config import ConfigError

    tables = _tables(sink)
    if not tables:
        raise ConfigError(f"{sink.location}: no Delta table there yet: give the sink of an ingest.")
    sink.check_store()
    result = CompactionResult(sink.location)
    failpoint("compact.before_commit")
    for name, _, table in tables:
        before = len(table.file_uris())
        result.files_before += before
        if before < min_files:
            say(f"{name}: {before} data files, fewer than {min_files}: not compacted")
            result.files_after += before
            continue
        say(f"{name}: {before} data files, merging into files of {target / 1024**2:.0f} MiB")
        metrics = table.optimize.compact(target_size=target)
        result.attempts += 1
        failpoint(_COMMITTED[name])
        table.create_checkpoint()
        if name in _CHECKPOINTED:
            failpoint(_CHECKPOINTED[name])
        after = len(table.file_uris())
        result.files_after += after
        result.files_rewritten += int(metrics.get("numFilesRemoved", 0))
        result.files_written += int(metrics.get("numFilesAdded", 0))
        result.tables[name] = {"before": before, "after": after}
        say(f"{name}: {before} -> {after} data files in one commit, then a checkpoint")
    return result


def _unlogged_files(sink: DeltaSink, root: PurePath) -> list[PurePath]:
    """Files a crash can leave that no commit names: a run's (under ``sluice/``; an upsert's
    staged messages under ``sluice-staged/``, which no commit ever names) and a killed
    compaction's (delta-rs writes an unpartitioned table's new files at its root before its
    commit; vacuum's default mode never looks at files the log does not name)."""
    store = sink.store
    runs = store.tree(root / "sluice") + store.tree(root / "sluice-staged")
    return runs + store.files(root, ".parquet")


def expire_delta(
    sink: DeltaSink, age: float, floor: float, dry_run: bool, say: Progress, now: float
) -> ExpiryResult:
    result = ExpiryResult(sink.location, dry_run=dry_run)
    if _tables(sink):
        sink.check_store()
    sink.recover()
    # A pending batch's quarantine files are in no log until its quarantine commit, which
    # recover() (here, or in the batch's rerun) makes from them: never orphans.
    pending = sink.pending_files()
    hours = math.ceil(age / 3600)
    store = sink.store
    held = store.held_since(sink.root / "_sluice" / "runs", now)
    # to the whole second below: S3 lists a file's time in whole seconds, so one written in
    # the second its run's lease was taken would look older than the lease
    oldest_live = math.floor(min(held, default=now))
    orphan_before = min(now - max(age, floor), oldest_live)
    for name, root, table in _tables(sink):
        removed = table.vacuum(
            retention_hours=hours, dry_run=dry_run, enforce_retention_duration=False
        )
        result.files_deleted += len(removed)
        result.paths += [str(p) for p in removed]
        if not dry_run:
            table.cleanup_metadata()
        known = {store.path(u) for u in table.file_uris()}
        tombstoned = table.vacuum(retention_hours=0, dry_run=True, enforce_retention_duration=False)
        known |= {store.path(p) if "://" in p else root / p for p in tombstoned}
        for path in _unlogged_files(sink, root):
            if path in known or path in pending:
                continue
            info = store.info(path)
            if info.modified >= orphan_before:
                result.kept_young += 1
                continue
            result.orphans_deleted += 1
            result.bytes_deleted += info.size
            result.paths.append(store.uri(path))
            if not dry_run:
                store.delete(path)
        say(f"{name}: vacuumed files removed before {hours} h ago, and crashed runs' files")
    return result
