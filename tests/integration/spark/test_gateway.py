"""The JVM's end of the Py4J gateway sends without Nagle's algorithm (sluice.spark.gateway).

Py4J opens a connection per Python thread, with Nagle's algorithm on; every answer longer
than 8 KiB then waited about 40 ms for a delayed acknowledgement (bench/py4j_answers.py).
The socket option is read here through Java's reflection, apart from the module's own code.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from sluice.spark import ingest
from sluice.spark.gateway import disable_nagle

from .conftest import SCHEMA, KafkaTopic, reading

pytestmark = pytest.mark.kafka


def _no_delay(spark: Any) -> dict[int, bool]:
    """TCP_NODELAY of the JVM's socket of each connection of the gateway, by the port of
    the connection's Python end."""
    server = spark._sc._gateway.java_gateway_server
    cls = server.getClass()
    while "connections" not in [f.getName() for f in cls.getDeclaredFields()]:
        cls = cls.getSuperclass()
    field = cls.getDeclaredField("connections")
    field.setAccessible(True)
    states = {}
    for connection in field.get(server).toArray():
        socket = connection.getClass().getDeclaredField("socket")
        socket.setAccessible(True)
        jvm_end = socket.get(connection)
        if jvm_end is not None:  # (a connection being closed)
            states[jvm_end.getPort()] = bool(jvm_end.getTcpNoDelay())
    return states


def _my_port(spark: Any) -> int:
    """The local port of this thread's connection to the JVM (PySpark pins one per thread)."""
    client = spark._sc._gateway._gateway_client
    connection = client._get_connection()
    try:
        return int(connection.socket.getsockname()[1])
    finally:
        client._give_back_connection(connection)


def _in_new_thread(spark: Any, work: Any) -> Any:
    """``work()`` in a thread of its own (so a connection of its own), kept open until the
    state of its connection is read; returns (TCP_NODELAY before, work's result, after)."""
    done: dict[str, Any] = {}
    opened, go, worked, end = (threading.Event() for _ in range(4))

    def run() -> None:
        spark._jvm.java.lang.System.nanoTime()  # this thread's connection opens
        done["port"] = _my_port(spark)
        opened.set()
        assert go.wait(60)
        try:
            done["result"] = work()
        finally:
            worked.set()
        assert end.wait(60)  # (a thread's end closes its connection)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        assert opened.wait(60)
        before = _no_delay(spark)[done["port"]]
        go.set()
        assert worked.wait(600)
        after = _no_delay(spark)[done["port"]]
    finally:
        go.set()
        end.set()
        thread.join(60)
    return before, done.get("result"), after


def test_a_new_threads_connection_is_turned_off_too(spark: Any) -> None:
    before, changed, after = _in_new_thread(spark, lambda: disable_nagle(spark))
    assert before is False, "a new thread's connection starts with Nagle's algorithm on"
    assert changed >= 1 and after is True


def test_an_ingest_turns_it_off_for_the_thread_it_runs_in(
    spark: Any, topic: KafkaTopic, tmp_path: Path
) -> None:
    topic.send([reading(i) for i in range(50)] + [b"not json"])
    spec = topic.plan()

    def run() -> Any:
        return ingest(spark, spec, str(tmp_path / "t"), source=topic.source, schema=SCHEMA)

    before, result, after = _in_new_thread(spark, run)
    assert before is False
    assert (result.written, result.quarantined) == (50, 1)
    assert after is True
