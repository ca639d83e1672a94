"""Sorting raw messages into good rows and quarantined ones, in Spark.

Every check runs as a Spark expression on the executors (or the driver's local relation), so
no payload passes through Python. A record is quarantined, with a ``reason``, when it is a
tombstone (null value), empty, larger than ``max_value_bytes``, not UTF-8, not JSON, or JSON
that does not match the schema: a field present with a wrong type (the reason names the
fields), not a JSON object, or an object that holds none of the schema's fields (the reason
names the expected and the present keys, with a "did you mean" for close names: a schema
that matches nothing quarantines every record, and the quarantine limit fails the batch,
instead of writing rows of nulls). A record that holds some of the fields is kept, the
missing ones null, as Spark's ``from_json`` does: producers leave out empty optional fields
and schemas grow fields that older records lack, so a partial match is normal data, while
no match at all is a wrong schema. Keys are matched case-sensitively, as ``from_json`` does;
keys the schema lacks are ignored. Good rows get the schema's fields as columns next to those
of the message's own columns (:data:`MESSAGE_COLUMNS`) that the table keeps
(:attr:`Rules.message`, :mod:`.layout`); quarantined rows keep the whole message.

Formats decoded in Python (avro, protobuf, json_schema, sparkplug_b: :mod:`.formats`) arrive
here decoded, with the reason a record did not decode; ``string`` values become one text
column (``payload``, or ``payload_column``), ``bytes`` values none. A decoded key (any
``key_format`` but bytes) is the column ``key_decoded``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from ..queues.config import ConfigError
from .ddl import DDLError, parse_ddl
from .layout import ID_COLUMN, MESSAGE_COLUMNS

__all__ = ["MESSAGE_COLUMNS", "Classification", "Rules", "parse_schema"]

REASON_COLUMN = "reason"
KEY_DECODED_COLUMN = "key_decoded"
_PARSED = "__sluice_parsed"  # also .formats.PARSED_COLUMN
_KEY = "__sluice_key"  # .formats.KEY_COLUMN
_ERROR = "__sluice_error"  # .formats.ERROR_COLUMN
_CORRUPT = "__sluice_corrupt"
_DECODED = frozenset({"avro", "protobuf", "json_schema", "sparkplug_b"})
_SESSION_CACHE = "_sluice_classifications"
_CACHED_PER_SESSION = 32
_SHOWN_KEYS = 10  # expected and present keys named in a reason


@dataclass(frozen=True)
class Rules:
    """How values are judged: the payload schema (None: any JSON), format and size limit."""

    schema: StructType | None
    value_format: str = "json"  # sluice.formats.ValueFormat ("raw" is "bytes")
    max_value_bytes: int = 1_000_000
    payload_column: str | None = None  # keep the parsed payload as one struct column
    key_format: str = "bytes"
    key_type: Any = None  # the decoded key's Spark type (key_format json: the key schema)
    #: the message's own columns a good row carries (:func:`.layout.message_columns`)
    message: tuple[str, ...] = (*MESSAGE_COLUMNS, ID_COLUMN)

    @property
    def decoded(self) -> bool:
        """Values decoded by :mod:`.formats` before the classification."""
        return self.value_format in _DECODED

    @property
    def payload_fields(self) -> list[str]:
        if self.value_format == "string":
            return [self.payload_column or "payload"]
        if self.schema is None or self.value_format in ("raw", "bytes"):
            return []
        return [self.payload_column] if self.payload_column else self.schema.fieldNames()

    @property
    def key_fields(self) -> list[str]:
        return [] if self.key_format == "bytes" else [KEY_DECODED_COLUMN]


def parse_schema(schema: Any, payload_column: str | None = None) -> StructType | None:
    """A StructType from a Spark DDL string or a StructType; a clear error otherwise."""
    if schema is None or isinstance(schema, StructType):
        parsed = schema
    elif isinstance(schema, str):
        try:
            parsed = parse_ddl(schema)
        except DDLError as exc:
            raise ConfigError(
                f"schema {schema!r} is not a valid Spark DDL string: {exc}. "
                "Write it like 'device STRING, temperature DOUBLE, ts TIMESTAMP'."
            ) from None
    else:
        raise ConfigError(
            f"schema must be a Spark DDL string or a StructType, not {type(schema).__name__}"
        )
    if parsed is not None and payload_column is None:
        taken = set(parsed.fieldNames()) & {*MESSAGE_COLUMNS, ID_COLUMN, REASON_COLUMN}
        if taken:
            raise ConfigError(
                f"schema field(s) {', '.join(sorted(taken))} collide with the message columns "
                f"({', '.join((*MESSAGE_COLUMNS, ID_COLUMN))}). Pass payload_column='payload' "
                "to keep the parsed payload as one struct column instead."
            )
    return parsed


@dataclass(frozen=True)
class Classification:
    """The sorting of raw rows by :class:`Rules`, as Spark columns built once per session
    (:meth:`for_session`) and applied to every chunk: building the expressions takes far more
    round trips to the JVM than applying them (about 0.1 s against 0.02 s a chunk)."""

    parsed: tuple[Column, ...]  # the message columns, message_id and the parsed payload
    result: tuple[Column, ...]  # payload fields, message columns, message_id and reason
    good: tuple[str, ...]  # the dataset's columns (where reason is null): payload, Rules.message
    bad: tuple[str, ...]  # the quarantine's (where it is not)

    @classmethod
    def of(cls, rules: Rules) -> Classification:
        text = F.col("value").cast("string")
        size = F.length("value")
        too_big = F.concat(
            F.lit("value is "),
            size.cast("string"),
            F.lit(f" bytes, over the limit of {rules.max_value_bytes} (max_value_bytes)"),
        )
        parsed = [*map(F.col, MESSAGE_COLUMNS), _message_id().alias(ID_COLUMN)]
        reason = F.when(size > rules.max_value_bytes, too_big)
        if rules.decoded or rules.key_format in _DECODED:
            parsed.append(F.col(_ERROR))
        if rules.decoded:
            parsed.append(F.col(_PARSED))
            reason = (
                F.when(F.col("value").isNull(), F.lit("tombstone: the record has no value"))
                .when(size == 0, F.lit("empty value"))
                .when(size > rules.max_value_bytes, too_big)
                .when(F.col(_ERROR).isNotNull(), F.col(_ERROR))
            )
        elif rules.value_format == "string":
            parsed.append(text.alias(_PARSED))
            reason = (
                F.when(F.col("value").isNull(), F.lit("tombstone: the record has no value"))
                .when(size > rules.max_value_bytes, too_big)
                .when(F.try_validate_utf8(text).isNull(), F.lit("value is not valid UTF-8"))
            )
        if rules.value_format == "json":
            reason = (
                F.when(F.col("value").isNull(), F.lit("tombstone: the record has no value"))
                .when(size == 0, F.lit("empty value"))
                .when(size > rules.max_value_bytes, too_big)
                .when(F.try_validate_utf8(text).isNull(), F.lit("value is not valid UTF-8"))
            )
            if rules.schema is None:
                reason = reason.when(F.try_parse_json(text).isNull(), F.lit("invalid JSON"))
            else:
                with_corrupt = StructType([*rules.schema.fields]).add(_CORRUPT, "string")
                options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT}
                parsed.append(F.from_json(text, with_corrupt, options).alias(_PARSED))
                corrupt = F.col(f"{_PARSED}.{_CORRUPT}").isNotNull()
                reason = (
                    reason.when(corrupt & F.try_parse_json(text).isNull(), F.lit("invalid JSON"))
                    .when(corrupt, _mismatch(rules.schema, text))
                    .when(*_no_field(rules.schema, text))
                )
        key, reason = _key(rules, parsed, reason)
        payload: list[Column] = []
        if rules.value_format == "string":
            payload = [F.col(_PARSED).alias(rules.payload_fields[0])]
        elif rules.payload_fields and rules.schema is not None:
            names = rules.schema.fieldNames()
            fields = [F.col(f"{_PARSED}.`{name}`") for name in names]
            if rules.payload_column:
                payload = [F.struct(*fields).alias(rules.payload_column)]
            else:
                payload = [c.alias(n) for c, n in zip(fields, names, strict=True)]
        message = [*MESSAGE_COLUMNS, ID_COLUMN]
        return cls(
            parsed=tuple(parsed),
            result=(*payload, *key, *map(F.col, message), reason.alias(REASON_COLUMN)),
            good=(*rules.payload_fields, *rules.key_fields, *rules.message),
            bad=(*message, REASON_COLUMN),
        )

    @classmethod
    def for_session(cls, spark: Any, rules: Rules) -> Classification:
        """:meth:`of` ``rules``, built once per session and kept on it (the last
        :data:`_CACHED_PER_SESSION` rules): a long-lived session's next ingest of a stream (a
        Dagster run's, a benchmark's) skips building them. The columns name no session, so
        they would serve any; kept per session, they go with it."""
        cache: dict[Rules, Classification] | None = getattr(spark, _SESSION_CACHE, None)
        if cache is None:
            cache = {}
            setattr(spark, _SESSION_CACHE, cache)
        found = cache.get(rules)
        if found is None:
            if len(cache) >= _CACHED_PER_SESSION:
                del cache[next(iter(cache))]
            found = cache[rules] = cls.of(rules)
        return found

    def apply(self, raw: DataFrame, keep: tuple[str, ...] = ()) -> DataFrame:
        """``raw`` (the columns of :data:`sluice.spark.records.RAW_SCHEMA`) as one frame with
        what both outputs need: :attr:`good` and :attr:`bad` name their columns. ``keep``:
        further columns of ``raw`` carried along as they are (a routed batch's route)."""
        return raw.select(*self.parsed, *keep).select(*self.result, *keep)


def _key(rules: Rules, parsed: list[Column], reason: Column) -> tuple[list[Column], Column]:
    """The decoded key column (if any), and ``reason`` with the key's reasons after the
    value's (a Python-decoded key's are in the decoding error column already)."""
    if rules.key_format == "bytes":
        return [], reason
    if rules.key_format in _DECODED:
        parsed.append(F.col(_KEY))
        return [F.col(_KEY).alias(KEY_DECODED_COLUMN)], reason.when(
            F.col(_ERROR).isNotNull(), F.col(_ERROR)
        )
    text = F.col("key").cast("string")
    given = F.col("key").isNotNull()
    bad_utf8 = given & F.try_validate_utf8(text).isNull()
    if rules.key_format == "string":
        parsed.append(text.alias(_KEY))
        return [F.col(_KEY).alias(KEY_DECODED_COLUMN)], reason.when(
            bad_utf8, F.lit("key is not valid UTF-8")
        )
    parsed.append(F.from_json(text, rules.key_type).alias(_KEY))
    invalid = given & F.try_parse_json(text).isNull()
    return [F.col(_KEY).alias(KEY_DECODED_COLUMN)], reason.when(
        bad_utf8, F.lit("key is not valid UTF-8")
    ).when(invalid, F.lit("key: invalid JSON"))


def _message_id() -> Column:
    """The envelope's id: the source's own (for Kafka the ``message_id`` header, found by
    :mod:`.records`), else the record's coordinates ``<topic>-<partition>-<offset>``."""
    return F.coalesce(F.col(ID_COLUMN), F.concat_ws("-", "topic", "partition", "offset"))


def _no_field(schema: StructType, text: Column) -> tuple[Column, Column]:
    """When an object parsed into nothing but nulls holds none of the schema's fields (an
    explicit null is a field held), and the reason: the expected keys, the present ones and a
    "did you mean" (:func:`_hints`) for the present keys close to a field's name.

    Rows that match cost one null check per field: the keys are read (``json_object_keys``)
    only when all fields are null (``AND`` and ``CASE WHEN`` evaluate lazily). No lambda
    (``transform``, ``filter``): Spark runs a projection holding one without whole-stage code
    generation; and little code, whatever the number of fields: whole-stage code generation
    inlines every branch into one method, which the JIT leaves uncompiled once it grows too
    large. Either made the whole classification twice as slow (a regular expression per
    field, or lambdas over the keys, measured on 200,000 rows)."""
    names = schema.fieldNames()
    all_null = F.lit(True)
    for name in names:
        all_null = all_null & F.col(f"{_PARSED}.`{name}`").isNull()
    keys = F.json_object_keys(text)
    held = F.coalesce(F.arrays_overlap(keys, F.array(*map(F.lit, names))), F.lit(True))
    expected = ", ".join(names[:_SHOWN_KEYS]) + (" ..." if len(names) > _SHOWN_KEYS else "")
    present = F.when(F.size(keys) == 0, F.lit("none")).otherwise(
        F.concat(
            F.array_join(F.slice(keys, 1, _SHOWN_KEYS), ", "),
            F.when(F.size(keys) > _SHOWN_KEYS, F.lit(" ...")).otherwise(F.lit("")),
        )
    )
    hints = _hints(names[:_SHOWN_KEYS], keys)
    reason = F.concat(
        F.lit(
            "does not match the schema: the record holds none of its fields "
            f"(expected: {expected}; present: "
        ),
        present,
        F.lit(")"),
        F.coalesce(
            F.concat(F.lit("; did you mean "), hints, F.lit("? ")),
            F.lit(". "),
        ),
        F.lit("Fix the schema's field names (they are case-sensitive) or the producer's"),
    )
    return all_null & ~held, reason


_KEY_SEP, _END_SEP, _ITEM_SEP = "\u001f", "\u001d", "\u001e"  # separators in :func:`_hints`' text


def _hints(names: list[str], keys: Column) -> Column:
    """``'temp -> temperature, device_id -> device'``: each present key close to a field of
    ``names``, after that field, in the keys' order; null when none is. Close, ignoring case
    and ``_ - .`` or spaces: a key that starts with the field's name (``temp ->
    temperature``; the same name too), a key of 3+ characters the name starts with
    (``device_id -> device``), a key sharing the name's first 4 characters
    (``temperature -> temprature``).

    One ``regexp_replace`` whatever the number of fields (the code Spark generates stays
    small: see :func:`_no_field`). Its text is the keys, then the fields' ``', name -> '``;
    the pattern's alternative for field ``i`` matches a close key and, looking ahead,
    captures the field's entry, so the replacement (every group) turns a close key into
    ``', name -> key'`` and any other key, and the entries, into nothing."""
    other = f"[^{_KEY_SEP}{_END_SEP}]*"

    def loose(chars: list[str]) -> str:  # letters and digits: nothing to escape
        return "[-_. ]?".join(chars)

    alternatives: list[str] = []
    replacement = entries = ""
    for name in names:
        letters = [c for c in name if c.isalnum()]
        if not letters:
            continue
        shapes = [loose(letters) + other]
        shapes += [loose(letters[:n]) for n in range(len(letters) - 1, 2, -1)]
        if len(letters) > 4:
            shapes.append(loose(letters[:4]) + other)
        skip = f"(?:[^{_ITEM_SEP}]*{_ITEM_SEP}){{{len(alternatives)}}}"
        alternatives.append(
            f"{_KEY_SEP}({'|'.join(shapes)})(?={_KEY_SEP}[^{_END_SEP}]*{_END_SEP}{skip}([^{_ITEM_SEP}]*){_ITEM_SEP})"
        )
        at = 2 * len(alternatives)
        replacement += f"${at}${at - 1}"
        entries += f", {name} -> {_ITEM_SEP}"
    if not alternatives:
        return F.lit(None).cast("string")
    pattern = "(?is)" + "|".join(
        [*alternatives, f"{_KEY_SEP}{other}(?={_KEY_SEP})", f"{_KEY_SEP}{_END_SEP}.*"]
    )
    text = F.concat(
        F.lit(_KEY_SEP), F.array_join(keys, _KEY_SEP), F.lit(f"{_KEY_SEP}{_END_SEP}{entries}")
    )
    found = F.regexp_replace(text, pattern, replacement)
    return F.nullif(F.regexp_replace(found, "^, ", ""), F.lit(""))


def _mismatch(schema: StructType, text: Column) -> Column:
    """'does not match the schema: ...' naming each field present with a wrong type."""
    wrong = [
        F.when(
            F.get_json_object(text, f"$['{field.name}']").isNotNull()
            & F.col(f"{_PARSED}.`{field.name}`").isNull(),
            F.lit(f"'{field.name}' is not {field.dataType.simpleString()}"),
        )
        for field in schema.fields
    ]
    detail = F.concat_ws(", ", *wrong)
    return F.concat(
        F.lit("does not match the schema: "),
        F.when(detail == "", F.lit("not a JSON object")).otherwise(detail),
    )
