"""Spark reads every message's route value as Python does (sluice.spark.routing against
sluice.routes): the ingest routes with the one, the watchers and the audit with the other."""

from __future__ import annotations

from typing import Any

import pytest

from sluice.routes import Extracted, Routes
from sluice.spark.routing import KIND, TYPE, VALUE, distinct_values, with_values

#: Payloads that tell parsers apart: not JSON, not UTF-8, duplicate keys, NaN, a BOM,
#: trailing text, raw control characters, lone surrogates, huge numbers, nesting.
PAYLOADS: list[bytes | None] = [
    None,
    b"",
    b"null",
    b"[1]",
    b'"click"',
    b"not json",
    b"\xff\xfe",
    b'{"t": "click"}',
    b'  {"t": "sp"}  ',
    b'{"t": "x"}garbage',
    b'{"t": "x"}}',
    b'{"t": 5}',
    b'{"t": 1.5}',
    b'{"t": 1e999}',
    b'{"t": -0}',
    b'{"t": true}',
    b'{"t": null}',
    b'{"t": {"u": "v"}}',
    b'{"t": ["a"]}',
    b'{"x": 1}',
    b'{"t": "a", "t": "b"}',
    b'{"o": {"t": 1, "t": 2}, "t": "y"}',
    b'{"t": NaN}',
    b'{"t": Infinity}',
    b'\xef\xbb\xbf{"t": "bom"}',
    b'{"t": "a\tb"}',
    b'{"t": "\\ud800"}',
    b'{"t": "\\ud83d\\ude00"}',
    b'{"t": "\\u00e9t\\u00e9"}',
    '{"t": "été"}'.encode(),
    b'{"t": "x", "n": 123456789012345678901234567890123456789012}',
    b'{"t": "../etc"}',
    b'{"t": "a.b"}',
    b'{"m": {"t": "deep"}, "t": "top"}',
    b'{"m": "flat"}',
    b"{'t': 'single'}",
    b'{"t": "x",}',
    b'{"t": 01}',
    b"[" * 50 + b"]" * 50,
]
KEYS: list[bytes | None] = [None, b"", b"a", b"\xff", "é".encode(), b"a/b"]
TOPICS: list[str | None] = [None, "", "a", "a/b", "a/b/c", "a//c", "/a", "a/"]


def _spark_values(spark: Any, routes: Routes, rows: list[tuple[Any, ...]]) -> list[Extracted]:
    """The route value Spark reads for each row (one job)."""
    frame = spark.createDataFrame(
        rows,
        "n INT, key BINARY, value BINARY, topic STRING, "
        "headers ARRAY<STRUCT<key: STRING, value: BINARY>>, message_id STRING",
    )
    found = {
        row["n"]: Extracted(int(row[KIND]), row[TYPE], row[VALUE])
        for row in with_values(frame, routes).select("n", KIND, TYPE, VALUE).collect()
    }
    return [found[n] for n in range(len(rows))]


def test_the_ingests_aggregation_reads_the_same(spark: Any) -> None:
    """distinct_values (what the ingest decides on) counts each value once, with its ids."""
    routes = Routes(by="field:t", template="delta:///lake/{x}")
    payloads = [b'{"t": "a"}', b'{"t": "a"}', b'{"t": 5}', b"no"]
    frame = spark.createDataFrame(
        [(None, p, "t", [], f"id{n}") for n, p in enumerate(payloads)],
        "key BINARY, value BINARY, topic STRING, "
        "headers ARRAY<STRUCT<key: STRING, value: BINARY>>, message_id STRING",
    )
    found = {d.found: (d.rows, sorted(d.message_ids)) for d in distinct_values(frame, routes, True)}
    assert found == {
        routes.extract(None, b'{"t": "a"}', None, None): (2, ["id0", "id1"]),
        routes.extract(None, b'{"t": 5}', None, None): (1, ["id2"]),
        routes.extract(None, b"no", None, None): (1, ["id3"]),
    }


@pytest.mark.parametrize(
    "by", ["field:t", "field:m.t", "key", "header:h", "topic", "topic_level:1"]
)
def test_spark_reads_the_route_value_python_reads(spark: Any, by: str) -> None:
    routes = Routes(by=by, template="delta:///lake/{x}")
    rows: list[tuple[Any, ...]] = []
    if by.startswith("field"):
        rows = [(n, None, p, "t", [], None) for n, p in enumerate(PAYLOADS)]
    elif by == "key":
        rows = [(n, k, b"{}", "t", [], None) for n, k in enumerate(KEYS)]
    elif by.startswith("header"):
        headers = [[], [("h", None)], [("h", b"a"), ("h", b"b")], [("x", b"a")], [("h", b"\xff")]]
        rows = [(n, None, b"{}", "t", h, None) for n, h in enumerate(headers)]
    else:
        rows = [(n, None, b"{}", t, [], None) for n, t in enumerate(TOPICS)]
    spark_found = _spark_values(spark, routes, rows)
    for row, found in zip(rows, spark_found, strict=True):
        _, key, value, topic, headers, _ = row
        expected = routes.extract(key, value, [(h[0], h[1]) for h in headers], topic)
        assert found == expected, f"{row[1:5]}: Spark read {found}, Python {expected}"
        assert routes.decide(found) == routes.decide(expected)
