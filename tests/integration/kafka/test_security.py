"""SASL and TLS on real Apache Kafka, through Sluice's own API.

One Apache Kafka JVM for the module (``secure_kafka_broker``, :class:`sluice.brokers.KafkaSecurity`)
listens with SASL_PLAINTEXT (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), SSL, SASL_SSL and
CLIENT_CERT (TLS that requires a client certificate) beside PLAINTEXT. The tests here show:

- each SASL mechanism logs in, publishes and receives, with ``credential.*`` keys and with a
  ``kafka+ssl://user:password@...`` URI; with kafka-python at DEBUG the password is in no log
  line, exception or ``repr`` (nor in the broker's log or command line);
- a wrong password or an unknown user fails within the configured attempts with an error that
  names the mechanism, the user and the broker's reason, never the password;
- TLS verifies the broker's certificate against ``options.ssl_cafile`` (another CA fails
  clearly), and a broker that requires a client certificate admits one and refuses a client
  without one, saying which keys to set;
- both batch readers (kafka-python and confluent-kafka) read a range over SASL_SSL, a Spark
  ingest reads on the executors and commits over SASL_SSL, and a refused login of the
  kafka-python reader is explained as a queue's is;
- TLS settings on a ``kafka://`` URI never connect in plaintext, and SASL/PLAIN over plaintext
  needs ``options.allow_plaintext_credentials`` or ``connection.protocol`` sasl_plaintext.

The Airflow hook's ``test_connection`` on the SASL_SSL listener is in
tests/integration/airflow/test_hook.py. noida-db (SASL/PLAIN with any password, no TLS) and
Tansu (SCRAM-SHA-512 users that no login can create) are no longer needed to show any of this;
Tansu's refused login still shows the confluent reader failing at once
(test_confluent_reader.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from sluice.batch import BatchSpec, OffsetRange
from sluice.brokers import ServerCertificates
from sluice.kafka import KafkaConnection, KafkaMessageQueue
from sluice.kafka.config import client_config
from sluice.queues import ConfigError, MessageEnvelope, queue_from_config, queue_from_uri
from sluice.spark import ingest
from sluice.spark.kafka_source import read_ranges, reader_kwargs
from sluice.testing import BrokerProcess, make_certificates
from sluice.testing.topics import create_kafka_topic

USER = "sluice"
MECHANISMS = ["plain", "scram-sha-256", "scram-sha-512"]
#: a failing connection gives up after two attempts of one second each
QUICK = {
    "options.max_retries": 2,
    "options.connect_timeout": 1000,
    "options.request_timeout": 3000,
    "options.retry_timeout": 100,
}


@pytest.fixture
def kafka_debug_logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """Capture kafka-python's DEBUG logs; put its logger's level back afterwards."""
    kafka_logger = logging.getLogger("kafka")
    level = kafka_logger.level
    with caplog.at_level(logging.DEBUG):
        yield caplog
    kafka_logger.setLevel(level)


def password_of(broker: BrokerProcess) -> str:
    return broker.users[USER]


def certificates_of(broker: BrokerProcess) -> ServerCertificates:
    assert broker.security is not None and broker.security.certificates is not None
    return broker.security.certificates


def sasl(broker: BrokerProcess, mechanism: str, password: str | None = None) -> dict[str, Any]:
    """Config keys of a SASL_PLAINTEXT login of ``mechanism`` (the user's own password unless
    ``password`` is given)."""
    return {
        "connection.uri": broker.listeners["SASL_PLAINTEXT"],
        "connection.protocol": "sasl_plaintext",
        "credential.username": USER,
        "credential.password": password or password_of(broker),
        "credential.mechanism": mechanism,
    }


def round_trip(broker: BrokerProcess, topic: str, config: dict[str, Any], text: str) -> Any:
    """Publish ``text`` to ``topic`` through a queue configured by ``config`` and receive it;
    the queue (closed) and what it received."""
    create_kafka_topic(broker.bootstrap, topic, 1)  # on the PLAINTEXT listener
    queue = KafkaMessageQueue(topic)
    queue.configure({"topic": topic, "from_beginning": True, **config})
    queue.open(None)
    try:
        queue.send(None, MessageEnvelope(None, "t", text))
        got = queue.receive(None, 15_000)
    finally:
        queue.close(None)
    assert got is not None, f"nothing received over {config.get('connection.protocol')}"
    return queue, got.message


def refused(config: dict[str, Any]) -> str:
    """The message of the ConnectionError that opening a connection with ``config`` raises
    (two attempts of a second each: well under 15 s, not a hang)."""
    connection = KafkaConnection()
    connection.configure({**QUICK, **config})
    started = time.monotonic()
    with pytest.raises(ConnectionError) as failed:
        connection.open(None)
    elapsed = time.monotonic() - started
    assert not connection.is_open()
    assert elapsed < 15, f"two 1 s attempts took {elapsed:.1f} s"
    return str(failed.value)


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_each_sasl_mechanism_publishes_and_receives_and_logs_no_password(
    secure_kafka_broker: BrokerProcess,
    unique_name: str,
    kafka_debug_logs: pytest.LogCaptureFixture,
    mechanism: str,
) -> None:
    broker, password = secure_kafka_broker, password_of(secure_kafka_broker)
    config = {**sasl(broker, mechanism), "options.log_level": 4}  # DEBUG: every request
    queue, got = round_trip(broker, unique_name, config, f"over {mechanism}")

    assert got == f"over {mechanism}".encode()
    assert client_config(queue.config)["security_protocol"] == "SASL_PLAINTEXT"
    logs = kafka_debug_logs.text
    assert f"SaslHandshakeRequest(version=1, mechanism='{mechanism.upper()}')" in logs
    assert "SaslAuthenticateRequest" in logs, "the login was not logged at all"
    assert password not in logs
    assert password not in repr(queue) and password not in str(queue)
    # the broker's side: the password is in no command line and no log of the broker
    assert not any(password in argument for argument in broker.argv)
    assert password not in broker.log_path.read_text(errors="replace")
    assert password not in (broker.workdir / "format.log").read_text(errors="replace")
    assert not (broker.workdir / "format.args").exists()


@pytest.mark.parametrize(
    ("mechanism", "who"),
    [(m, "wrong password") for m in MECHANISMS] + [("scram-sha-512", "unknown user")],
    ids=str,
)
def test_a_refused_login_names_mechanism_user_and_reason_never_the_password(
    secure_kafka_broker: BrokerProcess, caplog: pytest.LogCaptureFixture, mechanism: str, who: str
) -> None:
    broker, password = secure_kafka_broker, password_of(secure_kafka_broker)
    wrong = f"{password}-wrong"
    config = sasl(broker, mechanism, wrong)
    if who == "unknown user":
        config.update({"credential.username": "nobody", "credential.password": password})
    with caplog.at_level(logging.DEBUG):
        message = refused(config)

    user = config["credential.username"]
    assert f"The broker refused the SASL {mechanism.upper()} login of user '{user}'" in message
    assert "Authentication failed" in message, "the broker's reason is missing"
    assert "credential.password" in message and "after 2 attempt(s)" in message
    assert broker.listeners["SASL_PLAINTEXT"] in message
    for secret in (password, wrong):
        assert secret not in message and secret not in caplog.text


def test_a_kafka_ssl_uri_with_user_info_logs_in_over_sasl_ssl(
    secure_kafka_broker: BrokerProcess, unique_name: str
) -> None:
    broker, ca = secure_kafka_broker, certificates_of(secure_kafka_broker).ca
    uri = (
        f"kafka+ssl://{USER}:{password_of(broker)}@{broker.listeners['SASL_SSL']}/{unique_name}"
        f"?credential.mechanism=scram-sha-512&ssl_cafile={ca}&from_beginning=true"
    )
    queue = queue_from_uri(uri)
    assert isinstance(queue, KafkaMessageQueue)
    kwargs = client_config(queue.config)
    assert (kwargs["security_protocol"], kwargs["sasl_mechanism"]) == ("SASL_SSL", "SCRAM-SHA-512")
    create_kafka_topic(broker.bootstrap, unique_name, 1)
    queue.open(None)
    try:
        queue.send(None, MessageEnvelope(None, "t", "over sasl_ssl"))
        got = queue.receive(None, 15_000)
    finally:
        queue.close(None)
    assert got is not None and got.message == b"over sasl_ssl"
    assert password_of(broker) not in repr(queue)


def test_tls_verifies_the_broker_against_the_configured_ca(
    secure_kafka_broker: BrokerProcess, unique_name: str, tmp_path: Path
) -> None:
    broker, ca = secure_kafka_broker, certificates_of(secure_kafka_broker).ca
    tls = {"connection.uri": broker.listeners["SSL"], "connection.protocol": "ssl"}
    _, got = round_trip(broker, unique_name, {**tls, "options.ssl_cafile": str(ca)}, "over tls")
    assert got == b"over tls"

    other_ca = make_certificates(tmp_path / "other").ca
    message = refused({**tls, "options.ssl_cafile": str(other_ca)})
    assert "TLS: the broker's certificate did not verify" in message
    assert "CERTIFICATE_VERIFY_FAILED" in message and "options.ssl_cafile" in message


def test_a_broker_that_requires_a_client_certificate_admits_one_and_refuses_none(
    secure_kafka_broker: BrokerProcess, unique_name: str
) -> None:
    broker, certificates = secure_kafka_broker, certificates_of(secure_kafka_broker)
    tls = {
        "connection.uri": broker.listeners["CLIENT_CERT"],
        "options.ssl_cafile": str(certificates.ca),
    }
    # the server's certificate serves as the client's: the CA the broker trusts signed it
    client = {
        "options.ssl_certfile": str(certificates.cert),
        "options.ssl_keyfile": str(certificates.key),
    }
    _, got = round_trip(broker, unique_name, {**tls, **client}, "with a client certificate")
    assert got == b"with a client certificate"

    message = refused(tls)
    assert "TLS: the broker refused the connection for want of a client certificate" in message
    assert "options.ssl_certfile and options.ssl_keyfile" in message


@pytest.mark.parametrize("reader", ["kafka-python", "confluent"])
def test_both_batch_readers_read_a_range_over_sasl_ssl(
    secure_kafka_broker: BrokerProcess,
    unique_name: str,
    reader: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An ingest reads its batch with the same connection keys as the queue: a secure cluster
    works with either reader (the confluent one translates SASL and TLS to librdkafka)."""
    broker, password = secure_kafka_broker, password_of(secure_kafka_broker)
    create_kafka_topic(broker.bootstrap, unique_name, 1)
    config = {
        "connection.uri": broker.listeners["SASL_SSL"],
        "connection.protocol": "sasl_ssl",
        "credential.username": USER,
        "credential.password": password,
        "credential.mechanism": "scram-sha-256",
        "options.ssl_cafile": str(certificates_of(broker).ca),
        "options.reader": reader,
        "topic": unique_name,
        "from_beginning": True,  # open() need not find where the new topic ends
    }
    queue = queue_from_config("kafka", config)
    queue.open(None)
    try:
        for i in range(5):
            queue.send(None, MessageEnvelope(None, "t", f"m{i}"))
    finally:
        queue.close(None)

    kwargs = reader_kwargs(queue.config)
    with caplog.at_level(logging.DEBUG):
        batches = list(read_ranges(kwargs, unique_name, [OffsetRange(0, 1, 4)], 100, 20))
    rows = [row for batch in batches for row in batch.to_pylist()]
    assert [(r["offset"], r["value"]) for r in rows] == [(1, b"m1"), (2, b"m2"), (3, b"m3")]
    assert password not in caplog.text and password not in repr(kwargs)


