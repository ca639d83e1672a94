"""Column names and values that come from messages, checked before they reach a table.

A name or a value in a message is data (invariant I10): it is never spliced into an expression
unquoted, and one that cannot be a column, or a value that does not fit its column's type, is
a reason to set its change aside (the quarantine), never an error that stops the batch.
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

__all__ = [
    "RESERVED_PREFIX",
    "check_name",
    "infer_type",
    "kind_of",
    "misfit",
    "quote",
    "type_name",
]

#: Column names Sluice keeps for itself (its position column, the merge's flag).
RESERVED_PREFIX = "_sluice"
#: The longest column name taken (Parquet and the catalogs take longer; readers may not).
MAX_NAME = 255
# control characters, and the backtick, which delta-rs's SQL parser cannot escape in a name
_REFUSED = re.compile(r"[\x00-\x1f\x7f`]")


def check_name(name: Any, what: str = "column") -> str | None:
    """Why ``name`` cannot be a column's name (None: it can). Any other text can: it is quoted
    wherever it meets an expression (:func:`quote`)."""
    if not isinstance(name, str) or not name:
        return f"a {what} name must be a non-empty text, not {name!r}"
    if len(name) > MAX_NAME:
        return f"the {what} name {name[:40]!r}... is longer than {MAX_NAME} characters"
    if _REFUSED.search(name):
        return f"the {what} name {name!r} has a control character or a backtick"
    if name.lower().startswith(RESERVED_PREFIX):
        return f"the {what} name {name!r} starts with {RESERVED_PREFIX!r}, which Sluice keeps"
    return None


def quote(name: str) -> str:
    """``name`` as a quoted identifier of a delta-rs (DataFusion) SQL expression. Only names
    :func:`check_name` takes reach here: they hold no backtick."""
    if "`" in name:
        raise ValueError(f"the column name {name!r} cannot be quoted")
    return f"`{name}`"


def kind_of(value: Any) -> str:
    """What a value is, as a reason names it."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a floating-point number"
    if isinstance(value, str):
        return "a text"
    if isinstance(value, (bytes, bytearray)):
        return "bytes"
    if isinstance(value, decimal.Decimal):
        return "a decimal"
    if isinstance(value, dt.datetime):
        return "a timestamp"
    if isinstance(value, dt.date):
        return "a date"
    if isinstance(value, dt.time):
        return "a time"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, (list, tuple)):
        return "a list"
    return type(value).__name__


def type_name(kind: pa.DataType) -> str:
    """A column's type as a reason names it (Arrow's name; its large variants, which the
    catalogs read back, named as the plain ones)."""
    return str(kind).replace("large_string", "string").replace("large_binary", "binary")


_INTEGER_RANGES = {
    8: (-(2**7), 2**7 - 1),
    16: (-(2**15), 2**15 - 1),
    32: (-(2**31), 2**31 - 1),
    64: (-(2**63), 2**63 - 1),
}


def misfit(values: Sequence[Any], kind: pa.DataType) -> dict[int, str]:
    """The positions of ``values`` that a column of type ``kind`` cannot hold without changing
    them, with what each one is (None fits every type). Strict where Arrow would convert
    quietly: a float in an integer column, a boolean for a number, a number for a text."""
    accepted = _accepted(kind)
    bad: dict[int, str] = {}
    if accepted is not None:
        low, high = _bounds(kind)
        for index, value in enumerate(values):
            if value is None:
                continue
            if type(value) not in accepted:
                bad[index] = kind_of(value)
            elif low is not None and not low <= value <= high:
                bad[index] = f"{kind_of(value)} out of the type's range"
        return bad
    try:  # decimals, structs, lists...: Arrow's own check, value by value only on failure
        pa.array(values, type=kind)
        return bad
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, ValueError, TypeError):
        pass
    for index, value in enumerate(values):
        if value is None:
            continue
        try:
            pa.array([value], type=kind)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, ValueError, TypeError):
            bad[index] = kind_of(value)
    return bad


def _accepted(kind: pa.DataType) -> frozenset[type] | None:
    """The Python types a column of ``kind`` takes as they are; None: ask Arrow."""
    if pa.types.is_boolean(kind):
        return frozenset({bool})
    if pa.types.is_integer(kind):
        return frozenset({int})
    if pa.types.is_floating(kind):
        return frozenset({int, float})
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return frozenset({str})
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return frozenset({bytes})
    if pa.types.is_timestamp(kind):
        return frozenset({dt.datetime})
    if pa.types.is_date(kind):
        return frozenset({dt.date})
    if pa.types.is_time(kind):
        return frozenset({dt.time})
    if pa.types.is_null(kind):
        return frozenset()
    return None


def _bounds(kind: pa.DataType) -> tuple[int | None, int | None]:
    if pa.types.is_integer(kind):
        low, high = _INTEGER_RANGES[kind.bit_width]
        if pa.types.is_unsigned_integer(kind):
            return 0, 2 * high + 1
        return low, high
    return None, None


def infer_type(values: Sequence[Any]) -> pa.DataType | None:
    """The type of a column no table or schema types yet, from its values in order: the first
    value's kind (numbers: a float anywhere makes it double); None if every value is null.
    Values of another kind are then :func:`misfit`s."""
    first: Any = None
    numbers_float = False
    for value in values:
        if value is None:
            continue
        if first is None:
            first = value
        if isinstance(value, float):
            numbers_float = True
    if first is None:
        return None
    if isinstance(first, bool):
        return pa.bool_()
    if isinstance(first, (int, float)):
        return pa.float64() if numbers_float else pa.int64()
    if isinstance(first, str):
        return pa.string()
    if isinstance(first, (bytes, bytearray)):
        return pa.binary()
    alike = [v for v in values if v is not None and kind_of(v) == kind_of(first)]
    try:  # objects and lists: the fields of all of them, if Arrow can join them
        return pa.array(alike).type
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, ValueError, TypeError):
        pass
    try:
        return pa.array([first]).type
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, ValueError, TypeError):
        return None
