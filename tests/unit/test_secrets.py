"""sluice.secrets: the one redaction (by key name, inside URIs, known values, log records)."""

from __future__ import annotations

import json
import logging
import secrets as stdlib_secrets

import pytest
from pip_services3_commons.config import ConfigParams

from sluice.queues import ConfigError, ConfigKey, queue_from_uri
from sluice.queues.config import read_config
from sluice.secrets import (
    LOG_FILTER,
    install_log_filter,
    is_secret_key,
    redact_config,
    redact_exception,
    redact_text,
    redact_uri,
    redacted_errors,
    remember,
    remember_config,
    secrets_in_config,
)


def fresh(prefix: str = "pw") -> str:
    """A password no other test has registered."""
    return f"{prefix}-{stdlib_secrets.token_hex(6)}"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "kafka://user:s3cr3t-pw@h1:9092,h2:9092/topic",
            "kafka://user:***@h1:9092,h2:9092/topic",
        ),
        ("mqtt://u:p@host:1883/x", "mqtt://u:***@host:1883/x"),
        ("kafka+ssl://svc:p%40ss@h:9093", "kafka+ssl://svc:***@h:9093"),
        ("redis://:only-pw@h", "redis://:***@h"),
        # an unencoded '@' in the password: the authority ends at the last one, as urlsplit says
        ("kafka://u:p@ss@h:9092/t", "kafka://u:***@h:9092/t"),
        (
            "Cannot connect to 'mqtt://u:hunter22@h:1883/a' (refused); mail ops@example.com",
            "Cannot connect to 'mqtt://u:***@h:1883/a' (refused); mail ops@example.com",
        ),
        (
            "{'connection.uri': 'kafka://a:bb@h:1,i:2'}, then kafka://c:dd@j:3",
            "{'connection.uri': 'kafka://a:***@h:1,i:2'}, then kafka://c:***@j:3",
        ),
        (
            "kafka://h:9092/t?credential.password=x%24y&qos=1",
            "kafka://h:9092/t?credential.password=***&qos=1",
        ),
        ("kafka://user@h:9092/t", "kafka://user@h:9092/t"),  # a user name alone is no secret
        ("no uri here: a@b c:d", "no uri here: a@b c:d"),
    ],
)
def test_uri_passwords_are_masked_anywhere_in_a_text(text: str, expected: str) -> None:
    assert redact_text(text) == expected


def test_schemeless_server_lists_are_masked_as_uris() -> None:
    assert redact_uri("user:pw-x@h1:9092,h2:9092") == "user:***@h1:9092,h2:9092"
    assert redact_uri("kafka://user:pw-x@h1:9092/t") == "kafka://user:***@h1:9092/t"
    assert redact_uri("h1:9092,h2:9092") == "h1:9092,h2:9092"


def test_config_values_are_masked_by_key_name_and_inside_uris() -> None:
    password = fresh()
    config = {
        "credential.password": password,
        "credential.access_key": "AKIA-key",
        "credentials.1.password": "numbered",
        "options.token": "tok",
        "connection.uri": "user:pw-in-uri@h1:9092,h2:9092",
        "options.note": "see kafka://u:another-pw@h:1/t",
        "topic": "orders",
        "connection.port": 9092,
        "credential.username": "user",
    }
    shown = redact_config(config)
    assert shown == {
        "credential.password": "***",
        "credential.access_key": "***",
        "credentials.1.password": "***",
        "options.token": "***",
        "connection.uri": "user:***@h1:9092,h2:9092",
        "options.note": "see kafka://u:***@h:1/t",
        "topic": "orders",
        "connection.port": 9092,
        "credential.username": "user",
    }
    assert config["credential.password"] == password  # a copy
    params = ConfigParams.from_tuples("credential.password", password, "topic", "t")
    assert redact_config(params) == {"credential.password": "***", "topic": "t"}
    marked = (ConfigKey("options.pin", int, None, "A secret number.", secret=True),)
    assert redact_config({"options.pin": 1234}, marked) == {"options.pin": "***"}


def test_secrets_in_config_finds_key_values_and_uri_passwords() -> None:
    found = secrets_in_config(
        {"credential.password": "a-pass", "connection.uri": "u:p%2Fq@h1:1,h2:2", "x": 1}
    )
    assert found == {"a-pass", "p%2Fq", "p/q"}


def test_secrets_in_config_reads_nested_mappings_and_extra_secret_names() -> None:
    """A pyiceberg catalog's properties may nest (.pyiceberg.yaml), and name secrets with
    words of their own (``credential``, ``adls.account-key``)."""
    found = secrets_in_config(
        {
            "s3": {"secret-access-key": "s3-secret-1", "endpoint": "http://minio:9000"},
            "credential": "client:client-secret-2",
            "adls.account-key": "account-key-3",
            "type": "rest",
        },
        ("credential", "adls.account-key"),
    )
    assert found == {"s3-secret-1", "client:client-secret-2", "account-key-3"}


def test_a_password_with_an_unencoded_at_sign_is_hidden_in_pieces_too() -> None:
    """SQLAlchemy ends the password of ``postgresql://u:p4ss@w0rd-9@h/db`` at its first '@'
    and names the rest as the host in its error ('could not translate host name
    "w0rd-9@h"'): each piece is a secret."""
    password = f"{fresh('p4ss')}@{fresh('w0rd')}"
    uri = f"postgresql+psycopg2://postgres:{password}@127.0.0.1:5432/test"
    assert password.split("@")[1] in secrets_in_config({"uri": uri})
    remember_config({"uri": uri})
    tail = password.split("@")[1]
    leaked = f'could not translate host name "{tail}@127.0.0.1" to address'
    assert redact_text(leaked) == 'could not translate host name "***@127.0.0.1" to address'
    assert redact_text(uri) == "postgresql+psycopg2://postgres:***@127.0.0.1:5432/test"


