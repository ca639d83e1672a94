"""Routes: one topic, many tables. Which table each message of a batch goes to.

A :class:`Routes` names where a message's *route value* comes from (``by``):

- ``field:NAME`` (or ``field:a.b`` for a nested field): a string field of a JSON payload;
- ``key``: the message key, as UTF-8 text;
- ``header:NAME``: a Kafka header's value (the last header of that name), as UTF-8 text;
- ``topic``: the record's topic (an MQTT message's own topic), ``topic_level:N`` its
  ``N``-th level (from 0, split on ``/``);

and how a value names a table: ``tables``, an explicit mapping from values to sink locations,
and/or ``template``, a sink location with one placeholder (``iceberg://lake/events.{event_type}``,
``delta:///lake/{kind}``), optionally limited to the ``values`` it may take. Every route
table is a sink of its own (Parquet, Iceberg or Delta; routes may mix them), created on first
use with the route's schema (``schemas``, by route value; else the ingest's ``schema``).

A route value is untrusted data (invariant I10): it only *selects* a table among the names
the mapping or the template allows. A value put into a template must be a safe name
(:data:`SAFE_NAME`: letters, digits, ``_`` and ``-``, at most 64 characters, starting with a
letter or a digit), so it cannot climb out of a path (``..``, ``/``), add a namespace level
(``.``) or reach another catalog (a template cannot place its value in the catalog or the
query part). A message whose value is not one is quarantined with the reason; so is one
whose value cannot be read at all (a payload that is not a JSON object, a field that is a
number, a key that is not UTF-8).

A message with no route (no value: the field, key or header is absent or null; or a value
the mapping and the template do not take) goes where ``unmatched`` says: ``"quarantine"``
(the default) quarantines it in the ingest's own sink with the reason, ``"table"`` writes it
to the ingest's own sink as a row (a default table). It is never dropped.

The routing of a message is a function of the message and the routes alone, never of the
batch it came in: a rerun that reads a message again sends it to the same table.
:mod:`sluice.spark.routing` computes the same values in Spark, for the ingest; the sensors
(:mod:`sluice.route_index`) and the audit use :meth:`Routes.route` here.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .queues.config import ConfigError

__all__ = [
    "MAX_NAME",
    "SAFE_NAME",
    "Decision",
    "Extracted",
    "Routes",
    "Unmatched",
    "ValueKind",
]

#: A route value that goes into a template: letters, digits, ``_`` and ``-``, at most
#: :data:`MAX_NAME` characters, starting with a letter or a digit.
MAX_NAME = 64
SAFE_NAME = re.compile(rf"[A-Za-z0-9][A-Za-z0-9_-]{{0,{MAX_NAME - 1}}}")
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_FIELD_PART = re.compile(r"[^'\[\]\\.\s]+")
Unmatched = Literal["quarantine", "table"]


class ValueKind:
    """What reading a message's route value found (the same codes in Spark)."""

    VALUE = 0  # a text value
    MISSING = 1  # no value: the field, key or header is absent or null
    NOT_OBJECT = 2  # a field route, and the payload is no JSON object (or not UTF-8 text)
    NOT_STRING = 3  # a field route, and the field is a number, a boolean, an object...
    NOT_TEXT = 4  # a key, header or topic that is not UTF-8


@dataclass(frozen=True)
class Extracted:
    """A message's route value as read: ``kind`` (:class:`ValueKind`), the JSON type of a
    field that is not a string (``number``, ``boolean``, ``object``, ``array``), the text."""

    kind: int
    type: str | None = None
    value: str | None = None


@dataclass(frozen=True)
class Decision:
    """Where a message goes: ``table`` (a route table's location), or the ingest's own sink
    (``table`` None): quarantined with ``reason``, or, without one, as a row."""

    table: str | None
    reason: str | None = None

    @property
    def home(self) -> bool:
        return self.table is None


