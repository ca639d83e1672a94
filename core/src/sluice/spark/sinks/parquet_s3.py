"""The Parquet dataset sink on S3 (``s3://BUCKET/PREFIX``): the local layout, committed by one
conditional object write, where a file system would rename a directory; each batch's files
appear at once, as multipart uploads completed after the commit.

::

    <prefix>/batch_id=<id>/part-<run>.parquet              the batch's good rows: ONE object
    <prefix>/batch_id=<id>/<key>=<value>/part-<run>.parquet  partitioned: one per directory
    <prefix>/batch_id=<id>/_quarantine/part-<run>.parquet  its bad rows: one object
    <prefix>/batch_id=<id>/_sluice_batch.json              its manifest: the record and its files
    <prefix>/_sluice/staging/<id>-<run>/                   a run's task files until it finishes
    <prefix>/_sluice/streams/<stream>/log/<n>.json         batch n of the stream: THE COMMIT
    <prefix>/_sluice/streams/<stream>/state.json           the state folded up to some n
    <prefix>/_sluice/runs/<stream>.json                    the lease of the one run (I7)
    <prefix>/_sluice/dead_letters/<id>.json                how far a batch's dead letters got

Commit protocol. A run holds its stream's lease (:mod:`.lease`) and its writing tasks write
their files to its own staging prefix. Before its commit it *assembles* the batch's objects
(:mod:`.uploads`): one multipart upload per object, holding the staged files' rows (copied by
the server from a single file, or merged by this process from several), not completed, so
invisible to every reader. It planned on the stream's state after ``n`` batches; its commit
point (invariant I2) is ONE write: the log entry ``n + 1`` (the record, the uploads: key,
upload id, parts, the staged files they hold), created with ``If-None-Match: *``. Exactly one
run can create entry ``n + 1``: a run that lost its lease, or any run that planned on an older
state, is refused there (:class:`ConcurrentIngestError`), aborts its uploads and deletes its
staging. Then the run *finishes* the batch, each step idempotent: it completes the uploads
(the quarantine's first, then the good rows'), writes the manifest, writes the state with
entry ``n + 1`` folded in (``If-Match``: a newer state is never replaced by an older one) and
deletes its staging. Whoever comes next (an ingest's :meth:`~S3ParquetSink.recover`, an audit,
``sluice.read_dataset``) finishes an entry a crash left unfinished; the next run of a batch
that never committed aborts the uploads it left (:meth:`~S3ParquetSink.stage`), and so does
``sluice expire`` for batches never run again.

A stream's state is the last state object plus the log entries after it: reading it is one
GET of the state and one GET that finds no next entry, whatever the history (I5).

What readers see. A plain reader of the prefix (pyarrow, Spark, Trino, DuckDB over
``batch_id=*/*.parquet``) sees a committed batch's good rows whole or not at all: they are one
object, which S3 shows only once complete; it never sees a batch that did not commit (its
uploads are never completed) nor staging (``_``-names). Partitioned (``partition_by``, as a
local dataset: :mod:`.parquet`), a batch is one object per partition directory: their
completions are sent together, so for about one request's time (and after a crash among
them, until the batch is finished) a reader of the whole prefix can see some of the batch's
directories and not others; each directory's rows of the batch whole or not at all.
Sluice's readers (``sluice audit``, :func:`sluice.read_dataset`) read the batches whose
manifest exists, and only the files it lists.

Object stores acknowledge a write once it is durable (I9): no ``fsync`` here.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ...queues.config import ConfigError
from .. import layout
from ..failpoints import failpoint
from ..partitioning import Partitioning, PartitionSpecError
from ..writing import ATTEMPTS_DIR, WriteTargets
from .base import (
    BatchRecord,
    ConcurrentIngestError,
    Staging,
    StreamKey,
    StreamState,
    check_publishable,
)
from .lease import Lease, hold
from .objects import Objects, PreconditionFailed
from .parquet import COLUMNS_FILE, QUARANTINE_DIR, RECORD_FILE, coordinates_of
from .s3 import S3Settings, StoreError, split_s3
from .uploads import Pending, assemble, complete

__all__ = ["S3ParquetSink", "S3Staging"]

log = logging.getLogger(__name__)

_KINDS = {"data": "", "quarantine": f"{QUARANTINE_DIR}/"}
#: Completions sent at once (a batch's partition directories).
_COMPLETIONS = 16


@dataclass
class _Run:
    name: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    committing: bool = False  # the commit was sent: its outcome may be unknown
    published: bool = False
    uploads: list[Pending] = field(default_factory=list)  # its batch's objects, assembled


@dataclass(frozen=True)
class S3Staging(Staging):
    """A run's staging: ``prefix`` in the bucket, and a local scratch directory."""

    prefix: str = ""
    run: _Run = field(default_factory=_Run)


