"""Where the rows of a compacted Parquet batch are (``sluice compact``, :mod:`sluice.maintenance`).

A compaction merges several batch directories (or earlier merged ones) of a Parquet sink into
one *merged* directory, ``batch_id=compacted-<id>/``: one data file per partition directory
(one in all for an unpartitioned dataset) and one quarantine file, the rows of each batch one
contiguous slice of each, in publish order, and a manifest (``_sluice_compaction.json``)
listing each batch's record and slices. The directories it replaces are moved aside, file by
file, into ``_sluice/superseded/<id>/`` (``sluice expire`` deletes them).

::

    <sink>/batch_id=compacted-<id>/part-00000.parquet              good rows of several batches
    <sink>/batch_id=compacted-<id>/ts_day=2026-01-05/part-00000.parquet   (partitioned)
    <sink>/batch_id=compacted-<id>/_quarantine/part-00000.parquet  their bad rows
    <sink>/batch_id=compacted-<id>/_sluice_compaction.json         records and slices
    <sink>/_sluice/compacted/<hash of batch id>.json               a batch's record and slice
    <sink>/_sluice/compactions/<id>.json                           a compaction under way
    <sink>/_sluice/compactions/<id>/                               its merged directory, staged
    <sink>/_sluice/superseded/<id>/batch_id=...__<file>             what it replaced (flat)

The rename of the staged merged directory into place is the commit point. Then, under the
sink's lock, each batch's entry in ``_sluice/compacted/`` is written (pointing at the merged
directory, which exists) and the replaced directories are moved aside; :func:`finish` does
these steps (idempotent) for a compaction that crashed after its commit point and rolls back
one that crashed before it. So the sink's own readers (``find``, ``records``,
``row_coordinates``: the audit, reruns, MQTT de-duplication) see every batch once at every
moment: in its own directory while that exists, else where its entry says. A batch record is
never deleted: it moves from the batch directory into its entry.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..durable import sync_directory, sync_file
from ..failpoints import failpoint
from .base import BatchRecord

__all__ = [
    "MANIFEST_FILE",
    "MERGED_PREFIX",
    "entries",
    "entry",
    "finish",
    "finish_all",
    "intents",
    "merged_file",
    "rows",
    "slices",
]

MANIFEST_FILE = "_sluice_compaction.json"
RECORD_FILE = "_sluice_batch.json"  # a batch directory's record (sluice.spark.sinks.parquet)
MERGED_PREFIX = "compacted-"
GOOD_FILE = "part-00000.parquet"
QUARANTINE_DIR = "_quarantine"


def _meta(root: Path) -> Path:
    return root / "_sluice"


def entry_path(root: Path, batch_id: str) -> Path:
    name = hashlib.sha256(batch_id.encode()).hexdigest()[:32]
    return _meta(root) / "compacted" / f"{name}.json"


def write_json(path: Path, data: Any, sync: bool = True) -> None:
    """Replace ``path`` atomically (and durably unless ``sync`` is False)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(json.dumps(data, sort_keys=True))
    if sync:
        sync_file(temporary)
    os.replace(temporary, path)
    if sync:
        sync_directory(path.parent)


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None


def entry(root: Path, batch_id: str) -> dict[str, Any] | None:
    """The entry of a compacted batch: ``record``, ``directory`` (the merged directory's
    name) and its ``good``/``bad`` slices (see :func:`slices`); None for a batch never
    compacted."""
    found: dict[str, Any] | None = _read(entry_path(root, batch_id))
    return found


def entries(root: Path) -> Iterator[dict[str, Any]]:
    """Every compacted batch's entry (for the audit)."""
    for path in sorted((_meta(root) / "compacted").glob("*.json")):
        data = _read(path)
        if data:
            yield data


def record(root: Path, batch_id: str) -> BatchRecord | None:
    found = entry(root, batch_id)
    return BatchRecord.from_json(found["record"]) if found else None


Slice = tuple[str, int, int]  # a file relative to the merged directory, first row, rows


def merged_file(partition: str, quarantined: bool) -> str:
    """The merged directory's file of a partition directory (``""``: unpartitioned)."""
    parent = QUARANTINE_DIR if quarantined else partition
    return f"{parent}/{GOOD_FILE}" if parent else GOOD_FILE


