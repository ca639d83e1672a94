"""The Apache Iceberg sink: ``iceberg://CATALOG/NAMESPACE.TABLE``, one snapshot per batch.

The catalog is configured the pyiceberg way (``.pyiceberg.yaml``, or
``PYICEBERG_CATALOG__<NAME>__*`` environment variables, read afresh for every sink): a SQL
catalog on SQLite or PostgreSQL, REST, Glue, Hive... Quarantined rows go to a second table,
``<TABLE>__quarantine`` unless ``?quarantine=NAMESPACE.OTHER`` names another.

Tables. Created on the first ingest from the good rows' schema: the payload fields, the
message columns (key, value, topic, partition, offset, timestamp, headers, message_id) and a
``batch_id`` column (the quarantine table: the message columns, ``reason`` and ``batch_id``).
Every field is optional. A new field in a later batch is added (``union_by_name``); a field
whose type changes is refused with a :class:`ConfigError` naming it. The tables are
*unpartitioned*: pyiceberg's ``add_files`` takes a file's partition from its column
statistics, so each file must hold one partition value, and a batch's files span
days and partitions; a scan of one batch is pruned anyway, by the ``batch_id`` column's
statistics (kept in full: every data file holds one batch). A spec of ``identity(batch_id)``
would work too; ``day(timestamp)`` would not.

Commit protocol (docs/architecture.md, "The Iceberg sink"):

1. The Spark job writes the batch's Parquet files (:mod:`sluice.spark.writing`) straight under
   the table's location, ``<location>/data/sluice/<batch>/<run>/``; they become the table's
   data files as they are, nothing is copied.
2. The quarantined rows' files are committed to the quarantine table first, replacing any
   rows of the same batch id that an earlier, crashed run committed (one transaction: delete
   ``batch_id = <id>``, add the files), in a snapshot naming the batch.
3. ONE commit on the main table adds the good rows' files (``add_files``) in a snapshot whose
   summary names the batch (``sluice.batch-id``, ``sluice.kind``, ``sluice.topic``,
   ``sluice.group``, ``sluice.ranges``; MQTT ``sluice.message-count`` and a SHA-256
   ``sluice.message-digest`` of the sorted ids), holds its record (``sluice.record``) and the
   state of every stream of the table after this batch (``sluice.stream.<stream>``). This is
   the commit point (invariant I2): offsets are committed only after it. A state over
   :data:`INLINE_LIMIT` characters (MQTT's recent ids, a Kafka stream's last 1,000 batch ids)
   is written to an immutable file beside the table and the summary holds its path
   (``sluice.stream-file.<stream>``): Iceberg keeps every snapshot's summary in the table's
   metadata file, so summaries stay small.
4. On a commit conflict (another writer committed first): reload, check again that no
   other run published the batch's offsets or ids meanwhile (else
   :class:`ConcurrentIngestError`, and the batch's quarantine rows are withdrawn), fold the
   record into the fresh state and commit again. pyiceberg's own retry is off on these
   tables (``commit.retry.num-retries=0``): it would reuse the stale state.

Reading: ``state()`` reads the newest snapshot of the main branch that Sluice wrote (one
summary, and at most one state file: invariant I5); ``find()`` walks the main branch's
snapshots in the table metadata the catalog already loaded, without further I/O;
``recover()`` has nothing to do, a commit being atomic. ``records()`` and
``row_coordinates()`` (the audit) read the summaries and scan the tables.

Beside the table, ``<location's parent>/_sluice/<location's name>/``: stream states too large
for a summary (``streams/``) and the dead-letter progress (``dead_letters/<batch>.json``),
written with the table's FileIO. Not under the table's location, where Iceberg's orphan-file
removal would delete them. Files of a run that crashed before its commit are orphans under
the table's location; Iceberg's orphan-file removal deletes them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import parse_qs, urlsplit

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ...queues.config import ConfigError
from ..failpoints import failpoint
from ..writing import WriteTargets
from .base import BatchRecord, ConcurrentIngestError, Staging, StreamKey, StreamState
from .catalogs import catalog_error, load_iceberg_catalog

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot

__all__ = [
    "BATCH_COLUMN",
    "INLINE_LIMIT",
    "SCHEME",
    "IcebergSink",
    "IcebergStaging",
    "IcebergTarget",
    "parse_iceberg_uri",
]

SCHEME = "iceberg"
BATCH_COLUMN = "batch_id"
#: A stream state longer than this (JSON characters) goes to a file named by the summary.
INLINE_LIMIT = 4096
#: Commit attempts on conflicts before giving up.
COMMIT_ATTEMPTS = 30
PREFIX = "sluice."
TABLE_PROPERTIES = {
    "commit.retry.num-retries": "0",
    f"write.metadata.metrics.column.{BATCH_COLUMN}": "full",
}
_COORDINATES = {"partition": pa.int32(), "offset": pa.int64(), "message_id": pa.string()}
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
    "optionally ?quarantine=NAMESPACE.TABLE."
)


@dataclass(frozen=True)
class IcebergTarget:
    """What an ``iceberg://`` URI names."""

    catalog: str
    table: tuple[str, ...]
    quarantine: tuple[str, ...]

    @property
    def namespace(self) -> tuple[str, ...]:
        return self.table[:-1]


