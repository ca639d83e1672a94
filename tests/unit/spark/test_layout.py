"""keep_message: the columns it names, its text on command lines, a table's recorded choice
against the one given, and the columns a row carries for each source."""

from __future__ import annotations

import pyarrow as pa
import pytest

from sluice.queues import ConfigError
from sluice.spark import layout


def test_keep_message_names_the_message_columns_to_keep() -> None:
    assert layout.normalize(None) is None, "not asked: the table's own choice"
    assert layout.normalize(True) == ("headers", "key", "message_id", "topic", "value")
    assert layout.normalize(False) == ()
    assert layout.normalize(["value", "key", "offset"]) == ("key", "value"), "offset: every row"
    with pytest.raises(ConfigError, match=r"keep_message names 'values', which is not a column"):
        layout.normalize(["key", "values"])
    with pytest.raises(ConfigError, match=r"--keep-message names 'all'"):
        layout.normalize("all", "--keep-message")  # text is read by keep_of_text first


@pytest.mark.parametrize("keep", [True, False, ["headers", "key"], ["value"]])
def test_the_command_line_text_of_a_choice_reads_back_as_the_choice(keep: object) -> None:
    text = layout.keep_text(keep)  # type: ignore[arg-type]
    assert text is not None
    assert layout.normalize(layout.keep_of_text(text)) == layout.normalize(keep)  # type: ignore[arg-type]


def test_the_command_line_text() -> None:
    assert layout.keep_of_text(None) is None
    assert layout.keep_of_text("ALL") is True and layout.keep_of_text("none") is False
    assert layout.keep_of_text(" key , headers ") == ["key", "headers"]
    assert layout.keep_text(None) is None and layout.keep_text(False) == "none"


def test_a_table_keeps_its_choice_and_another_one_is_refused_saying_how_to_go_on() -> None:
    assert layout.resolve(None, None, "t") == (), "a new table keeps none by default"
    assert layout.resolve(["key"], None, "t") == ("key",)
    assert layout.resolve(None, ("key",), "t") == ("key",), "left out: the table's own"
    assert layout.resolve(["key"], ["key"], "t") == ("key",)
    assert layout.resolve(None, layout.FULL, "t") == layout.FULL
    with pytest.raises(ConfigError) as refused:
        layout.resolve(False, layout.FULL, "The sink /lake")
    message = str(refused.value)
    assert "The sink /lake was made with keep_message=True, and keep_message=False was given" in (
        message
    )
    assert "leave keep_message out" in message and "ingest into a new table" in message


def test_a_row_carries_the_coordinates_and_what_its_source_needs() -> None:
    coordinates = ("partition", "offset", "timestamp")
    assert layout.message_columns((), "kafka") == coordinates
    assert layout.message_columns(("key",), "kafka") == ("key", *coordinates)
    assert layout.message_columns((), "mqtt") == ("topic", *coordinates, "message_id")
    assert layout.message_columns((), "kafka", parsed=False) == ("value", *coordinates)
    assert layout.message_columns(layout.FULL, "kafka") == (
        "key", "value", "topic", *coordinates, "headers", "message_id",
    )  # fmt: skip


def test_offsets_and_timestamps_are_delta_encoded_and_the_rest_dictionary_encoded() -> None:
    schema = pa.schema(
        [
            ("device", pa.string()),
            ("partition", pa.int32()),
            ("offset", pa.int64()),
            ("timestamp", pa.timestamp("us", "UTC")),
            ("tags", pa.list_(pa.string())),
        ]
    )
    options = layout.arrow_writer_options(schema)
    assert options["column_encoding"] == {
        "offset": "DELTA_BINARY_PACKED",
        "timestamp": "DELTA_BINARY_PACKED",
    }
    assert options["use_dictionary"] == ["device", "partition", "tags.list.element"]
    assert layout.arrow_writer_options(pa.schema([("device", pa.string())])) == {}