class S3ParquetSink:
    """A Parquet dataset under ``s3://BUCKET/PREFIX`` (see the module docstring)."""

    def __init__(
        self,
        location: str,
        partition_by: str | Sequence[str] | Partitioning | None = None,
        settings: S3Settings | None = None,
    ) -> None:
        self.bucket, self.prefix = split_s3(location)
        self.location = f"s3://{self.bucket}/{self.prefix}".rstrip("/")
        self.settings = settings or S3Settings.resolve()
        self.objects = Objects(self.settings, self.bucket)
        self._leases: dict[StreamKey, Lease] = {}
        try:
            self.partitioning = Partitioning.parse(partition_by)
        except PartitionSpecError as exc:
            raise ConfigError(f"sink {self.location}: {exc}") from None

    def dataset_partitioning(self, adopt: bool = False) -> Partitioning:
        """The dataset's partition spec, as the local sink's
        (:meth:`.parquet.ParquetSink.dataset_partitioning`): the recorded one
        (``_sluice/partitioning.json``, created once with ``If-None-Match``), else the one
        given, which ``adopt`` records unless the dataset holds unpartitioned batches."""
        key = self._key("_sluice", "partitioning.json")
        given = self.partitioning
        for _ in range(2):
            recorded, _ = self.objects.get_json(key)
            if recorded is not None:
                spec = Partitioning.parse(recorded["partition_by"])
                if given and given != spec:
                    raise ConfigError(
                        f"The dataset {self.location} is partitioned by {spec}, and "
                        f"partition_by={given} was given. A dataset keeps one directory layout: "
                        f"give partition_by={spec} (or none: the dataset's own is used), or "
                        "write to another prefix."
                    )
                return spec
            if not given:
                return given
            if any(True for _ in self.records()):
                raise ConfigError(
                    f"The dataset {self.location} holds unpartitioned batches, and "
                    f"partition_by={given} was given. A dataset keeps one directory layout "
                    "(readers such as Spark refuse a mix): give no partition_by, or write to "
                    "another prefix."
                )
            if not adopt:
                return given
            try:
                self.objects.put_json(key, {"partition_by": str(given)}, if_none_match=True)
                return given
            except PreconditionFailed:
                continue  # another run recorded one first: compare with it
        raise ConfigError(f"The partition spec of {self.location} ({key}) cannot be read.")

    # ---- keys ----------------------------------------------------------------------------

    def _key(self, *parts: str) -> str:
        return "/".join(p.strip("/") for p in (self.prefix, *parts) if p.strip("/"))

    def _batch(self, batch_id: str) -> str:
        return self._key(f"batch_id={batch_id}")

    def _stream(self, stream: StreamKey) -> str:
        return self._key("_sluice", "streams", stream.slug)

    def _entry(self, stream: StreamKey, number: int) -> str:
        return f"{self._stream(stream)}/log/{number:012d}.json"

    def _uri(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    # ---- checking ------------------------------------------------------------------------

    def check(self) -> None:
        """The bucket exists, the credentials may list, write and delete under the prefix, and
        the server honours ``If-None-Match`` (else the sink could not fence two runs), and
        a partition spec given is the dataset's."""
        self.objects.check(
            self._key("_sluice", f"probe-{uuid.uuid4().hex[:12]}"),
            self.location,
            "the Parquet sink cannot make a commit that only one run wins",
            "or an Iceberg table (iceberg://CATALOG/NAMESPACE.TABLE)",
        )
        self.dataset_partitioning()  # another spec than the dataset's fails here

    # ---- reading -------------------------------------------------------------------------

    def _manifest(self, batch_id: str) -> dict[str, Any] | None:
        data, _ = self.objects.get_json(f"{self._batch(batch_id)}/{RECORD_FILE}")
        return data if isinstance(data, dict) else None

    def find(self, batch_id: str) -> BatchRecord | None:
        manifest = self._manifest(batch_id)
        return BatchRecord.from_json(manifest) if manifest else None

    def state(self, stream: StreamKey) -> StreamState:
        return self._state(stream)[0]

    def _state(self, stream: StreamKey) -> tuple[StreamState, int, str | None]:
        """The stream's state folded up to its last log entry, that entry's number, and the
        ETag of the state object (None: there is none)."""
        data, etag = self.objects.get_json(f"{self._stream(stream)}/state.json")
        state = StreamState.from_json(data["state"]) if data else StreamState()
        number = int(data["number"]) if data else 0
        while True:
            entry, _ = self.objects.get_json(self._entry(stream, number + 1))
            if entry is None:
                return state, number, etag
            state.fold(BatchRecord.from_json(entry["record"]))
            number += 1
            state.batches = number  # the log's count, whatever fold() said

    def records(self) -> Iterator[BatchRecord]:
        for batch in sorted(self.objects.children(f"{self.prefix}/" if self.prefix else "")):
            name = batch.rstrip("/").rsplit("/", 1)[-1]
            if name.startswith("batch_id="):
                manifest = self._manifest(name.removeprefix("batch_id="))
                if manifest:
                    yield BatchRecord.from_json(manifest)

    def unlisted(self) -> list[str]:
        """``s3://`` URIs of the Parquet objects in batch directories that no committed
        batch's manifest lists (:func:`sluice.audit.audit` reports them): what a plain reader
        would see of no committed batch. Nothing of Sluice's own writes them: a run's objects
        appear only after its commit."""
        root = f"{self.prefix}/" if self.prefix else ""
        listed: dict[str, set[str]] = {}
        found = []
        for key in self.objects.keys(root):
            inside = key[len(root) :]
            if not inside.startswith("batch_id=") or not key.endswith(".parquet"):
                continue
            directory, _, name = inside.partition("/")
            batch = directory.removeprefix("batch_id=")
            if batch not in listed:
                manifest = self._manifest(batch) or {}
                listed[batch] = {
                    f"{_KINDS[kind]}{n}"
                    for kind, names in manifest.get("files", {}).items()
                    for n in names
                }
            if name not in listed[batch]:
                found.append(self._uri(key))
        return found

    def published_files(self, quarantined: bool = False) -> list[str]:
        """``bucket/key`` of every file of the committed batches (for :func:`read_dataset`)."""
        found = []
        for record in self.records():
            manifest = self._manifest(record.batch_id) or {}
            found += self._files(manifest, "quarantine" if quarantined else "data")
        return found

    def _files(self, manifest: dict[str, Any], kind: str) -> list[str]:
        batch = self._batch(str(manifest["batch_id"]))
        names = (manifest.get("files") or {}).get(kind, [])
        return [f"{self.bucket}/{batch}/{_KINDS[kind]}{name}" for name in names]

    def filesystem(self) -> Any:
        return self.settings.filesystem()

    def _read(self, paths: list[str], columns: list[str] | None = None) -> pa.Table | None:
        if not paths:
            return None
        filesystem = self.filesystem()
        return pa.concat_tables(
            pq.read_table(p, filesystem=filesystem, columns=columns) for p in paths
        )

    def quarantine_table(self, batch_id: str) -> pa.Table:
        manifest = self._manifest(batch_id) or {"batch_id": batch_id}
        table = self._read(self._files(manifest, "quarantine"))
        return table if table is not None else pa.table({})

    def row_coordinates(self, batch_id: str, quarantined: bool) -> pa.Table:
        manifest = self._manifest(batch_id) or {"batch_id": batch_id}
        kind = "quarantine" if quarantined else "data"
        filesystem = self.filesystem()
        return coordinates_of(
            [pq.ParquetFile(p, filesystem=filesystem) for p in self._files(manifest, kind)]
        )

    def kept_columns(self) -> tuple[str, ...] | None:
        """The message columns the rows keep (:meth:`.parquet.ParquetSink.kept_columns`)."""
        if next(self.records(), None) is None:
            return None
        data, _ = self.objects.get_json(self._key("_sluice", COLUMNS_FILE))
        return layout.FULL if data is None else tuple(data["keep_message"])

    def keep_columns(self, kept: Sequence[str]) -> None:
        """Record the message columns the rows keep: the first batch's choice, kept."""
        first = next(self.records(), None) is None
        with suppress(PreconditionFailed):
            self.objects.put_json(
                self._key("_sluice", COLUMNS_FILE),
                {"keep_message": sorted(kept)},
                if_none_match=not first,
            )

    def output_location(self, batch_id: str) -> str:
        return self._uri(self._batch(batch_id))

    def quarantine_location(self, batch_id: str) -> str:
        return self._uri(f"{self._batch(batch_id)}/{QUARANTINE_DIR}")

    # ---- a run ---------------------------------------------------------------------------

    @contextmanager
    def exclusive(self, stream: StreamKey) -> Iterator[None]:
        with hold(
            self.objects, self._key("_sluice", "runs", f"{stream.slug}.json"), stream
        ) as lease:
            self._leases[stream] = lease
            try:
                yield
            finally:
                self._leases.pop(stream, None)

    def stage(self, batch_id: str) -> Staging:
        """A fresh staging prefix. Under a lease taken from a run that ended (released, or
        died on this machine), what earlier runs of this batch staged and assembled is theirs
        and dead: :meth:`recover` already finished any that committed, so it is deleted (its
        uploads aborted)."""
        leftovers = self._key("_sluice", "staging") + f"/{batch_id}-"
        if all(lease.clean for lease in self._leases.values()):
            self.objects.delete_prefix(leftovers)
            for key, upload, _ in self.objects.uploads(f"{self._batch(batch_id)}/"):
                self.objects.abort_upload(key, upload)
        run = _Run()
        scratch = Path(tempfile.mkdtemp(prefix="sluice-s3-"))
        prefix = f"{leftovers}{run.name}"
        return S3Staging(batch_id, scratch, scratch, prefix=prefix, run=run)

    def targets(self, staging: Staging, good: pa.Schema, bad: pa.Schema) -> WriteTargets:
        prefix = _staging(staging).prefix
        spec = self.dataset_partitioning(adopt=True)
        try:
            spec.check(good, "the batch's rows")
        except PartitionSpecError as exc:
            raise ConfigError(f"sink {self.location}: {exc}") from None
        return WriteTargets(
            self._uri(f"{prefix}/data"),
            self._uri(f"{prefix}/quarantine"),
            filesystem=self.settings.filesystem(),
            partitioning=spec,
        )

    def _staged(self, staging: S3Staging, kind: str) -> list[str]:
        """The run's staged files of ``kind``, relative to its directory (a partition
        directory's with it; not the writing tasks' attempts)."""
        base = f"{staging.prefix}/{kind}/"
        return sorted(
            k[len(base) :]
            for k in self.objects.keys(base)
            if k.endswith(".parquet") and not k[len(base) :].startswith(ATTEMPTS_DIR)
        )

    def _assemble(self, staging: S3Staging) -> dict[str, list[str]]:
        """The batch's objects as uploads not yet completed (:mod:`.uploads`): one per
        partition directory of its good rows, one of its quarantined rows, each named by the
        run; the manifest's ``files``."""
        files: dict[str, list[str]] = {}
        batch = self._batch(staging.batch_id)
        filesystem = self.filesystem()
        for kind, directory in _KINDS.items():
            groups: dict[str, list[str]] = {}
            for name in self._staged(staging, kind):
                groups.setdefault(name.rpartition("/")[0], []).append(name)
            for folder, names in sorted(groups.items()):
                name = f"{folder}/" if folder else ""
                name += f"part-{staging.run.name}.parquet"
                sources = [f"{staging.prefix}/{kind}/{n}" for n in names]
                key = f"{batch}/{directory}{name}"
                pending = assemble(self.objects, filesystem, kind, name, key, sources)
                staging.run.uploads.append(pending)
                files.setdefault(kind, []).append(name)
        return files

    def _abort(self, staging: S3Staging) -> None:
        for pending in staging.run.uploads:
            self.objects.abort_upload(pending.key, pending.upload)
        staging.run.uploads.clear()

    def _staged_rows(self, staging: S3Staging, kind: str) -> int:
        filesystem = self.filesystem()
        total = 0
        for name in self._staged(staging, kind):
            with filesystem.open_input_file(f"{self.bucket}/{staging.prefix}/{kind}/{name}") as f:
                total += pq.read_metadata(f).num_rows
        return total

    def staged_counts(self, staging: Staging) -> tuple[int, int]:
        s3 = _staging(staging)
        return self._staged_rows(s3, "data"), self._staged_rows(s3, "quarantine")

    def staged_quarantine_reasons(self, staging: Staging) -> dict[str, str]:
        s3 = _staging(staging)
        paths = [
            f"{self.bucket}/{s3.prefix}/quarantine/{n}" for n in self._staged(s3, "quarantine")
        ]
        table = self._read(paths, ["message_id", "reason"])
        if table is None:
            return {}
        return dict(zip(*table.to_pydict().values(), strict=True))

    def discard(self, staging: Staging) -> None:
        """Delete the run's staging, unless its commit may have happened (invariant I8)."""
        s3 = _staging(staging)
        shutil.rmtree(s3.scratch, ignore_errors=True)
        if s3.run.published:
            return
        if s3.run.committing:
            log.warning(
                "The commit of batch %s to %s may or may not have happened (its answer was "
                "lost); its staged files are kept. The next ingest or audit of the sink "
                "finishes the batch if it was committed.",
                s3.batch_id,
                self.location,
            )
            return
        try:
            self._abort(s3)
            self.objects.delete_prefix(s3.prefix + "/")
        except StoreError as exc:
            log.warning("Could not delete the staging of batch %s: %s", s3.batch_id, exc)

    def publish(self, staging: Staging, record: BatchRecord) -> None:
        s3 = _staging(staging)
        shutil.rmtree(s3.scratch, ignore_errors=True)
        record.published_at = time.time()
        record.run = s3.run.name
        stream = record.stream
        state, number, _ = self._state(stream)
        try:
            lease = self._leases.get(stream)
            if lease is not None and lease.lost:
                raise ConcurrentIngestError(
                    f"The lease of {stream.kind} topic '{stream.topic}' on {self.location} was "
                    f"taken by another run while batch {record.batch_id} was ingested. Nothing "
                    "was published or committed; run the batch again."
                )
            check_publishable(state, record)
        except ConcurrentIngestError:
            self.discard(staging)
            raise
        try:
            files = self._assemble(s3)
        except BaseException:
            self.discard(staging)
            raise
        failpoint("publish.after_intent")
        entry = {
            "record": record.to_json(),
            "files": files,
            "staging": s3.prefix,
            "objects": [p.to_json() for p in s3.run.uploads],
        }
        position = number + 1
        s3.run.committing = True
        try:
            self.objects.put_json(self._entry(stream, position), entry, if_none_match=True)
        except PreconditionFailed:
            found, _ = self.objects.get_json(self._entry(stream, position))
            if not found or found.get("record", {}).get("run") != s3.run.name:
                s3.run.committing = False  # another run's entry: ours did not happen
                self.discard(staging)
                raise ConcurrentIngestError(
                    f"Another ingest of {stream.kind} topic '{stream.topic}' committed batch "
                    f"{position} of the stream on {self.location} while batch {record.batch_id} "
                    "was ingested. Nothing was published or committed; run the batch again."
                ) from None
            # ours: a retry of a write whose first answer was lost
        s3.run.published = True
        failpoint("publish.after_rename")
        self._finish(stream, position, entry)
        failpoint("publish.after_state")

    # ---- finishing a committed batch -----------------------------------------------------

    def _finish(self, stream: StreamKey, position: int, entry: dict[str, Any]) -> None:
        """The steps after a commit, each idempotent, whoever runs them."""
        record = BatchRecord.from_json(entry["record"])
        batch = self._batch(record.batch_id)
        manifest_key = f"{batch}/{RECORD_FILE}"
        if not self.objects.exists(manifest_key):
            if "objects" in entry:
                self._complete([Pending.from_json(p) for p in entry["objects"]])
            else:  # committed by an earlier version, which copied the files one by one
                for kind, names in entry["files"].items():
                    for name in names:
                        source = f"{entry['staging']}/{kind}/{name}"
                        self.objects.copy(source, f"{batch}/{_KINDS[kind]}{name}")
            manifest = {**record.to_json(), "files": entry["files"]}
            self.objects.put_json(manifest_key, manifest)
        self._save_state(stream, position)
        self.objects.delete_prefix(entry["staging"] + "/")

    def _complete(self, objects: list[Pending]) -> None:
        """Make a committed batch's objects appear: its quarantined rows first (a reader that
        sees a good row of the batch can find its bad rows), then every partition directory's
        good rows at once (one completion each, sent together)."""
        filesystem = self.filesystem()
        for pending in objects:
            if pending.kind == "quarantine":
                complete(self.objects, filesystem, pending)
        failpoint("publish.midway")
        data = [p for p in objects if p.kind == "data"]
        if len(data) == 1:
            complete(self.objects, filesystem, data[0])
        elif data:
            with ThreadPoolExecutor(min(len(data), _COMPLETIONS)) as pool:
                for done in [pool.submit(complete, self.objects, filesystem, p) for p in data]:
                    done.result()

    def _save_state(self, stream: StreamKey, position: int) -> None:
        """Fold the log up to ``position`` into the state object, unless it is there already
        (or further: another finisher was quicker)."""
        for _ in range(10):
            data, etag = self.objects.get_json(f"{self._stream(stream)}/state.json")
            state = StreamState.from_json(data["state"]) if data else StreamState()
            number = int(data["number"]) if data else 0
            if number >= position:
                return
            while number < position:
                entry, _ = self.objects.get_json(self._entry(stream, number + 1))
                if entry is None:
                    return  # cannot happen: entries are never deleted
                state.fold(BatchRecord.from_json(entry["record"]))
                number += 1
                state.batches = number
            key = {"kind": stream.kind, "topic": stream.topic, "group": stream.group}
            body = {"stream": key, "number": number, "state": state.to_json()}
            try:
                if etag is None:
                    self.objects.put_json(
                        f"{self._stream(stream)}/state.json", body, if_none_match=True
                    )
                else:
                    self.objects.put_json(f"{self._stream(stream)}/state.json", body, if_match=etag)
                return
            except PreconditionFailed:
                continue

    def recover(self) -> None:
        """Finish every committed batch a crash left unfinished: per stream, the log entries
        after its state object (one GET each, and one that finds none)."""
        for prefix in self.objects.children(self._key("_sluice", "streams") + "/"):
            slug = prefix.rstrip("/").rsplit("/", 1)[-1]
            data, _ = self.objects.get_json(f"{prefix}state.json")
            number = int(data["number"]) if data else 0
            while True:
                entry, _ = self.objects.get_json(f"{prefix}log/{number + 1:012d}.json")
                if entry is None:
                    break
                number += 1
                record = BatchRecord.from_json(entry["record"])
                if record.stream.slug == slug:
                    self._finish(record.stream, number, entry)

    # ---- dead letters --------------------------------------------------------------------

    def dead_letter_progress(self, batch_id: str) -> dict[str, Any] | None:
        data, _ = self.objects.get_json(self._key("_sluice", "dead_letters", f"{batch_id}.json"))
        return data if isinstance(data, dict) else None

    def save_dead_letter_progress(self, batch_id: str, progress: dict[str, Any]) -> None:
        self.objects.put_json(self._key("_sluice", "dead_letters", f"{batch_id}.json"), progress)


def _staging(staging: Staging) -> S3Staging:
    if not isinstance(staging, S3Staging):
        raise TypeError(f"not an S3 staging area: {staging!r}")
    return staging