def test_a_spark_ingest_reads_and_commits_over_sasl_ssl_on_the_executors(
    spark: Any, secure_kafka_broker: BrokerProcess, unique_name: str, tmp_path: Path
) -> None:
    """The whole ingest on the secure listener: Spark tasks read with the confluent reader
    (the password travels pickled in the task, as the reader's arguments), and the offsets
    are committed over SASL_SSL afterwards."""
    broker = secure_kafka_broker
    source = {
        **sasl(broker, "scram-sha-512"),
        "connection.uri": broker.listeners["SASL_SSL"],
        "connection.protocol": "sasl_ssl",
        "options.ssl_cafile": str(certificates_of(broker).ca),
        "options.reader": "confluent",
    }
    queue = queue_from_config("kafka", {**source, "topic": unique_name, "from_beginning": True})
    create_kafka_topic(broker.bootstrap, unique_name, 1)
    queue.open(None)
    try:
        for i in range(20):
            queue.send(None, MessageEnvelope(None, "t", f'{{"n": {i}}}'))
    finally:
        queue.close(None)
    group = f"{unique_name}-ingest"
    spec = BatchSpec("kafka", unique_name, group_id=group, ranges=[OffsetRange(0, 0, 20)])

    result = ingest(spark, spec, tmp_path / "sink", source=source, mode="executors")

    assert result.mode == "executors"
    table = pq.read_table(tmp_path / "sink")
    assert sorted(table.column("offset").to_pylist()) == list(range(20)), table.schema
    connection = KafkaConnection()
    connection.configure({k: v for k, v in source.items() if k != "options.reader"})
    connection.open(None)
    try:
        committed, _, _ = connection.group_offsets(unique_name, group)
    finally:
        connection.close(None)
    assert committed == {0: 20}


