"""``scripts/demo.py`` (``make demo``) end to end, as a user runs it: its own brokers and S3
server, the Airflow example DAG under ``dag.test()``, the Dagster sensor and job, Spark,
Parquet and an Iceberg table on S3. It must print the summary table, draw the chart and leave
no process it started behind, also when interrupted."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Collection, Iterator
from pathlib import Path

import psutil
import pyarrow.dataset as ds
import pytest
from PIL import Image

from sluice.testing import wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.mqtt]

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "scripts" / "demo.py"
DEMO_TIMEOUT = 360
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# Small waves: the demo's fixed costs (Spark, Airflow, Dagster) dominate anyway.
KAFKA, MQTT, MALFORMED, WAVES = 1500, 400, 4, 2


def demo_env(home: Path) -> dict[str, str]:
    """The test's environment without what other tests set for Airflow, Dagster or the
    examples (the demo sets up its own), and with mosquitto's directory on PATH."""
    dropped = ("AIRFLOW", "SLUICE_EXAMPLE_", "SLUICE_TEST_AIRFLOW", "DAGSTER_HOME")
    env = {k: v for k, v in os.environ.items() if not k.startswith(dropped)}
    env["SLUICE_HOME"] = str(home)
    env["PATH"] = f"/usr/sbin:{env.get('PATH', '')}"
    return env


