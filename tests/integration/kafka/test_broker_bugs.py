"""Bugs of the brokers we test on, pinned so we notice when they are fixed.

Sluice works around each one; the contract suite passing on the broker shows the workaround.
"""

from __future__ import annotations

import socket
import ssl
import subprocess
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from sluice.kafka import KafkaConnection
from sluice.testing import BrokerProcess, make_certificates, start_tansu
from sluice.testing.topics import create_kafka_topic


def ten_messages(bootstrap: str, topic: str) -> None:
    create_kafka_topic(bootstrap, topic, 1)
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for i in range(10):
        producer.send(topic, f"m{i}".encode(), partition=0)
    producer.flush()
    producer.close()


def test_tansu_list_offsets_bug_is_still_there(
    tansu_broker: BrokerProcess, unique_name: str
) -> None:
    """Tansu 0.6 answers ListOffsets(latest) with 1 for a partition holding 10 messages, so
    ``end_offsets``/``seek_to_end`` are wrong there. KafkaMessageQueue takes the larger of it and
    the high watermark of fetch responses (``sluice.kafka.offsets.end_offsets``)."""
    ten_messages(tansu_broker.bootstrap, unique_name)
    tp = TopicPartition(unique_name, 0)
    consumer = KafkaConsumer(bootstrap_servers=tansu_broker.bootstrap)
    try:
        listed = consumer.end_offsets([tp])[tp]
        consumer.assign([tp])
        consumer.seek(tp, 0)
        fetched = sum(len(batch) for batch in consumer.poll(timeout_ms=5000).values())
        highwater = consumer.highwater(tp)
    finally:
        consumer.close()
    assert fetched == 10 and highwater == 10
    assert listed != 10, "Tansu's ListOffsets is fixed: the high-watermark workaround can go"


def test_noida_list_offsets_is_right(noida_broker: BrokerProcess, unique_name: str) -> None:
    ten_messages(noida_broker.bootstrap, unique_name)
    tp = TopicPartition(unique_name, 0)
    consumer = KafkaConsumer(bootstrap_servers=noida_broker.bootstrap)
    try:
        assert consumer.end_offsets([tp])[tp] == 10
    finally:
        consumer.close()


def test_tansu_tls_flags_bug_is_still_there(tansu_broker: BrokerProcess, tmp_path: Path) -> None:
    """Tansu 0.6.0 cannot serve TLS: ``--cert`` and ``--key`` are refused together, and with
    ``--cert`` alone (certificate and key in one file) the listener still speaks plaintext.
    So KafkaConnection's TLS settings are tested as client configuration only."""
    certs = make_certificates(tmp_path)
    exe = tansu_broker.argv[0]
    both = subprocess.run(
        [exe, "broker", "--cert", str(certs.cert), "--key", str(certs.key)],
        capture_output=True,
        timeout=30,
    )
    assert both.returncode != 0
    assert b"cannot be used with" in both.stdout + both.stderr

    combined = tmp_path / "combined.pem"
    combined.write_bytes(certs.cert.read_bytes() + certs.key.read_bytes())
    broker = start_tansu()
    try:
        broker.stop()
        broker.argv += ["--cert", str(combined)]
        broker.start()
        context = ssl.create_default_context(cafile=str(certs.ca))
        with (
            socket.create_connection((broker.host, broker.port), timeout=2) as sock,
            pytest.raises(OSError),  # SSL EOF, reset or timeout: no TLS handshake
        ):
            context.wrap_socket(sock, server_hostname=broker.host).close()
    finally:
        broker.close()


def test_noida_sasl_plain_accepts_any_password(noida_broker: BrokerProcess) -> None:
    """noida-db 0.2.3 completes SASL/PLAIN for any user and password (no credential check), so
    refused logins are shown on Apache Kafka (test_security.py)."""
    connection = KafkaConnection()
    connection.configure(
        {
            "connection.uri": noida_broker.bootstrap,
            "connection.protocol": "sasl_plaintext",  # noida-db has no TLS
            "credential.username": "anyone",
            "credential.password": "certainly-not-the-password",
            "options.max_retries": 1,
        }
    )
    connection.open(None)
    try:
        assert connection.client_config()["security_protocol"] == "SASL_PLAINTEXT"
        assert connection.read_queue_names() is not None
    finally:
        connection.close(None)
