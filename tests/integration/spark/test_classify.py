"""The classification of JSON values by a schema, in the session's real Spark: a record that
holds none of the schema's fields is quarantined (naming the expected and present keys, with
a "did you mean"); a record that holds some of them is kept, the missing ones null."""

from __future__ import annotations

from typing import Any

from sluice.spark.classify import Classification, Rules, parse_schema
from sluice.spark.records import RAW_SCHEMA_DDL

SCHEMA = "device_id STRING, temp DOUBLE"
NO_FIELD = (
    "does not match the schema: the record holds none of its fields (expected: device_id, temp; "
)
FIX = "Fix the schema's field names (they are case-sensitive) or the producer's"


def classify(spark: Any, values: list[str], payload_column: str | None = None) -> list[Any]:
    """The classified rows of ``values`` (JSON texts), in order."""
    raw = spark.createDataFrame(
        [(None, v.encode(), "t", 0, i, None, [], None) for i, v in enumerate(values)],
        RAW_SCHEMA_DDL,
    )
    rules = Rules(parse_schema(SCHEMA, payload_column), payload_column=payload_column)
    return Classification.of(rules).apply(raw).orderBy("offset").collect()


def test_a_record_with_none_of_the_fields_is_quarantined_with_a_did_you_mean(
    spark: Any,
) -> None:
    values = [
        '{"device": "d1", "temperature": 20.5}',
        '{"Device_ID": "d2", "reading": 1}',
        "{}",
        '{"x": 1, "y": 2}',
        '{"temprature": 1, "Device-Id": "d3"}',
    ]
    reasons = [row["reason"] for row in classify(spark, values)]
    assert reasons == [
        NO_FIELD + "present: device, temperature); did you mean device_id -> device, "
        "temp -> temperature? " + FIX,
        NO_FIELD + "present: Device_ID, reading); did you mean device_id -> Device_ID? " + FIX,
        NO_FIELD + "present: none). " + FIX,
        NO_FIELD + "present: x, y). " + FIX,
        NO_FIELD + "present: temprature, Device-Id); did you mean temp -> temprature, "
        "device_id -> Device-Id? " + FIX,
    ]
    wrapped = classify(spark, values[:1], payload_column="payload")
    assert wrapped[0]["reason"] == reasons[0], "the same with the payload as one column"


def test_a_record_with_some_of_the_fields_is_kept_with_the_others_null(spark: Any) -> None:
    values = [
        '{"device_id": "d1", "temp": 20.5}',
        '{"device_id": "d2", "humidity": 40}',  # temp left out, an unknown key ignored
        '{"device_id": null}',  # an explicit null is a field the record holds
        '{"temp": "hot"}',
    ]
    rows = classify(spark, values)
    assert [(r["device_id"], r["temp"], r["reason"]) for r in rows] == [
        ("d1", 20.5, None),
        ("d2", None, None),
        (None, None, None),
        (None, None, "does not match the schema: 'temp' is not double"),
    ]