def test_the_kafka_python_reader_says_whose_login_was_refused(
    secure_kafka_broker: BrokerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    """As a queue's open() does (the confluent reader: test_confluent_reader.py)."""
    broker, wrong = secure_kafka_broker, f"{password_of(secure_kafka_broker)}-wrong"
    config = {**sasl(broker, "scram-sha-256", wrong), **QUICK, "options.reader": "kafka-python"}
    kwargs = reader_kwargs(queue_from_config("kafka", {**config, "topic": "orders"}).config)
    with (
        caplog.at_level(logging.DEBUG),
        pytest.raises(ConnectionError, match=r"^Reading topic 'orders': cannot connect") as failed,
    ):
        list(read_ranges(kwargs, "orders", [OffsetRange(0, 0, 1)], 100, 20))
    message = str(failed.value)
    assert f"The broker refused the SASL SCRAM-SHA-256 login of user '{USER}'" in message
    assert wrong not in message and wrong not in caplog.text


def test_sasl_plain_over_plaintext_with_the_opt_in_key_of_every_transport(
    secure_kafka_broker: BrokerProcess, unique_name: str
) -> None:
    """``options.allow_plaintext_credentials`` (the key MQTT takes too) lets SASL/PLAIN go
    over plaintext, as ``connection.protocol`` sasl_plaintext does; without either it is
    refused before connecting, naming the key."""
    broker = secure_kafka_broker
    create_kafka_topic(broker.bootstrap, unique_name, 1)
    address = broker.listeners["SASL_PLAINTEXT"]
    uri = f"kafka://{USER}:{password_of(broker)}@{address}/{unique_name}"
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
    secure_kafka_broker: BrokerProcess, unique_name: str, tmp_path: Path, settings: str
) -> None:
    """``kafka://host/t?ssl_cafile=...`` (or a client certificate) connected to a plaintext
    listener in plaintext, silently. Now TLS settings switch TLS on: the PLAINTEXT listener
    fails the TLS handshake, where without them the same URI connects, and the error says so,
    naming the setting that switched TLS on (it read "Unable to bootstrap ... Check
    connection.host and connection.port ... and that the broker is running")."""
    broker, certificates = secure_kafka_broker, certificates_of(secure_kafka_broker)
    combined = tmp_path / "client.pem"  # a client certificate and its key in one file
    combined.write_bytes(certificates.cert.read_bytes() + certificates.key.read_bytes())
    files = {"ssl_cafile": certificates.ca, "ssl_certfile": combined}
    if "ssl_keyfile" in settings:
        files.update(ssl_certfile=certificates.cert, ssl_keyfile=certificates.key)
    query = "&".join(f"{name}={files[name]}" for name in settings.split("&"))
    quick = "max_retries=1&connect_timeout=2000&request_timeout=3000&create_topic=false"
    create_kafka_topic(broker.bootstrap, unique_name, 1)
    uri = f"kafka://{broker.listeners['PLAINTEXT']}/{unique_name}?{quick}"

    plain = queue_from_uri(uri)
    plain.open(None)  # the control: the listener is there, and speaks plaintext
    plain.close(None)

    queue = queue_from_uri(f"{uri}&{query}")
    assert isinstance(queue, KafkaMessageQueue)
    assert client_config(queue.config)["security_protocol"] == "SSL"
    with pytest.raises(ConnectionError) as failed:
        queue.open(None)
    message = str(failed.value)
    keys = " and ".join(f"options.{name}" for name in settings.split("&"))
    assert f"TLS was turned on by {keys}, and the broker at {broker.bootstrap} answered in " in (
        message
    )
    assert "plaintext" in message and f"leave out {keys}" in message
    assert "Check connection.host" not in message and "broker is running" not in message
    assert not queue.is_open()


def test_an_explicit_tls_protocol_to_a_plaintext_listener_is_named_too(
    secure_kafka_broker: BrokerProcess,
) -> None:
    """``connection.protocol`` ssl (no TLS file switched it on) against the PLAINTEXT
    listener: the handshake's failure is named, with no setting to blame."""
    message = refused(
        {"connection.uri": secure_kafka_broker.listeners["PLAINTEXT"], "connection.protocol": "ssl"}
    )
    assert f"the broker at {secure_kafka_broker.bootstrap} answered in plaintext" in message
    assert "TLS was turned on by" not in message and "broker is running" not in message
