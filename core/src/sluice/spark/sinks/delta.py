"""The Delta Lake sink: ``delta://PATH``, one Delta commit per batch, on delta-rs (``deltalake``).

::

    <table>/_delta_log/                               the Delta log (delta-rs writes it)
    <table>/sluice/<batch>/<run>/part-*.parquet       the files Spark wrote, as added
    <table>/_quarantine/                              the quarantine Delta table (or ?quarantine=)
    <table>/_sluice/streams/<stream>/<n>.json         the stream's state after its batch n
    <table>/_sluice/batches/<batch>.json              each published batch's record (the audit)
    <table>/_sluice/dead_letters/<batch>.json         how far a batch's dead letters got
    <table>/_sluice/message_columns.json              the message columns its rows keep
    <table>/_sluice/runs/<stream>.lock                held by the one run of a stream (I7)

``delta://PATH`` names the table's directory (``delta:///abs/path``, ``delta://relative/path``);
a directory that already holds a ``_delta_log`` is a Delta table too, given as a path or a
``file://`` URI. ``delta://s3://BUCKET/PATH`` is a table on S3 (or an S3-compatible server),
with the credentials of the other S3 sinks (:class:`.s3.S3Settings`); ``delta://gs://BUCKET/PATH``
and ``delta://az://CONTAINER/PATH`` (``abfs[s]://CONTAINER@ACCOUNT...``) tables on Google Cloud
Storage and Azure Blob Storage, with their standard variables (:mod:`.cloud`), kept as on S3
with each store's own create-if-absent and replace-if-unchanged.

Where the files are. The sink's own files go through a table store (:mod:`.tablestore`), so
the protocol below reads the same on both: on a local file system a JSON file is replaced by
``rename`` after ``fsync``, and the one run of a stream holds ``flock``; on S3 every JSON
object is written with a conditional write (``If-None-Match: *``, or ``If-Match`` on the
ETag the run read), the one run holds a lease object (:mod:`.lease`), and delta-rs commits
each log entry with ``If-None-Match: *`` (``aws_conditional_put=etag``; delta-rs 1.x has no
locking provider, and the settings that would ask for one or for an unsafe rename are
refused: :func:`check_s3_commits`). A server that ignores conditional writes is refused by
:meth:`DeltaSink.check`.

Tables. Created on the first ingest from the good rows' schema: the payload fields, Kafka's
coordinates (partition, offset, timestamp), the message columns the rows keep
(``keep_message``, :mod:`..layout`: recorded in ``message_columns.json`` before the table is
made; a table without that file was made before the choice existed and keeps the whole
message) and a ``batch_id`` column (the quarantine table: the whole message, ``reason`` and
``batch_id``); every field nullable, unpartitioned (a batch's rows are found by
the ``batch_id`` statistics of their files, one batch per file). A new field in a later batch
is added (its own metadata commit); a field whose type changes is refused with a
:class:`ConfigError` naming it.

Commit protocol, kafka-delta-ingest's idempotent writes:

1. The Spark job writes the batch's Parquet files (:mod:`sluice.spark.writing`) under the
   table's directory, ``sluice/<batch>/<run>/``; they become the table's data files as they are.
2. The stream's next state (the batch folded in) is written to ``streams/<stream>/<n>.json``,
   ``n`` being the stream's batch sequence, with the batch as *pending* (its record and its
   quarantine files). Nothing reads it until step 3 names ``n``.
3. ONE Delta commit is the commit point (invariant I2): it adds the good files and carries a
   ``txn`` action whose application id is the stream (``sluice-<stream>``) and whose version is
   ``n``; its ``commitInfo`` names the batch (``sluice.batch-id``, ``sluice.run``,
   ``sluice.kind``, ``sluice.topic``, ``sluice.group``, ``sluice.ranges``, ``sluice.record``).
   The stream's state is the file of the version the log's ``txn`` says: a rerun after a crash
   learns from the log whether its batch was committed. A file the log names that is gone or
   unreadable is rebuilt from the batches' records (:meth:`DeltaSink._rebuild`). delta-rs's own
   retry is off (``max_commit_retries=0``): on a conflict the sink reloads, checks again that no
   other run of the stream published meanwhile (else :class:`ConcurrentIngestError`), and
   commits again.
4. Then the quarantine files are committed to the quarantine table with the same ``txn``
   (so exactly once: a quarantine table whose ``txn`` for the stream is ``n`` has them), and the
   record is written to ``batches/``. A crash before they are done is finished by the next
   run's (or an audit's) :meth:`DeltaSink.recover`, from the pending batch of each stream's
   state.

One run per stream (I7): ``runs/<stream>.lock`` (``flock``, as the Parquet sink; on S3 the
lease ``runs/<stream>.json``) from the first step to the offsets' commit; the ``txn`` version
is a second fence. A commit whose outcome is unknown (an I/O error other than a conflict)
deletes nothing (I8): the next run reads the log. A conflict after which the stream's state
names this run's own batch is checked against the log: the commit that set the ``txn`` names
its run (a commit whose answer was lost, retried by object_store, fails its own
``If-None-Match`` and comes back as a conflict). Everything the commit depends on is synced
first, and the commit's log file after (I9); on S3 an acknowledged write is durable.

Reading: ``state()`` loads the log (delta-rs checkpoints every 100 commits, so bounded: I5) and
reads one state file; ``find()`` one record file; ``records()`` and ``row_coordinates()`` (the
audit) list the records and scan the tables. Readers: ``deltalake.DeltaTable(path)``, DuckDB's
``delta_scan``, Polars' ``scan_delta``, Spark with Delta; none reads ``_sluice``, ``_quarantine``
or files that no commit added.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import logging
import math
import os
import re
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path, PurePath, PurePosixPath
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, quote, urlsplit

import pyarrow as pa
import pyarrow.compute as pc

from ...cdc import POSITION_COLUMN, Reduced, TableShape
from ...cdc.columns import quote as quote_name
from ...errors import StreamStateError
from ...queues.config import ConfigError
from .. import layout
from ..failpoints import failpoint
from ..writing import WriteTargets
from .base import (
    ROW_COORDINATES,
    BatchRecord,
    ConcurrentIngestError,
    Staging,
    StreamKey,
    StreamState,
    check_publishable,
    coordinates_by_batch,
    no_coordinates,
)
from .tablestore import CloudStore, LocalStore, ObjectStore, S3Store, TableStore
from .upsert import (
    Held,
    Plan,
    UpsertMode,
    conform,
    merge_predicate,
    plan,
    truncated_rows_predicate,
    unsent_columns,
)

if TYPE_CHECKING:
    from deltalake import DeltaTable

__all__ = [
    "BATCH_COLUMN",
    "SCHEME",
    "DeltaSink",
    "DeltaStaging",
    "DeltaTarget",
    "app_id",
    "is_delta",
    "parse_delta_uri",
]

log = logging.getLogger(__name__)

SCHEME = "delta"
BATCH_COLUMN = "batch_id"
QUARANTINE_DIR = "_quarantine"
META_DIR = "_sluice"
#: Commit attempts on conflicts before giving up.
COMMIT_ATTEMPTS = 30
PREFIX = "sluice."
#: A current-state table's key columns (``{"key_columns": [...]}``), in the ``_sluice`` directory.
CDC_FILE = "cdc.json"
#: The message columns the rows keep (``{"keep_message": [...]}``), in the ``_sluice`` directory.
COLUMNS_FILE = "message_columns.json"
_DELETED = "_sluice_deleted"  # the merge source's column: the change deletes its key's row
_BASE_SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
        ("message_id", pa.string()),
        (BATCH_COLUMN, pa.string()),
    ]
)
#: A new table's properties on an object store: a checkpoint every 10 commits (delta-rs's
#: default is 100), since each load of the table GETs every commit after the last one
#: (bench/delta_s3.py: a batch's GETs grow with the commits since the checkpoint).
_S3_TABLE = {"delta.checkpointInterval": "10"}
_QUARANTINE_SCHEMA = _BASE_SCHEMA.insert(8, pa.field("reason", pa.string()))
_HINT = (
    "Write it as delta://PATH, e.g. delta://./data/readings or delta:///lake/readings, or "
    "delta://s3://BUCKET/PATH for a table on S3 (delta://gs://BUCKET/PATH on Google Cloud "
    "Storage, delta://az://CONTAINER/PATH on Azure Blob Storage), optionally ?quarantine=PATH "
    "(on an object store: ?quarantine=s3://BUCKET/PATH, in the same bucket)."
)
#: Object stores delta-rs can write that Sluice does not keep a Delta sink's state on yet.
_OTHER_STORES = ("adl", "oss", "hdfs", "lakefs", "wasb", "wasbs")
#: The object stores the sink writes tables on: a location's scheme -> the store's.
_SCHEMES = {"s3": "s3", "s3a": "s3", "gs": "gs", "az": "az", "abfs": "az", "abfss": "az"}
#: delta-rs's settings of an S3 commit that the sink refuses (see :func:`check_s3_commits`).
_UNSAFE = ("AWS_S3_LOCKING_PROVIDER", "AWS_S3_ALLOW_UNSAFE_RENAME")


def is_delta(location: object) -> bool:
    """Whether ``location`` names a Delta table: ``delta://...``, or a local directory (path or
    ``file://`` URI) that holds a ``_delta_log``."""
    if isinstance(location, str) and location.lower().startswith(f"{SCHEME}://"):
        return True
    if not isinstance(location, (str, os.PathLike)):
        return False
    text = os.fspath(location)
    parts = urlsplit(text)
    if parts.scheme == "file":
        text = parts.path
    elif parts.scheme and len(parts.scheme) > 1:
        return False
    return (Path(text) / "_delta_log").is_dir()


