"""Routes: how a message's route value is read and which table it selects (sluice.routes)."""

from __future__ import annotations

import json

import pytest

from sluice.queues.config import ConfigError
from sluice.routes import Decision, Routes, ValueKind

EVENTS = Routes(by="field:event_type", template="iceberg://lake/events.{event_type}")


def route(routes: Routes, value: bytes | None, **more: object) -> Decision:
    return routes.route(more.get("key"), value, more.get("headers"), more.get("topic"))  # type: ignore[arg-type]


def test_a_field_selects_the_templates_table() -> None:
    assert route(EVENTS, b'{"event_type": "click", "x": 1}') == Decision(
        "iceberg://lake/events.click"
    )
    nested = Routes(by="field:meta.kind", tables={"a": "delta:///lake/a"})
    assert route(nested, b'{"meta": {"kind": "a"}}') == Decision("delta:///lake/a")


@pytest.mark.parametrize(
    "value",
    [
        "../etc",
        "a/b",
        "events.x",
        "a.b",
        "..",
        "",
        " click",
        "_hidden",
        "-x",
        "x" * 65,
        "a\x00b",
        "é",
        "a%2Fb",
        "a b",
        "{x}",
    ],
)
def test_a_value_that_is_no_safe_name_is_quarantined_never_a_table(value: str) -> None:
    """Invariant I10: a route value only selects among the template's names."""
    decision = route(EVENTS, json.dumps({"event_type": value}).encode())
    assert decision.table is None
    assert decision.reason is not None and "not a safe table name" in decision.reason


def test_the_longest_safe_name_is_a_table() -> None:
    value = "a" * 64
    assert route(EVENTS, json.dumps({"event_type": value}).encode()).table == (
        f"iceberg://lake/events.{value}"
    )


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        (None, "not a JSON object"),
        (b"not json", "not a JSON object"),
        (b"[1, 2]", "not a JSON object"),
        (b'"click"', "not a JSON object"),
        (b"\xff\xfe", "not a JSON object"),
        (b'{"event_type": 5}', "JSON number, not a string"),
        (b'{"event_type": true}', "JSON boolean, not a string"),
        (b'{"event_type": {"a": 1}}', "JSON object, not a string"),
        (b'{"event_type": ["a"]}', "JSON array, not a string"),
        (b'{"event_type": "a", "event_type": "b"}', "not a JSON object"),
        (b'{"event_type": NaN}', "not a JSON object"),
    ],
)
def test_a_value_that_cannot_be_read_is_quarantined_with_the_reason(
    payload: bytes | None, why: str
) -> None:
    decision = route(EVENTS, payload)
    assert decision.table is None and decision.reason is not None and why in decision.reason


def test_no_value_goes_where_unmatched_says() -> None:
    for payload in (b'{"other": 1}', b'{"event_type": null}'):
        quarantined = route(EVENTS, payload)
        assert quarantined.table is None and "missing" in str(quarantined.reason)
        as_rows = Routes(by=EVENTS.by, template=EVENTS.template, unmatched="table")
        assert route(as_rows, payload) == Decision(None, None)


def test_values_limit_the_template_and_the_mapping_comes_first() -> None:
    routes = Routes(
        by="key",
        template="delta:///lake/{kind}",
        values=("a", "b"),
        tables={"c": "/data/c", "a": "/data/special-a"},
    )
    assert route(routes, None, key=b"a").table == "/data/special-a"
    assert route(routes, None, key=b"b").table == "delta:///lake/b"
    assert route(routes, None, key=b"c").table == "/data/c"
    other = route(routes, None, key=b"d")
    assert other.table is None and "no table takes the key 'd'" in str(other.reason)


def test_a_mapping_takes_any_text_as_a_value_it_names() -> None:
    routes = Routes(by="header:type", tables={"a/b..c": "/data/ab"})
    headers = [("type", b"x"), ("type", b"a/b..c")]
    assert route(routes, None, headers=headers).table == "/data/ab"  # the last header wins
    assert route(routes, None, headers=[("type", b"\xff")]).reason == (
        "no route: header 'type' is not UTF-8 text"
    )


