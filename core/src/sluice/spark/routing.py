"""A routed batch's routes in Spark: the route value of every message, as Spark columns.

:meth:`sluice.routes.Routes.extract` reads a message's route value in Python (for the
watchers and the audit); :func:`value_columns` reads the same in Spark, for the ingest, with
no Python per row: a JSON field through ``try_parse_json`` and ``try_variant_get``, a key or
a header as UTF-8 text, a topic level with ``split``. The two agree message for message
(``tests/integration/spark/test_routing.py`` runs a corpus of awkward payloads through both).

A batch is routed in two steps (:mod:`.routed`): the distinct (kind, type, value) triples of
its messages are counted (:func:`distinct_values`: a small aggregation in the JVM), each is
decided once in Python (:meth:`~sluice.routes.Routes.decide`: a route table, or the ingest's
own sink), and the decisions are joined back to the rows (:func:`with_routes`, a broadcast
join) as a route number: a table's index, :data:`HOME` (a row of the ingest's own sink) or
:data:`HOME_QUARANTINE` (quarantined there, with the reason); and :data:`HELD` marks the rows
their table holds already (a run that crashed after publishing some tables).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from ..batch import OffsetRange
from ..routes import Extracted, Routes, ValueKind
from .sinks.coverage import Coverage

__all__ = [
    "HELD",
    "HOME",
    "HOME_QUARANTINE",
    "REASON",
    "ROUTE",
    "Distinct",
    "distinct_values",
    "held_column",
    "value_columns",
    "with_routes",
    "within",
]

KIND, TYPE, VALUE = "__sluice_route_kind", "__sluice_route_type", "__sluice_route_value"
ROUTE, REASON, HELD = "__sluice_route", "__sluice_route_reason", "__sluice_held"
HOME, HOME_QUARANTINE = -1, -2


def value_columns(routes: Routes) -> tuple[Column, Column, Column]:
    """(kind, type, value) of each row's route value, as :meth:`Routes.extract` reads them."""
    kind, argument = routes.source
    if kind == "field":
        return _field(routes.field_path)
    if kind in ("key", "header"):
        data = (
            F.col("key")
            if kind == "key"
            else F.try_element_at(
                F.filter("headers", lambda h: h["key"] == F.lit(argument)), F.lit(-1)
            )["value"]
        )
        text = data.cast("string")
        found = (
            F.when(data.isNull(), F.lit(ValueKind.MISSING))
            .when(F.try_validate_utf8(text).isNull(), F.lit(ValueKind.NOT_TEXT))
            .otherwise(F.lit(ValueKind.VALUE))
        )
        return found, F.lit(None).cast("string"), F.when(found == ValueKind.VALUE, text)
    topic = F.col("topic")
    if kind == "topic_level":
        topic = F.try_element_at(F.split(topic, "/"), F.lit(routes.level + 1))
    found = F.when(topic.isNull(), F.lit(ValueKind.MISSING)).otherwise(F.lit(ValueKind.VALUE))
    return found, F.lit(None).cast("string"), topic


def _field(path: list[str]) -> tuple[Column, Column, Column]:
    text = F.col("value").cast("string")
    parsed = F.when(F.try_validate_utf8(text).isNotNull(), F.try_parse_json(text))
    json_path = "$" + "".join(f"['{part}']" for part in path)
    found = F.try_variant_get(parsed, json_path, "variant")
    shape = F.schema_of_variant(found)
    kind = (
        F.when(parsed.isNull(), F.lit(ValueKind.NOT_OBJECT))
        .when(~F.schema_of_variant(parsed).startswith("OBJECT"), F.lit(ValueKind.NOT_OBJECT))
        .when(found.isNull() | (shape == "VOID"), F.lit(ValueKind.MISSING))
        .when(shape == "STRING", F.lit(ValueKind.VALUE))
        .otherwise(F.lit(ValueKind.NOT_STRING))
    )
    json_type = (
        F.when(kind != ValueKind.NOT_STRING, F.lit(None).cast("string"))
        .when(shape == "BOOLEAN", F.lit("boolean"))
        .when(shape.startswith("OBJECT"), F.lit("object"))
        .when(shape.startswith("ARRAY"), F.lit("array"))
        .otherwise(F.lit("number"))
    )
    value = F.when(kind == ValueKind.VALUE, F.try_variant_get(found, "$", "string"))
    return kind, json_type, value