@dataclass(frozen=True)
class DeltaTarget:
    """What a Delta sink location names: the table's and the quarantine table's directories
    (local paths; on S3 ``/BUCKET/KEY`` paths, in ``bucket``)."""

    table: PurePath
    quarantine: PurePath
    bucket: str | None = None
    #: the object store's scheme: ``s3``, ``gs`` or ``az`` (None: a local path)
    scheme: str | None = None
    #: an Azure account an ``abfss://CONTAINER@ACCOUNT.dfs.core.windows.net`` location names
    account: str | None = None

    def uri(self, path: PurePath) -> str:
        """What delta-rs opens: the local path, or ``s3://BUCKET/KEY`` (``gs://``, ``az://``)."""
        return f"{self.scheme or 's3'}:/{path}" if self.bucket else str(path)


def parse_delta_uri(location: str | os.PathLike[str]) -> DeltaTarget:
    """``delta://PATH[?quarantine=PATH]``, ``delta://s3://BUCKET/PATH[?quarantine=s3://...]``,
    or the path or ``file://`` URI of a Delta table."""
    text = os.fspath(location)
    query = ""
    if text.lower().startswith(f"{SCHEME}://"):
        text, _, query = text[len(SCHEME) + 3 :].partition("?")
        if not text:
            raise ConfigError(f"sink {os.fspath(location)!r} names no directory. {_HINT}")
    options = parse_qs(query)
    unknown = sorted(set(options) - {"quarantine"})
    if unknown:
        raise ConfigError(
            f"sink {os.fspath(location)!r}: unknown option(s) {', '.join(unknown)}. {_HINT}"
        )
    parts = urlsplit(text)
    scheme = parts.scheme.lower()
    if scheme in _SCHEMES:
        return _s3_target(os.fspath(location), text, options.get("quarantine", [None])[-1])
    if scheme == "file":
        text = parts.path
    elif scheme in _OTHER_STORES:
        raise ConfigError(
            f"sink {os.fspath(location)!r}: the Delta sink writes tables on local (or mounted) "
            "file systems, S3, Google Cloud Storage and Azure Blob Storage, not yet on "
            f"{scheme}://: the stream state it keeps beside the table needs conditional writes, "
            "which Sluice makes on those stores only. Mount the store as a local directory, or "
            f"use one of those. {_HINT}"
        )
    elif scheme and len(scheme) > 1:
        raise ConfigError(
            f"sink {os.fspath(location)!r}: the Delta sink writes tables on local (or mounted) "
            f"file systems and on S3, not {scheme}://. {_HINT}"
        )
    table = Path(text).absolute()
    quarantine = table / QUARANTINE_DIR
    if "quarantine" in options:
        quarantine = Path(options["quarantine"][-1]).absolute()
    if quarantine == table:
        raise ConfigError(f"sink {os.fspath(location)!r}: the quarantine must be another table.")
    return DeltaTarget(table, quarantine)


def _bucket(text: str) -> tuple[str, str, str, str | None]:
    """(scheme: s3, gs or az; bucket or container; key; Azure account or None) of an object
    store URI (``abfss://CONTAINER@ACCOUNT.dfs.core.windows.net/PATH`` names the account)."""
    parts = urlsplit(text)
    scheme = _SCHEMES[parts.scheme.lower()]
    bucket, account = parts.netloc, None
    if scheme == "az" and "@" in bucket:
        bucket, _, host = bucket.partition("@")
        account = host.split(".", 1)[0] or None
    return scheme, bucket, parts.path.strip("/"), account


def _s3_target(location: str, text: str, quarantine_uri: str | None) -> DeltaTarget:
    scheme, bucket, key, account = _bucket(text)
    if not bucket or not key:
        raise ConfigError(
            f"sink {location!r} names no table in a bucket: delta://{scheme}://BUCKET/PATH. {_HINT}"
        )
    table = PurePosixPath("/", bucket, key)
    quarantine = table / QUARANTINE_DIR
    if quarantine_uri is not None:
        other = urlsplit(quarantine_uri)
        same = other.scheme.lower() in _SCHEMES and _bucket(quarantine_uri)[:2] == (
            scheme,
            bucket,
        )
        if not same:
            raise ConfigError(
                f"sink {location!r}: the quarantine of a table on an object store is a table in "
                f"the same bucket: ?quarantine={scheme}://{bucket}/PATH, not {quarantine_uri!r}."
            )
        quarantine = PurePosixPath("/", bucket, _bucket(quarantine_uri)[2])
    if quarantine == table or len(quarantine.parts) < 3:
        raise ConfigError(f"sink {location!r}: the quarantine must be another table.")
    return DeltaTarget(table, quarantine, bucket, scheme, account)


