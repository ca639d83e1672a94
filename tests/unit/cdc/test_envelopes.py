"""Debezium envelopes read, and a batch reduced to the last change per key (sluice.cdc)."""

from __future__ import annotations

import json
import re
from typing import Any

import pyarrow as pa
import pytest

from sluice.cdc import (
    JSON_ENVELOPES,
    POSITION_COLUMN,
    EnvelopeError,
    parse_change,
    reduce_messages,
)
from sluice.spark.sinks.base import fold_markers
from sluice.spark.sinks.upsert import plan


def envelope(op: str, before: Any = None, after: Any = None, source: Any = None) -> dict:
    return {"op": op, "before": before, "after": after, "source": source or {}, "ts_ms": 1}


def wrapped(document: dict) -> dict:
    return {"schema": {"type": "struct", "fields": []}, "payload": document}


def encode(document: Any) -> bytes | None:
    return None if document is None else json.dumps(document).encode()


def messages(*items: tuple[Any, Any], partition: int = 0) -> pa.Table:
    """(key document, value document) pairs at offsets 0, 1, 2..."""
    return pa.table(
        {
            "key": pa.array([encode(k) for k, _ in items], pa.binary()),
            "value": pa.array([encode(v) for _, v in items], pa.binary()),
            "partition": pa.array([partition] * len(items), pa.int32()),
            "offset": pa.array(range(len(items)), pa.int64()),
        }
    )


@pytest.mark.parametrize("wrap", [False, True], ids=["bare", "schema-payload"])
@pytest.mark.parametrize("op", ["c", "u", "r"])
def test_an_insert_update_or_read_gives_the_row_after_it(wrap: bool, op: str) -> None:
    value = envelope(op, after={"id": 7, "name": "ada"}, source={"lsn": 123})
    key = {"id": 7}
    change = parse_change(
        encode(wrapped(value) if wrap else value), encode(wrapped(key) if wrap else key), 0, 5
    )
    assert change is not None
    assert (change.key, change.row, change.position, change.deleted) == (
        (7,),
        {"id": 7, "name": "ada"},
        123,
        False,
    )


def test_a_delete_removes_the_row_and_a_tombstone_is_no_change() -> None:
    change = parse_change(encode(envelope("d", before={"id": 7})), encode({"id": 7}), 0, 1)
    assert change is not None and change.deleted and change.key == (7,)
    assert parse_change(None, encode({"id": 7}), 0, 2) == "tombstone"


def test_key_columns_named_by_the_user_come_from_the_row() -> None:
    value = encode(envelope("u", after={"tenant": "a", "id": 1, "v": 2}))
    change = parse_change(value, None, 0, 0, key_columns=["tenant", "id"])
    assert change is not None and change.key == ("a", 1)
    gone = parse_change(
        encode(envelope("d", before={"tenant": "a", "id": 1})), None, 0, 1, ["tenant", "id"]
    )
    assert gone is not None and gone.deleted and gone.key == ("a", 1)


@pytest.mark.parametrize(
    ("source", "position"),
    [
        ({"lsn": 33_554_432}, 33_554_432),
        ({"file": "mysql-bin.000003", "pos": 154}, (3 << 32) + 154),
        ({"connector": "sqlserver"}, None),
    ],
    ids=["postgres-lsn", "mysql-binlog", "none"],
)
def test_the_source_position_is_read(source: dict, position: int | None) -> None:
    change = parse_change(
        encode(envelope("u", after={"id": 1}, source=source)), encode({"id": 1}), 0, 0
    )
    assert change is not None and change.position == position


def test_a_later_binlog_file_is_a_later_position() -> None:
    def at(file: str, pos: int) -> int | None:
        change = parse_change(
            encode(envelope("u", after={"id": 1}, source={"file": file, "pos": pos})),
            encode({"id": 1}),
            0,
            0,
        )
        assert change is not None
        return change.position

    assert at("mysql-bin.000004", 4) > at("mysql-bin.000003", 999_999_999)  # type: ignore[operator]


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        (b'{"id": 1}', b"not json", "value is not JSON"),
        (b'{"id": 1}', b"[1, 2]", "not a JSON object"),
        (b'{"id": 1}', encode({"op": "x", "after": {"id": 1}}), "op is 'x'"),
        (b'{"id": 1}', encode(envelope("u", after=None)), "has no 'after' object"),
        (None, encode(envelope("c", after={"id": 1})), "has no key: give key_columns"),
        (b'"1"', encode(envelope("c", after={"id": 1})), "not a JSON object of key columns"),
        (b'{"id": null}', encode(envelope("c", after={"id": 1})), "key column 'id' is null"),
    ],
    ids=[
        "not-json",
        "not-object",
        "unknown-op",
        "no-after",
        "no-key",
        "bad-key",
        "null-key",
    ],
)
def test_a_malformed_envelope_names_what_is_wrong(
    key: bytes | None, value: bytes, reason: str
) -> None:
    with pytest.raises(EnvelopeError, match=reason):
        parse_change(value, key, 0, 0)


def test_a_key_column_missing_from_the_row_is_named() -> None:
    with pytest.raises(EnvelopeError, match="no key column 'tenant'"):
        parse_change(encode(envelope("c", after={"id": 1})), None, 0, 0, ["tenant", "id"])


