"""Compaction and expiry of the Iceberg sink's tables (the table and its quarantine table).

Compaction. The live data files of the current snapshot smaller than the target are taken in
commit order, grouped per partition up to the target's size; a group of at least
``min_files`` files is read (pyiceberg's ``ArrowScan``, which resolves the name mapping of
files added by ``add_files``) and written again as data files of the table (pyiceberg's
writer, field ids and metrics included). ONE overwrite snapshot then deletes the old files and
adds the new ones (``sluice.compaction`` in its summary, no ``sluice.batch-id``: it is no
batch). Rows keep their ``batch_id`` column, so the audit, ``find()`` (the batches' snapshots
are still ancestors) and the stream state (table properties, which a commit carries as they
are) see the same before and after.

Optimistic concurrency: the commit asserts the branch head it read. An ingest committing
meanwhile fails it (``CommitFailedException``): the table is reloaded and, if every file the
compaction replaces is still live (an ingest only adds files), the same new files are
committed again on the new head. If some were removed (another compaction), it gives up and
deletes the files it wrote. A commit of unknown outcome deletes nothing (invariant I8): its
files are then either the table's or orphans for :func:`expire_iceberg`.

Expiry. Snapshots older than the cutoff are expired, except the branch heads and the
quarantine snapshots of batches ``sluice.pending`` still names; before a batch's snapshot is
expired its record is copied beside the table (``batches/``, where the audit reads it) if it
is not there yet. Then every file under the table's location that no remaining snapshot (nor
the current metadata) references is deleted: at once if an expired snapshot referenced it
(or it is a metadata file of the table's log), as an orphan (a crashed run's) only once it is
older than the minimum age, because a live ingest's files are referenced by nothing until its
commit. Sluice's own files are beside the table, out of reach.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..queues.config import ConfigError
from ..spark.failpoints import failpoint
from ..spark.sinks.iceberg import (
    COMMIT_ATTEMPTS,
    PREFIX,
    IcebergSink,
    _pending,
    _sluice_snapshots,
    _sync_snapshot,
)
from ..spark.writing import resolve
from . import CompactionResult, ExpiryResult, Progress

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table

__all__ = ["compact_iceberg", "expire_iceberg"]


def _live_files(table: Table) -> list[tuple[int, DataFile]]:
    """(sequence number, data file) of the current snapshot's live data files, oldest first;
    raises ValueError if the table has delete files (Sluice writes none)."""
    from pyiceberg.manifest import DataFileContent, ManifestContent, ManifestEntryStatus

    snapshot = table.current_snapshot()
    if snapshot is None:
        return []
    found = []
    for manifest in snapshot.manifests(table.io):
        if manifest.content != ManifestContent.DATA:
            raise ValueError("the table has delete files")
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            live = entry.status != ManifestEntryStatus.DELETED
            if live and entry.data_file.content == DataFileContent.DATA:
                found.append((entry.sequence_number or 0, entry.data_file))
    return sorted(found, key=lambda f: (f[0], f[1].file_path))


def _groups(files: list[tuple[int, DataFile]], target: int, min_files: int) -> list[list[Any]]:
    by_partition: dict[tuple[int, str], list[DataFile]] = {}
    for _, data_file in files:
        if data_file.file_size_in_bytes < target:
            key = (data_file.spec_id, repr(data_file.partition))
            by_partition.setdefault(key, []).append(data_file)
    groups: list[list[Any]] = []
    for small in by_partition.values():
        current: list[DataFile] = []
        size = 0
        for data_file in small:
            if current and size + data_file.file_size_in_bytes > target:
                groups.append(current)
                current, size = [], 0
            current.append(data_file)
            size += data_file.file_size_in_bytes
        groups.append(current)
    return [g for g in groups if len(g) >= min_files]


def _require_table(sink: IcebergSink) -> None:
    if sink._load(sink.target.table) is None:
        raise ConfigError(
            f"The Iceberg table {'.'.join(sink.target.table)} does not exist in catalog "
            f"'{sink.target.catalog}': check the sink's name (the one given to the ingest)."
        )


def compact_iceberg(
    sink: IcebergSink, target: int, min_files: int, say: Progress
) -> CompactionResult:
    result = CompactionResult(sink.location)
    _require_table(sink)
    sink.recover()
    for identifier in (sink.target.table, sink.target.quarantine):
        name = ".".join(identifier)
        table = sink._load(identifier)
        if table is None or table.current_snapshot() is None:
            say(f"{name}: no data yet")
            continue
        counts = _compact_table(sink, identifier, target, min_files, say, result)
        result.tables[name] = counts
        result.files_before += counts["before"]
        result.files_after += counts["after"]
    return result


def _compact_table(
    sink: IcebergSink,
    identifier: tuple[str, ...],
    target: int,
    min_files: int,
    say: Progress,
    result: CompactionResult,
) -> dict[str, int]:
    from pyiceberg.exceptions import CommitFailedException
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan, _dataframe_to_data_files
    from pyiceberg.table import FileScanTask

    from ..spark.sinks.transactions import transaction as new_transaction

    name = ".".join(identifier)
    table = sink._load(identifier)
    assert table is not None
    try:
        files = _live_files(table)
    except ValueError as exc:
        say(f"{name}: not compacted ({exc})")
        return {"before": 0, "after": 0}
    groups = _groups(files, target, min_files)
    counts = {"before": len(files), "after": len(files), "rewritten": 0, "written": 0}
    say(f"{name}: {len(files)} data files, {len(groups)} group(s) of small files to merge")
    if not groups:
        return counts
    written: list[DataFile] = []
    write_id = uuid.uuid4()
    counter = iter(range(1_000_000))
    scan = ArrowScan(table.metadata, table.io, table.schema(), AlwaysTrue())
    for number, group in enumerate(groups, 1):
        size = sum(f.file_size_in_bytes for f in group)
        say(f"{name}: group {number}/{len(groups)}: {len(group)} files, {size / 1024**2:.1f} MiB")
        rows = scan.to_table([FileScanTask(f) for f in group])
        if table.spec().fields:  # a group is one partition value: one file of it
            written.append(_partition_file(table, rows, group[0], f"{write_id}-{number}"))
            continue
        written += _dataframe_to_data_files(
            table.metadata,
            rows,
            table.io,
            write_uuid=write_id,
            counter=counter,  # type: ignore[arg-type]
        )
    old = [f.file_path for group in groups for f in group]
    summary = {
        f"{PREFIX}compaction": f'{{"rewritten": {len(old)}, "written": {len(written)}}}',
    }
    failpoint("compact.before_commit")
    for attempt in range(1, COMMIT_ATTEMPTS + 1):
        result.attempts += 1
        live = {f.file_path: f for _, f in _live_files(table)}
        if not all(path in live for path in old):
            _delete(sink, [f.file_path for f in written])
            result.gave_up = (
                f"{name}: some of the files to replace were replaced meanwhile (another "
                "compaction); the files written were deleted, nothing was committed"
            )
            say(result.gave_up)
            return counts
        try:
            with new_transaction(table) as transaction:
                overwrite = transaction.update_snapshot(snapshot_properties=summary).overwrite()
                with overwrite:
                    for path in old:
                        overwrite.delete_data_file(live[path])
                    for data_file in written:
                        overwrite.append_data_file(data_file)
            break
        except CommitFailedException:
            if attempt == COMMIT_ATTEMPTS:
                _delete(sink, [f.file_path for f in written])
                raise
            result.retries += 1
            say(f"{name}: another commit came first; committing again on the new snapshot")
            time.sleep(min(0.05 * 2**attempt, 1.0))
            reloaded = sink._load(identifier)
            assert reloaded is not None
            table = reloaded
    _sync_snapshot(table)
    failpoint("compact.after_commit")
    counts.update(rewritten=len(old), written=len(written))
    counts["after"] = len(files) - len(old) + len(written)
    result.files_rewritten += len(old)
    result.files_written += len(written)
    say(f"{name}: {len(old)} files rewritten into {len(written)} in one snapshot")
    return counts


def _partition_file(table: Table, rows: Any, like: DataFile, name: str) -> DataFile:
    """The rows of one partition value as one data file in ``like``'s partition. (pyiceberg's
    writer would compute the partition from the rows, which needs pyiceberg-core; the values
    are the merged files' own.)"""
    import pyarrow.parquet as pq

    from ..spark.sinks.iceberg import parquet_data_file

    path = f"{table.location().rstrip('/')}/data/compacted-{name}.parquet"
    with table.io.new_output(path).create(overwrite=False) as stream:
        pq.write_table(rows, stream)
    source = table.io.new_input(path)
    with source.open() as handle:
        footer = pq.ParquetFile(handle).metadata
    entry: DataFile = parquet_data_file(
        table.metadata, path, len(source), footer, like.partition, like.spec_id
    )
    return entry


