"""Spark DDL schemas parsed in Python, so a wrong schema is reported before Spark starts.

PySpark's own ``StructType.fromDDL`` needs a running JVM; this parser covers what a payload
schema uses: ``name TYPE [NOT NULL] [COMMENT '...']`` fields separated by commas, the atomic
types, ``DECIMAL(p, s)``, ``VARCHAR(n)``, ``CHAR(n)``, and nested ``ARRAY<...>``,
``MAP<..., ...>`` and ``STRUCT<name: TYPE, ...>``. Names may be quoted with backticks.
"""

from __future__ import annotations

import difflib
import re

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    CharType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
    VarcharType,
    VariantType,
)

__all__ = ["DDLError", "parse_ddl"]

ATOMIC: dict[str, type[DataType]] = {
    "STRING": StringType,
    "BOOLEAN": BooleanType,
    "TINYINT": ByteType,
    "BYTE": ByteType,
    "SMALLINT": ShortType,
    "SHORT": ShortType,
    "INT": IntegerType,
    "INTEGER": IntegerType,
    "BIGINT": LongType,
    "LONG": LongType,
    "FLOAT": FloatType,
    "REAL": FloatType,
    "DOUBLE": DoubleType,
    "BINARY": BinaryType,
    "DATE": DateType,
    "TIMESTAMP": TimestampType,
    "TIMESTAMP_LTZ": TimestampType,
    "TIMESTAMP_NTZ": TimestampNTZType,
    "VARIANT": VariantType,
}
KNOWN = [*ATOMIC, "DECIMAL", "DEC", "NUMERIC", "VARCHAR", "CHAR", "ARRAY", "MAP", "STRUCT"]
_TOKEN = re.compile(r"\s*(`(?:[^`]|``)*`|'(?:[^'\\]|\\.)*'|[A-Za-z_][A-Za-z0-9_]*|\d+|[<>(),:])")


class DDLError(ValueError):
    """A schema that is not valid Spark DDL; the message says where and why."""


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens: list[tuple[str, int]] = []
        position = 0
        while position < len(text):
            match = _TOKEN.match(text, position)
            if match is None:
                if text[position:].strip() == "":
                    break
                raise self.error(f"unexpected character {text[position:].strip()[0]!r}", position)
            self.tokens.append((match.group(1), match.start(1)))
            position = match.end()
        self.index = 0

    def error(self, reason: str, at: int | None = None) -> DDLError:
        if at is None:
            at = self.tokens[self.index][1] if self.index < len(self.tokens) else len(self.text)
        return DDLError(f"{reason} at position {at + 1}")

    def peek(self) -> str | None:
        return self.tokens[self.index][0] if self.index < len(self.tokens) else None

    def take(self, what: str) -> str:
        """The next token, whatever it is (``what`` names it for the error at the end)."""
        token = self.peek()
        if token is None:
            raise self.error(f"expected {what}, found the end")
        self.index += 1
        return token

    def expect(self, literal: str) -> None:
        token = self.peek()
        if token is None or token.upper() != literal:
            found = "the end" if token is None else repr(token)
            raise self.error(f"expected {literal!r}, found {found}")
        self.index += 1

    def fields(self, closing: str | None) -> list[StructField]:
        fields = []
        while True:
            name = self.name()
            if self.peek() == ":":
                self.expect(":")
            data_type = self.type(name)
            nullable, metadata = True, {}
            if (self.peek() or "").upper() == "NOT":
                self.expect("NOT")
                self.expect("NULL")
                nullable = False
            if (self.peek() or "").upper() == "COMMENT":
                self.expect("COMMENT")
                if not (self.peek() or "").startswith("'"):
                    raise self.error("expected a quoted comment")
                quoted = self.take("a comment")
                metadata["comment"] = re.sub(r"\\(.)", r"\1", quoted[1:-1])
            fields.append(StructField(name, data_type, nullable, metadata))
            if self.peek() != ",":
                break
            self.expect(",")
        if self.peek() != closing:
            expected = f"',' or {closing!r}" if closing else "',' or the end"
            raise self.error(f"expected {expected}, found {self.peek()!r}")
        return fields

    def name(self) -> str:
        token = self.take("a field name")
        if token.startswith("`"):
            return token[1:-1].replace("``", "`")
        if not re.match(r"[A-Za-z_]", token):
            raise self.error(
                f"expected a field name, found {token!r}", self.tokens[self.index - 1][1]
            )
        return token

    def number(self) -> int:
        token = self.take("a number")
        if not token.isdigit():
            raise self.error(f"expected a number, found {token!r}", self.tokens[self.index - 1][1])
        return int(token)

    def type(self, field: str) -> DataType:
        at = self.tokens[self.index][1] if self.index < len(self.tokens) else len(self.text)
        word = self.take("a type").upper()
        if word in ATOMIC:
            return ATOMIC[word]()
        if word in ("DECIMAL", "DEC", "NUMERIC"):
            precision, scale = 10, 0
            if self.peek() == "(":
                self.expect("(")
                precision = self.number()
                if self.peek() == ",":
                    self.expect(",")
                    scale = self.number()
                self.expect(")")
            return DecimalType(precision, scale)
        if word in ("VARCHAR", "CHAR"):
            self.expect("(")
            length = self.number()
            self.expect(")")
            return VarcharType(length) if word == "VARCHAR" else CharType(length)
        if word == "ARRAY":
            self.expect("<")
            element = self.type(field)
            self.expect(">")
            return ArrayType(element)
        if word == "MAP":
            self.expect("<")
            key = self.type(field)
            self.expect(",")
            value = self.type(field)
            self.expect(">")
            return MapType(key, value)
        if word == "STRUCT":
            self.expect("<")
            if self.peek() == ">":
                self.expect(">")
                return StructType()
            inner = self.fields(">")
            self.expect(">")
            return StructType(inner)
        close = difflib.get_close_matches(word, KNOWN, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise self.error(f"unknown type {word!r} for field {field!r}{hint}", at)


def parse_ddl(text: str) -> StructType:
    """The StructType of a DDL string such as ``"device STRING, temperature DOUBLE"``."""
    parser = _Parser(text)
    if not parser.tokens:
        raise DDLError("the schema is empty")
    return StructType(parser.fields(None))