def check_s3_commits(location: str) -> None:
    """Refuse the settings that would make delta-rs's commits on S3 unsafe, or not what the
    user asked for. delta-rs 1.x commits a log entry with ``If-None-Match: *``
    (object_store's ``aws_conditional_put=etag``, which the sink sets) and has no locking
    provider any more (its DynamoDB log store is gone): a named locking provider would be
    ignored, and an unsafe rename is never how Sluice commits."""
    for name in _UNSAFE:
        value = os.environ.get(name, "")
        if value and value.lower() not in ("false", "0", "no"):
            raise ConfigError(
                f"The Delta sink {location} commits to S3 with conditional writes "
                f"(If-None-Match: *) only, and {name}={value} is set: delta-rs no longer has a "
                "locking provider (its DynamoDB log store is gone), and an unsafe rename can "
                "lose a commit. Unset it. Every writer of the table must commit with "
                "conditional writes (delta-rs 1.x, or Delta Lake's own S3 conditional writes); "
                "an S3 server without them cannot hold a Delta table that Sluice writes."
            )
    for name in ("AWS_CONDITIONAL_PUT", "aws_conditional_put"):
        value = os.environ.get(name, "")
        if value and value.strip().lower() != "etag":
            raise ConfigError(
                f"The Delta sink {location} commits to S3 with conditional writes, and "
                f"{name}={value} is set: unset it (or set it to etag). An S3 server without "
                "conditional writes cannot hold a Delta table that Sluice writes."
            )


def _object_store(target: DeltaTarget, location: str) -> ObjectStore:
    """The store of a table on S3, GCS or Azure, with the settings the environment gives."""
    assert target.bucket is not None
    if target.scheme == "gs":
        from .cloud import gcs_settings

        return CloudStore(target.bucket, gcs_settings())
    if target.scheme == "az":
        from .cloud import azure_settings

        return CloudStore(target.bucket, azure_settings(target.account))
    check_s3_commits(location)
    return S3Store(target.bucket)


def app_id(stream: StreamKey) -> str:
    """The Delta ``txn`` application id of a stream."""
    return f"sluice-{stream.slug}"


@dataclass
class _Run:
    name: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    data: PurePath | None = None
    quarantine: PurePath | None = None
    committing: bool = False  # the commit was sent: its outcome may be unknown
    published: bool = False
    changes: Reduced | None = None  # upsert: the staged messages as changes (reduce_staged)


@dataclass(frozen=True)
class DeltaStaging(Staging):
    """A run's staging: its files are written under the tables' directories."""

    run: _Run = field(default_factory=_Run)


def _run(staging: Staging) -> _Run:
    if not isinstance(staging, DeltaStaging):
        raise TypeError(f"not a Delta staging area: {staging!r}")
    return staging.run


def _parquet_files(store: TableStore, directory: PurePath | None) -> list[PurePath]:
    return [] if directory is None else store.files(directory, ".parquet")


def _rows(store: TableStore, files: list[PurePath]) -> int:
    return sum(store.parquet_metadata(f).num_rows for f in files)


_REASON_COLUMNS = ("message_id", "reason")


def _reasons(rows: pa.Table) -> dict[str, str]:
    """message_id -> reason of quarantined rows."""
    return dict(zip(*rows.select(list(_REASON_COLUMNS)).to_pydict().values(), strict=True))


def _reasons_in(store: TableStore, files: list[PurePath]) -> dict[str, str]:
    """message_id -> reason of the quarantined rows in ``files``."""
    if not files:
        return {}
    return _reasons(
        pa.concat_tables(store.read_parquet(f, columns=list(_REASON_COLUMNS)) for f in files)
    )


def _hashed(batch_id: str) -> str:
    return hashlib.sha256(batch_id.encode()).hexdigest()[:32]


def _directory_name(batch_id: str) -> str:
    """A batch's directory name: readable, and safe in a Delta path (no ':', '%', spaces)."""
    readable = re.sub(r"[^A-Za-z0-9_.\-]", "_", batch_id)[:60]
    return f"{readable}-{_hashed(batch_id)[:10]}"


def _stats(metadata: Any) -> str:
    """The add action's statistics of a data file: its row count, and the minimum, maximum and
    null count of every top-level column the Parquet footer has them for. All of them, not
    only the batch and offset columns: delta-rs's ``to_pyarrow_dataset`` turns a column's
    missing bounds into ``column >= null``, so a filter on it would skip every file.
    ``metadata``: the file's Parquet footer."""
    stats: dict[str, Any] = {"numRecords": metadata.num_rows}
    low: dict[str, Any] = {}
    high: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    for index in range(metadata.num_columns if metadata.num_rows else 0):
        name = metadata.schema.column(index).path
        if "." in name:  # a leaf of a nested column (headers): Delta keeps no bounds of those
            continue
        groups = [
            metadata.row_group(g).column(index).statistics for g in range(metadata.num_row_groups)
        ]
        if not all(g is not None and g.has_null_count for g in groups):
            continue
        nulls[name] = sum(g.null_count for g in groups)
        if all(g.has_min_max for g in groups):  # else unknown: an all-null row group has none
            bounds = (
                _bound(min(g.min for g in groups), False),
                _bound(max(g.max for g in groups), True),
            )
            if None not in bounds:
                low[name], high[name] = bounds
    if low:
        stats["minValues"], stats["maxValues"] = low, high
    if nulls:
        stats["nullCount"] = nulls
    return json.dumps(stats)


def _bound(value: Any, upper: bool) -> Any:
    """A column's minimum (or maximum) as the Delta log writes it; None for a type whose
    bounds Delta does not keep (binary) or a NaN. Timestamps are kept to the millisecond:
    a maximum is rounded up, so that it stays at or above every value."""
    if isinstance(value, dt.datetime):
        value = value.astimezone(dt.UTC) if value.tzinfo else value
        floor = value.replace(microsecond=value.microsecond // 1000 * 1000)
        if upper and floor != value:
            floor += dt.timedelta(milliseconds=1)
        text = floor.isoformat(timespec="milliseconds")
        return text.replace("+00:00", "Z") if floor.tzinfo else text
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, float):
        return None if math.isnan(value) else value
    if isinstance(value, (bool, int, str)):
        return value
    return None