def with_values(frame: DataFrame, routes: Routes) -> DataFrame:
    """``frame`` (raw message columns) with the route value's three columns."""
    kind, json_type, value = value_columns(routes)
    return frame.withColumns({KIND: kind, TYPE: json_type, VALUE: value})


@dataclass(frozen=True)
class Distinct:
    """One distinct route value of a batch: how it was read, how many rows have it, and
    (MQTT) their message ids."""

    found: Extracted
    rows: int
    message_ids: tuple[str, ...] = ()


def distinct_values(frame: DataFrame, routes: Routes, with_ids: bool = False) -> list[Distinct]:
    """The distinct route values of ``frame``'s rows (one small job in the JVM); with
    ``with_ids``, the message ids of each (an MQTT batch, whose slices list their ids)."""
    aggregates = [F.count(F.lit(1)).alias("rows")]
    if with_ids:
        aggregates.append(F.collect_list("message_id").alias("ids"))
    rows = with_values(frame, routes).groupBy(KIND, TYPE, VALUE).agg(*aggregates).collect()
    return [
        Distinct(
            Extracted(int(row[KIND]), row[TYPE], row[VALUE]),
            int(row["rows"]),
            tuple(row["ids"]) if with_ids else (),
        )
        for row in rows
    ]


def with_routes(
    frame: DataFrame,
    routes: Routes,
    decided: Mapping[Extracted, tuple[int, str | None]],
    held: Column | None = None,
) -> DataFrame:
    """``frame`` with :data:`ROUTE` (a table's index, or :data:`HOME`, :data:`HOME_QUARANTINE`)
    and :data:`REASON` (why a row is quarantined for want of a route), from the decision of
    each distinct value (``decided``, a broadcast join), and :data:`HELD`: ``held`` (a
    condition on the routed rows, :func:`held_column`), true where the row's table holds it
    already."""
    spark = frame.sparkSession
    decisions = spark.createDataFrame(
        [(e.kind, e.type, e.value, route, reason) for e, (route, reason) in decided.items()],
        f"d_kind INT, d_type STRING, d_value STRING, {ROUTE} INT, {REASON} STRING",
    )
    valued = with_values(frame, routes)
    condition = (
        (valued[KIND] == decisions["d_kind"])
        & valued[TYPE].eqNullSafe(decisions["d_type"])
        & valued[VALUE].eqNullSafe(decisions["d_value"])
    )
    joined = valued.join(F.broadcast(decisions), condition, "left").drop(
        "d_kind", "d_type", "d_value", KIND, TYPE, VALUE
    )
    return joined.withColumn(HELD, F.lit(False) if held is None else F.coalesce(held, F.lit(False)))


def held_column(by_route: Mapping[int, Coverage | set[str]], kind: str) -> Column | None:
    """The condition "its table holds this row already", per route index: a Kafka table's
    offsets (``Coverage``), an MQTT table's message ids (a set). None when no table holds
    any of the batch."""
    conditions: list[Column] = []
    for route, held in sorted(by_route.items()):
        if kind == "kafka":
            assert isinstance(held, Coverage)
            spans = [
                (F.col("partition") == p) & (F.col("offset") >= lo) & (F.col("offset") < hi)
                for p, intervals in sorted(held.intervals.items())
                for lo, hi in intervals
            ]
            if not spans:
                continue
            within = spans[0]
            for span in spans[1:]:
                within = within | span
        else:
            assert isinstance(held, set)
            if not held:
                continue
            within = F.col("message_id").isin(sorted(held))
        conditions.append((F.col(ROUTE) == route) & within)
    if not conditions:
        return None
    found = conditions[0]
    for condition in conditions[1:]:
        found = found | condition
    return found


def within(held: Coverage, ranges: Sequence[OffsetRange]) -> Coverage:
    """The part of ``held`` inside ``ranges``."""
    return Coverage.of(held.overlaps(ranges))
