"""Partition specs: ``day(ts),bucket(16,device)``, parsed, checked and computed on rows.

A spec is a comma-separated list of Iceberg's transforms of a column: ``identity(col)`` (or
just ``col``), ``year(col)``, ``month(col)``, ``day(col)``, ``hour(col)``, ``bucket(N,col)``
and ``truncate(W,col)``. The Iceberg sink creates its table with it (:meth:`Partitioning.
iceberg_spec`); the Parquet sink writes hive-style directories inside each batch, one per
partition value (``batch_id=<id>/ts_day=2026-01-05/device_bucket=3/part-*.parquet``).

Values are computed the way Iceberg defines them, so a file's partition value is the one
Iceberg would give its rows: time transforms count years, months, days or hours from
1970-01-01 (UTC); ``bucket`` is ``(murmur3_x86_32(v) & 0x7fffffff) % N`` of the value's
Iceberg serialisation (ints and longs as 8 little-endian bytes, strings as UTF-8, dates as
days and timestamps as microseconds); ``truncate`` keeps the first W characters of a string
or bytes, and ``v - (v mod W)`` of an integer.

The writing tasks split their rows with :meth:`Partitioning.split`. Spark pickles this module
by value into them (:mod:`.writing`), so executors need no Sluice: it imports only pyarrow
and, for ``bucket``, ``mmh3`` (a dependency of pyiceberg, so present where Iceberg is).
Errors are :class:`ValueError` subclasses here; :mod:`sluice.queues.config`'s ConfigError is
one, and is what the sinks raise.
"""

from __future__ import annotations

import re
import struct
import urllib.parse
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["TRANSFORMS", "PartitionSpecError", "PartitionTerm", "Partitioning"]

#: Transform -> whether it takes a number (bucket count, truncate width).
TRANSFORMS = {
    "identity": False,
    "year": False,
    "month": False,
    "day": False,
    "hour": False,
    "bucket": True,
    "truncate": True,
}
_TIME = ("year", "month", "day", "hour")
_SUFFIX = {"bucket": "bucket", "truncate": "trunc"}
_EXAMPLE = "e.g. partition_by='day(timestamp),bucket(16,device)'"
_TERM = re.compile(r"^\s*(?:(\w+)\s*\(\s*(?:(-?\d+)\s*,\s*)?([^(),\s]+)\s*\)|([^(),\s]+))\s*$")
_DAY_US = 86_400_000_000
_HOUR_US = 3_600_000_000


class PartitionSpecError(ValueError):
    """A partition spec that cannot be used; the message names the problem and a fix."""


@dataclass(frozen=True)
class PartitionTerm:
    """One transform of one column."""

    transform: str
    column: str
    width: int | None = None  # bucket: the number of buckets; truncate: the width

    @property
    def name(self) -> str:
        """The partition field's name, Iceberg's default: ``ts_day``, ``device_bucket``,
        ``name_trunc``; identity: the column's own name."""
        if self.transform == "identity":
            return self.column
        return f"{self.column}_{_SUFFIX.get(self.transform, self.transform)}"

    @property
    def directory_key(self) -> str:
        """The key of its hive-style directory in a Parquet dataset: :attr:`name`, except
        identity's, ``<column>_identity``: a directory named like a column of the files gives
        readers two columns of one name (pyarrow's ``read_table`` refuses them)."""
        return f"{self.column}_identity" if self.transform == "identity" else self.name

    def __str__(self) -> str:
        if self.width is None:
            return f"{self.transform}({self.column})"
        return f"{self.transform}({self.width},{self.column})"

    def values(self, column: pa.Array | pa.ChunkedArray) -> pa.Array:
        """The transform of every value of ``column`` (nulls stay null): ints for the time
        transforms and bucket, values of the column's type for identity and truncate."""
        array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        if self.transform == "identity":
            return array
        if self.transform in _TIME:
            return _time_values(self.transform, array)
        if self.transform == "bucket":
            assert self.width is not None
            return _mapped(array, lambda v: _bucket(v, array.type, self.width or 1), pa.int32())
        assert self.width is not None
        return _truncated(array, self.width)

    def human(self, value: Any) -> str:
        """A partition value as Iceberg writes it in paths: ``2026-01-05`` (day),
        ``2026-01-05-10`` (hour), ``2026-01`` (month), ``2026`` (year); ``null`` for null."""
        if value is None:
            return "null"
        if self.transform in _TIME:
            return _human_time(self.transform, int(value))
        if isinstance(value, bytes):
            return value.hex()
        return str(value)


