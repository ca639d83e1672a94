"""Where Airflow users look: OpenLineage events of the publish and ingest operators (the
OpenLineage provider's own listener and file transport), Sluice's lag and freshness through
Airflow's Stats (a real StatsD listener on loopback) and the AuditOperator failing a run whose
sink disagrees with the broker; all on real ``dag.test()`` runs, with a SASL password that
must show up in no event and no metric."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from functools import _lru_cache_wrapper
from pathlib import Path
from typing import Any

import pytest

from sluice.brokers import BrokerProcess
from sluice.testing import wait_until
from sluice.testing.topics import create_kafka_topic
from sluice_airflow.metrics import stat_name
from tests.integration.airflow import dag_runs
from tests.integration.airflow.conftest import SetConnection

pytestmark = pytest.mark.usefixtures("airflow_db", "spark")

READINGS = [
    {"device": f"sensor-{n}", "temperature": 20.0 + n, "ts": f"2026-01-01T12:00:0{n}Z"}
    for n in range(5)
]

INGEST_DAG = """
from sluice_airflow.operators.audit import AuditOperator
from sluice_airflow.operators.publish import QueuePublishOperator
from sluice_airflow.operators.spark import SparkIngestOperator

with {dag} as dag:
    publish = QueuePublishOperator(
        task_id="publish", conn_id={conn!r}, topic={topic!r}, messages={messages!r}
    )
    ingest = SparkIngestOperator(
        task_id="ingest",
        conn_id={conn!r},
        batch="waiting",
        topic={topic!r},
        config={{"group_id": {group!r}}},
        max_messages=4,
        sink={sink!r},
        schema="device STRING, temperature DOUBLE, ts TIMESTAMP",
    )
    audit = AuditOperator(task_id="audit", conn_id={conn!r}, sink={sink!r}, topic={topic!r})
    publish >> ingest >> audit
"""

AUDIT_DAG = """
from sluice_airflow.operators.audit import AuditOperator

with {dag} as dag:
    AuditOperator(task_id="audit", conn_id={conn!r}, sink={sink!r})
"""


def _clear_openlineage_settings() -> None:
    """The OpenLineage provider caches its settings per process: read them afresh."""
    from airflow.providers.openlineage import conf

    for value in vars(conf).values():
        if isinstance(value, _lru_cache_wrapper):
            value.cache_clear()


@pytest.fixture
def lineage_events(tmp_path: Path) -> Iterator[Path]:
    """The OpenLineage provider's listener with its file transport writing to a file of the
    test's own; its path. Airflow registers the listener from the provider's plugin when a
    process starts with a transport configured; this test process started without one, so
    the listener is added to the task runner's listener manager here (and removed after)."""
    from airflow.providers.openlineage.plugins.listener import get_openlineage_listener
    from airflow.sdk.listener import get_listener_manager

    path = tmp_path / "openlineage.jsonl"
    settings = {
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
            {"type": "file", "log_file_path": str(path), "append": True}
        ),
        "AIRFLOW__OPENLINEAGE__NAMESPACE": "sluice-tests",
        # the events are sent from a thread, not a fork of this process (it runs a JVM)
        "AIRFLOW__OPENLINEAGE__EXECUTE_IN_THREAD": "True",
    }
    os.environ.update(settings)
    _clear_openlineage_settings()
    listener = get_openlineage_listener()
    manager = get_listener_manager()
    manager.add_listener(listener)
    try:
        yield path
    finally:
        manager.pm.unregister(listener)
        for key in settings:
            os.environ.pop(key, None)
        _clear_openlineage_settings()


class StatsdListener:
    """A UDP socket on loopback that Airflow's StatsD client sends to."""

    def __init__(self) -> None:
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.socket.bind(("127.0.0.1", 0))
        self.socket.setblocking(False)
        self.port = self.socket.getsockname()[1]
        self.lines: list[str] = []

    def receive(self) -> list[str]:
        """Every metric line received so far."""
        while True:
            try:
                packet = self.socket.recv(65536)
            except BlockingIOError:
                return self.lines
            self.lines += packet.decode().splitlines()

    def value(self, name: str) -> tuple[float, str]:
        """(value, type) of the last line of metric ``name`` (waits for it)."""

        def found() -> list[str]:
            return [line for line in self.receive() if line.startswith(f"{name}:")]

        line = wait_until(found, 10, message=f"a StatsD line of {name}")[-1]
        value, kind = line.split(":", 1)[1].split("|")[:2]
        return float(value), kind


@pytest.fixture
def statsd() -> Iterator[StatsdListener]:
    """Airflow configured to send metrics over StatsD to a listener of the test's own, as a
    worker's task runner configures its ``Stats`` when it starts."""
    from airflow.sdk._shared.observability.metrics import stats
    from airflow.sdk.observability.metrics import stats_utils

    listener = StatsdListener()
    settings = {
        "AIRFLOW__METRICS__STATSD_ON": "True",
        "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
        "AIRFLOW__METRICS__STATSD_PORT": str(listener.port),
        "AIRFLOW__METRICS__STATSD_PREFIX": "airflow",
    }
    os.environ.update(settings)
    stats.initialize(factory=stats_utils.get_stats_factory(), export_legacy_names=True)
    try:
        yield listener
    finally:
        for key in settings:
            os.environ.pop(key, None)
        stats.initialize(factory=stats_utils.get_stats_factory(), export_legacy_names=True)
        listener.socket.close()


