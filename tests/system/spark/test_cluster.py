"""Sluice on a standalone Spark cluster (a master and two one-core workers on loopback).

A Dagster asset on a cluster is run as a user runs it by the Spark clusters guide's page
(tests/system/test_docs.py: ``dagster dev`` with ``SparkResource`` and the cluster's master)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sluice.audit import audit
from sluice.brokers import BrokerProcess, free_port
from sluice.testing.plugin import S3Bucket
from sluice.testing.spark_cluster import StandaloneCluster, start_cluster
from sluice.testing.waiting import wait_until
from tests.integration.spark.conftest import KafkaTopic, open_topic, reading
from tests.integration.spark.crashes import assert_exactly_once
from tests.system.spark.conftest import (
    DRIVER_CONF,
    SCHEMA,
    run_driver,
    sink_offsets,
    start_driver,
)

pytestmark = [pytest.mark.cluster, pytest.mark.kafka]


@pytest.fixture
def six_partitions(noida_broker: BrokerProcess, unique_name: str) -> Iterator[KafkaTopic]:
    topic = open_topic(noida_broker, unique_name, partitions=6)
    yield topic
    topic.queue.close(None)
    topic.producer.close()


def publish(topic: KafkaTopic, count: int, partitions: int = 6) -> None:
    sent = [
        topic.producer.send(topic.name, value=reading(i), partition=i % partitions)
        for i in range(count)
    ]
    topic.producer.flush(60)
    for future in sent[-partitions:]:
        future.get(10)


def job(topic: KafkaTopic, sink: Path | str, master: str, **extra: Any) -> dict[str, Any]:
    spec = topic.plan()
    return {
        "master": master,
        "conf": DRIVER_CONF,
        "source": topic.source,
        "schema": SCHEMA,
        "spec": spec.to_dict(),
        "sink": str(sink),
        **extra,
    }


def _driver_executors(ui_port: int) -> list[dict[str, Any]]:
    base = f"http://127.0.0.1:{ui_port}/api/v1/applications"
    try:
        with urllib.request.urlopen(base, timeout=2) as response:
            apps = json.load(response)
        with urllib.request.urlopen(f"{base}/{apps[0]['id']}/executors", timeout=2) as response:
            executors: list[dict[str, Any]] = json.load(response)
    except (OSError, ValueError, IndexError, KeyError):
        return []
    return executors


def test_executor_mode_is_exactly_once_when_a_worker_dies_mid_ingest(
    two_workers: StandaloneCluster, six_partitions: KafkaTopic, tmp_path: Path
) -> None:
    cluster, topic, sink = two_workers, six_partitions, tmp_path / "readings"
    publish(topic, 60_000)
    ui_port = free_port()
    conf = {**DRIVER_CONF, "spark.ui.port": str(ui_port), "spark.ui.enabled": "true"}
    # 24 tasks of 2,500 messages: a wide window in which to kill a worker that is reading.
    driver = start_driver(
        "python", job(topic, sink, cluster.url, conf=conf, mode="executors", chunk_size=2_500)
    )
    victim = cluster.live_workers[-1]
    try:

        def victim_reading() -> str | None:
            """The id of the victim's executor once it runs a task and half are left."""
            if driver.proc.poll() is not None:
                raise AssertionError("the ingest ended before a worker could be killed")
            ids = {str(e["id"]) for e in cluster.worker_executors(victim)}
            executors = _driver_executors(ui_port)
            done = sum(e["completedTasks"] for e in executors if e["id"] != "driver")
            busy = [e["id"] for e in executors if e["id"] in ids and e["activeTasks"] > 0]
            return busy[0] if busy and done < 12 else None

        executor = wait_until(victim_reading, 120, 0.05, "a task running on the second worker")
        victim.kill_with_children()
        results = driver.result()
    finally:
        if driver.proc.poll() is None:
            driver.proc.kill()
            driver.proc.wait()
    assert f"Lost executor {executor} on" in driver.stderr, driver.stderr[-3000:]
    (result,) = results
    assert (result["read"], result["written"], result["quarantined"]) == (60_000, 60_000, 0)
    offsets = sink_offsets(sink)
    assert offsets == sorted((p, o) for p in range(6) for o in range(10_000))
    assert topic.queue.read_message_count() == 0  # lag 0: every range committed


def test_airflow_operator_spark_submits_to_the_cluster(
    two_workers: StandaloneCluster,
    six_partitions: KafkaTopic,
    noida_broker: BrokerProcess,
    tmp_path: Path,
) -> None:
    """SparkIngestOperator(submit=True, spark_master="spark://..."): spark-submit in client
    mode, the executors on the workers."""
    publish(six_partitions, 600)
    sink = tmp_path / "readings"
    (result,) = run_driver(
        "airflow",
        job(six_partitions, sink, two_workers.url, mode="executors", submit=True)
        | {"connection": {"conn_type": "sluice_kafka", **_host_port(noida_broker)}},
    )
    assert (result["read"], result["written"], result["mode"]) == (600, 600, "executors")
    assert len(sink_offsets(sink)) == 600
    assert six_partitions.queue.read_message_count() == 0
    applications = two_workers.state()["completedapps"]
    assert any(app["name"] == "sluice-ingest" for app in applications), applications


