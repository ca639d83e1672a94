"""SASL and TLS against the brokers we have, as far as each supports them.

What the brokers can do (checked by the tests here and in test_broker_bugs.py):

- noida-db 0.2.3 speaks SASL/PLAIN on its plaintext port but accepts any user name and
  password; it has neither SCRAM nor TLS.
- Tansu 0.6.0 with ``--authentication`` requires SASL/SCRAM-SHA-512 (no PLAIN), but its users
  live in the storage engine and can only be created by an authenticated client, so with
  in-memory storage no login can succeed. Its TLS flags do not work (test_broker_bugs.py).

So a successful SASL session is tested on noida-db (SASL_PLAINTEXT + PLAIN), a refused one on
Tansu; what neither broker can show (SCRAM success, TLS, SASL_SSL) is covered by the unit tests
of the client configuration in tests/unit/kafka/test_config.py. That TLS settings switch TLS
on shows on noida-db too: its plaintext listener fails the client's TLS handshake.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sluice.kafka import KafkaConnection, KafkaMessageQueue
from sluice.kafka.config import client_config
from sluice.queues import ConfigError, MessageEnvelope, queue_from_uri
from sluice.testing import BrokerProcess, make_certificates
from sluice.testing.topics import create_kafka_topic

PASSWORD = "pw-Secret-4711"


@pytest.fixture
def kafka_debug_logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """Capture kafka-python's DEBUG logs; put its logger's level back afterwards."""
    kafka_logger = logging.getLogger("kafka")
    level = kafka_logger.level
    with caplog.at_level(logging.DEBUG):
        yield caplog
    kafka_logger.setLevel(level)


def test_sasl_plain_session_on_noida_and_no_password_in_debug_logs(
    noida_broker: BrokerProcess, unique_name: str, kafka_debug_logs: pytest.LogCaptureFixture
) -> None:
    create_kafka_topic(noida_broker.bootstrap, unique_name, 1)
    queue = KafkaMessageQueue(unique_name)
    queue.configure(
        {
            "connection.uri": noida_broker.bootstrap,
            "connection.protocol": "sasl_plaintext",
            "credential.username": "svc-sluice",
            "credential.password": PASSWORD,
            "topic": unique_name,
            "from_beginning": True,
            "options.session_timeout": 6000,
            "options.log_level": 4,  # kafka-python at DEBUG logs every request it sends
        }
    )
    queue.open(None)
    try:
        queue.send(None, MessageEnvelope(None, "t", "over sasl"))
        got = queue.receive(None, 15_000)
    finally:
        queue.close(None)

    assert got is not None and got.message == b"over sasl"
    assert "Authenticated as svc-sluice via SASL / Plain" in kafka_debug_logs.text
    assert "SaslAuthenticateRequest" in kafka_debug_logs.text, "the request was not logged at all"
    assert PASSWORD not in kafka_debug_logs.text
    assert PASSWORD not in repr(queue) and PASSWORD not in str(queue)


def test_tansu_refuses_an_unknown_scram_user_clearly(
    tansu_with_authentication: BrokerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    connection = KafkaConnection()
    connection.configure(
        {
            "connection.uri": tansu_with_authentication.bootstrap,
            "credential.username": "nobody",
            "credential.password": PASSWORD,
            "credential.mechanism": "scram-sha-512",
            "options.connect_timeout": 1000,
            "options.request_timeout": 1000,
            "options.max_retries": 2,
            "options.retry_timeout": 100,
        }
    )
    assert connection.client_config()["security_protocol"] == "SASL_PLAINTEXT"
    started = time.monotonic()
    with caplog.at_level(logging.DEBUG), pytest.raises(ConnectionError) as refused:
        connection.open(None)
    elapsed = time.monotonic() - started

    message = str(refused.value)
    assert tansu_with_authentication.bootstrap in message and "after 2 attempt(s)" in message
    assert PASSWORD not in message and PASSWORD not in caplog.text
    assert not connection.is_open()
    assert elapsed < 15, f"two 1 s attempts took {elapsed:.1f} s"


def test_sasl_plain_over_plaintext_with_the_opt_in_key_of_every_transport(
    noida_broker: BrokerProcess, unique_name: str
) -> None:
    """``options.allow_plaintext_credentials`` (the key MQTT takes too) lets SASL/PLAIN go
    over plaintext, as ``connection.protocol`` sasl_plaintext does; without either it is
    refused before connecting, naming the key."""
    create_kafka_topic(noida_broker.bootstrap, unique_name, 1)
    uri = f"kafka://svc-sluice:{PASSWORD}@{noida_broker.bootstrap}/{unique_name}"
    with pytest.raises(ConfigError, match=r"'options\.allow_plaintext_credentials' true"):
        queue_from_uri(uri)
    queue = queue_from_uri(f"{uri}?allow_plaintext_credentials=true&from_beginning=true")
    assert isinstance(queue, KafkaMessageQueue)
    queue.open(None)
    try:
        assert queue._conn().client_config()["security_protocol"] == "SASL_PLAINTEXT"
        queue.send(None, MessageEnvelope(None, "t", "opted in"))
        got = queue.receive(None, 15_000)
    finally:
        queue.close(None)
    assert got is not None and got.message == b"opted in"


@pytest.mark.parametrize(
    "settings", ["ssl_cafile", "ssl_certfile", "ssl_certfile&ssl_keyfile"], ids=str
)
def test_tls_settings_on_a_kafka_uri_never_connect_in_plaintext(
    noida_broker: BrokerProcess, unique_name: str, tmp_path: Path, settings: str
) -> None:
    """``kafka://host/t?ssl_cafile=...`` (or a client certificate) connected to a plaintext
    listener in plaintext, silently. Now TLS settings switch TLS on: noida-db has no TLS, so
    the connection fails, where without them the same URI connects."""
    certificates = make_certificates(tmp_path)
    combined = tmp_path / "client.pem"  # a client certificate and its key in one file
    combined.write_bytes(certificates.cert.read_bytes() + certificates.key.read_bytes())
    files = {"ssl_cafile": certificates.ca, "ssl_certfile": combined}
    if "ssl_keyfile" in settings:
        files.update(ssl_certfile=certificates.cert, ssl_keyfile=certificates.key)
    query = "&".join(f"{name}={files[name]}" for name in settings.split("&"))
    quick = "max_retries=1&connect_timeout=2000&request_timeout=3000&create_topic=false"
    create_kafka_topic(noida_broker.bootstrap, unique_name, 1)
    uri = f"kafka://{noida_broker.bootstrap}/{unique_name}?{quick}"

    plain = queue_from_uri(uri)
    plain.open(None)  # the control: the broker is there, and speaks plaintext
    plain.close(None)

    queue = queue_from_uri(f"{uri}&{query}")
    assert isinstance(queue, KafkaMessageQueue)
    assert client_config(queue.config)["security_protocol"] == "SSL"
    with pytest.raises(ConnectionError) as failed:
        queue.open(None)
    assert noida_broker.bootstrap in str(failed.value), failed.value
    assert not queue.is_open()
