"""A password in a queue URI never reaches the output: queue_from_uri's errors, and
``sluice peek``/``sluice lag`` (with and without --debug) against a dead port, a topic that
does not exist and URIs with mistakes. Each check also asserts the output it searched was
really produced."""

from __future__ import annotations

import logging
import secrets

import pytest

from sluice.brokers import BrokerProcess, free_port
from sluice.queues import queue_from_uri
from tests.unit.cli.runner import run


def test_queue_uri_errors_and_kafka_logs_hide_the_password(
    caplog: pytest.LogCaptureFixture,
) -> None:
    password = f"pw-{secrets.token_hex(8)}"
    dead = free_port()
    uri = f"kafka://svc:{password}@127.0.0.1:{dead},127.0.0.1:{free_port()}/orders"
    queue = queue_from_uri(
        f"{uri}?options.max_retries=1&options.connect_timeout=300"
        "&connection.protocol=sasl_plaintext"
    )
    with caplog.at_level(logging.DEBUG), pytest.raises(ConnectionError) as error:
        queue.open(None)
    with pytest.raises(ValueError) as bad_port:
        queue_from_uri(f"kafka://svc:{password}@127.0.0.1:90x2/orders")
    seen = {
        "open error": str(error.value),
        "bad port": str(bad_port.value),
        "logs": caplog.text,
        "config": repr(queue),
    }
    assert f"127.0.0.1:{dead}" in seen["open error"]
    assert "kafka://svc:***@127.0.0.1:90x2/orders" in seen["bad port"]
    assert "kafka" in seen["logs"]  # kafka-python's DEBUG logs were captured
    assert [where for where, text in seen.items() if password in text] == []


def test_peek_and_lag_never_print_the_password(noida_broker: BrokerProcess) -> None:
    password = f"pw-{secrets.token_hex(8)}"  # noida-db accepts any SASL/PLAIN password
    live = f"kafka://svc:{password}@{noida_broker.host}:{noida_broker.port}"
    dead = f"kafka://svc:{password}@127.0.0.1:{free_port()}"
    plain = "connection.protocol=sasl_plaintext"  # noida-db has no TLS
    missing_topic = f"no-such-topic-{secrets.token_hex(4)}"
    runs = {
        "peek dead port": (run("peek", f"{dead}/orders?{plain}"), "Cannot connect to Kafka"),
        "lag dead port --debug": (
            run("--debug", "lag", f"{dead}/orders?group_id=g&{plain}"),
            "Cannot connect to Kafka",
        ),
        "peek missing topic": (run("peek", f"{live}/{missing_topic}?{plain}"), missing_topic),
        "lag missing topic": (
            run("lag", f"{live}/{missing_topic}?group_id=g&{plain}"),
            missing_topic,
        ),
        "no topic": (run("peek", f"{live}?{plain}"), f"kafka://svc:***@{noida_broker.host}"),
        "plaintext not chosen": (run("peek", f"{live}/orders"), "password unencrypted"),
        "bad port": (run("peek", f"kafka://svc:{password}@h:9x/t"), "kafka://svc:***@h:9x/t"),
        "password in the query": (
            run("peek", f"kafka://127.0.0.1:1?credential.password={password}"),
            "credential.password=***",
        ),
    }
    for name, (result, produced) in runs.items():
        output = result.stdout + result.stderr
        assert produced in output, f"{name}: {output!r}"
        assert password not in output, f"{name}: {output!r}"
    assert "Traceback" in runs["lag dead port --debug"][0].stderr  # --debug printed it, redacted
