"""The Apache Iceberg sink: ``iceberg://CATALOG/NAMESPACE.TABLE``, one snapshot per batch.

The catalog is configured the pyiceberg way (``.pyiceberg.yaml``, or
``PYICEBERG_CATALOG__<NAME>__*`` environment variables, read afresh for every sink): a SQL
catalog on SQLite or PostgreSQL, REST, Glue, Hive... Quarantined rows go to a second table,
``<TABLE>__quarantine`` unless ``?quarantine=NAMESPACE.OTHER`` names another.

Tables. Created on the first ingest from the good rows' schema: the payload fields, Kafka's
coordinates (partition, offset, timestamp), the message columns the rows keep
(``keep_message``, :mod:`..layout`: recorded in the table's property ``sluice.keep-message``;
a table without it was made before the choice existed and keeps the whole message) and a
``batch_id`` column (the quarantine table: the whole message, ``reason`` and ``batch_id``).
Every field is optional. A new field in a later batch is added (``union_by_name``); a field
whose type changes is refused with a :class:`ConfigError` naming it. A scan of one batch is
pruned by the ``batch_id`` column's statistics (kept in full: every data file holds one batch).

Partitioning. ``?partition_by=day(timestamp),bucket(16,device)`` (or ``partition_by=``,
:mod:`..partitioning`) creates the main table with that spec; an existing table's spec is
followed, and a different one given is a :class:`ConfigError` (Sluice never evolves a spec).
The writing tasks put each partition value's rows in files of their own, and the commit adds
them with their partition values (:func:`_add_partitioned_files`; pyiceberg's ``add_files``
cannot infer a bucket from column statistics). The quarantine table is unpartitioned.

Commit protocol (docs/architecture.md, "The Iceberg sink"):

1. The Spark job writes the batch's Parquet files (:mod:`sluice.spark.writing`) straight under
   the tables' locations, ``<location>/data/sluice/<batch>/<run>/``; they become the tables'
   data files as they are, nothing is copied.
2. ONE commit on the main table is the commit point (invariant I2): it adds the good rows'
   files (``add_files``) in a snapshot whose summary names the batch (``sluice.batch-id``,
   ``sluice.run``, ``sluice.kind``, ``sluice.topic``, ``sluice.group``, ``sluice.ranges``; MQTT
   ``sluice.message-count`` and a SHA-256 ``sluice.message-digest`` of the sorted ids) and holds
   its record (``sluice.record``); and, in the same commit, it sets the stream's state in the
   table's *properties* (``sluice.stream.<stream>``), where compaction and snapshot expiry
   cannot reach it, and names the batch in ``sluice.pending`` with its quarantine files.
   A state over :data:`INLINE_LIMIT` characters (MQTT's recent ids, a Kafka stream's last
   1,000 batch ids) is written to an immutable file beside the table and the property holds
   its path (``sluice.stream-file.<stream>``).
3. The quarantined rows' files go to the quarantine table, in a snapshot naming the batch.
   Where the catalog commits several tables at once (a REST catalog whose server offers the
   specification's multi-table commit, :mod:`.multi_table`), that snapshot is in the commit of
   step 2, sent first: both tables show the batch from one moment. Elsewhere (the SQL catalog
   commits one table at a time) its commit is prepared before step 2's and sent right after
   it, so the quarantine rows of a published batch are missing for that moment. Then the
   batch's record is written beside the table (``batches/``, for the audit once snapshots are
   expired). A crash before they are done is finished by the next run's
   :meth:`IcebergSink.recover`, which completes every ``sluice.pending`` batch: the quarantine
   is never committed for a batch that is not published, and never twice; nothing is ever
   doubled or lost.
4. On a commit conflict (another writer committed first): reload, check again that no other
   run published the batch's offsets or ids meanwhile (else :class:`ConcurrentIngestError`),
   fold the record into the fresh state and commit again. pyiceberg's own retry is off on
   these tables (``commit.retry.num-retries=0``): it would reuse the stale state.
5. A commit whose outcome is unknown (the catalog's answer was lost: a 502/504, a dropped
   connection, a timeout or SIGTERM between the commit and its answer) deletes nothing: only a
   commit known not to have happened (refused by the catalog, or never sent) gives up its
   files (invariant I8). The next run reads the catalog: a batch found there is finished, one
   that is not is written again, and the files of the unknown attempt are orphans for
   Iceberg's orphan-file removal. A refused multi-table commit is checked against the catalog
   at once: a server that commits the tables one by one may have committed the table before
   it refused.

One run of a batch (:meth:`IcebergSink.exclusive`) loads each table from the catalog once and
keeps it; its own commits keep it current, and a commit conflict (step 4) loads it again. A
process remembers what stays done (:class:`_Done`): a namespace made sure of, a storage
location probed, the steps after a batch's commit point that it finished.

Reading: ``state()`` reads the table's properties (and at most one state file: invariant I5);
``find()`` walks the main branch's snapshots in the table metadata the catalog already loaded,
without further I/O; ``records()`` and ``row_coordinates()`` (the audit) read the summaries,
the record files and scan the tables.

Beside the table, ``<location's parent>/_sluice/<location's name>/``: stream states too large
for a property (``streams/``), batch records (``batches/``) and the dead-letter progress
(``dead_letters/<batch>.json``), written with the table's FileIO. Not under the table's
location, where Iceberg's orphan-file removal would delete them. On local file systems every
file a commit depends on is synced before the offsets are committed (invariant I9).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import parse_qs, urlsplit

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ...cdc import JSON_ENVELOPES, POSITION_COLUMN, Decoders, OnTruncate, Reduced, TableShape
from ...queues.config import ConfigError
from .. import layout
from ..durable import local_target, sync_directory, sync_file
from ..failpoints import failpoint
from ..partitioning import Partitioning, PartitionSpecError
from ..writing import WriteTargets, resolve
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
from .catalogs import catalog_error, load_iceberg_catalog
from .multi_table import can_commit_together, commit_together, discard, discard_unlanded
from .s3 import is_s3
from .upsert import CDC_PROPERTY, UpsertMode, apply_iceberg, plan_iceberg

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.table import Table, Transaction
    from pyiceberg.table.snapshots import Snapshot

    from .s3 import S3Settings

__all__ = [
    "BATCH_COLUMN",
    "INLINE_LIMIT",
    "SCHEME",
    "IcebergSink",
    "IcebergStaging",
    "IcebergTarget",
    "parse_iceberg_uri",
]

log = logging.getLogger(__name__)

SCHEME = "iceberg"
BATCH_COLUMN = "batch_id"
#: A stream state longer than this (JSON characters) goes to a file named by the summary.
INLINE_LIMIT = 4096
#: Commit attempts on conflicts before giving up.
COMMIT_ATTEMPTS = 30
PREFIX = "sluice."
#: The table property recording the message columns its rows keep (:mod:`..layout`).
KEEP_PROPERTY = f"{PREFIX}keep-message"
TABLE_PROPERTIES = {
    "commit.retry.num-retries": "0",
    f"write.metadata.metrics.column.{BATCH_COLUMN}": "full",
}


class _Done:
    """What this process did that stays done, for the sink objects of its later ingests (one
    per ingest): a storage location probed, a namespace made sure of, a batch's steps after
    its commit point finished (by the table's UUID). Bounded: what is forgotten is checked
    again."""

    LIMIT = 10_000

    def __init__(self) -> None:
        self._keys: set[tuple[Any, ...]] = set()
        self._lock = threading.Lock()

    def __contains__(self, key: tuple[Any, ...]) -> bool:
        return key in self._keys

    def add(self, key: tuple[Any, ...]) -> None:
        with self._lock:
            if len(self._keys) >= self.LIMIT:
                self._keys.clear()
            self._keys.add(key)


_DONE = _Done()

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
_HINT = (
    "Write it as iceberg://CATALOG/NAMESPACE.TABLE, e.g. iceberg://lake/sensors.readings, "
    "optionally ?quarantine=NAMESPACE.TABLE and ?partition_by=day(timestamp),bucket(16,device)."
)


@dataclass(frozen=True)
class IcebergTarget:
    """What an ``iceberg://`` URI names."""

    catalog: str
    table: tuple[str, ...]
    quarantine: tuple[str, ...]
    partitioning: Partitioning = field(default_factory=Partitioning)

    @property
    def namespace(self) -> tuple[str, ...]:
        return self.table[:-1]


def parse_iceberg_uri(uri: str) -> IcebergTarget:
    """``iceberg://CATALOG/NAMESPACE.TABLE[?quarantine=NAMESPACE.TABLE][&partition_by=SPEC]``
    (SPEC: :mod:`..partitioning`, e.g. ``day(timestamp),bucket(16,device)``)."""
    parts = urlsplit(uri)
    if parts.scheme != SCHEME or not parts.netloc:
        raise ConfigError(f"sink {uri!r} names no Iceberg catalog. {_HINT}")
    table = _identifier(parts.path.strip("/"), uri)
    options = parse_qs(parts.query)
    unknown = sorted(set(options) - {"quarantine", "partition_by"})
    if unknown:
        raise ConfigError(f"sink {uri!r}: unknown option(s) {', '.join(unknown)}. {_HINT}")
    quarantine = (*table[:-1], f"{table[-1]}__quarantine")
    if "quarantine" in options:
        quarantine = _identifier(options["quarantine"][-1], uri)
    if quarantine == table:
        raise ConfigError(f"sink {uri!r}: the quarantine table must differ from the table.")
    try:
        partitioning = Partitioning.parse(options.get("partition_by", [""])[-1])
    except PartitionSpecError as exc:
        raise ConfigError(f"sink {uri!r}: {exc}") from None
    return IcebergTarget(parts.netloc, table, quarantine, partitioning)


def _identifier(text: str, uri: str) -> tuple[str, ...]:
    names = tuple(text.split("."))
    if len(names) < 2 or not all(re.fullmatch(r"[A-Za-z0-9_\-]+", n) for n in names):
        raise ConfigError(f"sink {uri!r}: {text!r} is not NAMESPACE.TABLE. {_HINT}")
    return names


@dataclass
class _Run:
    data: str | None = None  # URIs of the staged files' directories (set by the first write)
    quarantine: str | None = None
    name: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    committing: bool = False  # the main commit was sent: its outcome may be unknown
    published: bool = False
    changes: Reduced | None = None  # upsert: the staged messages as changes (reduce_staged)


@dataclass(frozen=True)
class IcebergStaging(Staging):
    """A run's staging: its files are written under the tables' locations."""

    run: _Run = field(default_factory=_Run)


def _files(
    uri: str | None, suffix: str, filesystem: Any = None, recursive: bool = False
) -> list[str]:
    """URIs of the files named ``*<suffix>`` directly in the directory ``uri`` (or, with
    ``recursive``, under it: a partitioned run's partition directories); none if it is
    absent; ``filesystem``: see :func:`~sluice.spark.writing.resolve`."""
    if uri is None:
        return []
    from pyarrow import fs

    found, base = resolve(uri, filesystem)
    selector = fs.FileSelector(base, allow_not_found=True, recursive=recursive)
    infos = found.get_file_info(selector)
    return sorted(
        uri + info.path[len(base) :]
        for info in infos
        if info.type == fs.FileType.File and info.path.endswith(suffix)
    )


def _parquet_files(uri: str | None, filesystem: Any = None) -> list[str]:
    return _files(uri, ".parquet", filesystem, recursive=True)


def _read_parquet(
    uris: list[str], columns: list[str] | None = None, filesystem: Any = None
) -> pa.Table:
    tables = []
    for uri in uris:
        found, path = resolve(uri, filesystem)
        tables.append(pq.read_table(path, filesystem=found, columns=columns))
    return pa.concat_tables(tables)


def _rows(uris: list[str], filesystem: Any = None) -> int:
    total = 0
    for uri in uris:
        found, path = resolve(uri, filesystem)
        with found.open_input_file(path) as handle:
            total += pq.read_metadata(handle).num_rows
    return total


def _summary(snapshot: Snapshot) -> dict[str, str]:
    return dict(snapshot.summary.additional_properties) if snapshot.summary else {}


def _lineage(table: Table) -> Iterator[Snapshot]:
    """The main branch's snapshots, newest first."""
    from pyiceberg.table.snapshots import ancestors_of

    current = table.current_snapshot()
    if current is not None:
        yield from ancestors_of(current, table.metadata)


def _holds_rows(table: Table) -> bool:
    """Whether the table's current snapshot holds rows (one that does not say: assumed)."""
    snapshot = table.current_snapshot()
    if snapshot is None:
        return False
    total = snapshot.summary["total-records"] if snapshot.summary is not None else None
    return total is None or int(total) > 0


def _sluice_snapshots(table: Table) -> Iterator[tuple[Snapshot, dict[str, str]]]:
    for snapshot in _lineage(table):
        summary = _summary(snapshot)
        if f"{PREFIX}batch-id" in summary:
            yield snapshot, summary


T = TypeVar("T")


def _with_retries(
    what: str, attempt: Callable[[], T], forget: Callable[[], None] | None = None
) -> T:
    """``attempt()`` again on a commit conflict (it reloads what it needs itself, after
    ``forget()``: the tables a run keeps are stale then, :meth:`IcebergSink._load`)."""
    from pyiceberg.exceptions import CommitFailedException

    for number in range(COMMIT_ATTEMPTS):
        try:
            return attempt()
        except CommitFailedException:
            if forget is not None:
                forget()
            if number == COMMIT_ATTEMPTS - 1:
                raise
            time.sleep(min(0.05 * 2**number, 1.0) * (0.5 + uuid.uuid4().int % 100 / 100))
    raise AssertionError("unreachable")  # pragma: no cover


def _message_digest(ids: list[str]) -> str:
    return hashlib.sha256("\n".join(sorted(ids)).encode()).hexdigest()


class IcebergSink(UpsertMode):
    """An Iceberg table and its quarantine table (see the module docstring)."""

    def __init__(
        self, location: str, partition_by: str | Sequence[str] | Partitioning | None = None
    ) -> None:
        self.target = parse_iceberg_uri(location)
        self.location = location
        if partition_by is not None:
            try:
                given = Partitioning.parse(partition_by)
            except PartitionSpecError as exc:
                raise ConfigError(str(exc)) from None
            if self.target.partitioning and given != self.target.partitioning:
                raise ConfigError(
                    f"sink {location!r} names partition_by={self.target.partitioning} and "
                    f"partition_by={given} was given too: give the spec once."
                )
            self.target = dataclasses.replace(self.target, partitioning=given)
        self._spec: Partitioning | None = None  # the table's, once it is known
        self._catalog: Catalog | None = None
        self._quarantined: set[str] = set()  # batches whose quarantine this sink committed
        self._run = threading.local()  # the tables a run in this thread keeps (exclusive())
        self._coordinates: dict[tuple[bool, int | None], dict[str, pa.Table]] = {}
        self._s3: S3Settings | None = None
        self._s3_filesystem: Any = None
        self._kept: tuple[str, ...] | None = None  # recorded in a table this sink makes

    def upsert(
        self,
        key_columns: Sequence[str] | None,
        decoders: Decoders = JSON_ENVELOPES,
        on_truncate: OnTruncate = "quarantine",
    ) -> None:
        """:meth:`UpsertMode.upsert`, refused for a partitioned table."""
        if self.target.partitioning:
            raise ConfigError(
                f"sink {self.location!r}: write_mode='upsert' does not partition the table "
                "yet: leave partition_by out."
            )
        super().upsert(key_columns, decoders, on_truncate)

    @property
    def partitioning(self) -> Partitioning:
        """The partition spec given (the URI's ``?partition_by=`` or ``partition_by``)."""
        return self.target.partitioning

    # ---- catalog and tables --------------------------------------------------------------

    @property
    def catalog(self) -> Catalog:
        if self._catalog is None:
            self._catalog = load_iceberg_catalog(self.target.catalog)
        return self._catalog

    def _name(self, identifier: tuple[str, ...]) -> str:
        return ".".join(identifier)

    def _filesystem(self, uri: str | None) -> Any:
        """The pyarrow file system of an object store location of the tables (built from the
        catalog's s3.* properties and the AWS chain, :mod:`.s3`); None elsewhere."""
        if uri is None or not is_s3(uri):
            return None
        if self._s3 is None:
            from .s3 import S3Settings

            what = f"catalog '{self.target.catalog}'"
            self._s3 = S3Settings.resolve(self.catalog.properties, what)
            self._s3_filesystem = self._s3.filesystem()
        return self._s3_filesystem

    def _check_storage(self, table: Table | None) -> None:
        """The warehouse's (or ``table``'s) bucket can be listed and written, before any Spark
        work: a missing bucket, wrong keys or endpoint are named with how to fix them."""
        location = (
            table.location() if table is not None else self.catalog.properties.get("warehouse", "")
        )
        if not is_s3(location):
            return
        from .s3 import s3_error, split_s3

        self._filesystem(location)
        assert self._s3 is not None
        bucket, prefix = split_s3(location)
        done = ("storage", self._s3, bucket, prefix)
        if done in _DONE:
            return
        probe = f"{prefix}/_sluice-probe-{uuid.uuid4().hex[:12]}".lstrip("/")
        client = self._s3.client(attempts=2)
        try:
            client.list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=1)
            client.put_object(Bucket=bucket, Key=probe, Body=b"")
            client.delete_object(Bucket=bucket, Key=probe)
        except Exception as exc:
            raise s3_error(exc, self._s3, location, "open the tables' location") from None
        _DONE.add(done)

    def check(self) -> None:
        """The catalog opens and the table's namespace exists (it is created if missing); an
        existing table's partition spec is the one given, if one is."""
        try:
            for identifier in {self.target.namespace, self.target.quarantine[:-1]}:
                done = ("namespace", self.target.catalog, self.catalog.properties.get("uri"))
                if (*done, identifier) not in _DONE:
                    self.catalog.create_namespace_if_not_exists(identifier)
                    _DONE.add((*done, identifier))
            table = self._load(self.target.table)
            self._check_storage(table)
            if table is not None:
                self._table_spec(table)
                if self.upserting:  # (maintenance opens a current-state table too)
                    self._check_kind(table)
        except ConfigError:
            raise
        except Exception as exc:
            raise catalog_error(
                self.target.catalog,
                "cannot be used",
                exc,
                "check its configuration and that you may create namespaces and tables in it.",
            ) from None

    def kept_columns(self) -> tuple[str, ...] | None:
        """The message columns the table's rows keep (:mod:`..layout`): its recorded choice,
        the whole message for a table Sluice wrote before the choice was recorded; None: no
        table yet, or one made outside Sluice that no batch has written (its first batch
        records the choice)."""
        table = self._load(self.target.table)
        if table is None:
            return None
        stored = table.properties.get(KEEP_PROPERTY)
        if stored is not None:
            return layout.record_of_json(stored)
        return layout.FULL if self._streams(table) else None

    def keep_columns(self, kept: Sequence[str]) -> None:
        """The message columns to record in the table when this sink makes it."""
        self._kept = tuple(sorted(kept))

    def _base_schema(self, kind: str) -> pa.Schema:
        """The main table's columns before any payload field: those of the message it keeps."""
        if self._kept is None:
            return _BASE_SCHEMA
        columns = layout.message_columns(self._kept, kind)
        return pa.schema([f for f in _BASE_SCHEMA if f.name in (*columns, BATCH_COLUMN)])

    def _check_kind(self, table: Table) -> None:
        """A current-state table (upsert) is never appended to, nor the other way round; its
        key columns stay the ones it was made with."""
        stored = table.properties.get(CDC_PROPERTY)
        name = self._name(self.target.table)
        # (another writer's empty snapshot on a new table is no appended message: the
        # catalog conflict of its first batch's commit, nemesis CDC seed 113)
        appended = stored is None and (bool(self._streams(table)) or _holds_rows(table))
        if appended and self.upserting:
            raise ConfigError(
                f"The Iceberg table {name} holds appended messages; write_mode='upsert' keeps "
                "a current-state table of its own: ingest the change stream into a new table."
            )
        if stored is not None and not self.upserting:
            raise ConfigError(
                f"The Iceberg table {name} is a current-state table (write_mode='upsert', key "
                f"columns {', '.join(json.loads(stored))}): ingest into it with "
                "write_mode='upsert', or append the messages to another table."
            )
        if stored and self.key_columns and json.loads(stored) not in ([], self.key_columns):
            raise ConfigError(
                f"The Iceberg table {name} is keyed by {', '.join(json.loads(stored))}, not "
                f"{', '.join(self.key_columns)}: give key_columns={json.loads(stored)} (or "
                "none), or ingest into a new table."
            )

    def _load(self, identifier: tuple[str, ...], fresh: bool = False) -> Table | None:
        """The table as the catalog has it now, None if there is none. Within
        :meth:`exclusive` (one run of one batch) a table is loaded once and then kept, and
        this sink's own commits keep it current (``fresh``: load it all the same). Another
        writer's commit meanwhile is found by the run's commit, which is the fence: its
        conflict forgets the kept tables (:meth:`_forget`) and the retry loads them again."""
        from pyiceberg.exceptions import NoSuchTableError

        kept = self._tables
        if kept is not None and not fresh and identifier in kept:
            return kept[identifier]
        try:
            table = self.catalog.load_table(identifier)
        except NoSuchTableError:
            return None
        self._keep(identifier, table)
        return table

    @property
    def _tables(self) -> dict[tuple[str, ...], Table] | None:
        tables: dict[tuple[str, ...], Table] | None = getattr(self._run, "tables", None)
        return tables

    def _keep(self, identifier: tuple[str, ...], table: Table) -> None:
        if self._tables is not None:
            self._tables[identifier] = table

    def _forget(self) -> None:
        """Load the run's tables afresh when next asked for."""
        if self._tables is not None:
            self._tables.clear()

    def _ensure(
        self, identifier: tuple[str, ...], schema: pa.Schema, loaded: Table | None = None
    ) -> Table:
        """The table, created with ``schema`` or extended by its new fields; ``loaded``: the
        table as just loaded, if it was (a commit conflict reloads it)."""
        from pyiceberg.exceptions import ValidationError

        schema = pa.schema([f.with_nullable(True) for f in schema])
        main = identifier == self.target.table
        wanted = self.target.partitioning if main else Partitioning()
        properties = {**TABLE_PROPERTIES, **(_partition_properties(wanted) if main else {})}
        table = loaded or self._load(identifier)
        if table is None:
            self.catalog.create_namespace_if_not_exists(identifier[:-1])
            made = dict(properties)
            if main and self._kept is not None and not self.upserting:
                made[KEEP_PROPERTY] = layout.record_json(self._kept)
            table = self._create(identifier, schema, wanted, made)
        if main:
            self._spec = self._table_spec(table)
            properties.update(_partition_properties(self._spec))
            if (
                self._kept is not None
                and not self.upserting
                and KEEP_PROPERTY not in table.properties
            ):
                properties[KEEP_PROPERTY] = layout.record_json(self._kept)  # made outside Sluice
        missing = {k: v for k, v in properties.items() if table.properties.get(k) != v}
        if missing:
            table = _with_retries("properties", lambda: self._set_properties(identifier, missing))

        unused = [table]  # the first attempt evolves the table at hand, a retry reloads it

        def evolve() -> Table:
            fresh = unused.pop() if unused else self.catalog.load_table(identifier)
            with fresh.update_schema() as update:
                update.union_by_name(schema)
            return fresh

        try:
            table = _with_retries("schema", evolve)
        except (ValidationError, ValueError) as exc:
            raise ConfigError(
                f"The batch's rows do not fit the Iceberg table {self._name(identifier)}: {exc}. "
                "A new field is added to the table, but a field cannot change its type (Iceberg "
                "only widens int to long and float to double): keep the schema's type, or "
                "ingest into another table."
            ) from None
        self._keep(identifier, table)
        return table

    def _create(
        self,
        identifier: tuple[str, ...],
        schema: pa.Schema,
        partitioning: Partitioning,
        properties: dict[str, str],
    ) -> Table:
        """The table, created with ``schema`` and partitioned by ``partitioning`` in its first
        metadata (no unpartitioned moment), unless another writer created it first."""
        if not partitioning:
            return self.catalog.create_table_if_not_exists(
                identifier, schema=schema, properties=properties
            )
        from pyiceberg.catalog import Catalog
        from pyiceberg.schema import assign_fresh_schema_ids

        try:
            partitioning.check(schema, "the batch's rows")
        except PartitionSpecError as exc:
            raise ConfigError(str(exc)) from None
        iceberg = assign_fresh_schema_ids(Catalog._convert_schema_if_needed(schema))
        return self.catalog.create_table_if_not_exists(
            identifier,
            schema=iceberg,
            partition_spec=partitioning.iceberg_spec(iceberg),
            properties=properties,
        )

    def _table_spec(self, table: Table) -> Partitioning:
        """The table's partition spec, which Sluice follows and never changes: a different
        spec given is a :class:`ConfigError` (none given: the table's is used)."""
        try:
            spec = Partitioning.of_iceberg(table.spec(), table.schema())
        except PartitionSpecError as exc:
            raise ConfigError(f"Iceberg table {self._name(self.target.table)}: {exc}") from None
        given = self.target.partitioning
        if given and given != spec:
            raise ConfigError(
                f"The Iceberg table {self._name(self.target.table)} is partitioned by "
                f"{spec or 'nothing (unpartitioned)'}, and partition_by={given} was given. "
                "Sluice never changes a table's partition spec: give "
                + (f"partition_by={spec}" if spec else "no partition_by")
                + " (or none: the table's own spec is used), ingest into a new table, or "
                "evolve the table's spec yourself (pyiceberg's table.update_spec(), Spark's "
                "ALTER TABLE ... ADD PARTITION FIELD) and give the new spec."
            )
        return spec

    def _set_properties(self, identifier: tuple[str, ...], properties: dict[str, str]) -> Table:
        from .transactions import transaction

        table = self.catalog.load_table(identifier)
        with transaction(table) as changes:
            changes.set_properties(properties)
        return table

    def _sidecar(self, table: Table) -> str:
        location = table.location().rstrip("/")
        parent, _, name = location.rpartition("/")
        return f"{parent}/_sluice/{name}"

    # ---- reading -------------------------------------------------------------------------

    def find(self, batch_id: str) -> BatchRecord | None:
        table = self._load(self.target.table)
        if table is None:
            return None
        for _, summary in _sluice_snapshots(table):
            if summary[f"{PREFIX}batch-id"] == batch_id:
                return BatchRecord.from_json(json.loads(summary[f"{PREFIX}record"]))
        return None

    def state(self, stream: StreamKey) -> StreamState:
        for attempt in range(COMMIT_ATTEMPTS):
            table = self._load(self.target.table, fresh=attempt > 0)
            if table is None:
                return StreamState()
            try:
                return self._state(table, stream)
            except FileNotFoundError:  # a newer commit replaced the state file: reload
                continue
        raise RuntimeError(f"the state of {stream} kept changing while it was read")

    def _streams(self, table: Table) -> dict[str, str]:
        """The ``sluice.stream*`` entries of the table's properties; a table written by an
        older Sluice keeps them in the summary of the newest snapshot Sluice wrote."""
        found = {k: v for k, v in table.properties.items() if k.startswith(f"{PREFIX}stream")}
        if found:
            return found
        for _, summary in _sluice_snapshots(table):
            return {k: v for k, v in summary.items() if k.startswith(f"{PREFIX}stream")}
        return {}

    def _state(self, table: Table, stream: StreamKey) -> StreamState:
        streams = self._streams(table)
        inline = streams.get(f"{PREFIX}stream.{stream.slug}")
        if inline is not None:
            return StreamState.from_json(json.loads(inline))
        path = streams.get(f"{PREFIX}stream-file.{stream.slug}")
        if path is None:
            return StreamState()
        with table.io.new_input(path).open() as handle:
            return StreamState.from_json(json.loads(handle.read()))

    def records(self) -> Iterator[BatchRecord]:
        """Every published batch: from the snapshots, and from the record files of batches
        whose snapshots were expired."""
        table = self._load(self.target.table)
        if table is None:
            return
        found = {
            s[f"{PREFIX}batch-id"]: json.loads(s[f"{PREFIX}record"])
            for _, s in _sluice_snapshots(table)
        }
        sidecar = self._sidecar(table)
        for path in _files(f"{sidecar}/batches", ".json", self._filesystem(sidecar)):
            with table.io.new_input(path).open() as handle:
                data = json.loads(handle.read())
            found.setdefault(data["batch_id"], data)
        for data in sorted(found.values(), key=lambda d: float(d.get("published_at", 0.0))):
            yield BatchRecord.from_json(data)

    def snapshot_lines(self) -> list[str]:
        """One line per snapshot of the table naming a batch, oldest first (for people)."""
        table = self._load(self.target.table)
        if table is None:
            return []
        lines = []
        for snapshot, summary in reversed(list(_sluice_snapshots(table))):
            where = summary.get(f"{PREFIX}ranges") or (
                f"{summary.get(f'{PREFIX}message-count', '0')} message ids"
            )
            lines.append(
                f"snapshot {snapshot.snapshot_id}: batch {summary[f'{PREFIX}batch-id']} "
                f"({summary[f'{PREFIX}kind']} '{summary[f'{PREFIX}topic']}', {where}), "
                f"{summary.get('added-records', '0')} rows"
            )
        return lines

    def _scan(self, identifier: tuple[str, ...], batch_id: str, columns: list[str]) -> pa.Table:
        table = self._load(identifier)
        if table is None or table.current_snapshot() is None:
            return pa.table({c: pa.array([], pa.null()) for c in columns})
        rows = _of_batch(batch_id)
        return table.scan(row_filter=rows, selected_fields=tuple(columns)).to_arrow()

    def current_key_columns(self) -> list[str] | None:
        """A current-state table's key columns (None: the table appends messages)."""
        table = self._load(self.target.table)
        stored = table.properties.get(CDC_PROPERTY) if table is not None else None
        return list(json.loads(stored)) if stored is not None else None

    def current_rows(self) -> pa.Table:
        """Every row of a current-state table (for the audit)."""
        table = self._load(self.target.table)
        if table is None or table.current_snapshot() is None:
            return pa.table({})
        return table.scan().to_arrow()

    def quarantine_table(self, batch_id: str) -> pa.Table:
        columns = ["key", "value", "topic", "partition", "offset", "headers", "reason"]
        return self._scan(self.target.quarantine, batch_id, columns)

    def row_coordinates(self, batch_id: str, quarantined: bool) -> pa.Table:
        """From one scan of the whole table, kept for the next batch (the audit asks for
        every batch in turn)."""
        identifier = self.target.quarantine if quarantined else self.target.table
        table = self._load(identifier)
        snapshot = table.current_snapshot() if table is not None else None
        key = (quarantined, snapshot.snapshot_id if snapshot is not None else None)
        if key not in self._coordinates:
            by_batch: dict[str, pa.Table] = {}
            if table is not None and snapshot is not None:
                names = table.schema().column_names
                present = [c for c in (BATCH_COLUMN, *ROW_COORDINATES) if c in names]
                rows = table.scan(selected_fields=tuple(present)).to_arrow()
                by_batch.update(coordinates_by_batch(rows, BATCH_COLUMN))
            self._coordinates[key] = by_batch
        return self._coordinates[key].get(batch_id, no_coordinates())

    def output_location(self, batch_id: str) -> str:
        return f"{self._name(self.target.table)} ({BATCH_COLUMN} = '{batch_id}')"

    def quarantine_location(self, batch_id: str) -> str:
        return f"{self._name(self.target.quarantine)} ({BATCH_COLUMN} = '{batch_id}')"

    # ---- writing -------------------------------------------------------------------------

    @contextlib.contextmanager
    def exclusive(self, stream: StreamKey) -> Iterator[None]:
        """Nothing to hold: the commit is the fence (a second run's commit finds the offsets
        published and raises :class:`ConcurrentIngestError`), and a run never touches
        another run's files. Within it the run keeps the tables it loaded (:meth:`_load`)."""
        if self._tables is not None:  # (a run within a run: it shares the outer one's)
            yield
            return
        self._run.tables = {}
        try:
            yield
        finally:
            self._run.tables = None

    def recover(self) -> None:
        """Finish the batches ``sluice.pending`` names: their quarantine commit and record
        file (a run that crashed after its commit point)."""
        table = self._load(self.target.table)
        if table is None:
            return
        for batch_id, entry in _pending(table).items():
            if _finished(table, batch_id):
                continue
            self._finish(table, batch_id, list(entry.get("quarantine", [])))

    def pending_files(self) -> set[str]:
        """The quarantine files (URIs) that a pending batch names: in no snapshot until its
        quarantine commit, which :meth:`recover` or the batch's rerun makes from them."""
        table = self._load(self.target.table)
        pending = _pending(table).values() if table is not None else []
        return {uri for entry in pending for uri in entry.get("quarantine", [])}

    def _finish(
        self,
        table: Table,
        batch_id: str,
        quarantine_files: list[str],
        record: BatchRecord | None = None,
    ) -> None:
        """The steps after a batch's commit point; each is done once, whoever runs it.
        ``record``: the batch's, if known (else it is read from the table)."""
        if batch_id not in self._quarantined:
            _with_retries(
                "quarantine",
                lambda: self._commit_quarantine(batch_id, quarantine_files),
                self._forget,
            )
        path = self._record_file(table, batch_id)
        if not table.io.new_input(path).exists():
            record = record or self.find(batch_id)
            if record is not None:
                with table.io.new_output(path).create(overwrite=True) as handle:
                    handle.write(json.dumps(record.to_json(), sort_keys=True).encode())
                sync_file(path)
                sync_directory(path.rpartition("/")[0])
        _DONE.add(("finished", str(table.metadata.table_uuid), batch_id))

    def _record_file(self, table: Table, batch_id: str) -> str:
        name = hashlib.sha256(batch_id.encode()).hexdigest()[:32]
        return f"{self._sidecar(table)}/batches/{name}.json"

    def stage(self, batch_id: str) -> Staging:
        scratch = Path(tempfile.mkdtemp(prefix="sluice-iceberg-"))
        return IcebergStaging(batch_id, scratch, scratch)

    def targets(self, staging: Staging, good: pa.Schema, bad: pa.Schema) -> WriteTargets:
        run = _run(staging)
        if run.data is None or run.quarantine is None:
            existing = self._load(self.target.table)
            if existing is not None:
                self._check_kind(existing)
            name = f"{staging.batch_id}/{run.name}"
            batch = pa.field(BATCH_COLUMN, pa.string())
            # upsert: the messages are staged beside the table's data, never added to it
            columns = pa.schema([(POSITION_COLUMN, pa.int64())]) if self.upserting else None
            table = self._ensure(self.target.table, columns or good.append(batch), existing)
            quarantine = self._ensure(self.target.quarantine, bad.append(batch))
            staged = "sluice-staged" if self.upserting else "sluice"
            run.data = f"{table.location().rstrip('/')}/data/{staged}/{name}"
            run.quarantine = f"{quarantine.location().rstrip('/')}/data/sluice/{name}"
        spec = self._spec or Partitioning()
        try:
            if self.upserting:
                spec = Partitioning()
            spec.check(good.append(pa.field(BATCH_COLUMN, pa.string())), "the batch's rows")
        except PartitionSpecError as exc:
            raise ConfigError(f"Iceberg table {self._name(self.target.table)}: {exc}") from None
        constants = ((BATCH_COLUMN, staging.batch_id),)
        found = self._filesystem(run.data)
        return WriteTargets(run.data, run.quarantine, constants, found, spec)

    def staged_counts(self, staging: Staging) -> tuple[int, int]:
        run = _run(staging)
        found = self._filesystem(run.data)
        return (
            _rows(_parquet_files(run.data, found), found),
            _rows(_parquet_files(run.quarantine, found), found),
        )

    def staged_quarantine_reasons(self, staging: Staging) -> dict[str, str]:
        found = self._filesystem(_run(staging).quarantine)
        files = [f for f in _parquet_files(_run(staging).quarantine, found) if _rows([f], found)]
        if not files:
            return {}
        table = _read_parquet(files, ["message_id", "reason"], found)
        return dict(zip(*table.to_pydict().values(), strict=True))

    def reduce_staged(self, staging: Staging) -> Reduced:
        run = _run(staging)
        found = self._filesystem(run.data)
        files = [f for f in _parquet_files(run.data, found) if _rows([f], found)]
        if not files:
            run.changes = Reduced(list(self.key_columns or []))
            return run.changes
        messages = _read_parquet(files, None, found)
        table = self._load(self.target.table)
        schema = table.schema().as_arrow() if table is not None else None
        run.changes, bad = self.reduce(messages, TableShape(self.current_key_columns(), schema))
        if bad.num_rows:
            assert run.quarantine is not None  # set with run.data
            uri = f"{run.quarantine}/cdc-malformed.parquet"
            filesystem, path = resolve(uri, self._filesystem(run.quarantine))
            filesystem.create_dir(path.rpartition("/")[0], recursive=True)
            pq.write_table(bad, path, filesystem=filesystem)
            sync_file(uri)
        return run.changes

    def discard(self, staging: Staging) -> None:
        """Delete the run's files, but only if its commit is known not to have happened
        (invariant I8): after a commit whose answer was lost they may be the table's."""
        shutil.rmtree(staging.scratch, ignore_errors=True)
        run = _run(staging)
        if run.published:
            return
        if run.committing:
            log.warning(
                "The commit of batch %s to %s may or may not have happened (its answer was "
                "lost); its files are kept. The next ingest of the batch reads the catalog and "
                "finishes the batch or writes it again; Iceberg's orphan-file removal deletes "
                "files no commit took.",
                staging.batch_id,
                self._name(self.target.table),
            )
            return
        for directory in (run.data, run.quarantine):
            if directory is not None:
                with contextlib.suppress(OSError):
                    filesystem, path = resolve(directory, self._filesystem(directory))
                    filesystem.delete_dir(path)

    def publish(self, staging: Staging, record: BatchRecord) -> None:
        from pyiceberg.exceptions import CommitFailedException

        shutil.rmtree(staging.scratch, ignore_errors=True)
        run = _run(staging)
        record.published_at = time.time()
        record.run = run.name
        found = self._filesystem(run.data)
        good = [f for f in _parquet_files(run.data, found) if _rows([f], found)]
        bad = [f for f in _parquet_files(run.quarantine, found) if _rows([f], found)]
        for directory in (run.data, run.quarantine):
            _sync_parents(directory, 3)  # <run>, <batch> and data/sluice are new directories
        if run.changes is not None:
            self._evolve_for(run.changes)
            good = []  # the staged messages are applied as changes, not added
        failpoint("publish.after_intent")
        run.committing = True
        try:
            table = _with_retries(
                "batch", lambda: self._commit_batch(record, good, bad, run.changes), self._forget
            )
        except (ConcurrentIngestError, CommitFailedException):
            run.committing = False  # refused: it did not happen
            raise
        run.published = True
        _sync_snapshot(table, written=run.changes is not None)
        if run.changes is not None and run.data is not None:
            with contextlib.suppress(OSError):  # in no snapshot: orphans if left
                filesystem, path = resolve(run.data, found)
                filesystem.delete_dir(path)
        self._finish(table, record.batch_id, bad, record)
        failpoint("publish.after_state")

    def _commit_quarantine(self, batch_id: str, files: list[str]) -> None:
        """Add a published batch's quarantine files, unless a snapshot already did (a conflict
        with a concurrent finisher reloads and finds it)."""
        transaction = self._quarantine_transaction(batch_id, files)
        if transaction is not None:
            _sync_snapshot(transaction.commit_transaction())

    def _quarantine_transaction(self, batch_id: str, files: list[str]) -> Transaction | None:
        """A transaction adding the batch's quarantine ``files`` (not committed); None if
        there are none or a snapshot of the quarantine table already names the batch."""
        if not files:
            return None
        table = self._load(self.target.quarantine)
        if table is None:
            table = self._ensure(self.target.quarantine, _BASE_SCHEMA)
        if any(s[f"{PREFIX}batch-id"] == batch_id for _, s in _sluice_snapshots(table)):
            return None
        from .transactions import transaction as new_transaction

        transaction = new_transaction(table)
        transaction.add_files(files, {f"{PREFIX}batch-id": batch_id}, check_duplicate_files=False)
        return transaction

    @contextlib.contextmanager
    def _batch_transaction(
        self, table: Table, batch_id: str, quarantine: list[str]
    ) -> Iterator[Transaction]:
        """The batch's transaction on ``table``, committed when the block ends with the
        batch's ``quarantine`` files: in one commit where the catalog can (a REST catalog's
        multi-table commit); elsewhere the quarantine's commit is prepared (its manifests
        written) before the batch's and sent right after it, so that a reader sees the
        batch without its quarantine rows only while that commit is made (after a crash
        between the two, until :meth:`_finish` makes it)."""
        from pyiceberg.exceptions import CommitFailedException

        from .transactions import transaction as new_transaction

        transaction = new_transaction(table)
        yield transaction
        prepared = self._quarantine_transaction(batch_id, quarantine)
        if prepared is not None and can_commit_together(self.catalog):
            self._commit_together(batch_id, transaction, prepared)
            failpoint("publish.after_rename")
            return
        try:
            _sync_snapshot(transaction.commit_transaction())
        except CommitFailedException:
            if prepared is not None:
                discard([prepared])
            raise
        failpoint("publish.after_rename")  # (between the two commits)
        if prepared is not None:
            try:
                _sync_snapshot(prepared.commit_transaction())
                self._quarantined.add(batch_id)
            except Exception as exc:  # the batch is published: _finish tries again
                log.warning("Batch %s's quarantine commit failed (%s); retrying.", batch_id, exc)

    def _commit_together(self, batch_id: str, batch: Transaction, quarantine: Transaction) -> None:
        """The batch's commit and its quarantine's as one (:mod:`.multi_table`), the batch's
        first; the batch's table object is refreshed. A refusal (409) is checked against the
        catalog: a server that commits the tables one by one may have committed the table
        before it refused (then the batch is published, and :meth:`_finish` commits the
        quarantine)."""
        from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException

        self._forget()  # (a multi-table commit leaves the tables' objects as they were)
        try:
            commit_together(self.catalog, [batch, quarantine])
        except CommitFailedException:
            published, quarantined = discard_unlanded([batch, quarantine])
            if published is None or (quarantined and not published):
                raise CommitStateUnknownException(
                    f"The Iceberg catalog '{self.target.catalog}' refused the commit of batch "
                    f"{batch_id}, and what it committed of it is unknown (its multi-table "
                    "commit is not atomic). The batch's files are kept; run the batch again."
                ) from None
            if not published:
                raise
            log.warning(
                "The Iceberg catalog '%s' refused the one commit of batch %s and its "
                "quarantine, yet committed the batch (its multi-table commit is not atomic): "
                "the quarantine follows in a commit of its own.",
                self.target.catalog,
                batch_id,
            )
        else:
            self._quarantined.add(batch_id)
            if local_target(quarantine._table.metadata_location) is not None:
                _sync_snapshot(self.catalog.load_table(self.target.quarantine))
        batch._table.refresh()
        self._keep(self.target.table, batch._table)

    def _evolve_for(self, changes: Reduced) -> None:
        """Add the new columns of the changes' rows to the table (the rules of :meth:`_ensure`;
        a column's type as the table has it, where it has it)."""
        table = self._load(self.target.table)
        schema = table.schema().as_arrow() if table is not None else None
        self._ensure(self.target.table, changes.rows(schema).schema)

    def _commit_batch(
        self,
        record: BatchRecord,
        files: list[str],
        quarantine: list[str],
        changes: Reduced | None = None,
    ) -> Table:
        from pyiceberg.exceptions import CommitFailedException

        stream = record.stream
        table = self._load(self.target.table) or self._ensure(
            self.target.table, self._base_schema(stream.kind)
        )
        try:
            state = self._state(table, stream)
        except FileNotFoundError:  # a newer commit replaced it: this table is stale
            raise CommitFailedException("the stream state was replaced") from None
        plan = None
        if changes is not None:
            self._check_kind(table)
            plan = plan_iceberg(table, changes, state.cdc_deleted, state.cdc_truncated)
            record.counts.update(plan.counts)
            record.cdc_markers = plan.markers
            record.cdc_truncated = plan.truncated_at
        check_publishable(state, record)
        state.fold(record)
        text = json.dumps(state.to_json(), sort_keys=True)
        inline, in_file = f"{PREFIX}stream.{stream.slug}", f"{PREFIX}stream-file.{stream.slug}"
        previous = self._streams(table).get(in_file)
        pending = {k: v for k, v in _pending(table).items() if not _finished(table, k)}
        pending[record.batch_id] = {"quarantine": quarantine}
        properties = {f"{PREFIX}pending": json.dumps(pending, sort_keys=True)}
        stored_keys = json.loads(table.properties.get(CDC_PROPERTY, "null"))
        if (
            plan is not None
            and not stored_keys
            and (plan.reduced.key_columns or stored_keys is None)
        ):
            # fixed once, by the first batch that has keys (a first batch of tombstones or
            # malformed envelopes only leaves them to the next)
            properties[CDC_PROPERTY] = json.dumps(plan.reduced.key_columns)
        removed: list[str] = []
        written = None
        if len(text) <= INLINE_LIMIT:
            properties[inline] = text
            if previous is not None:
                removed.append(in_file)
        else:
            written = f"{self._sidecar(table)}/streams/{stream.slug}/{uuid.uuid4().hex}.json"
            with table.io.new_output(written).create(overwrite=True) as handle:
                handle.write(text.encode())
            sync_file(written)
            sync_directory(written.rpartition("/")[0])
            properties[in_file] = written
            if inline in table.properties:
                removed.append(inline)
        summary = self._batch_summary(record)
        try:
            with self._batch_transaction(table, record.batch_id, quarantine) as transaction:
                transaction.set_properties(properties)
                if removed:
                    transaction.remove_properties(*removed)
                if plan is not None:
                    apply_iceberg(transaction, plan, summary)
                elif files and table.spec().is_unpartitioned():
                    transaction.add_files(files, summary, check_duplicate_files=False)
                elif files:
                    _add_partitioned_files(table, transaction, files, summary)
                else:
                    with transaction.update_snapshot(snapshot_properties=summary).fast_append():
                        pass
        except CommitFailedException:
            if written is not None:
                table.io.delete(written)
            raise
        if previous is not None and previous != written:
            # a newer state replaces it; a concurrent reader reloads on a missing file
            with contextlib.suppress(OSError):
                table.io.delete(previous)
        return table

    def _batch_summary(self, record: BatchRecord) -> dict[str, str]:
        stream = record.stream
        stored = record.summary_json()
        summary = {
            f"{PREFIX}batch-id": record.batch_id,
            f"{PREFIX}run": record.run or "",
            f"{PREFIX}kind": stream.kind,
            f"{PREFIX}topic": stream.topic,
            f"{PREFIX}group": stream.group or "",
            f"{PREFIX}record": json.dumps(stored, sort_keys=True),
        }
        if stream.kind == "kafka":
            summary[f"{PREFIX}ranges"] = ",".join(
                f"{r.partition}:{r.start}-{r.end}" for r in record.ranges
            )
        else:
            summary[f"{PREFIX}message-count"] = str(len(record.message_ids))
            summary[f"{PREFIX}message-digest"] = _message_digest(record.message_ids)
        return summary

    # ---- dead letters --------------------------------------------------------------------

    def _dead_letter_file(self, batch_id: str) -> tuple[Table, str] | None:
        table = self._load(self.target.table)
        if table is None:
            return None
        name = hashlib.sha256(batch_id.encode()).hexdigest()[:32]
        return table, f"{self._sidecar(table)}/dead_letters/{name}.json"

    def dead_letter_progress(self, batch_id: str) -> dict[str, Any] | None:
        found = self._dead_letter_file(batch_id)
        if found is None:
            return None
        table, path = found
        source = table.io.new_input(path)
        if not source.exists():
            return None
        with source.open() as handle:
            data: dict[str, Any] = json.loads(handle.read())
        return data

    def save_dead_letter_progress(self, batch_id: str, progress: dict[str, Any]) -> None:
        found = self._dead_letter_file(batch_id)
        if found is None:
            raise RuntimeError(f"Iceberg table {self._name(self.target.table)} does not exist")
        table, path = found
        with table.io.new_output(path).create(overwrite=True) as handle:
            handle.write(json.dumps(progress, sort_keys=True).encode())


