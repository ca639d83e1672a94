"""sluice brokers up|status|down: embedded brokers that outlive the command."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from sluice.cli.brokers import Entry, running
from sluice.testing import wait_until
from tests.unit.cli.runner import assert_error, assert_ok, on_terminal, run, table_rows

SLUICE = str(Path(sys.executable).parent / "sluice")


def _sluice(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SLUICE_HOME": str(home), "COLUMNS": "200"}
    return subprocess.run(
        [SLUICE, *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def _entries(home: Path) -> list[Entry]:
    state = home / "brokers.json"
    if not state.exists():
        return []
    return [Entry(**e) for e in json.loads(state.read_text())["brokers"]]


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "state"
    for entry in _entries(tmp_path / "state"):  # a failed test still stops what it started
        if running(entry):
            os.kill(entry.pid, signal.SIGKILL)


def _accepts(url: str) -> bool:
    host, port = url.rpartition("/")[2].split(":")
    try:
        with socket.create_connection((host, int(port)), timeout=1):
            return True
    except OSError:
        return False


def test_up_status_down_through_the_console_script(home: Path) -> None:
    up = _sluice(home, "brokers", "up", "--kafka", "noida")
    assert up.returncode == 0, up.stderr
    urls = re.findall(r"at ((?:kafka|mqtt)://127\.0\.0\.1:\d+)", up.stdout)
    assert [u.split(":")[0] for u in urls] == ["kafka", "mqtt"]
    # The command has exited; the brokers it started are still there.
    assert all(_accepts(url) for url in urls)
    published = run("publish", f"{urls[0]}/demo", "--sample", "iot", "--count", "3")
    assert "Published 3 messages" in assert_ok(published)

    again = _sluice(home, "brokers", "up", "--kafka", "noida")
    assert again.returncode == 0 and "already runs" in again.stdout

    status = _sluice(home, "brokers", "status")
    assert status.returncode == 0
    rows = table_rows(status.stdout)
    assert [(r[0], r[1], r[3]) for r in rows] == [
        ("noida", urls[0], "yes"),
        ("mosquitto", urls[1], "yes"),
    ]
    started = _entries(home)
    assert [e.pid for e in started] == [int(r[2]) for r in rows]
    listed = json.loads(_sluice(home, "brokers", "status", "--json").stdout)
    assert [b["url"] for b in listed["brokers"]] == urls and listed["home"] == str(home)

    os.kill(started[1].pid, signal.SIGKILL)  # mosquitto crashes
    wait_until(lambda: not running(started[1]), 10, message="mosquitto to exit")
    crashed = table_rows(_sluice(home, "brokers", "status").stdout)
    assert [(r[0], r[3]) for r in crashed] == [("noida", "yes"), ("mosquitto", "no")]

    down = _sluice(home, "brokers", "down")
    assert down.returncode == 0
    assert "Stopped noida" in down.stdout and "mosquitto" in down.stdout
    assert "was not running" in down.stdout
    assert not any(_accepts(url) for url in urls)
    assert not any(running(e) for e in started)
    assert "No brokers recorded" in _sluice(home, "brokers", "status").stdout
    assert "Traceback" not in up.stderr + status.stderr + down.stderr


def test_a_port_in_use_is_one_line(home: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run(
            "brokers",
            "up",
            "--kafka",
            "none",
            "--mqtt-port",
            str(port),
            env={"SLUICE_HOME": str(home)},
        )
    assert_error(result, 1, f"port {port} is already in use")


def test_down_with_nothing_started(home: Path) -> None:
    out = assert_ok(run("brokers", "down", env={"SLUICE_HOME": str(home)}))
    assert "No brokers to stop" in out


def test_the_state_lives_in_the_home_directory_whatever_the_working_directory(
    tmp_path: Path,
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "SLUICE_HOME"}
    env["HOME"] = str(tmp_path / "user")
    (tmp_path / "elsewhere").mkdir()
    status = subprocess.run(
        [SLUICE, "brokers", "status", "--json"],
        env=env,
        cwd=tmp_path / "elsewhere",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout) == {"home": str(tmp_path / "user" / ".sluice"), "brokers": []}


def test_apache_kafka_one_node_then_three(home: Path) -> None:
    refused = _sluice(home, "brokers", "up", "--kafka", "noida", "--kafka-nodes", "3", "--no-mqtt")
    assert refused.returncode != 0 and "--kafka-nodes needs --kafka apache" in refused.stderr

    up = _sluice(home, "brokers", "up", "--no-mqtt")  # Apache Kafka is the default
    assert up.returncode == 0, up.stderr
    assert "Starting Apache Kafka" in up.stderr  # progress while the JVM starts
    (entry,) = _entries(home)
    assert entry.name == "kafka" and running(entry) and _accepts(entry.url)
    assert entry.executable.endswith("server.properties")  # its pid is told apart by its config

    switch = _sluice(home, "brokers", "up", "--kafka", "apache", "--kafka-nodes", "3")
    assert switch.returncode != 0 and "sluice brokers down" in switch.stderr
    assert _sluice(home, "brokers", "down").returncode == 0
    assert not running(entry)

    up = _sluice(home, "brokers", "up", "--kafka", "apache", "--kafka-nodes", "3", "--no-mqtt")
    assert up.returncode == 0, up.stderr
    nodes = _entries(home)
    assert [e.name for e in nodes] == ["kafka-1", "kafka-2", "kafka-3"]
    assert all(running(e) and _accepts(e.url) for e in nodes)
    bootstrap = ",".join(f"127.0.0.1:{e.port}" for e in nodes)
    assert f"SLUICE_KAFKA_BOOTSTRAP={bootstrap}" in up.stdout
    assert _sluice(home, "brokers", "down", "--purge").returncode == 0
    assert not any(running(e) for e in nodes)


def test_registry_is_a_stand_in_said_plainly_that_an_avro_publish_and_ingest_use(
    home: Path, tmp_path: Path
) -> None:
    """`sluice brokers up --registry` (issue 37, finding 10): the stand-in registry runs as a
    process of its own, says what it is, and serves the formats' round trip."""
    up = _sluice(home, "brokers", "up", "--kafka", "noida", "--no-mqtt", "--registry")
    assert up.returncode == 0, up.stderr
    assert "stand-in Schema Registry" in up.stderr and "lost when it stops" in up.stderr
    registry = next(e for e in _entries(home) if e.name == "registry")
    kafka = next(e for e in _entries(home) if e.name == "noida")
    assert running(registry) and f"--registry {registry.url}" in up.stdout
    schema = tmp_path / "reading.avsc"
    schema.write_text(
        json.dumps(
            {
                "type": "record",
                "name": "Reading",
                "fields": [
                    {"name": "device", "type": "string"},
                    {"name": "temperature", "type": "double"},
                    {"name": "humidity", "type": "double"},
                    {"name": "ts", "type": "string"},
                ],
            }
        )
    )
    topic = f"{kafka.url}/readings.avro"
    published = _sluice(
        home, "publish", topic, "--sample", "iot", "--count", "20", "--format", "avro",
        "--schema", str(schema), "--registry", registry.url,
    )  # fmt: skip
    assert published.returncode == 0, published.stderr
    with urllib.request.urlopen(f"{registry.url}/subjects", timeout=10) as answer:
        assert json.loads(answer.read()) == ["readings.avro-value"]

    # on a terminal, `down` says whom it waits for (issue 37, finding 11: SeaweedFS takes 10 s)
    code, screen = on_terminal([SLUICE, "brokers", "down"], {"SLUICE_HOME": str(home)})
    assert code == 0 and f"Stopping registry (pid {registry.pid})" in screen, screen
    assert "Stopped registry" in screen
    wait_until(lambda: not running(registry), 10, message="the registry stopped")
    assert not _accepts(registry.url)