@dataclass(frozen=True)
class Routes:
    """How a batch's messages go to tables (see the module docstring)."""

    by: str
    template: str | None = None
    tables: Mapping[str, str] = field(default_factory=dict)
    values: tuple[str, ...] | None = None
    unmatched: Unmatched = "quarantine"
    schemas: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "tables", dict(self.tables))
        object.__setattr__(self, "schemas", dict(self.schemas))
        if self.values is not None:
            object.__setattr__(self, "values", tuple(sorted(set(self.values))))
        self._check()

    # ---- configuration ---------------------------------------------------------------------

    @classmethod
    def parse(cls, routes: Routes | Mapping[str, Any] | str | Path) -> Routes:
        """A :class:`Routes` from itself, its dict (:meth:`to_dict`), that dict as JSON text,
        or a JSON file (a path, or ``@path``)."""
        if isinstance(routes, Routes):
            return routes
        if isinstance(routes, Path) or (isinstance(routes, str) and routes.startswith("@")):
            path = Path(str(routes).removeprefix("@"))
            try:
                routes = path.read_text()
            except OSError as exc:
                raise ConfigError(f"routes file {path}: {exc.strerror or exc}") from None
        if isinstance(routes, str):
            try:
                routes = json.loads(routes)
            except ValueError as exc:
                raise ConfigError(
                    f"routes must be a JSON object like "
                    f'{{"by": "field:event_type", "template": "iceberg://lake/events.{{event_type}}"}}'
                    f" ({exc})"
                ) from None
        if not isinstance(routes, Mapping):
            raise ConfigError(
                f"routes must be a Routes, a dict or its JSON, not {type(routes).__name__}"
            )
        known = {"by", "template", "tables", "values", "unmatched", "schemas"}
        unknown = sorted(set(routes) - known)
        if unknown:
            raise ConfigError(
                f"routes has unknown key(s) {', '.join(unknown)}; the keys are: "
                f"{', '.join(sorted(known))}"
            )
        if "by" not in routes:
            raise ConfigError(
                "routes needs 'by': where a message's route comes from (field:NAME, key, "
                "header:NAME, topic or topic_level:N)"
            )
        values = routes.get("values")
        return cls(
            by=str(routes["by"]),
            template=routes.get("template"),
            tables=dict(routes.get("tables") or {}),
            values=tuple(values) if values is not None else None,
            unmatched=routes.get("unmatched", "quarantine"),
            schemas=dict(routes.get("schemas") or {}),
        )

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"by": self.by, "unmatched": self.unmatched}
        if self.template is not None:
            data["template"] = self.template
        if self.tables:
            data["tables"] = dict(sorted(self.tables.items()))
        if self.values is not None:
            data["values"] = sorted(self.values)
        if self.schemas:
            data["schemas"] = dict(sorted(self.schemas.items()))
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @property
    def digest(self) -> str:
        """A short hash of the routes: a batch's records carry it, so that a batch is never
        finished under other routes than it was begun with."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()[:16]

    @property
    def source(self) -> tuple[str, str | None]:
        """(``field``, ``key``, ``header``, ``topic`` or ``topic_level``; its argument)."""
        kind, _, argument = self.by.partition(":")
        return kind, argument or None

    @property
    def field_path(self) -> list[str]:
        """A field route's path (``a.b`` is ``["a", "b"]``)."""
        kind, argument = self.source
        return str(argument).split(".") if kind == "field" else []

    @property
    def level(self) -> int:
        return int(self.source[1] or 0)

    def _check(self) -> None:
        kind, argument = self.source
        if kind not in ("field", "key", "header", "topic", "topic_level"):
            raise ConfigError(
                f"routes: by={self.by!r} is not a route source; give field:NAME (a JSON "
                "payload's field), key, header:NAME, topic or topic_level:N"
            )
        if kind in ("key", "topic") and argument is not None:
            raise ConfigError(f"routes: by={self.by!r}: '{kind}' takes no argument")
        if kind == "field" and not (
            argument and all(_FIELD_PART.fullmatch(p) for p in argument.split("."))
        ):
            raise ConfigError(
                f"routes: by={self.by!r} needs a field name (field:event_type, or field:a.b "
                "for a nested one), without quotes, brackets, backslashes or spaces"
            )
        if kind == "header" and not argument:
            raise ConfigError(f"routes: by={self.by!r} needs a header name (header:NAME)")
        if kind == "topic_level" and not (argument or "").isdigit():
            raise ConfigError(
                f"routes: by={self.by!r} needs a level number from 0 (topic_level:1 is 'b' of "
                "'a/b/c')"
            )
        if self.unmatched not in ("quarantine", "table"):
            raise ConfigError(
                f"routes: unmatched must be 'quarantine' (messages with no route are "
                f"quarantined in the ingest's sink) or 'table' (they are its rows), not "
                f"{self.unmatched!r}"
            )
        if self.template is None and not self.tables:
            raise ConfigError(
                "routes needs a template (e.g. 'iceberg://lake/events.{event_type}') or tables "
                "(a mapping from route values to sinks), or both"
            )
        if self.template is not None:
            _check_template(self.template)
        elif self.values is not None:
            raise ConfigError("routes: values limit a template's values; give a template")
        for value in self.values or ():
            if not SAFE_NAME.fullmatch(value):
                raise ConfigError(
                    f"routes: values holds {value!r}, which is no safe table name "
                    f"({_SAFE_TEXT}); map it with tables instead"
                )
        for value, table in self.tables.items():
            if not isinstance(value, str) or not isinstance(table, str) or not table:
                raise ConfigError(
                    f"routes: tables maps route values (text) to sinks (text), not "
                    f"{value!r} to {table!r}"
                )
            if _PLACEHOLDER.search(table):
                raise ConfigError(
                    f"routes: tables[{value!r}] = {table!r} has a placeholder; a mapping names "
                    "its tables in full (a template is 'template')"
                )
        unknown = [v for v in self.schemas if v not in self.tables and not self._templated(v)]
        if unknown:
            raise ConfigError(
                f"routes: schemas names route value(s) {', '.join(map(repr, unknown))} that no "
                "table takes"
            )
        by_table: dict[str, set[str]] = {}
        for value in self.schemas:
            by_table.setdefault(self.resolve(value) or "", set()).add(self.schemas[value])
        for table, schemas in by_table.items():
            if len(schemas) > 1:
                raise ConfigError(
                    f"routes: the values that go to {table} have different schemas; a table has one"
                )

    def _templated(self, value: str) -> bool:
        return (
            self.template is not None
            and SAFE_NAME.fullmatch(value) is not None
            and (self.values is None or value in self.values)
        )

    # ---- routing ---------------------------------------------------------------------------

    def resolve(self, value: str) -> str | None:
        """The table a route value selects (its location), or None when no route takes it.
        Raises ``ValueError`` (the quarantine's reason) for a value no template can take."""
        if value in self.tables:
            return self.tables[value]
        if self.template is None:
            return None
        if not SAFE_NAME.fullmatch(value):
            raise ValueError(f"route value {_shown(value)} is not a safe table name ({_SAFE_TEXT})")
        if self.values is not None and value not in self.values:
            return None
        return _PLACEHOLDER.sub(lambda _: value, self.template, count=1)

    def decide(self, found: Extracted) -> Decision:
        """Where a message whose route value was read as ``found`` goes."""
        what = self._what()
        if found.kind == ValueKind.NOT_OBJECT:
            return Decision(None, f"no route: the value is not a JSON object ({what})")
        if found.kind == ValueKind.NOT_STRING:
            return Decision(None, f"no route: {what} is a JSON {found.type}, not a string")
        if found.kind == ValueKind.NOT_TEXT:
            return Decision(None, f"no route: {what} is not UTF-8 text")
        if found.kind == ValueKind.MISSING or found.value is None:
            return self._unmatched(f"no route: {what} is missing")
        try:
            table = self.resolve(found.value)
        except ValueError as exc:
            return Decision(None, f"no route: {exc}")
        if table is None:
            return self._unmatched(f"no route: no table takes {what} {_shown(found.value)}")
        return Decision(table)

    def _unmatched(self, reason: str) -> Decision:
        return Decision(None, reason if self.unmatched == "quarantine" else None)

    def _what(self) -> str:
        kind, argument = self.source
        return {
            "field": f"field '{argument}'",
            "key": "the key",
            "header": f"header '{argument}'",
            "topic": "the topic",
            "topic_level": f"level {argument} of the topic",
        }[kind]

    def extract(
        self,
        key: bytes | None,
        value: bytes | None,
        headers: Iterable[tuple[str, bytes | None]] | None,
        topic: str | None,
    ) -> Extracted:
        """A message's route value (:class:`Extracted`); what Spark computes for the ingest
        (:mod:`sluice.spark.routing`)."""
        kind, argument = self.source
        if kind == "field":
            return _field(value, self.field_path)
        if kind == "key":
            return _text(key)
        if kind == "header":
            found = [v for k, v in headers or () if k == argument]
            return _text(found[-1] if found else None)
        if topic is None:
            return Extracted(ValueKind.MISSING)
        if kind == "topic":
            return Extracted(ValueKind.VALUE, None, topic)
        levels = topic.split("/")
        if self.level >= len(levels):
            return Extracted(ValueKind.MISSING)
        return Extracted(ValueKind.VALUE, None, levels[self.level])

    def route(
        self,
        key: bytes | None,
        value: bytes | None,
        headers: Iterable[tuple[str, bytes | None]] | None = None,
        topic: str | None = None,
    ) -> Decision:
        """Where one message goes (:meth:`extract`, then :meth:`decide`)."""
        return self.decide(self.extract(key, value, headers, topic))

    def table_for(self, value: str) -> str:
        """The table of route value ``value``, for a watcher or an asset that stands for one
        route: a ``ConfigError`` when no route takes it."""
        try:
            table = self.resolve(value)
        except ValueError as exc:
            raise ConfigError(f"route {value!r}: {exc}") from None
        if table is None:
            raise ConfigError(
                f"route {value!r}: no table takes it (tables: "
                f"{', '.join(sorted(self.tables)) or 'none'}"
                + (f"; template {self.template}" if self.template else "")
                + (f" for {', '.join(self.values)}" if self.values is not None else "")
                + ")"
            )
        return table

    def schema_for(self, table: str, default: Any = None) -> Any:
        """The schema of a route table (by any value that goes there), else ``default``."""
        for value, schema in self.schemas.items():
            if self.resolve(value) == table:
                return schema
        return default

    def known_tables(self) -> list[str]:
        """The tables the routes name without seeing a message: the mapping's, and the
        template's for each of its ``values``."""
        found = set(self.tables.values())
        if self.template is not None and self.values is not None:
            found.update(self.resolve(v) or "" for v in self.values)
        return sorted(found - {""})