def start_demo(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(DEMO), "--output", str(tmp_path / "out"), *args],
        cwd=tmp_path,
        env=demo_env(tmp_path / "home"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def alive(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def processes_using(path: Path) -> list[psutil.Process]:
    """Live processes whose command line names ``path`` (the demo's brokers name their data
    and config files, which live under ``$SLUICE_HOME``)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        with_path = any(str(path) in arg for arg in proc.info["cmdline"] or [])
        if with_path and proc.pid != os.getpid() and alive(proc.pid):
            found.append(proc)
    return found


@pytest.fixture
def no_leftovers(tmp_path: Path) -> Iterator[None]:
    """After the test, kill (and report) any process still running from the demo's home, so
    a failing demo never leaves brokers behind on the test machine."""
    yield
    left = processes_using(tmp_path / "home")
    for proc in left:
        proc.kill()
    assert not left, f"left running: {[(p.pid, p.info['cmdline']) for p in left]}"


def finish(proc: subprocess.Popen[str], timeout: float) -> tuple[str, str]:
    """Wait for the demo; past ``timeout``, stop it as Ctrl-C would and fail."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        pytest.fail(f"the demo took over {timeout} s:\n{out[-3000:]}\n{err[-3000:]}")


def table_rows(stdout: str) -> dict[str, list[str]]:
    """The summary table's rows by source: [orchestrator, batches, rows, quarantined, msg/s]."""
    rows = {}
    for line in stdout.splitlines():
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if len(cells) == 6 and cells[0] in ("kafka", "mqtt", "iceberg"):
            rows[cells[0]] = cells[1:]
    return rows


def number(cell: str) -> int:
    return int(cell.replace(",", ""))


@pytest.mark.timeout(DEMO_TIMEOUT + 90)
@pytest.mark.usefixtures("no_leftovers")
def test_demo_ingests_both_sources_prints_the_summary_and_stops_its_brokers(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    proc = start_demo(
        tmp_path,
        *("--waves", str(WAVES), "--kafka-messages", str(KAFKA)),
        *("--mqtt-messages", str(MQTT), "--malformed", str(MALFORMED)),
    )
    stdout, stderr = finish(proc, DEMO_TIMEOUT)
    log = (out / "demo.log").read_text(errors="replace") if (out / "demo.log").exists() else ""
    assert proc.returncode == 0, f"{stdout}\n{stderr}\n--- demo.log ---\n{log[-5000:]}"

    rows = table_rows(stdout)
    assert set(rows) == {"kafka", "mqtt", "iceberg"}, stdout
    expected = {"kafka": KAFKA, "mqtt": MQTT, "iceberg": KAFKA}
    orchestrators = {"kafka": "Airflow", "mqtt": "Dagster", "iceberg": "ingest()"}
    for source, (orchestrator, batches, written, quarantined, rate) in rows.items():
        assert orchestrator.startswith(orchestrators[source])
        # every message exactly once: the good ones in the dataset, the malformed quarantined
        assert number(batches) == WAVES
        assert number(written) == WAVES * (expected[source] - MALFORMED) > 0
        assert number(quarantined) == WAVES * MALFORMED > 0
        assert number(rate) > 0

    # what the table says is what is on disk
    summary = {s["source"]: s for s in json.loads((out / "summary.json").read_text())["sources"]}
    for source in ("kafka", "mqtt"):
        cells = rows[source]
        dataset = ds.dataset(summary[source]["dataset"], format="parquet", partitioning="hive")
        assert dataset.count_rows() == number(cells[2])
        assert Path(summary[source]["dataset"]).parent == out

    # the Kafka readings again in an Iceberg table on the S3 server, a snapshot per wave
    # naming its batch; the data went with the server, the SQLite catalog stays and points
    # at S3
    snapshots = re.findall(r"snapshot \d+: batch (\w+) \(kafka ", stdout)
    assert len(snapshots) == WAVES, stdout
    iceberg = json.loads((out / "summary.json").read_text())["iceberg"]
    assert iceberg["rows"] == WAVES * (KAFKA - MALFORMED)
    assert iceberg["batch_ids"] == snapshots
    tables = {s["table"] for s in iceberg["snapshots"]}
    assert tables == {"demo.readings", "demo.readings__quarantine"}, iceberg
    with sqlite3.connect(out / "iceberg" / "catalog.db") as catalog:
        [(location,)] = catalog.execute(
            "SELECT metadata_location FROM iceberg_tables WHERE table_name = 'readings'"
        ).fetchall()
    assert location.startswith("s3://lake/demo-warehouse/"), location
    # the playground's secret key never reaches the terminal or the log
    from sluice.cli.brokers import S3_SECRET_KEY

    assert S3_SECRET_KEY not in stdout + stderr + log

    # lag over time: the Kafka groups' lag rose when a wave was published, and nothing waits
    lag = json.loads((out / "summary.json").read_text())["lag"]
    kafka_lags = [points for label, points in lag.items() if label.startswith("kafka")]
    assert len(kafka_lags) == 2 and all(points for points in kafka_lags), lag
    for points in kafka_lags:
        assert max(n for _, n in points) >= KAFKA and points[-1][1] == 0, points

    # OpenLineage: each Airflow ingest told a lineage backend topic -> dataset, and the demo
    # printed it
    events = [json.loads(line) for line in (out / "openlineage.jsonl").read_text().splitlines()]
    ingests = [
        e for e in events if e["eventType"] == "COMPLETE" and e["job"]["name"].endswith(".ingest")
    ]
    assert len(ingests) == WAVES, [(e["eventType"], e["job"]["name"]) for e in events]
    for event in ingests:
        ((source,), (target,)) = event["inputs"], event["outputs"]
        assert source["namespace"].startswith("kafka://127.0.0.1:"), source
        assert (target["namespace"], target["name"]) == ("file", summary["kafka"]["dataset"])
        written = target["outputFacets"]["outputStatistics"]["rowCount"]
        assert written == KAFKA - MALFORMED
        assert f"({written} rows); batch " in stdout, stdout

    chart = out / "ingested.png"
    assert chart.read_bytes()[:8] == PNG_SIGNATURE
    with Image.open(chart) as image:
        image.verify()
    with Image.open(chart) as image:
        assert image.format == "PNG" and image.width > 300 and image.height > 200

    started = {int(pid) for pid in re.findall(r"\(pid (\d+)\)", stdout)}
    assert len(started) == 3, stdout  # Apache Kafka, mosquitto and seaweedfs
    assert not [pid for pid in started if alive(pid)]
    state = json.loads((tmp_path / "home" / "demo" / "brokers.json").read_text())
    assert state["brokers"] == []
    assert not list((tmp_path / "home" / "demo").glob("airflow-*")), "its Airflow home is gone"
    assert "Stopped kafka" in stdout and "mosquitto" in stdout and "seaweedfs" in stdout


def wait_for_brokers(
    proc: subprocess.Popen[str], state: Path, others: Collection[int] = ()
) -> list[int]:
    """The pids of the demo's three brokers (Apache Kafka, mosquitto, seaweedfs; not
    ``others``), once all run."""

    def pids() -> list[int] | None:
        if proc.poll() is not None:
            raise AssertionError(f"the demo exited early: {proc.communicate()}")
        try:
            entries = json.loads(state.read_text())["brokers"]
        except (OSError, ValueError, KeyError):
            return None
        found = [int(e["pid"]) for e in entries]
        mine = len(found) == 3 and not set(found) & set(others)
        return found if mine and all(alive(p) for p in found) else None

    found = wait_until(pids, 90, message="the demo's brokers to start")
    assert found is not None
    return found


@pytest.mark.timeout(240)
@pytest.mark.usefixtures("no_leftovers")
def test_demo_stops_what_it_started_when_interrupted_and_what_a_killed_run_left(
    tmp_path: Path,
) -> None:
    state = tmp_path / "home" / "demo" / "brokers.json"
    killed = start_demo(tmp_path)
    orphans = wait_for_brokers(killed, state)
    killed.kill()  # no chance to clean up: its brokers keep running
    killed.communicate(timeout=30)
    assert all(alive(pid) for pid in orphans)

    proc = start_demo(tmp_path)
    pids = wait_for_brokers(proc, state, others=orphans)
    assert not [pid for pid in orphans if alive(pid)], "the next run stops the leftovers"
    children = psutil.Process(proc.pid).children(recursive=True)
    assert {c.pid for c in children} >= set(pids)

    proc.send_signal(signal.SIGINT)
    stdout, stderr = finish(proc, 90)

    for pid in orphans:
        assert f"(pid {pid}), left running by an earlier demo" in stdout, stdout
    assert proc.returncode == 130, f"{stdout}\n{stderr}"
    assert stderr.startswith("Interrupted (Ctrl-C)"), stderr
    assert len(stderr.strip().splitlines()) == 1, stderr  # one line
    wait_until(
        lambda: not [c for c in children if alive(c.pid)],
        30,
        message="every process the demo started to exit",
    )
    assert json.loads(state.read_text())["brokers"] == []