def parse_iceberg_uri(uri: str) -> IcebergTarget:
    """``iceberg://CATALOG/NAMESPACE.TABLE[?quarantine=NAMESPACE.TABLE]``."""
    parts = urlsplit(uri)
    if parts.scheme != SCHEME or not parts.netloc:
        raise ConfigError(f"sink {uri!r} names no Iceberg catalog. {_HINT}")
    table = _identifier(parts.path.strip("/"), uri)
    options = parse_qs(parts.query)
    unknown = sorted(set(options) - {"quarantine"})
    if unknown:
        raise ConfigError(f"sink {uri!r}: unknown option(s) {', '.join(unknown)}. {_HINT}")
    quarantine = (*table[:-1], f"{table[-1]}__quarantine")
    if "quarantine" in options:
        quarantine = _identifier(options["quarantine"][-1], uri)
    if quarantine == table:
        raise ConfigError(f"sink {uri!r}: the quarantine table must differ from the table.")
    return IcebergTarget(parts.netloc, table, quarantine)


def _identifier(text: str, uri: str) -> tuple[str, ...]:
    names = tuple(text.split("."))
    if len(names) < 2 or not all(re.fullmatch(r"[A-Za-z0-9_\-]+", n) for n in names):
        raise ConfigError(f"sink {uri!r}: {text!r} is not NAMESPACE.TABLE. {_HINT}")
    return names


@dataclass
class _Run:
    data: str | None = None  # URIs of the staged files' directories (set by the first write)
    quarantine: str | None = None
    published: bool = False


@dataclass(frozen=True)
class IcebergStaging(Staging):
    """A run's staging: its files are written under the tables' locations."""

    run: _Run = field(default_factory=_Run)


def _parquet_files(uri: str | None) -> list[str]:
    """URIs of the Parquet files directly in the directory ``uri`` (none if it is absent)."""
    if uri is None:
        return []
    from pyarrow import fs

    filesystem, base = fs.FileSystem.from_uri(uri)
    infos = filesystem.get_file_info(fs.FileSelector(base, allow_not_found=True))
    return sorted(
        uri + info.path[len(base) :]
        for info in infos
        if info.type == fs.FileType.File and info.path.endswith(".parquet")
    )


def _read_parquet(uris: list[str], columns: list[str] | None = None) -> pa.Table:
    from pyarrow import fs

    tables = []
    for uri in uris:
        filesystem, path = fs.FileSystem.from_uri(uri)
        tables.append(pq.read_table(path, filesystem=filesystem, columns=columns))
    return pa.concat_tables(tables)


def _rows(uris: list[str]) -> int:
    from pyarrow import fs

    total = 0
    for uri in uris:
        filesystem, path = fs.FileSystem.from_uri(uri)
        with filesystem.open_input_file(path) as handle:
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