_SAFE_TEXT = (
    f"letters, digits, _ and -, at most {MAX_NAME} characters, starting with a letter or a digit"
)


def _shown(value: str) -> str:
    return repr(value if len(value) <= 80 else value[:77] + "...")


def _check_template(template: str) -> None:
    found = _PLACEHOLDER.findall(template)
    if len(found) != 1 or template.count("{") != 1 or template.count("}") != 1:
        raise ConfigError(
            f"routes: template {template!r} must hold exactly one placeholder, e.g. "
            "'iceberg://lake/events.{event_type}' or 'delta:///lake/{kind}'"
        )
    at = template.index("{")
    if "?" in template[:at] or "#" in template[:at]:
        raise ConfigError(
            f"routes: template {template!r} puts its value in the query; put it in the table's "
            "name or path"
        )
    scheme, sep, rest = template.partition("://")
    if sep and "{" in scheme:
        raise ConfigError(f"routes: template {template!r} puts its value in the scheme")
    if sep and scheme.lower() == "iceberg" and "{" in rest.partition("/")[0]:
        raise ConfigError(
            f"routes: template {template!r} lets a message choose the Iceberg catalog; put the "
            "value in the table's name (iceberg://CATALOG/NAMESPACE.events_{kind})"
        )


def _text(data: bytes | None) -> Extracted:
    if data is None:
        return Extracted(ValueKind.MISSING)
    try:
        return Extracted(ValueKind.VALUE, None, bytes(data).decode("utf-8"))
    except UnicodeDecodeError:
        return Extracted(ValueKind.NOT_TEXT)