def test_known_secrets_are_masked_in_every_form() -> None:
    password = fresh("pä$s/wörd")
    remember_config({"credential.password": password})
    texts = [
        f"auth failed for {password}",
        f"b'u\\x00u\\x00{password.encode()!r}'",
        f"?credential.password={password.replace('/', '%2F')}",
        json.dumps({"credential.password": password}),
    ]
    for text in texts:
        assert password.split("-")[1] not in redact_text(text), text
    assert "***" in redact_text(texts[0])


def test_short_secrets_are_not_hunted_in_free_text() -> None:
    remember("pw")  # would turn "password" into "***ssword" everywhere
    assert redact_text("the pw field") == "the pw field"
    assert redact_config({"credential.password": "pw"}) == {"credential.password": "***"}
    assert redact_text("kafka://u:pw@h") == "kafka://u:***@h"


def test_redact_text_remembers_the_secrets_of_a_config() -> None:
    password = fresh()
    assert redact_text(f"refused {password}", {"credential.password": password}) == "refused ***"
    assert redact_text(f"later: {password}") == "later: ***"  # one registry


def test_is_secret_key() -> None:
    assert is_secret_key("credential.password") and is_secret_key("credentials.0.password")
    assert is_secret_key("credential.access_key") and is_secret_key("spark.s3a.secret.key")
    assert is_secret_key("options.pin", {"options.pin"})
    assert not is_secret_key("credential.username") and not is_secret_key("credential.access_id")
    assert not is_secret_key("connection.uri") and not is_secret_key("options.ssl_keyfile")


def test_redacted_errors_keep_the_type_and_drop_a_cause_that_holds_the_secret() -> None:
    password = fresh()
    uri = f"kafka://u:{password}@h:9092/t"
    with pytest.raises(ConnectionError) as caught, redacted_errors():
        raise ConnectionError(f"cannot reach {uri}")
    assert password not in str(caught.value) and "kafka://u:***@h:9092/t" in str(caught.value)
    assert caught.value.__cause__ is None and caught.value.__suppress_context__

    with pytest.raises(ValueError) as chained, redacted_errors():
        try:
            raise KeyError(uri)
        except KeyError as inner:
            raise ValueError("wrapped") from inner
    assert chained.value.__cause__ is None

    with pytest.raises(TypeError) as clean, redacted_errors():
        try:
            raise KeyError("nothing secret")
        except KeyError as inner:
            raise TypeError("plain") from inner
    assert isinstance(clean.value.__cause__, KeyError)  # nothing to hide: left alone


def test_redact_exception_falls_back_to_runtime_error_for_odd_types() -> None:
    class Odd(Exception):
        def __init__(self, text: str) -> None:
            super().__init__(f"odd {text}")

    error = redact_exception(Odd("mqtt://u:odd-pw@h"))
    assert type(error) is RuntimeError and str(error) == "Odd: odd mqtt://u:***@h"
    kept = redact_exception(OSError(5, "mqtt://u:odd-pw@h"))
    assert type(kept) is OSError and str(kept) == "[Errno 5] mqtt://u:***@h"
    plain = ValueError("fine")
    assert redact_exception(plain) is plain


def test_the_log_filter_masks_messages_arguments_and_tracebacks(
    caplog: pytest.LogCaptureFixture,
) -> None:
    password = fresh()
    remember(password)
    install_log_filter("sluice.test_secrets")
    child = logging.getLogger("sluice.test_secrets.child")
    install_log_filter("sluice.test_secrets")  # the child, created since, gets it too
    assert LOG_FILTER in child.filters
    with caplog.at_level(logging.DEBUG, logger="sluice.test_secrets"):
        child.info("connecting to %s", "kafka://u:uri-pw@h/t")
        child.debug("sending %r", password.encode())
        try:
            raise RuntimeError(f"boom {password}")
        except RuntimeError:
            child.exception("failed")
        child.info("nothing secret: %d", 42)
    text = caplog.text
    assert password not in text and "uri-pw" not in text
    assert "kafka://u:***@h/t" in text and "failed" in text and "boom ***" in text
    assert "nothing secret: 42" in text


def test_config_errors_never_show_a_uri_password() -> None:
    keys = (ConfigKey("options.qos", int, 0, "QoS.", choices=(0, 1)),)
    with pytest.raises(ConfigError) as error:
        read_config({"options.qos": "kafka://u:in-a-value@h"}, keys, "Q")
    assert "in-a-value" not in str(error.value) and "options.qos" in str(error.value)


def test_a_bad_queue_uri_is_reported_without_its_password() -> None:
    with pytest.raises(ValueError, match="invalid port") as error:
        queue_from_uri("kafka://user:port-pw@h:90x2/t")
    assert "port-pw" not in str(error.value)
    with pytest.raises(ValueError, match="no scheme") as missing:
        queue_from_uri("//user:scheme-pw@h:9092/t")
    assert "scheme-pw" not in str(missing.value)


def test_a_multi_host_uri_keeps_its_servers_and_credentials() -> None:
    queue = queue_from_uri("kafka+ssl://user:multi-pw@h1:9092,h2:9093/orders")
    assert queue.config["connection.uri"] == "kafka+ssl://user:multi-pw@h1:9092,h2:9093"
    assert queue.config["credential.password"] == "multi-pw" and queue.topic == "orders"
    assert "multi-pw" not in repr(redact_config(queue.config))
