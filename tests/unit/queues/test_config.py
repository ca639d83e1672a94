from __future__ import annotations

import pytest
from pip_services3_commons.config import ConfigParams

from sluice.queues import ConfigError, ConfigKey, UnknownConfigKeyWarning
from sluice.queues.config import read_config
from sluice.secrets import redact_config

KEYS = (
    ConfigKey("topic", str, None, "Topic."),
    ConfigKey("from_beginning", bool, False, "Start at the beginning."),
    ConfigKey("options.qos", int, 0, "QoS.", choices=(0, 1, 2)),
    ConfigKey("options.ratio", float, 0.5, "A ratio."),
)


def test_defaults_apply_and_strings_convert() -> None:
    values = read_config({"topic": "t", "from_beginning": "true", "options.qos": "2"}, KEYS, "Q")
    assert values["topic"] == "t"
    assert values["from_beginning"] is True
    assert values["options.qos"] == 2
    assert values["options.ratio"] == 0.5
    assert values["connection.host"] is None


def test_config_params_and_numbered_sections_are_accepted() -> None:
    params = ConfigParams.from_tuples("connections.0.host", "h1", "connection.port", 9092)
    values = read_config(params, KEYS, "Q")
    assert values["connection.host"] == "h1"
    assert values["connection.port"] == 9092


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("from_beginning", "maybe", "bool"),
        ("options.qos", "high", "int"),
        ("connection.port", "x", "int"),
    ],
)
def test_wrong_type_names_the_key_and_the_type(key: str, value: str, expected: str) -> None:
    with pytest.raises(ConfigError) as error:
        read_config({key: value}, KEYS, "MyQueue")
    assert f"'{key}'" in str(error.value)
    assert expected in str(error.value)
    assert "MyQueue" in str(error.value)


def test_value_outside_choices_is_an_error() -> None:
    with pytest.raises(ConfigError, match=r"options\.qos.*one of 0, 1, 2"):
        read_config({"options.qos": 3}, KEYS, "Q")


def test_unknown_key_warns_with_did_you_mean() -> None:
    with pytest.warns(
        UnknownConfigKeyWarning, match="'form_beginning'.*Did you mean 'from_beginning'"
    ):
        read_config({"form_beginning": True}, KEYS, "Q")


def test_unknown_key_far_from_any_known_key_has_no_guess() -> None:
    with pytest.warns(UnknownConfigKeyWarning) as record:
        read_config({"zzz": 1}, KEYS, "Q")
    assert "Did you mean" not in str(record[0].message)


def test_secret_values_never_appear_in_errors_or_redacted_config() -> None:
    secret_key = (ConfigKey("options.token", int, None, "A secret number.", secret=True),)
    with pytest.raises(ConfigError) as error:
        read_config({"options.token": "hunter2"}, secret_key, "Q")
    assert "hunter2" not in str(error.value)
    shown = redact_config({"credential.password": "hunter2", "topic": "t"})
    assert shown == {"credential.password": "***", "topic": "t"}