def _delete(sink: IcebergSink, uris: list[str]) -> None:
    for uri in uris:
        with contextlib.suppress(OSError):
            filesystem, path = resolve(uri, sink._filesystem(uri))
            filesystem.delete_file(path)


# ---- expiry -------------------------------------------------------------------------------


def _referenced(table: Table, snapshot_ids: set[int]) -> set[str]:
    """Manifest lists, manifests and live data files of the snapshots ``snapshot_ids``."""
    from pyiceberg.manifest import ManifestEntryStatus

    found: set[str] = set()
    seen: set[str] = set()
    for snapshot in table.metadata.snapshots:
        if snapshot.snapshot_id not in snapshot_ids:
            continue
        found.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(table.io):
            found.add(manifest.manifest_path)
            if manifest.manifest_path in seen:
                continue
            seen.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
                if entry.status != ManifestEntryStatus.DELETED:
                    found.add(entry.data_file.file_path)
    return found


def _listing(sink: IcebergSink, location: str) -> Iterator[tuple[str, float, int]]:
    """(path, modification time, size) of every file under ``location``."""
    from pyarrow import fs

    filesystem, base = resolve(location, sink._filesystem(location))
    for info in filesystem.get_file_info(
        fs.FileSelector(base, allow_not_found=True, recursive=True)
    ):
        if info.type == fs.FileType.File:
            mtime = info.mtime.timestamp() if info.mtime is not None else 0.0
            yield info.path, mtime, info.size or 0


