"""Change data capture: Debezium envelopes read, checked and reduced to one change per key
(``ingest(..., write_mode="upsert")``; the sinks apply the result, docs/guides/cdc.md).

- :mod:`.envelopes`: one message as a change, a truncate, or a message with no change;
- :mod:`.types`: the columns' types an envelope's schema declares (Debezium's logical types);
- :mod:`.columns`: names and values from messages checked before they reach a table;
- :mod:`.reduce`: a batch checked against its table and reduced to the last change per key,
  in the source's order.
"""

from .envelopes import (
    JSON_ENVELOPES,
    NOTES,
    OPS,
    UNAVAILABLE,
    Change,
    Decoders,
    EnvelopeError,
    Truncate,
    parse_change,
    source_position,
)
from .reduce import (
    POSITION_COLUMN,
    OnTruncate,
    Reduced,
    TableShape,
    in_source_order,
    reduce_changes,
    reduce_messages,
)

__all__ = [
    "JSON_ENVELOPES",
    "NOTES",
    "OPS",
    "POSITION_COLUMN",
    "UNAVAILABLE",
    "Change",
    "Decoders",
    "EnvelopeError",
    "OnTruncate",
    "Reduced",
    "TableShape",
    "Truncate",
    "in_source_order",
    "parse_change",
    "reduce_changes",
    "reduce_messages",
    "source_position",
]
