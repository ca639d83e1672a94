"""Passwords never reach the logs through kafka-python's DEBUG request logging."""

from __future__ import annotations

import logging

import pytest

from sluice.kafka import KafkaConnection
from sluice.kafka.logs import kafka_log_level


def test_a_configured_password_is_redacted_from_kafka_python_logs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    KafkaConnection().configure(
        {
            "connection.protocol": "sasl_ssl",
            "credential.username": "u",
            "credential.password": "pä55-word",
        }
    )
    parser = logging.getLogger("kafka.protocol.parser")
    with caplog.at_level(logging.DEBUG, logger="kafka.protocol.parser"):
        parser.debug("Sending %s", b"u\x00u\x00p\xc3\xa455-word")
        parser.debug("auth for %s with %s", "u", "pä55-word")
        parser.debug("nothing secret here: %d", 42)
    assert "55-word" not in caplog.text
    assert caplog.text.count("***") == 2
    assert "nothing secret here: 42" in caplog.text


@pytest.mark.parametrize(
    ("level", "expected"),
    [(0, logging.CRITICAL + 10), (1, logging.ERROR), (3, logging.INFO), (4, logging.DEBUG)],
)
def test_log_level_option_maps_onto_logging(level: int, expected: int) -> None:
    assert kafka_log_level(level) == expected