def _time_values(transform: str, array: pa.Array) -> pa.Array:
    """Years, months, days or hours since 1970-01-01 (floor, so before 1970 is negative)."""
    if pa.types.is_date(array.type):
        days = array.cast(pa.date32()).cast(pa.int32()).cast(pa.int64())
        micros = pc.multiply(days, _DAY_US)
    else:
        micros = array.cast(pa.timestamp("us", tz=getattr(array.type, "tz", None))).cast(pa.int64())
    if transform == "day":
        return _floor_div(micros, _DAY_US).cast(pa.int32())
    if transform == "hour":
        return _floor_div(micros, _HOUR_US).cast(pa.int32())
    moments = micros.cast(pa.timestamp("us"))
    years = pc.subtract(pc.year(moments), 1970)
    if transform == "year":
        return years.cast(pa.int32())
    return pc.add(pc.multiply(years, 12), pc.subtract(pc.month(moments), 1)).cast(pa.int32())


def _floor_div(values: pa.Array, unit: int) -> pa.Array:
    """``values // unit`` rounded down (Arrow's integer division truncates toward zero)."""
    quotient = pc.divide(values, unit)
    behind = pc.and_(pc.less(values, 0), pc.not_equal(pc.multiply(quotient, unit), values))
    return pc.if_else(behind, pc.subtract(quotient, 1), quotient)


def _human_time(transform: str, value: int) -> str:
    import datetime

    if transform == "year":
        return f"{1970 + value:04d}"
    if transform == "month":
        year, month = divmod(value, 12)
        return f"{1970 + year:04d}-{month + 1:02d}"
    epoch = datetime.datetime(1970, 1, 1)
    if transform == "day":
        return (epoch + datetime.timedelta(days=value)).strftime("%Y-%m-%d")
    return (epoch + datetime.timedelta(hours=value)).strftime("%Y-%m-%d-%H")


def _mapped(array: pa.Array, function: Any, result: pa.DataType) -> pa.Array:
    """``function`` applied to each distinct value of ``array`` once (nulls stay null)."""
    distinct = pc.unique(array)
    outputs = pa.array(
        [None if v is None else function(v) for v in distinct.to_pylist()], type=result
    )
    return pc.take(outputs, pc.index_in(array, value_set=distinct))


def _bucket(value: Any, kind: pa.DataType, buckets: int) -> int:
    import datetime

    import mmh3

    if isinstance(value, str):
        data = value.encode("utf-8")
    elif isinstance(value, bytes):
        data = value
    elif isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.UTC)
        delta = value - datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
        micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
        data = struct.pack("<q", micros)
    elif isinstance(value, datetime.date):
        data = struct.pack("<q", (value - datetime.date(1970, 1, 1)).days)
    else:
        data = struct.pack("<q", int(value))
    return (int(mmh3.hash(data)) & 0x7FFFFFFF) % buckets


def _truncated(array: pa.Array, width: int) -> pa.Array:
    if pa.types.is_string(array.type) or pa.types.is_large_string(array.type):
        return pc.utf8_slice_codeunits(array, 0, width)
    if pa.types.is_binary(array.type) or pa.types.is_large_binary(array.type):
        return pc.binary_slice(array, 0, width)
    # integers: v - (v mod W), the mod taken toward minus infinity
    remainder = pc.subtract(array, pc.multiply(_floor_div(array.cast(pa.int64()), width), width))
    return pc.subtract(array, remainder.cast(array.type))


