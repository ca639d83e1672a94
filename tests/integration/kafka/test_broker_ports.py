"""Apache Kafka's embedded nodes on ports of their own: a cluster's ports all distinct, every
listener's port checked before a node starts, a start that lost a port to another process
started again on other ports, and a storage format that fails leaving no StorageTool running
and no file with the SCRAM passwords behind.

The collisions are forced: ``free_port`` is made to hand out a port twice, or one a socket of
the test holds (the operating system hands out a free port twice only by chance, and another
process takes one between its choice and the broker's bind only by chance too).
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from sluice import brokers
from sluice.brokers import HOST, KafkaSecurity, create_kafka_topic

pytestmark = pytest.mark.kafka


@pytest.fixture
def holder() -> Iterator[socket.socket]:
    """A socket of the test's own on a port of 127.0.0.1 (bound, not yet listening)."""
    sock = socket.socket()
    sock.bind((HOST, 0))
    yield sock
    sock.close()


def test_a_clusters_ports_are_all_distinct_when_free_port_hands_one_out_twice(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Nothing listens on a port ``free_port`` returned until its node starts, so it may
    return it again: every second answer here repeats the one before. The two controller
    ports were the same one, and a node's PLAINTEXT port could be another's controller port."""
    real, handed = brokers.free_port, []

    def repeating() -> int:
        port = handed[-1] if len(handed) % 2 else real()
        handed.append(port)
        return port

    monkeypatch.setattr(brokers, "free_port", repeating)
    cluster = brokers.start_kafka_cluster(2, tmp_path / "cluster")
    try:
        ports = [port for node in cluster.nodes for port in node.bound_ports]
        assert len(ports) == 4 and len(set(ports)) == 4, ports
        assert len(handed) > len(set(handed)), "free_port handed a port out twice"
        create_kafka_topic(cluster.bootstrap, "replicated", 1, replication_factor=2)
    finally:
        cluster.close()


@pytest.mark.parametrize("taken", ["before the check", "after the check"])
def test_a_node_whose_controller_port_is_taken_starts_on_other_ports(
    monkeypatch: pytest.MonkeyPatch,
    holder: socket.socket,
    caplog: pytest.LogCaptureFixture,
    taken: str,
) -> None:
    """The node's second port (its controller's) is one another process holds. Before the
    check: the listener of another process, which the check of only the PLAINTEXT port
    missed. After it: taken between the check and the JVM's bind (the check is made to find
    it free), so the JVM exits with "Address already in use". Either way the start chooses
    other ports and the node serves."""
    if taken == "before the check":
        holder.listen()
    else:  # the race lost: the check saw the port free
        monkeypatch.setattr(brokers, "_bindable", lambda host, port: True, raising=False)
    held = holder.getsockname()[1]
    real, calls = brokers.free_port, []

    def second_is_held() -> int:
        calls.append(1)
        return held if len(calls) == 2 else real()

    monkeypatch.setattr(brokers, "free_port", second_is_held)
    with caplog.at_level(logging.WARNING, "sluice.brokers"):
        broker = brokers.start_kafka()
    try:
        assert held not in broker.bound_ports
        assert f"port {held} taken by another process" in caplog.text
        create_kafka_topic(broker.bootstrap, "served", 1)
    finally:
        broker.close()


def _storage_tools(workdir: Path) -> list[psutil.Process]:
    """Running processes whose command line names ``workdir``'s StorageTool arguments."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if any(str(workdir / "format.args") in part for part in proc.info["cmdline"] or []):
            found.append(proc)
    return found


def test_a_failed_storage_format_leaves_no_storage_tool_running_and_no_passwords_on_disk(
    tmp_path: Path,
) -> None:
    """The second node's StorageTool cannot start (its directory is gone) after the first's
    has: the first's JVM kept running, and its argument file, which holds the SCRAM
    passwords, stayed on disk."""
    java, classpath = brokers._java(), brokers.kafka_classpath()
    security = KafkaSecurity({"alice": "storage-tool-secret"})
    ports: list[int] = []
    while len(ports) < 4:
        if (port := brokers.free_port()) not in ports:
            ports.append(port)
    voters = f"1@{HOST}:{ports[2]},2@{HOST}:{ports[3]}"
    nodes = [
        brokers._kafka_node(
            f"kafka-{i}",
            i,
            tmp_path / f"node-{i}",
            ports[i - 1],
            ports[i + 1],
            voters,
            2,
            java,
            classpath,
            owns=False,
            security=security,
        )
        for i in (1, 2)
    ]
    first, second = nodes
    for path in second.workdir.iterdir():
        path.unlink()
    second.workdir.rmdir()

    with pytest.raises(OSError):
        brokers._format_storage(nodes, java, classpath, standalone=False)

    assert not (first.workdir / "format.args").exists(), "the passwords stayed on disk"
    assert _storage_tools(first.workdir) == [], "a StorageTool kept running"
