"""sluice.connection_fields: connection fields to config keys, unknown keys refused."""

from __future__ import annotations

import pytest

from sluice.connection_fields import check_no_secrets, config_from_fields, secret_keys
from sluice.queues import queue_from_config
from sluice.queues.config import ConfigError


def test_the_keys_configure_a_real_queue_without_warnings() -> None:
    config = config_from_fields(
        "mqtt",
        host="broker",
        port=1884,
        username="u",
        password="p",
        extra={"client_id": "c", "options.qos": "1", "options.allow_plaintext_credentials": True},
        topic="plant/#",
    )
    queue = queue_from_config("mqtt", config)  # unknown keys would warn (an error in tests)
    assert queue.config["options.qos"] == 1
    assert queue.config["credential.password"] == "p"


def test_unknown_key_names_where_it_came_from() -> None:
    with pytest.raises(ConfigError, match=r"my resource overrides: unknown config key 'topik'"):
        config_from_fields("kafka", overrides={"topik": "t"}, where="my resource")


def test_unknown_kind() -> None:
    with pytest.raises(ConfigError, match="Unknown queue kind 'amqp'"):
        config_from_fields("amqp")


def test_secrets() -> None:
    assert {"credential.password", "credential.access_key"} <= secret_keys("kafka")
    check_no_secrets({"group_id": "g"}, "task")
    with pytest.raises(ConfigError, match="put it in the connection"):
        check_no_secrets({"credential.password": "p"}, "task")