class DeltaSink(UpsertMode):
    """A Delta table and its quarantine table (see the module docstring)."""

    def __init__(self, location: str | os.PathLike[str], store: TableStore | None = None) -> None:
        self.target = parse_delta_uri(location)
        self.root = self.target.table
        self.location = os.fspath(location)
        self._meta = self.root / META_DIR
        if store is None and self.target.bucket is not None:
            store = _object_store(self.target, self.location)
        #: where the tables and the sink's own files are (:mod:`.tablestore`)
        self.store: TableStore = store or LocalStore()
        self._finished: set[str] = set()  # pending batches this object finished
        self._coordinates: dict[tuple[bool, int | None], dict[str, pa.Table]] = {}
        self._kept: tuple[str, ...] | None = None  # the message columns the rows keep

    def kept_columns(self) -> tuple[str, ...] | None:
        """The message columns the table's rows keep (:mod:`..layout`): as recorded, or the
        whole message for a table Sluice wrote before they were recorded; None: no table
        yet, or one made outside Sluice that no batch has written (its first batch records
        the choice)."""
        if self._load(self.root) is None:
            return None
        stored = self.store.read_json(self._meta / COLUMNS_FILE)
        if stored is not None:
            return tuple(stored["keep_message"])
        return layout.FULL if self.store.subdirectories(self._meta / "streams") else None

    def keep_columns(self, kept: Sequence[str]) -> None:
        """Record the message columns the rows keep: before the table is made (so a table
        without the record is one made before it existed), kept from then on."""
        self._kept = tuple(sorted(kept))
        document = {"keep_message": list(self._kept)}
        if self._load(self.root) is None:
            self.store.write_json(self._meta / COLUMNS_FILE, document)
        else:
            self.store.create_json(self._meta / COLUMNS_FILE, document)

    def _base_schema(self, kind: str) -> pa.Schema:
        """The table's columns before any payload field: those of the message it keeps."""
        if self._kept is None:
            return _BASE_SCHEMA
        columns = layout.message_columns(self._kept, kind)
        return pa.schema([f for f in _BASE_SCHEMA if f.name in (*columns, BATCH_COLUMN)])

    def current_key_columns(self) -> list[str] | None:
        """A current-state table's key columns (None: the table appends messages)."""
        stored = self.store.read_json(self._meta / CDC_FILE)
        return list(stored["key_columns"]) if stored is not None else None

    def current_rows(self) -> pa.Table:
        """Every row of a current-state table (for the audit)."""
        table = self._load(self.root)
        return table.to_pyarrow_table() if table is not None else pa.table({})

    def _check_kind(self) -> None:
        """A current-state table is never appended to, nor the other way round; its key
        columns stay the ones it was made with."""
        stored = self.current_key_columns()
        published = bool(self.store.files(self._meta / "batches", ".json"))
        if stored is None and self.upserting and published:
            raise ConfigError(
                f"The Delta table {self.root} holds appended messages; write_mode='upsert' "
                "keeps a current-state table of its own: ingest the change stream into a new "
                "table."
            )
        if stored is not None and not self.upserting:
            raise ConfigError(
                f"The Delta table {self.root} is a current-state table (write_mode='upsert', "
                f"key columns {', '.join(stored)}): ingest into it with write_mode='upsert', "
                "or append the messages to another table."
            )
        if stored and self.key_columns and stored != self.key_columns:
            raise ConfigError(
                f"The Delta table {self.root} is keyed by {', '.join(stored)}, not "
                f"{', '.join(self.key_columns)}: give key_columns={stored} (or none), or "
                "ingest into a new table."
            )

    # ---- tables --------------------------------------------------------------------------

    def check(self) -> None:
        """Create the table's directory if needed, write a probe file in it (on S3: check
        that the server honours conditional writes), and open the tables that exist."""
        self.check_store()
        for path in (self.target.table, self.target.quarantine):
            try:
                self._load(path)
            except Exception as exc:
                raise ConfigError(f"The Delta table at {path} cannot be opened: {exc}") from None
        if self.upserting:  # (maintenance opens a current-state table too)
            self._check_kind()

    def check_store(self) -> None:
        """The table's directory is writable; on S3, the bucket is there, the credentials may
        list, write and delete, and the server honours ``If-None-Match: *`` (the commits of
        delta-rs and of the sink's own files need it)."""
        if isinstance(self.store, ObjectStore):
            self.store.check(
                self._meta / f"probe-{uuid.uuid4().hex[:12]}",
                self.uri(self.root),
                "neither delta-rs's commits nor the sink's stream state can be made so that "
                "only one writer wins",
                "(a server without them cannot hold a Delta table that Sluice writes)",
            )
            return
        try:
            self.store.makedirs(self.root)
            probe = Path(self.root) / f".sluice-probe-{uuid.uuid4().hex[:8]}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            raise ConfigError(
                f"The sink {self.root} is not writable ({exc.strerror or exc}): choose a "
                "directory you can write, e.g. delta://./data/readings."
            ) from None

    def uri(self, path: PurePath) -> str:
        """What delta-rs and readers open for ``path``: a local path, or ``s3://...``."""
        return self.store.uri(path)

    def open_table(self, path: PurePath) -> DeltaTable:
        """The Delta table at ``path`` (TableNotFoundError: there is none)."""
        from deltalake import DeltaTable

        return DeltaTable(self.uri(path), storage_options=self.store.storage_options)

    def _load(self, path: PurePath) -> DeltaTable | None:
        from deltalake.exceptions import TableNotFoundError

        if not self.store.is_dir(path / "_delta_log"):
            return None
        try:
            return self.open_table(path)
        except TableNotFoundError:  # a _delta_log without a commit yet: a table being created
            return None

    def _ensure(self, path: PurePath, schema: pa.Schema) -> DeltaTable:
        """The table at ``path``, created with ``schema`` or extended by its new fields."""
        from deltalake import DeltaTable
        from deltalake import Schema as DeltaSchema

        schema = pa.schema([f.with_nullable(True) for f in schema])
        table = self._load(path)
        if table is None:
            self.store.makedirs(path)
            with contextlib.suppress(Exception):  # another run created it first: loaded below
                DeltaTable.create(
                    self.uri(path),
                    schema=schema,
                    mode="ignore",
                    storage_options=self.store.storage_options,
                    configuration=None if self.store.local else _S3_TABLE,
                )
            table = self._load(path)
            if table is None:
                raise RuntimeError(f"the Delta table at {path} could not be created")
        wanted = DeltaSchema.from_arrow(schema)
        existing = {f.name: f for f in table.schema().fields}
        new = []
        for wanted_field in wanted.fields:
            have = existing.get(wanted_field.name)
            if have is None:
                new.append(wanted_field)
            elif _type_name(have.type) != _type_name(wanted_field.type):
                raise ConfigError(
                    f"The batch's rows do not fit the Delta table at {path}: field "
                    f"'{wanted_field.name}' is {_type_name(have.type)} in the table and "
                    f"{_type_name(wanted_field.type)} in the batch. A new field is added to the "
                    "table, but a field cannot change its type: keep the schema's type, or "
                    "ingest into another table."
                )
        if new:
            try:
                table.alter.add_columns(new)
            except Exception:  # a concurrent run added them: check again on a fresh table
                table = self._load(path) or table
                have_now = {f.name for f in table.schema().fields}
                missing = [f for f in new if f.name not in have_now]
                if missing:
                    table.alter.add_columns(missing)
            table = self._load(path) or table
        return table

    # ---- streams -------------------------------------------------------------------------

    def _stream_dir(self, stream_slug: str) -> PurePath:
        return self._meta / "streams" / stream_slug

    def _stream_doc(self, table: DeltaTable | None, slug: str) -> tuple[int, dict[str, Any]]:
        """(n, the state document of version n) of a stream, as the table's log says;
        (0, {}) for a stream the table has no ``txn`` of. FileNotFoundError: a newer commit
        replaced the file (reload). A file the log names that is gone or unreadable is
        rebuilt (:meth:`_rebuild`)."""
        if table is None:
            return 0, {}
        version = table.transaction_version(f"sluice-{slug}")
        if version is None:
            return 0, {}
        path = self._stream_dir(slug) / f"{version}.json"
        try:
            data = self.store.read_json(path)
        except ValueError as exc:  # not JSON, or not UTF-8
            return version, self._rebuild(table, slug, version, f"unreadable ({exc})")
        if data is None:
            if self._moved(slug, version):
                raise FileNotFoundError(path)
            return version, self._rebuild(table, slug, version, "missing")
        if not isinstance(data, dict) or not isinstance(data.get("state"), dict):
            return version, self._rebuild(table, slug, version, "not a state document")
        return int(version), data

    def _moved(self, slug: str, version: int) -> bool:
        """Whether the log names a newer version of the stream than ``version``."""
        fresh = self._load(self.root)
        return fresh is not None and fresh.transaction_version(f"sluice-{slug}") != version

    def _rebuild(self, table: DeltaTable, slug: str, version: int, problem: str) -> dict[str, Any]:
        """The state document of a stream's batch ``version``, rebuilt by folding its batches'
        records in publish order: each batch's commit carries its record in ``commitInfo``
        (MQTT message ids left out), and its record file (``batches/``) has it whole once the
        batch is finished. The last batch is pending again (:meth:`_finish` does only what is
        not done). Refused (:class:`StreamStateError`) unless exactly ``version`` batches of
        the stream are found: log clean-up may have removed old commits. The rebuilt file
        replaces the bad one, which is kept beside it (``.bad``)."""
        path = self._stream_dir(slug) / f"{version}.json"
        found: dict[str, BatchRecord] = {}
        commits: dict[str, int] = {}  # batch id -> the Delta version of its commit
        for commit in self.commit_infos(self.root):
            text = commit.get(f"{PREFIX}record")
            if text is None or f"{PREFIX}stream-version" not in commit:
                continue
            record = BatchRecord.from_json(json.loads(text))
            if record.stream.slug == slug:
                found[record.batch_id] = record
                commits[record.batch_id] = int(commit["version"])
        whole = {r.batch_id: r for r in self.records() if r.stream.slug == slug}
        found.update(whole)
        what = f"The stream state file {path}"
        if len(found) != version:
            if self._moved(slug, version):
                raise FileNotFoundError(path)
            raise StreamStateError(
                f"{what} is {problem}, and it cannot be rebuilt: the "
                f"Delta log of {self.root} and its {self._meta / 'batches'} hold {len(found)} "
                f"of the stream's {version} batches (delta-rs's log clean-up removes commits "
                "older than the table's delta.logRetentionDuration). Restore the file from a "
                f"backup of {self._meta}, or ingest the stream into a new table."
            )
        ordered = sorted(found.values(), key=lambda r: r.published_at)
        last = ordered[-1]
        run = self.target.quarantine / "sluice" / _directory_name(last.batch_id) / (last.run or "")
        bad = [f for f in _parquet_files(self.store, run) if last.run and _rows(self.store, [f])]
        state = StreamState()
        for record in ordered:
            if record.stream.kind == "mqtt" and record.batch_id not in whole:
                self._fill_message_ids(record, bad if record is last else [])
            state.fold(record)
        stream = last.stream
        document = {
            "stream": {"kind": stream.kind, "topic": stream.topic, "group": stream.group},
            "state": state.to_json(),
            "pending": {
                "batch_id": last.batch_id,
                "run": last.run,
                "quarantine": [f.relative_to(self.target.quarantine).as_posix() for f in bad],
                "record": last.to_json(),
            },
        }
        kept = path.with_name(f"{path.name}.bad")
        if self.store.exists(path):
            self.store.move(path, kept)
        self.store.write_json(path, document)
        used = sorted(commits[b] for b in found if b not in whole and b in commits)
        log.warning(
            "%s was %s: rebuilt from the batches' records, %d from record files in %s and %d "
            "from the commitInfo of Delta version(s) %s of %s (the stream's %d batches; the "
            "last one, %s of Delta version %s, is finished again if a crash cut it off)%s.",
            what,
            problem,
            len(whole),
            self._meta / "batches",
            len(used),
            ", ".join(map(str, used)) or "none",
            self.root,
            version,
            last.batch_id,
            commits.get(last.batch_id, "(cleaned up)"),
            f"; the bad file is kept as {kept}" if self.store.exists(kept) else "",
        )
        return document

    def _fill_message_ids(self, record: BatchRecord, staged: list[PurePath]) -> None:
        """An MQTT batch's message ids (its commit leaves them out), from its rows: the table's,
        and the quarantine table's or, before its quarantine commit, its ``staged`` files."""
        good = self._scan(self.root, record.batch_id, ["message_id"])
        bad = self._scan(self.target.quarantine, record.batch_id, list(_REASON_COLUMNS))
        reasons = _reasons(bad) if bad.num_rows else _reasons_in(self.store, staged)
        ids = good.column("message_id").to_pylist() if good.num_rows else []
        record.message_ids, record.quarantined_ids = [*ids, *reasons], reasons

    def state(self, stream: StreamKey) -> StreamState:
        for _ in range(COMMIT_ATTEMPTS):
            try:
                _, data = self._stream_doc(self._load(self.root), stream.slug)
            except FileNotFoundError:  # replaced by a newer commit while read: reload
                continue
            return StreamState.from_json(data["state"]) if data else StreamState()
        raise RuntimeError(f"the state of {stream} kept changing while it was read")

    # ---- reading -------------------------------------------------------------------------

    def _record_file(self, batch_id: str) -> PurePath:
        return self._meta / "batches" / f"{_hashed(batch_id)}.json"

    def find(self, batch_id: str) -> BatchRecord | None:
        """From the record file, written once the batch's commit is done (:meth:`recover`
        writes those a crash cut off)."""
        data = self.store.read_json(self._record_file(batch_id))
        return BatchRecord.from_json(data) if data else None

    def records(self) -> Iterator[BatchRecord]:
        found = [
            data
            for path in self.store.files(self._meta / "batches", ".json")
            if (data := self.store.read_json(path))
        ]
        for data in sorted(found, key=lambda d: float(d.get("published_at", 0.0))):
            yield BatchRecord.from_json(data)

    def _scan(self, path: PurePath, batch_id: str, columns: list[str]) -> pa.Table:
        table = self._load(path)
        if table is None:
            return pa.table({c: pa.array([], pa.null()) for c in columns})
        dataset = table.to_pyarrow_dataset()
        present = [c for c in columns if c in dataset.schema.names]
        return dataset.to_table(columns=present, filter=pc.field(BATCH_COLUMN) == batch_id)

    def quarantine_table(self, batch_id: str) -> pa.Table:
        columns = ["key", "value", "topic", "partition", "offset", "headers", "reason"]
        return self._scan(self.target.quarantine, batch_id, columns)

    def row_coordinates(self, batch_id: str, quarantined: bool) -> pa.Table:
        """From one scan of the whole table, kept for the next batch (the audit asks for every
        batch in turn)."""
        path = self.target.quarantine if quarantined else self.target.table
        table = self._load(path)
        key = (quarantined, table.version() if table is not None else None)
        if key not in self._coordinates:
            by_batch: dict[str, pa.Table] = {}
            if table is not None:
                dataset = table.to_pyarrow_dataset()
                wanted = (BATCH_COLUMN, *ROW_COORDINATES)
                present = [n for n in wanted if n in dataset.schema.names]
                rows = dataset.to_table(columns=present)
                by_batch.update(coordinates_by_batch(rows, BATCH_COLUMN))
            self._coordinates[key] = by_batch
        return self._coordinates[key].get(batch_id, no_coordinates())

    def output_location(self, batch_id: str) -> str:
        return f"{self.uri(self.root)} ({BATCH_COLUMN} = '{batch_id}')"

    def quarantine_location(self, batch_id: str) -> str:
        return f"{self.uri(self.target.quarantine)} ({BATCH_COLUMN} = '{batch_id}')"

    # ---- writing -------------------------------------------------------------------------

    def exclusive(self, stream: StreamKey) -> AbstractContextManager[None]:
        lock = self._meta / "runs" / stream.slug  # a local lock file or an S3 lease (.json)
        held: AbstractContextManager[None] = self.store.exclusive(
            lock, stream, f"the Delta table {self.uri(self.root)}"
        )
        return held

    def recover(self) -> None:
        """Finish the pending batch of each stream (its quarantine commit and record file:
        a run that crashed after its commit point), and remove state files the log no longer
        names."""
        streams = self._meta / "streams"
        directories = self.store.subdirectories(streams)
        if not directories:
            return
        table = self._load(self.root)
        for directory in directories:
            try:
                version, data = self._stream_doc(table, directory.name)
            except FileNotFoundError:
                table = self._load(self.root)  # a newer commit: it finishes its own batch
                continue
            if not data:
                continue
            self._finish(directory.name, version, data.get("pending"))
            for old in self.store.files(directory, ".json"):
                if old.stem.isdigit() and int(old.stem) < version:
                    with contextlib.suppress(OSError):
                        self.store.delete(old)

    def pending_files(self) -> set[PurePath]:
        """The quarantine files that a pending batch of any stream names, in every state file
        (those the log names and those it does not yet): in no commit until its quarantine
        commit, which :meth:`recover` or the batch's rerun makes from them (as
        :meth:`IcebergSink.pending_files <sluice.spark.sinks.iceberg.IcebergSink.pending_files>`:
        expiry keeps them)."""
        found: set[PurePath] = set()
        streams = self._meta / "streams"
        for directory in self.store.subdirectories(streams):
            for path in self.store.files(directory, ".json"):
                with contextlib.suppress(OSError, ValueError):
                    pending = (self.store.read_json(path) or {}).get("pending") or {}
                    found |= {self.target.quarantine / f for f in pending.get("quarantine", [])}
        return found

    def _finish(self, slug: str, version: int, pending: dict[str, Any] | None) -> None:
        """The steps after a batch's commit point; each is done once, whoever runs it."""
        if not pending or pending["batch_id"] in self._finished:
            return
        batch_id = pending["batch_id"]
        files = [self.target.quarantine / f for f in pending.get("quarantine", [])]
        if files:
            self._commit_quarantine(slug, version, batch_id, files)
        self.store.create_json(self._record_file(batch_id), pending["record"])
        self._finished.add(batch_id)

    def _commit_quarantine(
        self, slug: str, version: int, batch_id: str, files: list[PurePath]
    ) -> None:
        from deltalake import CommitProperties, Transaction
        from deltalake.exceptions import CommitFailedError

        for number in range(COMMIT_ATTEMPTS):
            table = self._load(self.target.quarantine) or self._ensure(
                self.target.quarantine, _QUARANTINE_SCHEMA
            )
            done = table.transaction_version(f"sluice-{slug}")
            if done is not None and done >= version:
                return
            properties = CommitProperties(
                custom_metadata={f"{PREFIX}batch-id": batch_id},
                max_commit_retries=0,
                app_transactions=[Transaction(f"sluice-{slug}", version, _now_ms())],
            )
            try:
                table.create_write_transaction(
                    [self._add(self.target.quarantine, f) for f in files],
                    "append",
                    table.schema(),
                    commit_properties=properties,
                )
            except CommitFailedError:
                _backoff(number)
                continue
            _sync_log(self.store, self.target.quarantine)
            return
        raise RuntimeError(f"the quarantine of batch {batch_id} could not be committed")

    def stage(self, batch_id: str) -> Staging:
        scratch = Path(tempfile.mkdtemp(prefix="sluice-delta-"))
        return DeltaStaging(batch_id, scratch, scratch)

    def targets(self, staging: Staging, good: pa.Schema, bad: pa.Schema) -> WriteTargets:
        run = _run(staging)
        if run.data is None or run.quarantine is None:
            self._check_kind()
            batch = pa.field(BATCH_COLUMN, pa.string())
            # upsert: the messages are staged in the table's directory, never added to it
            columns = pa.schema([(POSITION_COLUMN, pa.int64())]) if self.upserting else None
            self._ensure(self.target.table, columns or good.append(batch))
            self._ensure(self.target.quarantine, bad.append(batch))
            name = f"{_directory_name(staging.batch_id)}/{run.name}"
            staged = "sluice-staged" if self.upserting else "sluice"
            run.data = self.target.table / staged / name
            run.quarantine = self.target.quarantine / "sluice" / name
        constants = ((BATCH_COLUMN, staging.batch_id),)
        return WriteTargets(
            self.uri(run.data), self.uri(run.quarantine), constants, self.store.filesystem
        )

    def staged_counts(self, staging: Staging) -> tuple[int, int]:
        run, store = _run(staging), self.store
        return _rows(store, _parquet_files(store, run.data)), _rows(
            store, _parquet_files(store, run.quarantine)
        )

    def staged_quarantine_reasons(self, staging: Staging) -> dict[str, str]:
        store = self.store
        files = _parquet_files(store, _run(staging).quarantine)
        return _reasons_in(store, [f for f in files if _rows(store, [f])])

    def reduce_staged(self, staging: Staging) -> Reduced:
        run = _run(staging)
        store = self.store
        files = [f for f in _parquet_files(store, run.data) if _rows(store, [f])]
        if not files:
            run.changes = Reduced(list(self.key_columns or []))
            return run.changes
        messages = pa.concat_tables([store.read_parquet(f) for f in files])
        table = self._load(self.root)
        schema = table.to_pyarrow_dataset().schema if table is not None else None
        shape = TableShape(self.current_key_columns(), schema)
        run.changes, bad = self.reduce(messages, shape)
        if bad.num_rows and run.quarantine is not None:
            store.write_parquet(bad, run.quarantine / "cdc-malformed.parquet")
        return run.changes

    def _plan(self, table: DeltaTable, changes: Reduced, state: StreamState) -> Plan:
        """:func:`.upsert.plan` against the table's rows of the changes' keys (their positions,
        and the columns the changes did not send) and the stream's markers in ``state``."""
        deleted, truncated = state.cdc_deleted, state.cdc_truncated
        keys = changes.key_columns
        dataset = table.to_pyarrow_dataset()
        if not changes.changes or not keys or POSITION_COLUMN not in dataset.schema.names:
            return plan(changes, {}, deleted, None, truncated)
        first = changes.keys(list(changes.changes.values())).column(keys[0])
        wanted = [*keys, POSITION_COLUMN, *unsent_columns(changes)]
        found = dataset.to_table(
            columns=[c for c in dict.fromkeys(wanted) if c in dataset.schema.names],
            filter=pc.field(keys[0]).isin(first.cast(dataset.schema.field(keys[0]).type)),
        )
        held = Held.of(found, keys)
        return plan(changes, held.positions, deleted, held.values, truncated)

    def discard(self, staging: Staging) -> None:
        """Delete the run's files, but only if its commit is known not to have happened
        (invariant I8)."""
        shutil.rmtree(staging.scratch, ignore_errors=True)
        run = _run(staging)
        if run.published:
            return
        if run.committing:
            log.warning(
                "The Delta commit of batch %s to %s may or may not have happened; its files "
                "are kept. The next ingest of the batch reads the log and finishes the batch "
                "or writes it again; Delta's vacuum deletes files no commit added.",
                staging.batch_id,
                self.root,
            )
            return
        for directory in (run.data, run.quarantine):
            if directory is not None:
                self.store.delete_tree(directory)

    def publish(self, staging: Staging, record: BatchRecord) -> None:
        from deltalake.exceptions import CommitFailedError

        shutil.rmtree(staging.scratch, ignore_errors=True)
        run = _run(staging)
        record.published_at = time.time()
        record.run = run.name
        store = self.store
        good = [f for f in _parquet_files(store, run.data) if _rows(store, [f])]
        bad = [f for f in _parquet_files(store, run.quarantine) if _rows(store, [f])]
        for directory in (run.data, run.quarantine):
            store.sync_parents(directory, 3)  # <run>, <batch> and sluice/ may be new directories
        stream = record.stream
        slug = stream.slug
        if store.lease_lost(stream):
            raise ConcurrentIngestError(
                f"The lease of {stream.kind} topic '{stream.topic}' on {self.location} was "
                f"taken by another run while batch {record.batch_id} was ingested. Nothing "
                "was published or committed; run the batch again."
            )
        changes = run.changes
        if changes is not None:
            good = []  # the staged messages are applied as changes, not added
            table = self._load(self.root)
            schema = table.to_pyarrow_dataset().schema if table is not None else None
            self._ensure(self.root, changes.rows(schema).schema)
            stored = self.current_key_columns()
            if stored is None or (not stored and changes.key_columns):
                # (none yet: a first batch of tombstones or malformed envelopes only)
                store.write_json(self._meta / CDC_FILE, {"key_columns": changes.key_columns})
        applying: Plan | None = None
        planned_at: int | None = None  # the table version the last commit attempt read
        document: dict[str, Any] | None = None  # the state this run wrote
        for number in range(COMMIT_ATTEMPTS):
            table = self._load(self.root) or self._ensure(self.root, self._base_schema(stream.kind))
            pending: dict[str, Any] | None
            try:
                version, data = self._stream_doc(table, slug)
            except FileNotFoundError:
                continue
            pending = data.get("pending") if data else None
            if pending and pending.get("run") == run.name:
                if self._committed_by(table, slug, version, planned_at) == run.name:
                    break  # an earlier attempt's commit happened (its answer was lost)
                # the state file is this run's, the commit that names it another's (a run
                # paused past its lease): the log is right, the file is rebuilt from it
                data = self._rebuild(table, slug, version, "not of the commit that names it")
                pending = data.get("pending")
            self._finish(slug, version, pending)
            state = StreamState.from_json(data["state"]) if data else StreamState()
            if changes is not None:
                applying = self._plan(table, changes, state)
                record.counts.update(applying.counts)
                record.cdc_markers = applying.markers
                record.cdc_truncated = applying.truncated_at
            check_publishable(state, record)
            state.fold(record)
            version += 1
            quarantine = [f.relative_to(self.target.quarantine).as_posix() for f in bad]
            pending = {
                "batch_id": record.batch_id,
                "run": run.name,
                "quarantine": quarantine,
                "record": record.to_json(),
            }
            key = {"kind": stream.kind, "topic": stream.topic, "group": stream.group}
            document = {"stream": key, "state": state.to_json(), "pending": pending}
            store.write_json(self._stream_dir(slug) / f"{version}.json", document)
            failpoint("publish.after_intent")  # a state file the log does not name yet
            planned_at = table.version()
            run.committing = True
            try:
                self._commit_batch(table, record, version, good, applying)
            except CommitFailedError:  # another commit took this table version: reload
                run.committing = False
                _backoff(number)
                continue
            break
        else:
            raise ConcurrentIngestError(
                f"The Delta table {self.root} kept changing: batch {record.batch_id} could not "
                f"be committed in {COMMIT_ATTEMPTS} attempts. Nothing was published; run the "
                "batch again."
            )
        run.published = True
        _sync_log(store, self.root)
        if not store.local and document is not None:
            self._restore_state(slug, version, run.name, document)
        if changes is not None:
            store.sync_all()  # the merge's data files, which delta-rs does not sync
            if run.data is not None:
                store.delete_tree(run.data)  # in no commit
        failpoint("publish.after_rename")
        self._finish(slug, version, pending)
        with contextlib.suppress(OSError):  # the state it replaces (recover() removes leftovers)
            store.delete(self._stream_dir(slug) / f"{version - 1}.json")
        failpoint("publish.after_state")

    def _restore_state(self, slug: str, version: int, run: str, document: Any) -> None:
        """On an object store, after this run's commit named state ``version``: the state
        object is this run's, or it is written again. (A run paused past its lease, then
        resumed, can replace it before its own commit, which then fails: the log names this
        run's commit, so this run's state is the stream's.)"""
        path = self._stream_dir(slug) / f"{version}.json"
        with contextlib.suppress(ValueError):
            found = self.store.read_json(path) or {}
            if (found.get("pending") or {}).get("run") == run:
                return
        log.warning("The state object %s was replaced by another run: written again.", path)
        self.store.write_json(path, document)

    def _committed_by(
        self, table: DeltaTable, slug: str, version: int, since: int | None
    ) -> str | None:
        """The run whose commit set the stream's ``txn`` to ``version``, as the log says
        (invariant I8: a commit whose answer was lost is resolved by reading the log): one of
        the commits after table version ``since``."""
        latest = table.version()
        first = since + 1 if since is not None else max(latest - COMMIT_ATTEMPTS, 0)
        for number in range(latest, first - 1, -1):
            commit = self.commit_info(self.root, number) or {}
            if commit.get(f"{PREFIX}stream-version") != str(version):
                continue
            text = commit.get(f"{PREFIX}record")
            if text and BatchRecord.from_json(json.loads(text)).stream.slug == slug:
                return str(commit.get(f"{PREFIX}run"))
        return None

    def commit_info(self, root: PurePath, version: int) -> dict[str, Any] | None:
        """The ``commitInfo`` of Delta version ``version`` of the table at ``root``, with its
        ``version`` (None: no such commit file, e.g. cleaned up). Read from the log file
        itself, through the store (delta-rs's ``history()`` holds Python's GIL while it waits
        on the network)."""
        data = self.store.read_bytes(root / "_delta_log" / f"{version:020d}.json")
        if data is None:
            return None
        for line in data.splitlines():
            action = json.loads(line) if line.strip() else {}
            if "commitInfo" in action:
                return {**action["commitInfo"], "version": version}
        return {"version": version}

    def commit_infos(self, root: PurePath) -> list[dict[str, Any]]:
        """The ``commitInfo`` of every commit file in the log of the table at ``root``,
        newest first (as ``DeltaTable.history()``)."""
        files = self.store.files(root / "_delta_log", ".json")
        versions = sorted((int(p.stem) for p in files if p.stem.isdigit()), reverse=True)
        return [c for v in versions if (c := self.commit_info(root, v)) is not None]

    def _commit_batch(
        self,
        table: DeltaTable,
        record: BatchRecord,
        version: int,
        files: list[PurePath],
        applying: Plan | None = None,
    ) -> None:
        from deltalake import CommitProperties, Transaction

        stream = record.stream
        stored = record.summary_json()
        metadata = {
            f"{PREFIX}batch-id": record.batch_id,
            f"{PREFIX}run": record.run or "",
            f"{PREFIX}kind": stream.kind,
            f"{PREFIX}topic": stream.topic,
            f"{PREFIX}group": stream.group or "",
            f"{PREFIX}stream-version": str(version),
            f"{PREFIX}record": json.dumps(stored, sort_keys=True),
        }
        if stream.kind == "kafka":
            metadata[f"{PREFIX}ranges"] = ",".join(
                f"{r.partition}:{r.start}-{r.end}" for r in record.ranges
            )
        else:
            metadata[f"{PREFIX}message-count"] = str(len(record.message_ids))
        properties = CommitProperties(
            custom_metadata=metadata,
            max_commit_retries=0,
            app_transactions=[Transaction(app_id(stream), version, _now_ms())],
        )
        if applying is not None and applying.changes_anything:
            _merge(table, applying, properties)
            if table.transaction_version(app_id(stream)) == version:
                return
            # delta-rs commits nothing for a merge that changes no file (a delete of a key
            # without a row, a truncate older than every row): the batch commits on its own
        table.create_write_transaction(
            [self._add(self.root, f) for f in files],
            "append",
            table.schema(),
            commit_properties=properties,
        )

    def _add(self, root: PurePath, path: PurePath) -> Any:
        from deltalake.transaction import AddAction

        info = self.store.info(path)
        relative = quote(path.relative_to(root).as_posix())
        stats = _stats(self.store.parquet_metadata(path))
        return AddAction(relative, info.size, {}, int(info.modified * 1000), True, stats)

    # ---- dead letters --------------------------------------------------------------------

    def dead_letter_progress(self, batch_id: str) -> dict[str, Any] | None:
        data: dict[str, Any] | None = self.store.read_json(
            self._meta / "dead_letters" / f"{_hashed(batch_id)}.json"
        )
        return data

    def save_dead_letter_progress(self, batch_id: str, progress: dict[str, Any]) -> None:
        self.store.write_json(self._meta / "dead_letters" / f"{_hashed(batch_id)}.json", progress)