class _Rejected(ValueError):
    pass


def _no_duplicates(pairs: Sequence[tuple[str, Any]]) -> dict[str, Any]:
    names = [name for name, _ in pairs]
    if len(set(names)) != len(names):
        raise _Rejected("duplicate keys")  # Spark's parse_json refuses them
    return dict(pairs)


def _no_constant(name: str) -> Any:
    raise _Rejected(f"{name} is not JSON")  # NaN, Infinity: Spark's parse_json refuses them


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_DECODER = json.JSONDecoder(object_pairs_hook=_no_duplicates, parse_constant=_no_constant)


def _field(value: bytes | None, path: list[str]) -> Extracted:
    """A JSON payload's field, read as Spark's ``parse_json`` and ``variant_get`` read it."""
    if value is None:
        return Extracted(ValueKind.NOT_OBJECT)
    try:
        text = bytes(value).decode("utf-8").lstrip(" \t\n\r")
        # the first JSON value, what follows it ignored: as Spark's parse_json reads a value
        parsed, _ = _DECODER.raw_decode(text)
        if _SURROGATE_ESCAPE.search(text):  # Spark refuses a document with a lone surrogate
            json.dumps(parsed, ensure_ascii=False).encode("utf-8")
    except (UnicodeError, ValueError, RecursionError):
        return Extracted(ValueKind.NOT_OBJECT)
    if not isinstance(parsed, dict):
        return Extracted(ValueKind.NOT_OBJECT)
    found: Any = parsed
    for part in path:
        if not isinstance(found, dict) or part not in found:
            return Extracted(ValueKind.MISSING)
        found = found[part]
    if found is None:
        return Extracted(ValueKind.MISSING)
    if isinstance(found, str):
        return Extracted(ValueKind.VALUE, None, found)
    return Extracted(ValueKind.NOT_STRING, _json_type(found))


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return "object" if isinstance(value, dict) else "array"