def test_executors_without_sluice_get_it_shipped(
    two_workers: StandaloneCluster, six_partitions: KafkaTopic, bare_venv: Path, tmp_path: Path
) -> None:
    """The workers run a Python that has pyarrow and pandas but not Sluice;
    ``spark_session(..., ship_sluice=True)`` sends it (a zip on the executors' sys.path)."""
    missing = subprocess.run(
        [str(bare_venv), "-c", "import sluice"], capture_output=True, text=True, check=False
    )
    assert "No module named 'sluice'" in missing.stderr
    publish(six_partitions, 600)
    sink = tmp_path / "readings"
    (result,) = run_driver(
        "python",
        job(six_partitions, sink, two_workers.url, mode="executors", ship=True),
        python=str(bare_venv),
    )
    assert (result["read"], result["written"]) == (600, 600)
    assert len(sink_offsets(sink)) == 600


def test_spark_reader_ingests_on_executors_without_python(
    two_workers: StandaloneCluster, six_partitions: KafkaTopic, tmp_path: Path
) -> None:
    """options.reader 'spark' on a standalone cluster whose executors have no Python at all
    (their interpreter does not exist): Spark's Kafka source reads, Spark columns classify and
    Spark's own writer writes (:mod:`sluice.spark.jvm_writer`), so no Python worker starts.
    The Kafka source's jars are on no worker; ``spark_session(..., kafka_source=True)`` gives
    them to the driver (spark.jars), which serves them to the executors."""
    publish(six_partitions, 600)
    six_partitions.send([b"not json", b'{"device": "d", "temperature": "warm"}'], partition=0)
    sink = tmp_path / "readings"
    settings = {"source": f"{six_partitions.source}?reader=spark", "kafka_source": True}
    no_python = str(tmp_path / "no-such-python")
    (result,) = run_driver(
        "python", job(six_partitions, sink, two_workers.url, **settings), no_python
    )
    assert (result["mode"], result["read"], result["written"]) == ("spark", 602, 600)
    assert result["quarantined"] == 2
    assert sink_offsets(sink) == sorted((p, o) for p in range(6) for o in range(100))
    assert six_partitions.queue.read_message_count() == 0
    assert audit(str(sink), six_partitions.source).ok


@pytest.fixture
def worker_on_its_own_disk(tmp_path: Path) -> Iterator[tuple[StandaloneCluster, Path]]:
    """A master and one worker that sees ``<tmp>/lake`` as a disk of its own (an empty
    tmpfs there, in the worker's mount namespace), as a worker on another host sees a local
    path the driver also has."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("a worker with a disk of its own needs root and util-linux's unshare")
    lake = tmp_path / "lake"
    lake.mkdir()
    cluster = start_cluster(0, tmp_path / "cluster")
    try:
        cluster.add_worker(own_disk=[lake])
        yield cluster, lake
    finally:
        cluster.close()


def test_spark_writer_on_a_path_only_the_driver_has_names_the_disk_not_the_topic(
    worker_on_its_own_disk: tuple[StandaloneCluster, Path], six_partitions: KafkaTopic
) -> None:
    """options.reader 'spark' writing a Parquet sink at a path that is a local disk on each
    host: the executors wrote their files on theirs, the driver found none on its own and
    blamed a topic that changed ("read again from a topic that changed (retention or
    compaction)"). It says where the files went now; nothing is committed."""
    cluster, lake = worker_on_its_own_disk
    publish(six_partitions, 60)
    sink = lake / "readings"
    settings = {"source": f"{six_partitions.source}?reader=spark", "kafka_source": True}
    driver = start_driver("python", job(six_partitions, sink, cluster.url, **settings))
    out, err = driver.proc.communicate(timeout=240)
    assert driver.proc.returncode != 0, f"the ingest succeeded:\n{out[-2000:]}"
    assert "the executors wrote where the driver cannot see" in err, err[-4000:]
    assert "topic that changed" not in err
    assert "Nothing was published or committed" in err
    assert six_partitions.queue.read_message_count() == 60, "nothing was committed"


def _host_port(broker: BrokerProcess) -> dict[str, Any]:
    return {"host": broker.host, "port": broker.port}


def test_executors_write_a_parquet_dataset_on_s3_with_the_drivers_credentials(
    two_workers: StandaloneCluster, six_partitions: KafkaTopic, s3_bucket: S3Bucket
) -> None:
    """The workers started without any AWS setting: the writing tasks get the endpoint, region
    and keys the driver resolved from its environment (the AWS chain), pickled into the task."""
    publish(six_partitions, 600)
    sink = s3_bucket.uri("readings")
    (result,) = run_driver("python", job(six_partitions, sink, two_workers.url, mode="executors"))
    assert (result["read"], result["written"]) == (600, 600)
    assert_exactly_once(audit(sink, six_partitions.source), 600)
    assert six_partitions.queue.read_message_count() == 0
    secret = s3_bucket.environment()["AWS_SECRET_ACCESS_KEY"]
    assert secret not in json.dumps(result)
    assert secret not in json.dumps(two_workers.state())
