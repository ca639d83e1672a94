"""Every trigger serializes to what rebuilds it, and never carries a secret."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sluice.queues.config import ConfigError
from sluice_airflow.triggers.queue import QueueMessageTrigger
from sluice_airflow.triggers.routed import RoutedMessageTrigger

SETTINGS: list[dict[str, Any]] = [
    {"conn_id": "sluice_kafka_default", "topic": "orders"},
    {
        "conn_id": "mqtt",
        "topic": "plant/+/temp",
        "min_messages": 10,
        "max_messages": 500,
        "poll_interval": 0.5,
        "config": {"client_id": "ingest", "options.qos": 1},
        "rerun_after": 90.0,
    },
]


def _trigger_classes() -> list[type]:
    """Every trigger the provider declares (a new one is covered automatically)."""
    import importlib
    import inspect

    from airflow.triggers.base import BaseTrigger

    from sluice_airflow.get_provider_info import get_provider_info

    found = []
    for entry in get_provider_info()["triggers"]:
        for name in entry["python-modules"]:
            module = importlib.import_module(name)
            for _, cls in inspect.getmembers(module, inspect.isclass):
                if issubclass(cls, BaseTrigger) and cls.__module__ == name:
                    found.append(cls)
    return found


def test_the_provider_declares_its_triggers() -> None:
    assert _trigger_classes() == [QueueMessageTrigger, RoutedMessageTrigger]


ROUTES = {"by": "field:kind", "tables": {"orders": "delta:///lake/orders"}}


@pytest.mark.parametrize("route", ["orders", None])
def test_a_routed_trigger_round_trips(route: str | None) -> None:
    trigger = RoutedMessageTrigger(
        "c", "t", ROUTES, route, max_messages=5, config={"group_id": "g"}, rerun_after=90
    )
    classpath, kwargs = trigger.serialize()
    assert classpath == "sluice_airflow.triggers.routed.RoutedMessageTrigger"
    json.dumps(kwargs)
    assert RoutedMessageTrigger(**kwargs).serialize() == (classpath, kwargs)
    assert trigger.place == ("delta:///lake/orders" if route else "(no route)")


def test_a_routed_trigger_refuses_a_route_without_a_table_and_a_secret() -> None:
    with pytest.raises(ConfigError, match="route 'refunds': no table takes it"):
        RoutedMessageTrigger("c", "t", ROUTES, "refunds")
    with pytest.raises(ConfigError, match=r"'credential\.password' is a secret"):
        RoutedMessageTrigger("c", "t", ROUTES, "orders", config={"credential.password": "pw"})
    with pytest.raises(ConfigError, match="routes needs 'by'"):
        RoutedMessageTrigger("c", "t", {"tables": {}}, "orders")


@pytest.mark.parametrize("kwargs", SETTINGS)
def test_serialize_round_trips(kwargs: dict[str, Any]) -> None:
    trigger = QueueMessageTrigger(**kwargs)
    classpath, serialized = trigger.serialize()
    assert classpath == "sluice_airflow.triggers.queue.QueueMessageTrigger"
    json.dumps(serialized)  # the triggerer stores it as JSON
    again = QueueMessageTrigger(**serialized)
    assert again.serialize() == (classpath, serialized)
    assert {k: serialized[k] for k in kwargs} == kwargs


def test_event_trigger_hash_is_stable() -> None:
    """AssetWatcher identifies a trigger by this hash: equal settings, equal hash."""
    a = QueueMessageTrigger(**SETTINGS[1]).serialize()
    b = QueueMessageTrigger(**SETTINGS[1]).serialize()
    assert QueueMessageTrigger.hash(*a) == QueueMessageTrigger.hash(*b)


@pytest.mark.parametrize("key", ["credential.password", "credential.access_key", "ssl_password"])
def test_a_secret_in_config_is_refused(key: str) -> None:
    with pytest.raises(ConfigError, match=f"'{key}' is a secret"):
        QueueMessageTrigger("c", "t", config={key: "pw"})


def test_serialization_holds_the_connection_id_not_its_password(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_SLUICE_SECRET",
        json.dumps({"conn_type": "sluice_kafka", "host": "h", "password": "pw-never-seen"}),
    )
    trigger = QueueMessageTrigger("sluice_secret", "t")
    assert "pw-never-seen" not in json.dumps(trigger.serialize())
    assert "pw-never-seen" not in repr(trigger)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"min_messages": 0}, "min_messages must be at least 1"),
        ({"min_messages": 5, "max_messages": 2}, "max_messages"),
        ({"rerun_after": 0}, "rerun_after must be a positive number of seconds"),
    ],
)
def test_bad_sizes_are_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        QueueMessageTrigger("c", "t", **kwargs)


def test_an_idle_trigger_logs_its_waiting_line_when_it_changes_not_on_every_look(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """500 idle watchers in one triggerer each looking every STATUS_EVERY seconds: the same
    line logged at each look was most of the triggerer's idle CPU (bench/trigger_latency.py)."""
    from structlog.testing import capture_logs

    from sluice_airflow.triggers import queue

    clock = [1000.0]
    monkeypatch.setattr(queue.time, "monotonic", lambda: clock[0])
    trigger = QueueMessageTrigger(conn_id="sluice_kafka_default", topic="orders")
    said: list[str] = []

    def look(status: str, after: float) -> None:
        clock[0] += after
        with capture_logs() as logged:  # Airflow 3 logs through structlog
            trigger._log_status(status)
        said.extend(
            str(entry["event"]) % tuple(entry.get("positional_args", ())) for entry in logged
        )

    look("waiting: 0 of 1 messages on orders", 0)
    for _ in range(10):
        look("waiting: 0 of 1 messages on orders", queue.STATUS_EVERY)
    assert said == ["waiting: 0 of 1 messages on orders"]
    look("waiting: 2 of 5 messages on orders", queue.STATUS_EVERY)
    assert said[-1] == "waiting: 2 of 5 messages on orders"
    look("waiting: 2 of 5 messages on orders", queue.STATUS_REPEAT)
    assert said[-2:] == ["waiting: 2 of 5 messages on orders"] * 2
    assert len(said) == 3