def test_the_last_change_per_key_wins_in_offset_order() -> None:
    batch = messages(
        ({"id": 1}, envelope("c", after={"id": 1, "v": "a"})),
        ({"id": 2}, envelope("c", after={"id": 2, "v": "b"})),
        ({"id": 1}, envelope("u", before={"id": 1, "v": "a"}, after={"id": 1, "v": "c"})),
        ({"id": 2}, envelope("d", before={"id": 2, "v": "b"})),
        ({"id": 2}, None),  # the delete's tombstone
        ({"id": 3}, envelope("c", after={"id": 3, "v": "d"})),
        ({"id": 3}, envelope("d", before={"id": 3})),
        ({"id": 3}, envelope("c", after={"id": 3, "v": "e"})),  # created again
    )
    # handed over in another order: the offsets decide
    reduced = reduce_messages(batch.take([7, 3, 0, 5, 2, 1, 6, 4]))
    assert reduced.key_columns == ["id"]
    assert reduced.tombstones == 1 and reduced.malformed == {}
    assert {c.key: (c.row or {}).get("v") for c in reduced.changes.values()} == {
        (1,): "c",
        (2,): None,
        (3,): "e",
    }
    assert [c.key for c in reduced.deletes] == [(2,)]
    rows = reduced.rows()
    assert sorted(rows.column("id").to_pylist()) == [1, 3]
    assert rows.schema.field(POSITION_COLUMN).type == pa.int64()
    assert reduced.keys(reduced.deletes).to_pylist() == [{"id": 2}]


def test_malformed_messages_are_set_aside_with_their_reason_and_the_rest_applied() -> None:
    batch = messages(
        ({"id": 1}, envelope("c", after={"id": 1})),
        ({"id": 2}, {"op": "c"}),
        ({"other": 3}, envelope("c", after={"other": 3})),
    )
    reduced = reduce_messages(batch)
    assert list(reduced.changes) == [(1,)]
    assert reduced.malformed == {
        (0, 1): "cdc: op 'c' has no 'after' object (the row after the change)",
        (0, 2): "cdc: the message key has fields 'other'; the new table is keyed by the "
        "fields most of the batch's keys have, 'id'",
    }


def test_rows_take_the_tables_types_and_leave_out_columns_of_unknown_type() -> None:
    batch = messages(({"id": 1}, envelope("c", after={"id": 1, "score": 2, "note": None})))
    table_schema = pa.schema([("id", pa.int64()), ("score", pa.float64())])
    rows = reduce_messages(batch).rows(table_schema)
    assert rows.schema.field("score").type == pa.float64()
    assert "note" not in rows.column_names


def test_rows_have_every_column_any_row_has() -> None:
    batch = messages(
        ({"id": 1}, envelope("c", after={"id": 1})),
        ({"id": 2}, envelope("c", after={"id": 2, "tier": "gold"})),
    )
    rows = reduce_messages(batch).rows()
    assert rows.to_pylist() == [
        {"id": 1, POSITION_COLUMN: None, "tier": None},
        {"id": 2, POSITION_COLUMN: None, "tier": "gold"},
    ]


def test_a_delete_leaves_a_marker_that_makes_older_changes_stale_until_the_key_returns() -> None:
    def at(op: str, position: int, v: str | None = None) -> dict:
        row = {"id": 1, "v": v}
        return envelope(op, before=row, after=None if op == "d" else row, source={"lsn": position})

    deleted = plan(reduce_messages(messages(({"id": 1}, at("d", 20)))), {})
    assert deleted.markers == {"[1]": 20}  # no row held: still marked
    markers: dict[str, int] = {}
    fold_markers(markers, deleted.markers)

    late = plan(reduce_messages(messages(({"id": 1}, at("u", 10, "late")))), {}, markers)
    assert late.applied == [] and late.counts["stale"] == 1 and late.markers == {}
    again = plan(reduce_messages(messages(({"id": 1}, at("c", 30, "again")))), {}, markers)
    assert again.counts["upserted"] == 1 and again.markers == {"[1]": None}
    fold_markers(markers, again.markers)
    assert markers == {}
    # a change without a position cannot be compared: it applies
    unplaced = envelope("c", after={"id": 1, "v": "x"})
    assert plan(reduce_messages(messages(({"id": 1}, unplaced))), {}, {"[1]": 20}).applied


@pytest.mark.parametrize(
    ("formats", "options", "named"),
    [
        (("protobuf", "bytes"), {}, "value_format='protobuf'"),
        (("json", "json"), {}, "key_format='json'"),
        (("json", "bytes"), {"value_schema": "x.avsc"}, "takes no value_schema"),
        (("json", "bytes"), {"schema_registry": "http://127.0.0.1:1"}, "nor a schema_registry"),
    ],
)
def test_envelopes_are_read_as_json_or_avro_and_anything_else_is_refused(
    formats: tuple[str, str], options: dict[str, Any], named: str
) -> None:
    from sluice.queues import ConfigError
    from sluice.spark.ingest import envelope_decoders

    with pytest.raises(ConfigError, match=re.escape(named)):
        envelope_decoders("t", *formats, **options)
    assert envelope_decoders("t", "json", "bytes") == JSON_ENVELOPES