def _partition_properties(spec: Partitioning) -> dict[str, str]:
    """Full column statistics of identity and truncate partition sources: a file's partition
    value is read back from its statistics, which are otherwise truncated to 16 bytes."""
    return {
        f"write.metadata.metrics.column.{term.column}": "full"
        for term in spec.terms
        if term.transform in ("identity", "truncate")
    }


def _add_partitioned_files(
    table: Table, transaction: Any, files: list[str], summary: dict[str, str]
) -> None:
    """``add_files`` for a partitioned table: pyiceberg's infers a file's partition from its
    column statistics, which cannot give a bucket (murmur3 does not keep order). Here each
    file's partition value is computed from its rows (the partition source columns only) and
    checked to be one value (the writing job split the rows so); the file's statistics are
    pyiceberg's, as in ``add_files``."""
    from pyiceberg.table import TableProperties
    from pyiceberg.typedef import Record

    metadata = transaction.table_metadata
    schema = metadata.schema()
    spec = Partitioning.of_iceberg(metadata.spec(), schema)
    if metadata.name_mapping() is None:
        transaction.set_properties(
            **{TableProperties.DEFAULT_NAME_MAPPING: schema.name_mapping.model_dump_json()}
        )
        metadata = transaction.table_metadata
    sources = sorted({term.column for term in spec.terms})
    data_files = []
    for path in files:
        source = table.io.new_input(path)
        with source.open() as handle:
            parquet = pq.ParquetFile(handle)
            rows = parquet.read(columns=sources)
            footer = parquet.metadata
        values = []
        for term in spec.terms:
            distinct = pc.unique(term.values(rows.column(term.column))).to_pylist()
            if len(distinct) != 1:
                raise RuntimeError(
                    f"{path} holds {len(distinct)} values of partition field {term.name}, not "
                    "one: it cannot be added to a partitioned table"
                )
            values.append(_internal(distinct[0]))
        data_files.append(
            parquet_data_file(
                metadata, path, len(source), footer, Record(*values), metadata.default_spec_id
            )
        )
    with transaction.update_snapshot(snapshot_properties=summary).fast_append() as append:
        for data_file in data_files:
            append.append_data_file(data_file)