@dataclass(frozen=True)
class Partitioning:
    """A partition spec: its terms, in order (none: unpartitioned)."""

    terms: tuple[PartitionTerm, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.terms)

    def __str__(self) -> str:
        return ",".join(str(t) for t in self.terms)

    @classmethod
    def parse(cls, spec: str | Sequence[str] | Partitioning | None) -> Partitioning:
        """``day(ts),bucket(16,device)``, or a list of such terms; None or "": unpartitioned.
        :class:`PartitionSpecError` names a term that is not a known transform of a column,
        or a bad width."""
        if spec is None:
            return cls()
        if isinstance(spec, Partitioning):
            return spec
        texts = _split_terms(spec) if isinstance(spec, str) else list(spec)
        terms = tuple(_parse_term(text) for text in texts if text.strip())
        names = [t.name for t in terms]
        doubled = sorted({n for n in names if names.count(n) > 1})
        if doubled:
            raise PartitionSpecError(
                f"partition_by {spec!r} gives the partition field {doubled[0]!r} twice: give "
                "each transform of a column once."
            )
        return cls(terms)

    def check(self, schema: pa.Schema, where: str = "the rows") -> None:
        """Every term's column is a column of ``schema`` of a type its transform takes."""
        names = schema.names
        for term in self.terms:
            if term.column not in names:
                listed = ", ".join(n for n in names if not n.startswith("__"))
                raise PartitionSpecError(
                    f"partition_by {str(self)!r}: {where} have no column {term.column!r} (for "
                    f"{term}). The columns are: {listed}. Name one of them, e.g. "
                    "day(timestamp) for the message's time."
                )
            kind = schema.field(term.column).type
            if not _takes(term.transform, kind):
                raise PartitionSpecError(
                    f"partition_by {str(self)!r}: {term} cannot take column {term.column!r} of "
                    f"type {kind}: {_TYPES[term.transform]}."
                )

    def split(self, table: pa.Table) -> Iterator[tuple[str, tuple[Any, ...], pa.Table]]:
        """(hive-style relative directory, partition values, rows) for each partition value
        of ``table``'s rows: every row in exactly one of them."""
        if not self.terms:
            yield "", (), table
            return
        keys = [t.values(table.column(t.column)) for t in self.terms]
        names = [f"__p{i}" for i in range(len(keys))]
        grouped = pa.table(dict(zip(names, keys, strict=True)))
        combos = grouped.group_by(names, use_threads=False).aggregate([]).to_pylist()
        for combo in combos:
            mask = None
            for name, key in zip(names, keys, strict=True):
                value = combo[name]
                this = pc.is_null(key) if value is None else pc.equal(key, value)
                this = pc.fill_null(this, False)
                mask = this if mask is None else pc.and_(mask, this)
            values = tuple(combo[n] for n in names)
            yield self.directory(values), values, table.filter(mask)

    def directory(self, values: Sequence[Any]) -> str:
        """``ts_day=2026-01-05/device_bucket=3`` (values escaped as URL path segments)."""
        return "/".join(
            f"{t.directory_key}={urllib.parse.quote(t.human(v), safe='')}"
            for t, v in zip(self.terms, values, strict=True)
        )

    # ---- Iceberg ---------------------------------------------------------------------------

    def iceberg_spec(self, schema: Any) -> Any:
        """The pyiceberg ``PartitionSpec`` of these terms on the Iceberg ``schema``."""
        from pyiceberg.partitioning import PartitionField, PartitionSpec
        from pyiceberg.transforms import parse_transform

        fields = []
        for number, term in enumerate(self.terms):
            text = term.transform if term.width is None else f"{term.transform}[{term.width}]"
            fields.append(
                PartitionField(
                    source_id=schema.find_field(term.column).field_id,
                    field_id=1000 + number,
                    transform=parse_transform(text),
                    name=term.name,
                )
            )
        return PartitionSpec(*fields)

    @classmethod
    def of_iceberg(cls, spec: Any, schema: Any) -> Partitioning:
        """The terms of a table's pyiceberg ``PartitionSpec`` (a transform Sluice does not
        write, such as ``void``, is refused with the table's spec named)."""
        terms = []
        for field in spec.fields:
            text = str(field.transform)
            match = re.fullmatch(r"(\w+)(?:\[(\d+)\])?", text)
            column = schema.find_column_name(field.source_id)
            if match is None or match.group(1) not in TRANSFORMS:
                raise PartitionSpecError(
                    f"the table's partition field {field.name} is {text}({column}), a transform "
                    "Sluice cannot write; ingest into a table partitioned by "
                    f"{', '.join(TRANSFORMS)} only."
                )
            width = int(match.group(2)) if match.group(2) else None
            terms.append(PartitionTerm(match.group(1), column, width))
        return cls(tuple(terms))