def slices(batch: dict[str, Any], quarantined: bool) -> list[Slice]:
    """Where a batch's good (or quarantined) rows are in its merged directory: a list of
    ``[file, start, rows]``; an entry of the first release's format, ``[start, rows]`` of
    the one data (or quarantine) file, is read as that file's slice."""
    value = batch.get("bad" if quarantined else "good") or []
    if len(value) == 2 and all(isinstance(v, int) for v in value):
        start, count = value
        return [(merged_file("", quarantined), start, count)] if count else []
    return [(str(file), int(start), int(count)) for file, start, count in value if count]


# Consecutive batches of a merged directory read the same files (the audit walks them in
# order): one read per file, for as many files as a merged directory has partitions.
@functools.lru_cache(maxsize=64)
def _read_file(path: str, columns: tuple[str, ...] | None, mtime_ns: int) -> pa.Table:
    """The file's ``columns`` (None: all) that it has."""
    file = pq.ParquetFile(path)
    present = None if columns is None else [c for c in columns if c in file.schema_arrow.names]
    return file.read(columns=present)


def rows(
    root: Path, batch_id: str, quarantined: bool, columns: list[str] | None = None
) -> pa.Table | None:
    """The rows of a compacted batch (its slices of the merged directory's files, partition
    directory by partition directory), or None if the batch was never compacted or has no
    such rows."""
    found = entry(root, batch_id)
    if found is None:
        return None
    directory = root / found["directory"]
    wanted = tuple(columns) if columns else None
    parts = []
    for file, start, count in slices(found, quarantined):
        path = directory / file
        parts.append(_read_file(str(path), wanted, path.stat().st_mtime_ns).slice(start, count))
    if not parts:
        return None
    return pa.concat_tables(parts, promote_options="default")


def intents(root: Path) -> list[Path]:
    """The intents of compactions under way (or crashed)."""
    return sorted((_meta(root) / "compactions").glob("*.json"))


def finish(root: Path, intent: Path) -> bool:
    """Finish the compaction of ``intent`` (under the sink's lock): roll it forward if its
    merged directory is in place (True), else back. Each step is idempotent."""
    data = json.loads(intent.read_text())
    merged = root / data["directory"]
    staged = _meta(root) / "compactions" / data["id"]
    if not merged.exists():
        shutil.rmtree(staged, ignore_errors=True)
        intent.unlink()
        sync_directory(intent.parent)
        return False
    manifest = json.loads((merged / MANIFEST_FILE).read_text())
    for batch in manifest["batches"]:
        path = entry_path(root, batch["batch_id"])
        value = {**batch, "directory": data["directory"]}
        if _read(path) != value:
            write_json(path, value, sync=False)
    os.sync()  # every entry on disk before the directories holding the same are moved
    superseded = _meta(root) / "superseded" / data["id"]
    superseded.mkdir(parents=True, exist_ok=True)
    for source in data["sources"]:
        _set_aside(root, root / source, superseded)
    sync_directory(superseded)
    sync_directory(root)
    failpoint("compact.after_supersede")
    intent.unlink()
    sync_directory(intent.parent)
    return True


def _set_aside(root: Path, directory: Path, superseded: Path) -> None:
    """Move the files of a replaced directory into the one flat directory ``superseded``
    (``batch_id=X__part-0.parquet``...): readers that list the dataset recursively (pyarrow)
    would otherwise walk a thousand directories under ``_sluice`` until expiry. Its record
    (or manifest) goes first, so Sluice's readers turn to the batch's entry before any row
    moves; a crash midway is finished by the next :func:`finish`."""
    if not directory.exists():
        return
    first = [directory / RECORD_FILE, directory / MANIFEST_FILE]
    rest = sorted(directory.rglob("*"), key=lambda p: len(p.parts), reverse=True)
    for path in [*first, *(p for p in rest if p not in first)]:
        if path.is_dir():
            path.rmdir()
        elif path.exists():
            os.replace(path, superseded / "__".join(path.relative_to(root).parts))
    directory.rmdir()


def finish_all(root: Path) -> None:
    """Finish every compaction a crash left (under the sink's lock)."""
    for intent in intents(root):
        finish(root, intent)