def _merge(table: DeltaTable, applying: Plan, properties: Any) -> None:
    """Apply ``applying`` in one merge commit (with ``properties``: the batch's metadata and
    ``txn``): a changed key's row replaced, a deleted key's row removed, a new key's row
    inserted, and with a truncate every other row older than it removed. Column names come
    from messages: every one is quoted, never spliced in as it is."""
    schema = table.to_pyarrow_dataset().schema
    reduced = applying.reduced
    upserts = [c for c in applying.applied if not c.deleted]
    deletes = [c for c in applying.applied if c.deleted]
    rows = conform(reduced.rows(schema, upserts), schema)
    gone = conform(reduced.keys(deletes), schema)
    source = pa.concat_tables([rows, gone]).append_column(
        _DELETED, pa.array([False] * rows.num_rows + [True] * gone.num_rows)
    )
    deleted = f"s.{quote_name(_DELETED)}"
    merger = (
        table.merge(
            source,
            merge_predicate(reduced.key_columns),
            source_alias="s",
            target_alias="t",
            commit_properties=properties,
        )
        .when_matched_delete(predicate=deleted)
        .when_matched_update_all(predicate=f"NOT {deleted}", except_cols=[_DELETED])
        .when_not_matched_insert_all(predicate=f"NOT {deleted}", except_cols=[_DELETED])
    )
    if applying.truncate is not None:
        merger = merger.when_not_matched_by_source_delete(
            predicate=truncated_rows_predicate(applying.truncate, "t")
        )
    merger.execute()


def _type_name(kind: Any) -> str:
    """A Delta type's name, nullability left out (every field Sluice writes may be null)."""
    text = re.sub(r",?\s*(value_)?(contains_null|nullable)=(True|False)", "", str(kind))
    return re.sub(r'PrimitiveType\("(\w+)"\)', r"\1", text)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _backoff(number: int) -> None:
    time.sleep(min(0.02 * 2**number, 1.0) * (0.5 + uuid.uuid4().int % 100 / 100))


def _sync_log(store: TableStore, root: PurePath) -> None:
    """Sync the newest commit files of the table's log, and the log directory (I9): delta-rs
    renames a commit into place without syncing it (on an object store, an acknowledged
    write is durable: nothing to do)."""
    if not store.local:
        return
    log_dir = root / "_delta_log"
    store.sync_files(store.files(log_dir, ".json")[-3:])
    store.sync_directory(log_dir)
