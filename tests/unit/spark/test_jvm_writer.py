"""The report Spark's own writer builds on the driver (sluice.spark.jvm_writer): the offsets'
runs and each partition's last offset from the written files' columns, in the shape
sluice.spark.writing's Python tasks give it for lean rows (checked by sluice.spark.reconcile;
the last message's fingerprint fetched by the ingest); and the quarantined rows the
observation brings back."""

from __future__ import annotations

import base64
import json

import numpy as np
import pyarrow as pa
import pytest

from sluice.spark.jvm_writer import _check_counts, _Offsets, _quarantined, _report
from sluice.spark.writing import UNKNOWN_FINGERPRINT, merge_reports


def offsets(pairs: list[tuple[int, int]], good: int, bad: int) -> _Offsets:
    partition, offset = zip(*pairs, strict=True) if pairs else ((), ())
    return _Offsets(
        np.array(partition, np.int64), np.array(offset, np.int64), {"good": good, "bad": bad}
    )


def test_runs_of_consecutive_offsets_per_partition_with_a_repeat_counted_as_a_row() -> None:
    # partition 0: 5, 6, 7, a gap, 9 twice, 10 (files in any order); partition 2: 3
    written = offsets([(0, 9), (0, 5), (2, 3), (0, 7), (0, 10), (0, 6), (0, 9)], 6, 1)

    merged = merge_reports([_report(written, [0, 1, 2])])

    assert sorted(merged) == [0, 2], "a partition with no rows has no report"
    assert merged[0].intervals == [(5, 8), (9, 11)]
    assert merged[0].rows == 6, "the repeated offset shows as more rows than offsets"
    assert merged[0].last_offset == 10
    assert merged[0].last_fingerprint == UNKNOWN_FINGERPRINT, "fetched by the ingest"
    assert (merged[2].intervals, merged[2].rows, merged[2].last_offset) == ([(3, 4)], 1, 3)


def test_files_holding_other_counts_than_the_read_fail_the_batch() -> None:
    _check_counts(offsets([(0, 1), (0, 2)], 1, 1), {"good": 1, "bad": 1})
    with pytest.raises(RuntimeError, match="wrote 1 quarantined rows where the read counted 2"):
        _check_counts(offsets([(0, 1), (0, 2)], 1, 1), {"good": 1, "bad": 2})


def test_fewer_files_than_tasks_that_wrote_rows_name_the_disk_not_the_topic() -> None:
    """Three tasks wrote good rows, each a file; the driver lists one: the executors wrote on
    disks of their own (a local path on a cluster of several hosts). Its rows are fewer too,
    which once read as rows read again from a topic that changed."""
    seen = {"good": 30, "bad": 0, "good_tasks": [0, 1, 2], "bad_tasks": []}
    one_file = _Offsets(
        np.zeros(10, np.int64), np.arange(10), {"good": 10, "bad": 0}, {"good": 1, "bad": 0}
    )
    with pytest.raises(RuntimeError) as failed:
        _check_counts(one_file, seen, {"good": "/lake/readings", "bad": "/lake/q"})
    message = str(failed.value)
    assert "in 3 task(s)" in message and "finds 1 of those files under /lake/readings" in message
    assert "the executors wrote where the driver cannot see" in message
    assert "topic that changed" not in message
    every_file = _Offsets(
        np.zeros(10, np.int64), np.arange(10), {"good": 10, "bad": 0}, {"good": 3, "bad": 0}
    )
    with pytest.raises(RuntimeError, match="topic that changed"):
        _check_counts(every_file, seen)  # every file is there: the rows differ


def json_lines(rows: list[dict[str, object]]) -> str:
    """Rows as the observation brings them: a line of Spark's ``to_json`` each."""
    return "\n".join(json.dumps(row) for row in rows)


def test_quarantined_rows_brought_back_as_json_are_the_rows_spark_holds() -> None:
    """Spark's ``to_json`` of each row the observation keeps: binary in base64, timestamps in
    microseconds, a null field left out, headers as a list of structs (one of them without
    a value)."""
    schema = pa.schema(
        [
            ("key", pa.binary()),
            ("value", pa.binary()),
            ("partition", pa.int32()),
            ("offset", pa.int64()),
            ("timestamp", pa.timestamp("us", tz="UTC")),
            ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
            ("reason", pa.string()),
        ]
    )
    text = json_lines(
        [
            {
                "key": base64.b64encode(b"k\x00").decode(),
                "value": base64.b64encode(b"{not json").decode(),
                "partition": 2,
                "offset": 7,
                "timestamp": 1_700_000_000_123_000,
                "headers": [
                    {"key": "h", "value": base64.b64encode(b"\x00\xff").decode()},
                    {"key": "empty"},
                ],
                "reason": "invalid JSON",
            },
            {"partition": 0, "offset": 3, "timestamp": 5, "headers": [], "reason": "tombstone"},
        ]
    )
    table = _quarantined(text, schema)
    assert table.schema == schema
    rows = table.to_pylist()
    assert rows[0]["key"] == b"k\x00" and rows[0]["value"] == b"{not json"
    assert rows[0]["headers"] == [
        {"key": "h", "value": b"\x00\xff"},
        {"key": "empty", "value": None},
    ]
    assert rows[0]["timestamp"].timestamp() == 1_700_000_000.123
    assert (rows[1]["key"], rows[1]["value"], rows[1]["headers"]) == (None, None, [])
    assert _quarantined(None, schema).num_rows == 0


def test_a_quarantined_rows_message_id_is_made_from_its_headers_as_every_reader_makes_it() -> None:
    """The observation brings quarantined rows back without their id (Spark finds it with a
    higher-order function, which would take the whole projection out of its generated code):
    the last ``message_id`` header with a value, bytes that are not UTF-8 replaced; else the
    coordinates."""
    schema = pa.schema(
        [
            ("topic", pa.string()),
            ("partition", pa.int32()),
            ("offset", pa.int64()),
            ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
            ("message_id", pa.string()),
            ("reason", pa.string()),
        ]
    )

    def header(key: str, value: bytes | None) -> dict[str, str]:
        return (
            {"key": key}
            if value is None
            else {"key": key, "value": base64.b64encode(value).decode()}
        )

    rows = [
        {"topic": "t", "partition": 1, "offset": 5, "headers": [], "reason": "r"},
        {
            "topic": "t",
            "partition": 0,
            "offset": 9,
            "headers": [header("message_id", b"a"), header("message_id", b"b\xff")],
            "reason": "r",
        },
        {
            "topic": "t",
            "partition": 0,
            "offset": 10,
            "headers": [header("message_id", b"a"), header("message_id", None)],
            "reason": "r",
        },
        {
            "topic": "t",
            "partition": 2,
            "offset": 3,
            "headers": [header("message_id", b"")],
            "reason": "r",
        },
    ]
    table = _quarantined(json_lines(rows), schema)
    assert table.schema == schema
    assert table.column("message_id").to_pylist() == ["t-1-5", "b\ufffd", "a", "t-2-3"]


def test_quarantined_rows_of_large_lists_keep_their_type() -> None:
    schema = pa.schema(
        [("headers", pa.large_list(pa.struct([("key", pa.string()), ("value", pa.binary())])))]
    )
    text = json_lines([{"headers": [{"key": "h", "value": base64.b64encode(b"v").decode()}]}, {}])
    table = _quarantined(text, schema)
    assert table.schema == schema
    assert table.column("headers").to_pylist() == [[{"key": "h", "value": b"v"}], None]