def expire_iceberg(
    sink: IcebergSink, age: float, orphan_age: float, dry_run: bool, say: Progress, now: float
) -> ExpiryResult:
    result = ExpiryResult(sink.location, dry_run)
    _require_table(sink)
    sink.recover()
    main = sink._load(sink.target.table)
    pending = set(_pending(main)) if main is not None else set()
    for identifier in (sink.target.table, sink.target.quarantine):
        table = sink._load(identifier)
        if table is not None:
            _expire_table(
                sink, identifier, table, pending, age, orphan_age, dry_run, say, result, now
            )
    return result


def _expire_table(
    sink: IcebergSink,
    identifier: tuple[str, ...],
    table: Table,
    pending: set[str],
    age: float,
    orphan_age: float,
    dry_run: bool,
    say: Progress,
    result: ExpiryResult,
    now: float,
) -> None:
    from pyiceberg.exceptions import CommitFailedException

    name = ".".join(identifier)
    cutoff_ms = (now - age) * 1000
    protected = {ref.snapshot_id for ref in table.metadata.refs.values()}
    if identifier == sink.target.quarantine:
        # recover() finishes a pending batch by looking for its quarantine snapshot: keep it
        protected |= {
            s.snapshot_id
            for s, summary in _sluice_snapshots(table)
            if summary.get(f"{PREFIX}batch-id") in pending
        }
    expired = {
        s.snapshot_id
        for s in table.metadata.snapshots
        if s.timestamp_ms < cutoff_ms and s.snapshot_id not in protected
    }
    remaining = {s.snapshot_id for s in table.metadata.snapshots} - expired
    say(f"{name}: {len(table.metadata.snapshots)} snapshots, {len(expired)} older than the cutoff")
    if identifier == sink.target.table:
        _copy_records_forward(sink, table, expired, dry_run)
    kept = _referenced(table, remaining)
    known = _referenced(table, expired) - kept
    current_metadata = table.metadata_location
    old_metadata = {
        log.metadata_file for log in table.metadata.metadata_log if log.timestamp_ms < cutoff_ms
    }
    known |= old_metadata
    logged = {log.metadata_file for log in table.metadata.metadata_log} - old_metadata
    reachable = kept | logged | {current_metadata}
    reachable |= {f.statistics_path for f in table.metadata.statistics}
    result.snapshots_expired += len(expired)
    if expired and not dry_run:

        def commit() -> None:
            fresh = sink._load(identifier)
            assert fresh is not None
            ids = [i for i in expired if fresh.metadata.snapshot_by_id(i) is not None]
            heads = {ref.snapshot_id for ref in fresh.metadata.refs.values()}
            ids = [i for i in ids if i not in heads]
            if ids:
                fresh.maintenance.expire_snapshots().by_ids(ids).commit()

        for attempt in range(COMMIT_ATTEMPTS):
            try:
                commit()
                break
            except CommitFailedException:
                if attempt == COMMIT_ATTEMPTS - 1:
                    raise
                time.sleep(min(0.05 * 2**attempt, 1.0))
        failpoint("expire.after_commit")
        # the metadata file of the expiry's own commit is the table's now: never an orphan
        # (with a clock days ahead, as the crash tests run it, it looked old enough to be one)
        after = sink._load(identifier)
        if after is not None:
            reachable.add(after.metadata_location)
    filesystem = sink._filesystem(table.location())

    def path_of(uri: str) -> str:
        return resolve(uri, filesystem)[1]

    reachable_paths = {path_of(u) for u in reachable}
    known_paths = {path_of(u) for u in known}
    quarantine_pending = {path_of(f) for f in sink.pending_files()}
    found, base = resolve(table.location(), filesystem)
    doomed = []
    for path, mtime, size in _listing(sink, table.location()):
        if path in reachable_paths or path in quarantine_pending:
            continue
        if path in known_paths:
            result.files_deleted += 1
        elif mtime < now - orphan_age:
            result.orphans_deleted += 1
        else:
            result.kept_young += 1
            continue
        result.bytes_deleted += size
        result.paths.append(path)
        doomed.append(path)
    say(f"{name}: {len(doomed)} unreferenced file(s) to delete")
    if not dry_run:
        for path in doomed:
            with contextlib.suppress(FileNotFoundError, OSError):
                found.delete_file(path)
        _remove_empty_directories(found, f"{base.rstrip('/')}/data/sluice")


def _copy_records_forward(
    sink: IcebergSink, table: Table, expired: set[int], dry_run: bool
) -> None:
    """Every batch whose snapshot is expired keeps its record beside the table."""
    import json

    from ..spark.durable import sync_file

    for snapshot, summary in _sluice_snapshots(table):
        if snapshot.snapshot_id not in expired:
            continue
        path = sink._record_file(table, summary[f"{PREFIX}batch-id"])
        if dry_run or table.io.new_input(path).exists():
            continue
        with table.io.new_output(path).create(overwrite=True) as handle:
            handle.write(
                json.dumps(json.loads(summary[f"{PREFIX}record"]), sort_keys=True).encode()
            )
        sync_file(path)


def _remove_empty_directories(filesystem: Any, base: str) -> None:
    from pyarrow import fs

    if filesystem.type_name != "local":
        return  # object stores have no directories
    infos = filesystem.get_file_info(fs.FileSelector(base, allow_not_found=True, recursive=True))
    directories = sorted(
        (i.path for i in infos if i.type == fs.FileType.Directory), key=len, reverse=True
    )
    for directory in directories:
        with contextlib.suppress(OSError):
            if not filesystem.get_file_info(fs.FileSelector(directory)):
                filesystem.delete_dir(directory)
