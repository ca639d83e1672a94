"""An Airflow Connection as Sluice config keys (no broker needed)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from airflow.sdk import Connection

from sluice.queues.config import ConfigError
from sluice.secrets import redact_text
from sluice_airflow.hooks.queue import config_from_connection, queue_kind


def conn(conn_type: str = "sluice_kafka", extra: dict[str, Any] | None = None, **fields: Any):
    return Connection(
        conn_id="sluice_test", conn_type=conn_type, extra=json.dumps(extra or {}), **fields
    )


def test_fields_and_extra_become_config_keys() -> None:
    c = conn(
        host="broker",
        port=9093,
        login="alice",
        password="s3cret",
        extra={"group_id": "g", "options.session_timeout": 6000, "credential.mechanism": "plain"},
    )
    assert config_from_connection(c, "orders", {"from_beginning": True}) == {
        "connection.host": "broker",
        "connection.port": 9093,
        "credential.username": "alice",
        "credential.password": "s3cret",
        "group_id": "g",
        "options.session_timeout": 6000,
        "credential.mechanism": "plain",
        "from_beginning": True,
        "topic": "orders",
    }


@pytest.mark.parametrize("host", ["h1:9092,h2:9092", "kafka://h1:9092"])
def test_server_lists_and_uris_become_connection_uri(host: str) -> None:
    config = config_from_connection(conn(host=host))
    assert config == {"connection.uri": host}


def test_overrides_win_and_form_prefixes_and_empty_fields_are_dropped() -> None:
    c = conn(
        "sluice_mqtt",
        host="m",
        extra={"extra__sluice_mqtt__client_id": "a", "options.qos": 0, "options.retain": ""},
    )
    config = config_from_connection(c, "t/#", {"options.qos": 1})
    assert config == {"connection.host": "m", "client_id": "a", "options.qos": 1, "topic": "t/#"}


def test_unknown_extra_key_is_an_error_naming_it() -> None:
    with pytest.raises(ConfigError) as info:
        config_from_connection(conn(extra={"grup_id": "g"}))
    message = str(info.value)
    assert "'grup_id'" in message
    assert "Did you mean 'group_id'" in message
    assert "sluice_test" in message


def test_a_key_of_the_other_broker_is_unknown() -> None:
    with pytest.raises(ConfigError, match=r"'options\.qos'"):
        config_from_connection(conn("sluice_kafka", extra={"options.qos": 1}))


def test_wrong_connection_type_says_which_to_use() -> None:
    with pytest.raises(ValueError, match="sluice_kafka"):
        queue_kind(conn("kafka"))


def test_redact_text_removes_the_connection_passwords() -> None:
    config = config_from_connection(conn(password="pw-123", login="u"))
    assert redact_text("refused pw-123 for u", config) == "refused *** for u"


def test_a_login_on_a_plaintext_kafka_connection_is_refused_before_connecting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """SASL/PLAIN over plaintext would send the password unencrypted: the hook says how to
    fix the connection (TLS, or connection.protocol sasl_plaintext in its extra)."""
    from sluice_airflow.hooks.queue import QueueHook

    plain = {"conn_type": "sluice_kafka", "host": "127.0.0.1", "port": 9, "login": "svc"}
    monkeypatch.setenv(
        "AIRFLOW_CONN_SLUICE_PLAIN", json.dumps({**plain, "password": "pw-hook-plain-3"})
    )
    hook = QueueHook("sluice_plain")
    ok, message = hook.test_connection()
    assert not ok
    assert "password unencrypted" in message and "sasl_plaintext" in message
    assert "pw-hook-plain-3" not in message
    with pytest.raises(ConfigError, match="password unencrypted"):
        hook.get_conn()
    explicit = {**plain, "password": "pw", "extra": {"connection.protocol": "sasl_plaintext"}}
    monkeypatch.setenv("AIRFLOW_CONN_SLUICE_EXPLICIT", json.dumps(explicit))
    queue = QueueHook("sluice_explicit").get_conn()
    assert queue.config["connection.protocol"] == "sasl_plaintext"
