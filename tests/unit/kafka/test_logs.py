"""Passwords never reach the logs through kafka-python's DEBUG request logging."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap

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


#: A Spark task's process in executor mode: it gets the reader's kwargs (pickled, holding the
#: password) and nothing of the driver's registration. It logs once before read_ranges (the
#: password shows: nothing registered it yet), then as kafka-python and librdkafka would.
_EXECUTOR = textwrap.dedent(
    """
    import logging, sys
    logging.basicConfig(stream=sys.stdout, level=logging.DEBUG, format="%(name)s|%(message)s")
    from sluice.spark.kafka_source import ReaderKwargs, read_ranges

    password, reader = sys.argv[1], sys.argv[2]
    kwargs = ReaderKwargs(
        {"bootstrap_servers": ["127.0.0.1:9"], "security_protocol": "SASL_SSL",
         "sasl_mechanism": "PLAIN", "sasl_plain_username": "svc",
         "sasl_plain_password": password},
        reader,
    )
    logging.getLogger("kafka.conn").debug("before the task: %s", password)
    assert list(read_ranges(kwargs, "orders", [], 100, 1.0)) == []  # no range: no broker
    logging.getLogger("kafka").debug("root logger: %s", password)
    logging.getLogger("kafka.protocol.parser").debug(
        "Sending request SaslAuthenticateRequest(auth_bytes=%r)",
        b"svc\\x00svc\\x00" + password.encode(),
    )
    logging.getLogger("kafka.net.connection").debug("auth %s:%s", "svc", password)
    if reader == "confluent":  # librdkafka's lines come through this logger
        logging.getLogger("sluice.kafka.confluent_ranges").warning("SASL: %s", password)
    """
)


@pytest.mark.parametrize("reader", ["kafka-python", "confluent"])
def test_a_spark_task_registers_the_password_it_receives_before_it_reads(reader: str) -> None:
    """Executor mode: read_ranges runs in a process where the driver registered nothing; it
    hides the password of its kwargs from kafka-python's and librdkafka's logs."""
    password = "executor-pw-3141"
    run = subprocess.run(
        [sys.executable, "-c", _EXECUTOR, password, reader],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == f"kafka.conn|before the task: {password}", "the test sees no leak"
    after = lines[1:]
    assert len(after) == (4 if reader == "confluent" else 3), after
    assert all("***" in line and "3141" not in line for line in after), after
    assert after[0] == "kafka|root logger: ***"