def test_topic_levels() -> None:
    routes = Routes(by="topic_level:1", template="delta:///lake/plant_{plant}")
    assert route(routes, None, topic="plants/p7/temp").table == "delta:///lake/plant_p7"
    missing = route(routes, None, topic="plants")
    assert missing.table is None and "level 1 of the topic is missing" in str(missing.reason)
    assert route(routes, None, topic="plants//temp").reason is not None  # '' is no name


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ({"by": "field:t"}, "needs a template"),
        ({"by": "value", "template": "/x/{t}"}, "not a route source"),
        ({"by": "field:", "template": "/x/{t}"}, "needs a field name"),
        ({"by": "field:a['b']", "template": "/x/{t}"}, "needs a field name"),
        ({"by": "key:x", "template": "/x/{t}"}, "takes no argument"),
        ({"by": "topic_level:x", "template": "/x/{t}"}, "level number"),
        ({"by": "key", "template": "/x/{t}/{u}"}, "exactly one placeholder"),
        ({"by": "key", "template": "/x/t"}, "exactly one placeholder"),
        ({"by": "key", "template": "iceberg://{c}/ns.t"}, "choose the Iceberg catalog"),
        ({"by": "key", "template": "iceberg://c/ns.t?quarantine={q}"}, "in the query"),
        ({"by": "key", "template": "{s}://x/t"}, "in the scheme"),
        ({"by": "key", "tables": {"a": "/x/{t}"}}, "has a placeholder"),
        ({"by": "key", "tables": {"a": "/a"}, "values": ["a"]}, "give a template"),
        ({"by": "key", "template": "/x/{t}", "values": ["a/b"]}, "no safe table name"),
        ({"by": "key", "template": "/x/{t}", "unmatched": "drop"}, "unmatched must be"),
        ({"by": "key", "template": "/x/{t}", "schemas": {"a/b": "x INT"}}, "no table takes"),
        ({"by": "key", "template": "/x/{t}", "colour": 1}, "unknown key(s) colour"),
        (
            {
                "by": "key",
                "tables": {"a": "/t", "b": "/t"},
                "schemas": {"a": "x INT", "b": "y INT"},
            },
            "different schemas",
        ),
    ],
)
def test_a_wrong_spec_names_what_to_fix(spec: dict[str, object], why: str) -> None:
    with pytest.raises(ConfigError, match="routes") as raised:
        Routes.parse(spec)
    assert why in str(raised.value)


def test_the_spec_round_trips_and_its_digest_follows_it(tmp_path: object) -> None:
    routes = Routes.parse(
        {
            "by": "field:event_type",
            "template": "delta:///lake/{t}",
            "values": ["b", "a"],
            "schemas": {"a": "x INT"},
        }
    )
    assert Routes.parse(routes.to_json()) == routes
    assert Routes.parse(routes.to_dict()).digest == routes.digest
    other = Routes.parse({**routes.to_dict(), "unmatched": "table"})
    assert other.digest != routes.digest
    assert routes.schema_for("delta:///lake/a") == "x INT"
    assert routes.schema_for("delta:///lake/b", "default") == "default"
    assert routes.known_tables() == ["delta:///lake/a", "delta:///lake/b"]


def test_table_for_names_a_route_a_watcher_or_an_asset_stands_for() -> None:
    assert EVENTS.table_for("click") == "iceberg://lake/events.click"
    with pytest.raises(ConfigError, match="not a safe table name"):
        EVENTS.table_for("a.b")
    limited = Routes(by="key", template="/x/{t}", values=("a",))
    with pytest.raises(ConfigError, match="no table takes it"):
        limited.table_for("b")


def test_extract_reads_what_spark_reads() -> None:
    """The Python reading mirrors Spark's parse_json: the first value, what follows ignored."""
    found = EVENTS.extract(None, b'  {"event_type": "x"} trailing', None, None)
    assert (found.kind, found.value) == (ValueKind.VALUE, "x")
