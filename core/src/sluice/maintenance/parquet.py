"""Compaction and expiry of a local Parquet dataset (see :mod:`sluice.spark.sinks.compacted`
for the layout and the commit protocol).

Compaction. The *units* of a sink are its batch directories and its merged directories, in
publish order. Consecutive units whose good files are smaller than the target are grouped
up to the target's size (a unit whose schema does not merge with the group's starts a new
group); a group of at least ``min_files`` data files is merged: its rows are read (every
batch's rows stay contiguous), written to one data file per partition directory (a
partitioned dataset keeps its hive layout inside the merged directory) and one quarantine
file in a staged merged directory with its manifest, and committed under the sink's lock:

1. crashed publishes and compactions are finished first;
2. every unit is checked to be still in place, unchanged (else another compaction took it:
   the staged directory is deleted and this group is given up, nothing else touched);
3. an intent is written, the staged directory renamed into place (the commit point), and
   :func:`sluice.spark.sinks.compacted.finish` writes each batch's entry and moves the
   replaced directories aside.

An ingest publishing meanwhile adds a batch directory that is not part of the group, so it
never conflicts. Two compactions at once: the second is refused (``_sluice/runs/compaction.lock``).

Expiry. Directories a compaction replaced (``_sluice/superseded/<id>``) older than the
cutoff; staging directories of crashed ingests (``_sluice/staging``) and compactions
(``_sluice/compactions/<id>``) whose newest file is older than the cutoff *and* older than
the start of every run holding its stream's lock now: a live run holds its lock from before it
creates its staging until its commit, so its files are never older than its lock.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..queues.config import ConfigError
from ..spark.durable import sync_directory, sync_file
from ..spark.failpoints import failpoint
from ..spark.sinks import compacted
from ..spark.sinks.base import ConcurrentIngestError
from ..spark.sinks.parquet import RECORD_FILE, ParquetSink, good_files
from . import CompactionResult, ExpiryResult, Progress

__all__ = ["compact_parquet", "expire_parquet"]

ROW_GROUP_ROWS = 128 * 1024
COMPACTION_LOCK = "compaction.lock"


@dataclass
class _Unit:
    """A batch directory or a merged one."""

    name: str  # batch_id=...
    directory: Path
    batches: list[dict[str, Any]]  # batch_id, record, and (merged) good/bad slices
    good: list[Path]
    bad: list[Path]
    size: int
    published: float
    schema: pa.Schema | None = None

    @property
    def merged(self) -> bool:
        return self.name.startswith(f"batch_id={compacted.MERGED_PREFIX}")


@dataclass
class _Group:
    units: list[_Unit] = field(default_factory=list)
    size: int = 0
    schema: pa.Schema | None = None

    @property
    def files(self) -> int:
        return sum(len(u.good) for u in self.units)


def _data_files(root: Path) -> int:
    return sum(len(good_files(directory)) for directory in root.glob("batch_id=*"))


def _units(sink: ParquetSink) -> list[_Unit]:
    found = []
    for directory in sorted(sink.root.glob("batch_id=*")):
        good = good_files(directory)
        bad = sorted((directory / compacted.QUARANTINE_DIR).glob("*.parquet"))
        size = sum(f.stat().st_size for f in good)
        record = directory / RECORD_FILE
        manifest = directory / compacted.MANIFEST_FILE
        if record.exists():
            data = json.loads(record.read_text())
            batches = [{"batch_id": data["batch_id"], "record": data}]
        elif manifest.exists():
            batches = json.loads(manifest.read_text())["batches"]
        else:
            continue
        published = min(float(b["record"].get("published_at", 0.0)) for b in batches)
        found.append(_Unit(directory.name, directory, batches, good, bad, size, published))
    return sorted(found, key=lambda u: (u.published, u.name))


def _schema(unit: _Unit) -> pa.Schema | None:
    schemas = [pq.read_schema(f) for f in unit.good]
    if not schemas:
        return None
    return pa.unify_schemas(schemas, promote_options="permissive")


def _merge(schema: pa.Schema | None, other: pa.Schema | None) -> pa.Schema | None:
    """The schema of both, or raise (pyarrow) if a field's type conflicts."""
    if schema is None or other is None:
        return schema or other
    return pa.unify_schemas([schema, other], promote_options="default")