def _sluice_snapshots(table: Table) -> Iterator[tuple[Snapshot, dict[str, str]]]:
    for snapshot in _lineage(table):
        summary = _summary(snapshot)
        if f"{PREFIX}batch-id" in summary:
            yield snapshot, summary


T = TypeVar("T")


def _with_retries(what: str, attempt: Callable[[], T]) -> T:
    """``attempt()`` again on a commit conflict (it reloads what it needs itself)."""
    from pyiceberg.exceptions import CommitFailedException

    for number in range(COMMIT_ATTEMPTS):
        try:
            return attempt()
        except CommitFailedException:
            if number == COMMIT_ATTEMPTS - 1:
                raise
            time.sleep(min(0.05 * 2**number, 1.0) * (0.5 + uuid.uuid4().int % 100 / 100))
    raise AssertionError("unreachable")  # pragma: no cover


def _message_digest(ids: list[str]) -> str:
    return hashlib.sha256("\n".join(sorted(ids)).encode()).hexdigest()


class IcebergSink:
    """An Iceberg table and its quarantine table (see the module docstring)."""

    def __init__(self, location: str) -> None:
        self.target = parse_iceberg_uri(location)
        self.location = location
        self._catalog: Catalog | None = None
        self._coordinates: dict[tuple[bool, int | None], dict[str, pa.Table]] = {}

    # ---- catalog and tables --------------------------------------------------------------

    @property
    def catalog(self) -> Catalog:
        if self._catalog is None:
            self._catalog = load_iceberg_catalog(self.target.catalog)
        return self._catalog

    def _name(self, identifier: tuple[str, ...]) -> str:
        return ".".join(identifier)

    def check(self) -> None:
        """The catalog opens and the table's namespace exists (it is created if missing)."""
        try:
            for identifier in {self.target.namespace, self.target.quarantine[:-1]}:
                self.catalog.create_namespace_if_not_exists(identifier)
        except ConfigError:
            raise
        except Exception as exc:
            raise catalog_error(
                self.target.catalog,
                "cannot be used",
                exc,
                "check its configuration and that you may create namespaces and tables in it.",
            ) from None

    def _load(self, identifier: tuple[str, ...]) -> Table | None:
        from pyiceberg.exceptions import NoSuchTableError

        try:
            return self.catalog.load_table(identifier)
        except NoSuchTableError:
            return None

    def _ensure(self, identifier: tuple[str, ...], schema: pa.Schema) -> Table:
        """The table, created with ``schema`` or extended by its new fields."""
        from pyiceberg.exceptions import ValidationError

        schema = pa.schema([f.with_nullable(True) for f in schema])
        table = self._load(identifier)
        if table is None:
            self.catalog.create_namespace_if_not_exists(identifier[:-1])
            table = self.catalog.create_table_if_not_exists(
                identifier, schema=schema, properties=TABLE_PROPERTIES
            )
        missing = {k: v for k, v in TABLE_PROPERTIES.items() if table.properties.get(k) != v}
        if missing:
            table = _with_retries("properties", lambda: self._set_properties(identifier, missing))

        def evolve() -> Table:
            fresh = self.catalog.load_table(identifier)
            with fresh.update_schema() as update:
                update.union_by_name(schema)
            return fresh

        try:
            return _with_retries("schema", evolve)
        except (ValidationError, ValueError) as exc:
            raise ConfigError(
                f"The batch's rows do not fit the Iceberg table {self._name(identifier)}: {exc}. "
                "A new field is added to the table, but a field cannot change its type (Iceberg "
                "only widens int to long and float to double): keep the schema's type, or "
                "ingest into another table."
            ) from None

    def _set_properties(self, identifier: tuple[str, ...], properties: dict[str, str]) -> Table:
        table = self.catalog.load_table(identifier)
        with table.transaction() as transaction:
            transaction.set_properties(properties)
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
        for _ in range(COMMIT_ATTEMPTS):
            table = self._load(self.target.table)
            if table is None:
                return StreamState()
            try:
                return self._state(table, stream)
            except FileNotFoundError:  # a newer commit replaced the state file: reload
                continue
        raise RuntimeError(f"the state of {stream} kept changing while it was read")

    def _streams(self, table: Table) -> dict[str, str]:
        """The ``sluice.stream*`` entries of the newest snapshot Sluice wrote."""
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
        table = self._load(self.target.table)
        if table is None:
            return
        found = [json.loads(s[f"{PREFIX}record"]) for _, s in _sluice_snapshots(table)]
        for data in reversed(found):
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
                rows = table.scan(selected_fields=(BATCH_COLUMN, *_COORDINATES)).to_arrow()
                rows = rows.select([BATCH_COLUMN, *_COORDINATES]).cast(
                    pa.schema([(BATCH_COLUMN, pa.string()), *_COORDINATES.items()])
                )
                for name in set(rows.column(BATCH_COLUMN).to_pylist()):
                    mask = pc.equal(rows.column(BATCH_COLUMN), name)
                    by_batch[name] = rows.filter(mask).drop_columns([BATCH_COLUMN])
            self._coordinates[key] = by_batch
        empty = pa.table({c: pa.array([], t) for c, t in _COORDINATES.items()})
        return self._coordinates[key].get(batch_id, empty)

    def output_location(self, batch_id: str) -> str:
        return f"{self._name(self.target.table)} ({BATCH_COLUMN} = '{batch_id}')"

    def quarantine_location(self, batch_id: str) -> str:
        return f"{self._name(self.target.quarantine)} ({BATCH_COLUMN} = '{batch_id}')"

    # ---- writing -------------------------------------------------------------------------

    def recover(self) -> None:
        """Nothing to do: a batch is published by one atomic catalog commit."""

    def stage(self, batch_id: str) -> Staging:
        scratch = Path(tempfile.mkdtemp(prefix="sluice-iceberg-"))
        return IcebergStaging(batch_id, scratch, scratch)

    def targets(self, staging: Staging, good: pa.Schema, bad: pa.Schema) -> WriteTargets:
        run = _run(staging)
        if run.data is None or run.quarantine is None:
            name = f"{staging.batch_id}/{uuid.uuid4().hex[:12]}"
            batch = pa.field(BATCH_COLUMN, pa.string())
            table = self._ensure(self.target.table, good.append(batch))
            quarantine = self._ensure(self.target.quarantine, bad.append(batch))
            run.data = f"{table.location().rstrip('/')}/data/sluice/{name}"
            run.quarantine = f"{quarantine.location().rstrip('/')}/data/sluice/{name}"
        return WriteTargets(run.data, run.quarantine, ((BATCH_COLUMN, staging.batch_id),))

    def staged_counts(self, staging: Staging) -> tuple[int, int]:
        run = _run(staging)
        return _rows(_parquet_files(run.data)), _rows(_parquet_files(run.quarantine))

    def staged_quarantine_reasons(self, staging: Staging) -> dict[str, str]:
        files = [f for f in _parquet_files(_run(staging).quarantine) if _rows([f])]
        if not files:
            return {}
        table = _read_parquet(files, ["message_id", "reason"])
        return dict(zip(*table.to_pydict().values(), strict=True))

    def discard(self, staging: Staging) -> None:
        shutil.rmtree(staging.scratch, ignore_errors=True)
        run = _run(staging)
        if run.published:
            return
        from pyarrow import fs

        if run.data is not None:  # never referenced: the main commit did not happen
            with contextlib.suppress(OSError):
                filesystem, path = fs.FileSystem.from_uri(run.data)
                filesystem.delete_dir(path)

    def publish(self, staging: Staging, record: BatchRecord) -> None:
        shutil.rmtree(staging.scratch, ignore_errors=True)
        run = _run(staging)
        record.published_at = time.time()
        good = [f for f in _parquet_files(run.data) if _rows([f])]
        bad = [f for f in _parquet_files(run.quarantine) if _rows([f])]
        if bad or self._quarantine_names(record.batch_id):
            _with_retries("quarantine", lambda: self._commit_quarantine(record.batch_id, bad))
        failpoint("publish.after_intent")
        try:
            _with_retries("batch", lambda: self._commit_batch(record, good))
        except ConcurrentIngestError:
            if self.find(record.batch_id) is None:
                self._withdraw_quarantine(record.batch_id)
            raise
        run.published = True
        failpoint("publish.after_rename")
        failpoint("publish.after_state")

    def _quarantine_names(self, batch_id: str) -> bool:
        """Whether a snapshot of the quarantine table names ``batch_id``."""
        table = self._load(self.target.quarantine)
        if table is None:
            return False
        return any(s[f"{PREFIX}batch-id"] == batch_id for _, s in _sluice_snapshots(table))

    def _commit_quarantine(self, batch_id: str, files: list[str]) -> None:
        table = self._load(self.target.quarantine)
        if table is None:
            table = self._ensure(self.target.quarantine, _BASE_SCHEMA)
        properties = {f"{PREFIX}batch-id": batch_id}
        with table.transaction() as transaction:
            if any(s[f"{PREFIX}batch-id"] == batch_id for _, s in _sluice_snapshots(table)):
                transaction.delete(_of_batch(batch_id), properties)
            if files:
                transaction.add_files(files, properties, check_duplicate_files=False)

    def _withdraw_quarantine(self, batch_id: str) -> None:
        def attempt() -> None:
            if self._quarantine_names(batch_id):
                self._commit_quarantine(batch_id, [])

        _with_retries("quarantine", attempt)

    def _commit_batch(self, record: BatchRecord, files: list[str]) -> None:
        from pyiceberg.exceptions import CommitFailedException

        table = self._load(self.target.table) or self._ensure(self.target.table, _BASE_SCHEMA)
        stream = record.stream
        streams = self._streams(table)
        try:
            state = self._state(table, stream)
        except FileNotFoundError:  # a newer commit replaced it: this table is stale
            raise CommitFailedException("the stream state was replaced") from None
        reset = set(record.reset_partitions)
        taken = state.written.overlaps([r for r in record.ranges if r.partition not in reset])
        if taken or any(i in state.recent_ids for i in record.message_ids):
            raise ConcurrentIngestError(
                f"Another ingest of {stream.kind} topic '{stream.topic}' published some of "
                f"batch {record.batch_id}'s messages while it ran "
                f"({', '.join(_describe(r) for r in taken[:5]) or 'message ids'}). Nothing "
                "was published or committed; run the batch again to ingest what is left."
            )
        state.fold(record)
        summary = self._batch_summary(record)
        summary.update(streams)
        text = json.dumps(state.to_json(), sort_keys=True)
        inline, in_file = f"{PREFIX}stream.{stream.slug}", f"{PREFIX}stream-file.{stream.slug}"
        previous = summary.pop(in_file, None)
        summary.pop(inline, None)
        written = None
        if len(text) <= INLINE_LIMIT:
            summary[inline] = text
        else:
            written = f"{self._sidecar(table)}/streams/{stream.slug}/{uuid.uuid4().hex}.json"
            with table.io.new_output(written).create(overwrite=True) as handle:
                handle.write(text.encode())
            summary[in_file] = written
        try:
            with table.transaction() as transaction:
                if files:
                    transaction.add_files(files, summary, check_duplicate_files=False)
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

    def _batch_summary(self, record: BatchRecord) -> dict[str, str]:
        stream = record.stream
        stored = record.to_json()
        stored["message_ids"], stored["quarantined_ids"] = [], {}
        summary = {
            f"{PREFIX}batch-id": record.batch_id,
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


def _of_batch(batch_id: str) -> BooleanExpression:
    """The filter ``batch_id = <batch_id>``."""
    from pyiceberg.expressions import EqualTo

    return EqualTo(BATCH_COLUMN, batch_id)  # type: ignore[call-arg, arg-type]


def _run(staging: Staging) -> _Run:
    if not isinstance(staging, IcebergStaging):
        raise TypeError(f"not an Iceberg staging area: {staging!r}")
    return staging.run


def _describe(r: Any) -> str:
    return f"partition {r.partition} offsets {r.start}-{r.end - 1}"
