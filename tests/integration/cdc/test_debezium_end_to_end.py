"""Real Debezium, end to end: PostgreSQL (``wal_level=logical``, pgoutput) captured by
Debezium's PostgreSQL connector in a Kafka Connect worker into the session's Apache Kafka,
ingested by Sluice into a current-state Iceberg table (SQL catalog on SQLite) and a Delta
table per source table, while an ingest, the Connect worker and PostgreSQL are each killed
once (:mod:`sluice.testing.cdc_pipeline`). The oracle: every table equals ``SELECT *`` of its
source, every row and column, with types where the converter carries the schema, and
``sluice audit`` passes."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sluice.brokers import BrokerProcess
from sluice.testing.cdc_pipeline import feeds_for, run_pipeline
from sluice.testing.cdc_workload import Workload
from sluice.testing.debezium_postgres import (
    CONVERTERS,
    DEBEZIUM_POSTGRES,
    Capture,
    start_capture,
    start_capture_postgres,
    topic_messages,
)
from sluice.testing.kafka_connect import ConnectWorker, start_connect
from sluice.testing.postgres import PostgresServer

from ..iceberg.conftest import Lake, sqlite_lake

__all__ = ["sqlite_lake"]  # a fixture of the Iceberg tests, used here

#: The seed CI runs (``bench/cdc_debezium.py`` runs many).
SEED = 44
ROUNDS = 4


@pytest.fixture(scope="module")
def capture_postgres() -> Iterator[PostgresServer]:
    """PostgreSQL ready for logical decoding, for the module's tests."""
    server = start_capture_postgres()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def connect_worker(apache_kafka_broker: BrokerProcess) -> Iterator[ConnectWorker]:
    """A Kafka Connect worker with Debezium's PostgreSQL connector, on the session's Kafka."""
    with start_connect(apache_kafka_broker.bootstrap, [DEBEZIUM_POSTGRES]) as worker:
        yield worker


def _capture(
    kafka: BrokerProcess, postgres: PostgresServer, worker: ConnectWorker, converter: str
) -> Capture:
    """A database of its own with the seed's tables and first rows, captured by a connector
    of its own in ``worker``, streaming."""
    database = f"shop_{uuid.uuid4().hex[:8]}"
    postgres.create_database(database)
    workload = Workload(SEED, ROUNDS)
    workload.create(postgres.dsn(database))
    return start_capture(
        kafka.bootstrap, postgres, database, workload, CONVERTERS[converter], worker=worker
    )


@pytest.mark.timeout(900)  # four rounds of a real pipeline: about 2 minutes on a quiet machine
@pytest.mark.parametrize("converter", list(CONVERTERS))
def test_lake_tables_equal_the_source_tables_after_every_process_is_killed(
    spark: Any,
    apache_kafka_broker: BrokerProcess,
    capture_postgres: PostgresServer,
    connect_worker: ConnectWorker,
    sqlite_lake: Lake,
    tmp_path: Path,
    converter: str,
) -> None:
    capture = _capture(apache_kafka_broker, capture_postgres, connect_worker, converter)
    try:
        lake = sqlite_lake
        feeds = feeds_for(capture, lake.catalog_name, lake.catalog, lake.namespace, tmp_path)
        figures = run_pipeline(spark, capture, feeds, seed=SEED)
    finally:
        capture.close(keep_worker=True)

    # the run did what it says: every process killed once, every table fed
    print("\n".join(figures.events + figures.mismatches + figures.audit_failures))
    assert (figures.sluice_kills, figures.connect_kills, figures.postgres_restarts) == (1, 1, 1)
    assert figures.batches >= len(feeds)
    assert not figures.audit_failures, "\n".join(figures.audit_failures)
    assert not figures.mismatches, "\n".join(figures.mismatches)


@pytest.mark.timeout(300)
def test_a_worker_killed_as_soon_as_the_capture_starts_resumes_without_a_new_snapshot(
    apache_kafka_broker: BrokerProcess,
    capture_postgres: PostgresServer,
    connect_worker: ConnectWorker,
) -> None:
    """``start_capture`` returns once Connect has committed a streaming offset: a worker
    killed at once resumes from it. (Had it committed none, or a snapshot's, the restarted
    connector would snapshot again, and a row deleted meanwhile would never reach Kafka.)"""
    import psycopg2

    capture = _capture(apache_kafka_broker, capture_postgres, connect_worker, "json-bare")
    try:
        capture.kill_connect()
        conn = psycopg2.connect(capture.dsn)
        with conn, conn.cursor() as cur:
            cur.execute(f"DELETE FROM {capture.workload.qualified('customers')} WHERE id = 1")
        conn.close()
        capture.restart_connect()
        capture.fence()
        ops = [
            (json.loads(value)["op"], json.loads(key)["id"])
            for key, value in topic_messages(
                apache_kafka_broker.bootstrap, capture.topic("customers")
            )
            if key is not None and value is not None  # tombstones carry no change
        ]
    finally:
        capture.close(keep_worker=True)
    assert [op for op, _ in ops].count("r") == 6, ops  # the snapshot, once
    assert ("d", 1) in ops, ops