_TYPES = {
    "identity": "identity takes any column of a primitive type (not a list, map or struct)",
    "year": "year takes a timestamp or date column",
    "month": "month takes a timestamp or date column",
    "day": "day takes a timestamp or date column",
    "hour": "hour takes a timestamp column",
    "bucket": "bucket takes an int, long, string, binary, date or timestamp column",
    "truncate": "truncate takes an int, long, string or binary column",
}


def _takes(transform: str, kind: pa.DataType) -> bool:
    t = pa.types
    if transform == "identity":
        return not bool(t.is_nested(kind))
    if transform in ("year", "month", "day"):
        return bool(t.is_timestamp(kind) or t.is_date(kind))
    if transform == "hour":
        return bool(t.is_timestamp(kind))
    text = t.is_string(kind) or t.is_large_string(kind)
    binary = t.is_binary(kind) or t.is_large_binary(kind)
    if transform == "bucket":
        return bool(t.is_integer(kind) or text or binary or t.is_date(kind) or t.is_timestamp(kind))
    return bool(t.is_integer(kind) or text or binary)


def _split_terms(text: str) -> list[str]:
    """Split at the commas outside parentheses."""
    terms, depth, current = [], 0, ""
    for char in text:
        if char == "," and depth == 0:
            terms.append(current)
            current = ""
            continue
        depth += {"(": 1, ")": -1}.get(char, 0)
        current += char
    terms.append(current)
    return terms


def _parse_term(text: str) -> PartitionTerm:
    match = _TERM.match(text)
    flipped = re.fullmatch(r"\s*(\w+)\s*\(\s*([A-Za-z_]\w*)\s*,\s*(\d+)\s*\)\s*", text)
    if match is None and flipped is not None:
        name, column, number = flipped.groups()
        raise PartitionSpecError(
            f"partition_by term {text.strip()!r}: the number comes first, as in Iceberg's "
            f"SQL: {name}({number},{column})."
        )
    if match is None:
        raise PartitionSpecError(
            f"partition_by term {text.strip()!r} is not TRANSFORM(COLUMN), bucket(N,COLUMN) or "
            f"truncate(W,COLUMN) ({_EXAMPLE})."
        )
    transform, number, column, bare = match.groups()
    if bare is not None:
        return PartitionTerm("identity", bare)
    transform = transform.lower()
    if transform not in TRANSFORMS:
        raise PartitionSpecError(
            f"partition_by term {text.strip()!r}: unknown transform {transform!r}. Iceberg's "
            f"transforms are {', '.join(TRANSFORMS)} ({_EXAMPLE})."
        )
    if TRANSFORMS[transform]:
        if number is None:
            raise PartitionSpecError(
                f"partition_by term {text.strip()!r}: {transform} needs a number first, "
                f"{transform}(N,{column}), e.g. {transform}(16,{column})."
            )
        width = int(number)
        if width < 1:
            raise PartitionSpecError(
                f"partition_by term {text.strip()!r}: the "
                f"{'number of buckets' if transform == 'bucket' else 'width'} must be at least "
                f"1, not {width}; e.g. {transform}(16,{column})."
            )
        return PartitionTerm(transform, column, width)
    if number is not None:
        raise PartitionSpecError(
            f"partition_by term {text.strip()!r}: {transform} takes only a column, "
            f"{transform}({column})."
        )
    return PartitionTerm(transform, column)
