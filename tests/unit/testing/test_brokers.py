"""The embedded brokers start on free ports, stop by pid, and keep their data across restarts."""

from __future__ import annotations

import logging
import os
import socket
import threading

import pytest

from sluice.brokers import KafkaSecurity
from sluice.testing import (
    BrokerError,
    BrokerProcess,
    start_mosquitto,
    start_noida,
    start_tansu,
    wait_until,
)


def accepts(broker: BrokerProcess) -> bool:
    try:
        with socket.create_connection((broker.host, broker.port), timeout=0.5):
            return True
    except OSError:
        return False


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split()[2] != "Z"


@pytest.mark.parametrize(
    "start", [start_noida, start_tansu, start_mosquitto], ids=["noida", "tansu", "mosquitto"]
)
def test_broker_starts_on_a_free_port_and_stops_by_pid(start: object) -> None:
    broker: BrokerProcess = start()  # type: ignore[operator]
    try:
        pid = broker.pid
        assert pid is not None and pid_alive(pid)
        assert accepts(broker)
        broker.stop()
        assert not pid_alive(pid)
        assert not accepts(broker)
    finally:
        broker.close()


def test_restart_reuses_the_port() -> None:
    broker = start_mosquitto()
    try:
        port, first_pid = broker.port, broker.pid
        broker.restart()
        assert broker.port == port and broker.pid != first_pid
        assert accepts(broker)
    finally:
        broker.close()
    assert not broker.workdir.exists()


def test_a_restart_waits_for_its_port_while_another_process_holds_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A broker restarts on its own port (its clients know it; a Kafka node's quorum knows its
    controller port). Taken meanwhile by another process (here a listener of the test's, let
    go once the restart has found it taken), the restart waits for it and starts; it failed
    at once."""
    broker = start_mosquitto()
    holder = socket.socket()
    try:
        broker.stop()
        holder.bind((broker.host, broker.port))
        holder.listen()

        def let_go_once_refused() -> None:
            wait_until(
                lambda: f"port {broker.port} taken by another process" in caplog.text,
                20,
                0.05,
                "the restart to find its port taken",
            )
            holder.close()

        with caplog.at_level(logging.WARNING, "sluice.brokers"):
            releaser = threading.Thread(target=let_go_once_refused)
            releaser.start()
            try:
                broker.restart(timeout=30)
            finally:
                releaser.join()
        assert accepts(broker)
    finally:
        holder.close()
        broker.close()


def test_a_broker_that_cannot_listen_reports_its_log() -> None:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    try:
        with pytest.raises(BrokerError, match="mosquitto"):
            start_mosquitto(port=holder.getsockname()[1])
    finally:
        holder.close()


@pytest.mark.parametrize(
    "users", [{"al ice": "pw"}, {"alice": 'p"w'}, {"alice": "p,w]"}], ids=["name", "quote", "comma"]
)
def test_kafka_security_refuses_credentials_its_settings_cannot_quote(
    users: dict[str, str],
) -> None:
    with pytest.raises(ValueError, match="may hold only letters, digits") as refused:
        KafkaSecurity(users)
    assert 'p"w' not in str(refused.value) and "p,w]" not in str(refused.value)