def events_of(path: Path, job: str, event_type: str) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [e for e in events if e["job"]["name"] == job and e["eventType"] == event_type]


def test_lineage_metrics_and_the_audit_of_an_ingest(
    noida_broker: BrokerProcess,
    set_connection: SetConnection,
    lineage_events: Path,
    statsd: StatsdListener,
    unique_name: str,
    tmp_path: Path,
    password: str,
    capfd: pytest.CaptureFixture[str],
) -> None:
    conn = set_connection(
        "sluice_kafka_observed",
        "sluice_kafka",
        noida_broker.host,
        noida_broker.port,
        login="sluice",
        password=password,
        extra={"connection.protocol": "sasl_plaintext", "options.session_timeout": 6000},
    )
    create_kafka_topic(noida_broker.bootstrap, unique_name, 1)
    sink, group, dag_id = tmp_path / "readings", f"{unique_name}-lake", f"{unique_name}_observed"
    messages = [READINGS[0], "not json", *READINGS[1:]]
    run = dag_runs.run_test_dag(
        dag_id,
        INGEST_DAG,
        conn=conn,
        topic=unique_name,
        group=group,
        sink=str(sink),
        messages=messages,
    )
    run.raise_for_state()
    result = run.xcom("ingest")
    assert (result["read"], result["written"], result["quarantined"]) == (4, 3, 1)

    # OpenLineage: the publish's output and the ingest's input are the same topic dataset
    kafka = f"kafka://{noida_broker.host}:{noida_broker.port}"
    (published,) = wait_until(
        lambda: events_of(lineage_events, f"{dag_id}.publish", "COMPLETE"), 20, message="event"
    )
    (topic_out,) = published["outputs"]
    assert (topic_out["namespace"], topic_out["name"]) == (kafka, unique_name)
    assert topic_out["outputFacets"]["outputStatistics"]["rowCount"] == 6
    (started,) = events_of(lineage_events, f"{dag_id}.ingest", "START")
    assert [(i["namespace"], i["name"]) for i in started["inputs"]] == [(kafka, unique_name)]
    (completed,) = wait_until(
        lambda: events_of(lineage_events, f"{dag_id}.ingest", "COMPLETE"), 20, message="event"
    )
    (topic_in,) = completed["inputs"]
    assert (topic_in["namespace"], topic_in["name"]) == (kafka, unique_name)
    assert topic_in["inputFacets"]["inputStatistics"]["rowCount"] == 4
    (table,) = completed["outputs"]
    assert (table["namespace"], table["name"]) == ("file", str(sink))
    columns = [f["name"] for f in table["facets"]["schema"]["fields"]]
    assert columns[:3] == ["device", "temperature", "ts"] and columns[-1] == "batch_id"
    assert "offset" in columns
    assert table["outputFacets"]["outputStatistics"]["rowCount"] == 3
    assert table["outputFacets"]["sluice_quarantine"]["rowCount"] == 1
    (batch,) = completed["run"]["facets"]["sluice_batch"]["batches"]
    assert batch["batch_id"] == result["batch_id"] and batch["group"] == group
    assert batch["ranges"] == [{"partition": 0, "start": 0, "end": 4}]
    assert (batch["written"], batch["quarantined"], batch["committed"]) == (3, 1, True)

    # Airflow metrics: 2 of the 6 messages still wait after the batch of 4
    def metric(name: str) -> str:
        return "airflow." + stat_name(name, unique_name, group)

    assert statsd.value(metric("lag")) == (2.0, "g")
    age, kind = statsd.value(metric("oldest_waiting_age"))
    assert kind == "g" and 0 < age < 600
    assert statsd.value(metric("written")) == (3.0, "c")
    assert statsd.value(metric("quarantined")) == (1.0, "c")
    last, _ = statsd.value(metric("last_batch_timestamp"))
    assert last > 1.7e9
    assert statsd.value(metric("audit.missing")) == (0.0, "g")

    # The sink loses the batch's rows: the audit fails the next run, naming what is missing
    for part in next(sink.glob("batch_id=*")).glob("*.parquet"):
        part.unlink()
    failed = dag_runs.run_test_dag(f"{dag_id}_audit", AUDIT_DAG, conn=conn, sink=str(sink))
    assert failed.states == {"audit": "failed"} and not failed.succeeded
    seen = dag_runs.everything_seen(failed.dag_run, capfd)
    # offsets 0, 2 and 3 were good rows; 1 was quarantined and is still there
    assert "partition 0: 3 offset(s) committed but in no batch (0, 2-3)" in seen["task output"]
    assert statsd.value(metric("audit.missing")) == (3.0, "g")

    # the password: in no event, no metric, no log
    seen["openlineage events"] = lineage_events.read_text()
    seen["statsd"] = "\n".join(statsd.receive())
    assert [where for where, text in seen.items() if password in text] == []
