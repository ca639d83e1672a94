"""The Parquet dataset sink: a directory per batch, published by one rename.

::

    <sink>/batch_id=<id>/part-*.parquet             the batch's good rows
    <sink>/batch_id=<id>/_quarantine/part-*.parquet its bad rows, each with a reason
    <sink>/batch_id=<id>/_sluice_batch.json         its record (the manifest)
    <sink>/_sluice/staging/<id>-<random>/           a run's batch until it is published
    <sink>/_sluice/intents/<id>.json                a publish under way (crash recovery)
    <sink>/_sluice/streams/<stream>.json            each stream's state (bounded)
    <sink>/_sluice/dead_letters/<id>.json           how far a batch's dead letters got
    <sink>/_sluice/lock                             serialises publishes
    <sink>/_sluice/runs/<stream>.lock               held by the one run of a stream (I7)
    <sink>/_sluice/partitioning.json                the dataset's partition spec, if any
    <sink>/_sluice/message_columns.json             the message columns its rows keep

Partitioned (``partition_by="day(timestamp),bucket(16,device)"``, :mod:`..partitioning`), a
batch's good rows are in hive-style directories inside it, one file per partition value and
writing task: ``<sink>/batch_id=<id>/timestamp_day=2026-01-05/device_bucket=3/part-*.parquet``.
The columns stay in the files; a directory's key is Iceberg's partition field name
(``<column>_<transform>``, ``<column>_trunc``; identity: ``<column>_identity``, so that no
directory is named like a column). The spec is recorded with the first batch and kept: a
different one given later (or one given for a dataset of unpartitioned batches) is refused,
as readers need one directory layout; given none, the dataset's own is used.

A run builds the whole batch directory (rows, quarantine and record) in staging, and one
``rename`` makes it visible and recorded at once (invariant I2): a crash leaves either no
batch or a whole one. Around the rename, under the lock: pending intents of crashed runs are
folded in first, then an intent is written before the rename, and after it the stream state is
updated and the intent removed; :meth:`ParquetSink.recover` folds in a batch whose state
update a crash interrupted. Every file and directory entry is synced to stable storage before
the step that depends on it (invariant I9), so the offsets committed after a publish never
outlive the rows after a power loss.

One run per stream (I7): an ingest holds ``runs/<stream>.lock`` (``flock``, released by the
kernel when the process dies) from its first step to its commit; a second run of the stream
gets :class:`ConcurrentIngestError` at once and touches nothing.

The message columns the rows keep (``keep_message``, :mod:`..layout`) are recorded before
the first batch is written (``message_columns.json``); a dataset without that file and with
batches was written before the choice existed, and keeps the whole message.

Spark and pyarrow ignore names starting with ``_``, so ``spark.read.parquet(sink)`` reads
exactly the published good rows, with
``batch_id`` as a partition column; quarantined rows read with
``spark.read.parquet(f"{sink}/batch_id=*/_quarantine")``.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.parquet as pq

from ...queues.config import ConfigError
from .. import layout
from ..durable import sync_directory, sync_file
from ..failpoints import failpoint
from ..partitioning import Partitioning, PartitionSpecError
from ..writing import WriteTargets
from . import compacted
from .base import (
    ROW_COORDINATES,
    BatchRecord,
    ConcurrentIngestError,
    Staging,
    StreamKey,
    StreamState,
    check_publishable,
    no_coordinates,
    stream_lock,
    with_coordinates,
)

__all__ = ["RECORD_FILE", "ParquetSink", "local_path", "parquet_rows"]

RECORD_FILE = "_sluice_batch.json"
QUARANTINE_DIR = "_quarantine"
COLUMNS_FILE = "message_columns.json"


def local_path(location: str | os.PathLike[str], what: str = "sink") -> Path:
    text = os.fspath(location)
    scheme = urlsplit(text).scheme
    if scheme == "file":
        text = urlsplit(text).path
    elif scheme and len(scheme) > 1:  # one letter: a Windows drive
        raise ConfigError(
            f"{what} {text!r} is not a local directory: the Parquet sink publishes batches with "
            "atomic renames, which it does on local (or mounted shared) file systems only. Give "
            "a path such as ./data/orders or file:///data/orders."
        )
    return Path(text).absolute()


def parquet_rows(directory: Path, recursive: bool = True) -> int:
    """Rows in the Parquet files under ``directory``, from their footers."""
    if not directory.exists():
        return 0
    files = directory.rglob("*.parquet") if recursive else directory.glob("*.parquet")
    return sum(pq.read_metadata(f).num_rows for f in files)


def good_files(directory: Path) -> list[Path]:
    """A batch directory's good rows' files: its Parquet files, in partition directories
    too, but not under ``_quarantine`` (nor any other ``_`` or ``.`` directory)."""
    if not directory.exists():
        return []
    return sorted(
        f
        for f in directory.rglob("*.parquet")
        if not any(part.startswith(("_", ".")) for part in f.relative_to(directory).parts[:-1])
    )


def _write_json(path: Path, data: Any) -> None:
    """Replace ``path`` atomically and durably (the file, then its directory entry)."""
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    temporary.write_text(json.dumps(data, sort_keys=True))
    sync_file(temporary)
    os.replace(temporary, path)
    sync_directory(path.parent)


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text()) if path.exists() else None


class ParquetSink:
    """A Parquet dataset directory (see the module docstring)."""

    def __init__(
        self,
        location: str | os.PathLike[str],
        partition_by: str | Sequence[str] | Partitioning | None = None,
    ) -> None:
        self.root = local_path(location)
        self.location = str(self.root)
        self._meta = self.root / "_sluice"
        try:
            self.partitioning = Partitioning.parse(partition_by)
        except PartitionSpecError as exc:
            raise ConfigError(f"sink {self.location}: {exc}") from None

    def dataset_partitioning(self, adopt: bool = False) -> Partitioning:
        """The dataset's partition spec: the recorded one (a different one given is a
        :class:`ConfigError`); none recorded, the one given, which ``adopt`` records unless
        the dataset holds unpartitioned batches already (then a spec given is refused)."""
        recorded = _read_json(self._meta / "partitioning.json")
        given = self.partitioning
        if recorded is not None:
            spec = Partitioning.parse(recorded["partition_by"])
            if given and given != spec:
                raise ConfigError(
                    f"The dataset {self.root} is partitioned by {spec}, and partition_by="
                    f"{given} was given. A dataset keeps one directory layout: give "
                    f"partition_by={spec} (or none: the dataset's own is used), or write to "
                    "another directory."
                )
            return spec
        if not given:
            return given
        if any(self.root.glob("batch_id=*")):
            raise ConfigError(
                f"The dataset {self.root} holds unpartitioned batches, and partition_by="
                f"{given} was given. A dataset keeps one directory layout (readers such as "
                "Spark refuse a mix): give no partition_by, or write to another directory."
            )
        if adopt:
            self._meta.mkdir(parents=True, exist_ok=True)
            _write_json(self._meta / "partitioning.json", {"partition_by": str(given)})
        return given

    def kept_columns(self) -> tuple[str, ...] | None:
        """The message columns the dataset's rows keep (:mod:`..layout`): as recorded, or the
        whole message for a dataset written before they were recorded; None: no batch yet."""
        if not self._has_batches():
            return None
        recorded = _read_json(self._meta / COLUMNS_FILE)
        return layout.FULL if recorded is None else tuple(recorded["keep_message"])

    def keep_columns(self, kept: Sequence[str]) -> None:
        """Record the message columns the rows keep: the choice of the dataset's first batch
        (a run that published nothing leaves it to the next), kept from then on."""
        path = self._meta / COLUMNS_FILE
        if path.exists() and self._has_batches():
            return
        self._meta.mkdir(parents=True, exist_ok=True)
        _write_json(path, {"keep_message": sorted(kept)})

    def _has_batches(self) -> bool:
        return (
            any(self.root.glob("batch_id=*"))
            or next(compacted.entries(self.root), None) is not None
        )

    def check(self) -> None:
        """Create the sink directory if needed and write a probe file in it (permissions
        alone say little: root passes every check, and /proc refuses root)."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            probe = self.root / f".sluice-probe-{uuid.uuid4().hex[:8]}"
            probe.write_bytes(b"")
            probe.unlink()
            self.dataset_partitioning()  # another spec than the dataset's fails here
        except OSError as exc:
            raise ConfigError(
                f"The sink {self.root} is not writable ({exc.strerror or exc}): choose a "
                "directory you can write, e.g. ./data/readings."
            ) from None

    # ---- paths -------------------------------------------------------------------------

    def output_dir(self, batch_id: str) -> Path:
        return self.root / f"batch_id={batch_id}"

    def quarantine_dir(self, batch_id: str) -> Path:
        return self.output_dir(batch_id) / QUARANTINE_DIR

    def _stream_file(self, stream: StreamKey) -> Path:
        return self._meta / "streams" / f"{stream.slug}.json"

    # ---- reading -----------------------------------------------------------------------

    def find(self, batch_id: str) -> BatchRecord | None:
        data = _read_json(self.output_dir(batch_id) / RECORD_FILE)
        if not data:  # merged by sluice compact: the record is in its entry
            return compacted.record(self.root, batch_id)
        return BatchRecord.from_json(data)

    def state(self, stream: StreamKey) -> StreamState:
        data = _read_json(self._stream_file(stream))
        return StreamState.from_json(data["state"]) if data else StreamState()

    def records(self) -> Iterator[BatchRecord]:
        seen = set()
        for directory in sorted(self.root.glob("batch_id=*")):
            data = _read_json(directory / RECORD_FILE)
            if data:
                seen.add(data["batch_id"])
                yield BatchRecord.from_json(data)
        for entry in compacted.entries(self.root):  # batches merged by sluice compact
            if entry["batch_id"] not in seen:
                yield BatchRecord.from_json(entry["record"])

    def quarantine_table(self, batch_id: str) -> pa.Table:
        if not (self.output_dir(batch_id) / RECORD_FILE).exists():
            merged = compacted.rows(self.root, batch_id, True)
            if merged is not None:
                return merged
        return pq.read_table(self.quarantine_dir(batch_id))

    def row_coordinates(self, batch_id: str, quarantined: bool) -> pa.Table:
        if not (self.output_dir(batch_id) / RECORD_FILE).exists():
            merged = compacted.rows(self.root, batch_id, quarantined, list(ROW_COORDINATES))
            if merged is not None:
                return with_coordinates(merged)
        directory = self.quarantine_dir(batch_id) if quarantined else self.output_dir(batch_id)
        files = good_files(directory) if not quarantined else sorted(directory.glob("*.parquet"))
        return coordinates_of([pq.ParquetFile(f) for f in files])

    # ---- writing -----------------------------------------------------------------------

    def exclusive(self, stream: StreamKey) -> AbstractContextManager[None]:
        return stream_lock(self._meta / "runs" / f"{stream.slug}.lock", stream, "this sink")

    def stage(self, batch_id: str) -> Staging:
        """A fresh staging area. Called under :meth:`exclusive`, so what an earlier run of
        this batch left in staging belongs to a run that is gone, and is removed."""
        staging = self._meta / "staging"
        for left in staging.glob(f"{batch_id}-*"):
            shutil.rmtree(left, ignore_errors=True)
        run = f"{batch_id}-{uuid.uuid4().hex[:8]}"
        directory, scratch = staging / run, staging / f"{run}.scratch"
        directory.mkdir(parents=True)
        scratch.mkdir()
        return Staging(batch_id, directory, scratch)

    def targets(self, staging: Staging, good: pa.Schema, bad: pa.Schema) -> WriteTargets:
        spec = self.dataset_partitioning(adopt=True)
        try:
            spec.check(good, "the batch's rows")
        except PartitionSpecError as exc:
            raise ConfigError(f"sink {self.location}: {exc}") from None
        return WriteTargets(str(staging.data), str(staging.quarantine), partitioning=spec)

    def staged_counts(self, staging: Staging) -> tuple[int, int]:
        good = sum(pq.read_metadata(f).num_rows for f in good_files(staging.data))
        return good, parquet_rows(staging.quarantine)

    def staged_quarantine_reasons(self, staging: Staging) -> dict[str, str]:
        if not parquet_rows(staging.quarantine):
            return {}
        table = pq.read_table(staging.quarantine, columns=["message_id", "reason"])
        return dict(zip(*table.to_pydict().values(), strict=True))

    def output_location(self, batch_id: str) -> str:
        return str(self.output_dir(batch_id))

    def quarantine_location(self, batch_id: str) -> str:
        return str(self.quarantine_dir(batch_id))

    def discard(self, staging: Staging) -> None:
        shutil.rmtree(staging.directory, ignore_errors=True)
        shutil.rmtree(staging.scratch, ignore_errors=True)

    def publish(self, staging: Staging, record: BatchRecord) -> None:
        shutil.rmtree(staging.scratch, ignore_errors=True)
        for marker in staging.directory.rglob("_SUCCESS"):
            marker.unlink()
        record.published_at = time.time()
        record_file = staging.directory / RECORD_FILE
        record_file.write_text(json.dumps(record.to_json(), sort_keys=True))
        sync_file(record_file)
        sync_directory(staging.quarantine)
        sync_directory(staging.directory)
        intents = self._meta / "intents"
        intents.mkdir(parents=True, exist_ok=True)
        intent = intents / f"{record.batch_id}.json"
        with self._locked():
            self._fold_intents()  # a crashed run's batch counts before the overlap check
            stream = record.stream
            state = self.state(stream)
            try:
                check_publishable(state, record)
            except ConcurrentIngestError:
                self.discard(staging)
                raise
            _write_json(intent, {"batch_id": record.batch_id})
            failpoint("publish.after_intent")
            os.rename(staging.directory, self.output_dir(record.batch_id))
            sync_directory(self.root)
            sync_directory(staging.directory.parent)
            failpoint("publish.after_rename")
            self._fold(stream, state, record)
            failpoint("publish.after_state")
            intent.unlink()

    def recover(self) -> None:
        if not any((self._meta / "intents").glob("*.json")) and not compacted.intents(self.root):
            return
        with self._locked():
            self._fold_intents()
            compacted.finish_all(self.root)  # a compaction that crashed (sluice compact)

    def committed_files(self, quarantine: bool = False) -> list[Path]:
        """The files of every committed batch, each batch once (its good rows, or with
        ``quarantine`` its quarantined ones): listed under the sink's lock, after crashed
        publishes and compactions are finished, so that a compaction's switch (its merged
        directory in place, the directories it replaces not yet moved aside) is never seen."""
        if not self._meta.is_dir():  # nothing published here yet: no lock to take
            return []
        with self._locked():
            self._fold_intents()
            compacted.finish_all(self.root)
            directories = sorted(self.root.glob("batch_id=*"))
            if quarantine:
                return [f for d in directories for f in sorted(d.glob("_quarantine/*.parquet"))]
            return [f for d in directories for f in good_files(d)]

    def _fold_intents(self) -> None:
        """Fold in the batches of intents that crashed runs left (under the lock)."""
        for intent in sorted((self._meta / "intents").glob("*.json")):
            record = self.find(json.loads(intent.read_text())["batch_id"])
            if record is not None:
                self._fold(record.stream, self.state(record.stream), record)
            intent.unlink()

    def _fold(self, stream: StreamKey, state: StreamState, record: BatchRecord) -> None:
        if state.fold(record):
            path = self._stream_file(stream)
            path.parent.mkdir(parents=True, exist_ok=True)
            key = {"kind": stream.kind, "topic": stream.topic, "group": stream.group}
            _write_json(path, {"stream": key, "state": state.to_json()})

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self._meta.mkdir(parents=True, exist_ok=True)
        with open(self._meta / "lock", "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    # ---- dead letters ------------------------------------------------------------------

    def dead_letter_progress(self, batch_id: str) -> dict[str, Any] | None:
        data: dict[str, Any] | None = _read_json(self._meta / "dead_letters" / f"{batch_id}.json")
        return data

    def save_dead_letter_progress(self, batch_id: str, progress: dict[str, Any]) -> None:
        path = self._meta / "dead_letters" / f"{batch_id}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_json(path, progress)


def coordinates_of(files: Sequence[pq.ParquetFile]) -> pa.Table:
    """The coordinates (:func:`.base.with_coordinates`) of the rows of ``files``."""
    tables = [
        with_coordinates(f.read(columns=[c for c in ROW_COORDINATES if c in f.schema_arrow.names]))
        for f in files
    ]
    return pa.concat_tables(tables) if tables else no_coordinates()