def parquet_data_file(
    metadata: Any, path: str, size: int, footer: Any, partition: Any, spec_id: int
) -> Any:
    """The manifest entry of the Parquet file at ``path`` (its ``footer``: pyarrow's
    FileMetaData) in partition ``partition`` of spec ``spec_id``, with pyiceberg's statistics,
    as ``add_files`` makes it."""
    from pyiceberg.io.pyarrow import (
        compute_statistics_plan,
        data_file_statistics_from_parquet_metadata,
        parquet_path_to_id_mapping,
    )
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat

    schema = metadata.schema()
    statistics = data_file_statistics_from_parquet_metadata(
        parquet_metadata=footer,
        stats_columns=compute_statistics_plan(schema, metadata.properties),
        parquet_column_mapping=parquet_path_to_id_mapping(schema),
    )
    return DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=partition,
        file_size_in_bytes=size,
        sort_order_id=None,
        spec_id=spec_id,
        equality_ids=None,
        key_metadata=None,
        **statistics.to_serialized_dict(),
    )


def _internal(value: Any) -> Any:
    """A partition value in Iceberg's representation: dates as days, timestamps as
    microseconds since the epoch (UTC)."""
    import datetime

    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.UTC)
        epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
        delta = value - epoch
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    if isinstance(value, datetime.date):
        return (value - datetime.date(1970, 1, 1)).days
    return value