def _groups(units: list[_Unit], target: int, min_files: int) -> list[_Group]:
    groups: list[_Group] = []
    current = _Group()

    def close() -> None:
        nonlocal current
        if len(current.units) >= 2 and current.files >= min_files:
            groups.append(current)
        current = _Group()

    for unit in units:
        if unit.size >= target:
            close()
            continue
        unit.schema = _schema(unit)
        try:
            merged = _merge(current.schema, unit.schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            close()
            merged = unit.schema
        if current.units and current.size + unit.size > target:
            close()
            merged = unit.schema
        current.units.append(unit)
        current.size += unit.size
        current.schema = merged
    close()
    return groups


Parts = dict[str, pa.Table]  # partition directory -> rows


def _read(files: list[Path]) -> pa.Table | None:
    tables = [pq.read_table(f) for f in files]
    return pa.concat_tables(tables, promote_options="default") if tables else None


def _partition(directory: Path, file: Path) -> str:
    """The partition directory of ``file`` in a batch or merged directory (``""``: none)."""
    parent = file.parent.relative_to(directory).as_posix()
    return "" if parent == "." else parent


def _batch_rows(unit: _Unit, quarantined: bool) -> Iterator[tuple[dict[str, Any], Parts]]:
    """Each batch of ``unit`` with its rows (good or quarantined) per partition directory
    (``""`` for an unpartitioned dataset's and for quarantined rows)."""
    if not unit.merged:
        by_partition: dict[str, list[Path]] = {}
        for file in unit.bad if quarantined else unit.good:
            key = "" if quarantined else _partition(unit.directory, file)
            by_partition.setdefault(key, []).append(file)
        read = {key: _read(files) for key, files in by_partition.items()}
        yield unit.batches[0], {key: rows for key, rows in read.items() if rows is not None}
        return
    tables: dict[str, pa.Table] = {}  # each merged file read once
    for batch in unit.batches:
        parts: Parts = {}
        for name, start, count in compacted.slices(batch, quarantined):
            if name not in tables:
                tables[name] = pq.read_table(unit.directory / name)
            key = "" if quarantined else _partition(unit.directory, unit.directory / name)
            parts[key] = tables[name].slice(start, count)
        yield batch, parts


def _write(tables: list[pa.Table], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    merged = pa.concat_tables(tables, promote_options="default")
    pq.write_table(merged, path, row_group_size=ROW_GROUP_ROWS)
    sync_file(path)
    sync_directory(path.parent)


def _stage(sink: ParquetSink, group: _Group, compaction: str) -> Path:
    """The group's merged directory, staged: data file, quarantine file, manifest."""
    staged = sink.root / "_sluice" / "compactions" / compaction
    staged.mkdir(parents=True)
    batches: dict[str, dict[str, Any]] = {}
    for quarantined in (False, True):
        files: dict[str, list[pa.Table]] = {}  # merged file -> its rows, batch by batch
        written: dict[str, int] = {}  # merged file -> its rows so far
        for unit in group.units:
            for batch, parts in _batch_rows(unit, quarantined):
                entry = batches.setdefault(
                    batch["batch_id"], {"batch_id": batch["batch_id"], "record": batch["record"]}
                )
                placed = entry.setdefault("bad" if quarantined else "good", [])
                for partition, rows in sorted(parts.items()):
                    if not rows.num_rows:
                        continue
                    file = compacted.merged_file(partition, quarantined)
                    placed.append([file, written.get(file, 0), rows.num_rows])
                    files.setdefault(file, []).append(rows)
                    written[file] = written.get(file, 0) + rows.num_rows
        for file, tables in files.items():
            _write(tables, staged / file)
    manifest = {
        "id": compaction,
        "created": time.time(),
        "sources": [u.name for u in group.units],
        "batches": list(batches.values()),
    }
    (staged / compacted.MANIFEST_FILE).write_text(json.dumps(manifest, sort_keys=True))
    sync_file(staged / compacted.MANIFEST_FILE)
    sync_directory(staged)
    return staged


def _unchanged(sink: ParquetSink, unit: _Unit) -> bool:
    directory = sink.root / unit.name
    return directory.is_dir() and good_files(directory) == unit.good


@contextmanager
def _compaction_lock(sink: ParquetSink) -> Iterator[None]:
    path = sink.root / "_sluice" / "runs" / COMPACTION_LOCK
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ConcurrentIngestError(
                f"Another sluice compact is running on {sink.root}: nothing was done. Run "
                "it again once that one has finished."
            ) from None
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def compact_parquet(
    sink: ParquetSink, target: int, min_files: int, say: Progress
) -> CompactionResult:
    if not sink.root.is_dir():
        raise ConfigError(f"{sink.root} is not a directory: give the sink of an ingest.")
    result = CompactionResult(sink.location)
    with _compaction_lock(sink):
        sink.recover()
        result.files_before = _data_files(sink.root)
        units = _units(sink)
        groups = _groups(units, target, min_files)
        say(
            f"{len(units)} batch directories, {result.files_before} data files; "
            f"{len(groups)} group(s) of small files to merge"
        )
        for number, group in enumerate(groups, 1):
            compaction = f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"
            say(
                f"group {number}/{len(groups)}: merging {group.files} files of "
                f"{sum(len(u.batches) for u in group.units)} batches "
                f"({group.size / 1024**2:.1f} MiB)"
            )
            staged = _stage(sink, group, compaction)
            try:
                failpoint("compact.before_commit")
                result.attempts += 1
                committed = _commit(sink, group, compaction, staged)
            except BaseException:
                if not (sink.root / f"batch_id={compacted.MERGED_PREFIX}{compaction}").exists():
                    shutil.rmtree(staged, ignore_errors=True)
                raise
            if not committed:
                shutil.rmtree(staged, ignore_errors=True)
                result.gave_up = (
                    "another compaction replaced some of the same directories meanwhile; "
                    "nothing of this group was changed"
                )
                say(f"group {number}: {result.gave_up}")
                continue
            result.files_rewritten += group.files
            result.files_written += 1
            result.batches += sum(len(u.batches) for u in group.units)
        result.files_after = _data_files(sink.root)
    say(f"data files: {result.files_before} -> {result.files_after}")
    return result


def _commit(sink: ParquetSink, group: _Group, compaction: str, staged: Path) -> bool:
    root = sink.root
    directory = f"batch_id={compacted.MERGED_PREFIX}{compaction}"
    with sink._locked():
        sink._fold_intents()
        compacted.finish_all(root)
        if not all(_unchanged(sink, u) for u in group.units):
            return False
        intent = root / "_sluice" / "compactions" / f"{compaction}.json"
        sources = [u.name for u in group.units]
        compacted.write_json(intent, {"id": compaction, "directory": directory, "sources": sources})
        failpoint("compact.after_intent")
        os.rename(staged, root / directory)
        sync_directory(root)
        sync_directory(staged.parent)
        failpoint("compact.after_commit")
        compacted.finish(root, intent)
    return True


# ---- expiry -------------------------------------------------------------------------------


def _newest(path: Path) -> float:
    """The newest modification time in the tree at ``path``."""
    newest = path.lstat().st_mtime
    if path.is_dir():
        for found in path.rglob("*"):
            try:
                newest = max(newest, found.lstat().st_mtime)
            except FileNotFoundError:
                continue
    return newest


def _tree(path: Path) -> tuple[int, int]:
    """(files, bytes) in the tree at ``path``."""
    if path.is_file():
        return 1, path.stat().st_size
    files = [f for f in path.rglob("*") if f.is_file()]
    return len(files), sum(f.stat().st_size for f in files)


def _held_since(runs: Path) -> dict[str, float]:
    """Lock file name -> when its holder took it, for every run lock held now."""
    held = {}
    for lock in sorted(runs.glob("*.lock")):
        with open(lock) as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                held[lock.name] = lock.stat().st_mtime  # written when it was taken
            else:
                fcntl.flock(handle, fcntl.LOCK_UN)
    return held


def expire_parquet(
    sink: ParquetSink, age: float, dry_run: bool, say: Progress, now: float
) -> ExpiryResult:
    if not sink.root.is_dir():
        raise ConfigError(f"{sink.root} is not a directory: give the sink of an ingest.")
    result = ExpiryResult(sink.location, dry_run)
    meta = sink.root / "_sluice"
    sink.recover()
    cutoff = now - age
    held = _held_since(meta / "runs")
    live_since = min((t for n, t in held.items() if n != COMPACTION_LOCK), default=now)
    pending = {p.stem for p in compacted.intents(sink.root)}
    say(f"looking for what is older than {age:.0f} s in {sink.root}")

    def remove(path: Path, orphan: bool) -> None:
        files, size = _tree(path)
        result.paths.append(str(path))
        result.bytes_deleted += size
        if orphan:
            result.orphans_deleted += files
        else:
            result.files_deleted += files
        if not dry_run:
            shutil.rmtree(path) if path.is_dir() else path.unlink()

    superseded = sorted((meta / "superseded").glob("*")) if (meta / "superseded").is_dir() else []
    for directory in superseded:
        if directory.name not in pending and directory.stat().st_mtime < cutoff:
            remove(directory, orphan=False)
    # staging of crashed ingests: older than the cutoff and than every live run's lock
    for staged in sorted((meta / "staging").glob("*")) if (meta / "staging").is_dir() else []:
        newest = _newest(staged)
        if newest < cutoff and newest < live_since:
            remove(staged, orphan=True)
        elif newest >= live_since or newest >= cutoff:
            result.kept_young += 1
    # staging of crashed compactions (no intent: never committed)
    if COMPACTION_LOCK not in held:
        for staged in sorted((meta / "compactions").glob("*")):
            if staged.is_dir() and staged.name not in pending and _newest(staged) < cutoff:
                remove(staged, orphan=True)
    if not dry_run:
        for directory in (meta / "superseded", meta / "staging"):
            if directory.is_dir():
                sync_directory(directory)
    say(" ".join(result.lines()[:1]))
    return result
