"""The Python DDL parser agrees with Spark's own (the session's JVM is the oracle)."""

from __future__ import annotations

from typing import Any

import pytest

from sluice.spark.ddl import DDLError, parse_ddl

AGREED = [
    "device STRING, temperature DOUBLE, ts TIMESTAMP",
    "a INT NOT NULL, b BIGINT COMMENT 'the b', c: SMALLINT, d TINYINT, e BOOLEAN, f BINARY",
    "price DECIMAL(12, 3), day DATE, local TIMESTAMP_NTZ, ratio FLOAT, n DEC",
    "tags ARRAY<STRING>, attrs MAP<STRING, DOUBLE>, inner STRUCT<x: INT, y ARRAY<LONG>>",
    "`odd name` STRING, `back``tick` INT",
    "s STRUCT<>",
]


@pytest.mark.parametrize("ddl", AGREED)
def test_parses_like_spark(spark: Any, ddl: str) -> None:
    from pyspark.sql.types import StructType

    assert parse_ddl(ddl) == StructType.fromDDL(ddl)


@pytest.mark.parametrize(
    ("ddl", "reason"),
    [
        (
            "device STRNG",
            "unknown type 'STRNG' for field 'device' (did you mean STRING?) at position 8",
        ),
        ("a INT,", "expected a field name, found the end at position 7"),
        ("a INT b INT", "expected ',' or the end, found 'b' at position 7"),
        ("a MAP<STRING>", "expected ',', found '>' at position 13"),
        ("a DECIMAL(10", "expected ')', found the end"),
        ("a INT; DROP", "unexpected character ';' at position 6"),
        ("", "the schema is empty"),
    ],
)
def test_says_what_is_wrong_and_where(ddl: str, reason: str) -> None:
    with pytest.raises(DDLError) as caught:
        parse_ddl(ddl)
    assert str(caught.value) == reason or reason in str(caught.value)