def _finished(table: Table, batch_id: str) -> bool:
    """This process finished the steps after ``batch_id``'s commit point (:meth:`_finish`)."""
    return ("finished", str(table.metadata.table_uuid), batch_id) in _DONE


def _pending(table: Table) -> dict[str, dict[str, Any]]:
    """The batches whose steps after the commit point may be unfinished."""
    data: dict[str, dict[str, Any]] = json.loads(table.properties.get(f"{PREFIX}pending", "{}"))
    return data


def _sync_parents(directory: str | None, levels: int) -> None:
    """Sync ``directory`` and its ``levels - 1`` parents (new directory entries; local only)."""
    for _ in range(levels):
        if not directory:
            return
        sync_directory(directory)
        directory = directory.rstrip("/").rpartition("/")[0]


def _sync_snapshot(table: Table, written: bool = False) -> None:
    """Sync what the table's current snapshot depends on (local warehouses only): its metadata
    file, manifest list and manifests, and their directories. The data files were synced by
    the tasks that wrote them; ``written``: pyiceberg wrote some in the commit (an upsert's),
    which a sync of the file system makes durable."""
    snapshot = table.current_snapshot()
    if local_target(table.metadata_location) is None or snapshot is None:
        return
    if written:
        os.sync()
    files = [table.metadata_location, snapshot.manifest_list]
    files += [m.manifest_path for m in snapshot.manifests(table.io)]
    for path in files:
        with contextlib.suppress(FileNotFoundError):
            sync_file(path)
    for directory in {path.rpartition("/")[0] for path in files}:
        sync_directory(directory)


def _of_batch(batch_id: str) -> BooleanExpression:
    """The filter ``batch_id = <batch_id>``."""
    from pyiceberg.expressions import EqualTo

    return EqualTo(BATCH_COLUMN, batch_id)  # type: ignore[call-arg, arg-type]


def _run(staging: Staging) -> _Run:
    if not isinstance(staging, IcebergStaging):
        raise TypeError(f"not an Iceberg staging area: {staging!r}")
    return staging.run
