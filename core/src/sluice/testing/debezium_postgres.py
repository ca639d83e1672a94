"""Debezium's PostgreSQL connector in Kafka Connect (:mod:`.kafka_connect`), against a
PostgreSQL server of the tests' own (:func:`start_capture_postgres`: ``wal_level=logical``,
the ``pgoutput`` plugin built into PostgreSQL).

:data:`DEBEZIUM_POSTGRES` is the plugin (``io.debezium:debezium-connector-postgres``);
:func:`connector_config` the connector's settings for one database and a converter of
:data:`CONVERTERS`: Kafka's JsonConverter with schemas (every key and value wrapped in
``{"schema": ..., "payload": ...}``) or without (the bare envelope).

There is no Avro variant: Debezium documents two Avro converters, Confluent's
(``io.confluent.connect.avro.AvroConverter``, not on Maven Central) and Apicurio's
(``io.apicurio:apicurio-registry-utils-converter``), whose client speaks Apicurio's own REST
API (``/apis/registry/v2``), not the Confluent API that Sluice's registry client and the
tests' stand-in registry (:mod:`.schema_registry`) speak.
"""

from __future__ import annotations

import contextlib
import json
import signal
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .cdc_workload import FENCE, Workload
from .kafka_connect import (
    JSON_CONVERTER,
    ConnectError,
    ConnectPlugin,
    ConnectWorker,
    connect_classpath,
    start_connect,
)
from .postgres import PostgresServer, start_postgres
from .waiting import wait_until

__all__ = [
    "CONVERTERS",
    "DEBEZIUM_KAFKA_VERSION",
    "DEBEZIUM_POSTGRES",
    "DEBEZIUM_VERSION",
    "LOGICAL_REPLICATION",
    "Capture",
    "Converter",
    "connector_config",
    "resolve_jars",
    "start_capture",
    "start_capture_postgres",
    "topic_messages",
    "topic_records",
]

#: The Debezium release (Maven Central serves 3.6.1.Final whole for every module).
DEBEZIUM_VERSION = "3.6.1.Final"
#: The Kafka Connect release it runs in. Debezium 3.6.1 is built against Kafka 4.3.0 and
#: calls ``org.apache.kafka.common.utils.Sanitizer``, which Kafka 4.4.0 moved to an internal
#: package (KAFKA-20297): in a 4.4.0 worker its task fails at start with
#: ``ClassNotFoundException`` (Debezium stops using the class after 3.6.1, dbz#2555). The
#: worker of 4.3 writes to the 4.4 broker like any client.
DEBEZIUM_KAFKA_VERSION = "4.3.1"
DEBEZIUM_POSTGRES = ConnectPlugin(
    "debezium-connector-postgres",
    (f"io.debezium:debezium-connector-postgres:{DEBEZIUM_VERSION}",),
    DEBEZIUM_KAFKA_VERSION,
)
#: Server settings logical decoding needs (a slot and a WAL sender for the connector, and
#: room for a second while a killed one's are released).
LOGICAL_REPLICATION = {
    "wal_level": "logical",
    "max_replication_slots": "4",
    "max_wal_senders": "4",
}


@dataclass(frozen=True)
class Converter:
    """How the connector's keys and values are serialized: the converter settings of the
    connector, and settings of Debezium's that go with them."""

    name: str
    settings: Mapping[str, str]
    debezium: Mapping[str, str] = field(default_factory=dict)

    @property
    def schemas(self) -> bool:
        """Whether each message carries its schema (so the logical types are known)."""
        return self.settings.get("value.converter.schemas.enable") == "true"


def _json(schemas: bool) -> dict[str, str]:
    enabled = "true" if schemas else "false"
    return {
        "key.converter": JSON_CONVERTER,
        "key.converter.schemas.enable": enabled,
        "value.converter": JSON_CONVERTER,
        "value.converter.schemas.enable": enabled,
    }


#: The converters the tests run Debezium with, by name.
CONVERTERS = {
    # Debezium's defaults: NUMERIC as its Decimal logical type (the unscaled value's bytes,
    # base64 in JSON, the scale in the schema), timestamptz as ZonedTimestamp (ISO text).
    "json": Converter("json", _json(True)),
    # Without schemas a Decimal's bytes carry no scale, so NUMERIC is sent as text, as
    # Debezium's documentation advises for consumers that read no schema.
    "json-bare": Converter("json-bare", _json(False), {"decimal.handling.mode": "string"}),
}


#: Seconds a fence waits for the slot to confirm it before it writes the fence row again.
NUDGE_AFTER = 15.0


#: The tests' PostgreSQL skips fsync for speed; this one is killed (immediate shutdown) while
#: its changes are captured, so a commit it acknowledged must survive: without these a
#: restart lost the last commits (an ALTER TABLE included, bench/cdc_debezium.py seed 13),
#: and the source table no longer held what Debezium had already sent.
DURABLE = {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}


def start_capture_postgres(
    settings: Mapping[str, str] | None = None, timeout: float = 60.0
) -> PostgresServer:
    """A PostgreSQL server of the tests' own, ready for logical decoding, that keeps every
    commit it acknowledged through a crash."""
    return start_postgres(
        timeout=timeout, settings={**LOGICAL_REPLICATION, **DURABLE, **(settings or {})}
    )


def connector_config(
    server: PostgresServer,
    database: str,
    *,
    prefix: str,
    tables: list[str],
    converter: Converter,
    slot: str | None = None,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Settings of Debezium's PostgreSQL connector capturing ``tables`` (``schema.table``)
    of ``database`` on ``server`` into topics ``<prefix>.<schema>.<table>``: ``pgoutput``,
    a publication of those tables made by the connector, truncates emitted (Debezium skips
    them by default), heartbeats every second, transaction metadata (``<prefix>.transaction``
    and a ``transaction`` block in each envelope), topics of one partition made by Connect."""
    slot = slot or f"{prefix.replace('-', '_').replace('.', '_')}_slot"
    config = {
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "tasks.max": "1",
        "database.hostname": server.host,
        "database.port": str(server.port),
        "database.user": server.user,
        # a server that trusts its local connections checks no password
        "database.password": getattr(server, "password", None) or "unused",
        "database.dbname": database,
        "topic.prefix": prefix,
        "plugin.name": "pgoutput",
        "slot.name": slot,
        "publication.name": f"{slot}_publication",
        "publication.autocreate.mode": "filtered",
        "table.include.list": ",".join(tables),
        "snapshot.mode": "initial",
        "skipped.operations": "none",
        "heartbeat.interval.ms": "1000",
        "provide.transaction.metadata": "true",
        "topic.creation.default.partitions": "1",
        "topic.creation.default.replication.factor": "-1",
        # after PostgreSQL restarts, retry its connection soon (default 10 s)
        "retriable.restart.connector.wait.ms": "1000",
        "errors.max.retries": "-1",
        **converter.settings,
        **converter.debezium,
        **(extra or {}),
    }
    return config


def _lsn(text: str) -> int:
    """PostgreSQL's ``pg_lsn`` text (``16/B374D848``) as the number Debezium sends."""
    high, low = text.split("/")
    return (int(high, 16) << 32) + int(low, 16)


def _payload(document: Any) -> Any:
    if isinstance(document, dict) and set(document) == {"schema", "payload"}:
        return document["payload"]
    return document


@dataclass
class Capture:
    """Debezium capturing a :class:`~.cdc_workload.Workload`'s tables on ``postgres``
    (database ``database``) into the Kafka at ``bootstrap``, through ``worker``; each part
    can be killed and restarted by pid."""

    bootstrap: str
    postgres: PostgresServer
    database: str
    worker: ConnectWorker
    workload: Workload
    converter: Converter
    prefix: str
    name: str  # the connector's

    @property
    def dsn(self) -> str:
        return self.postgres.dsn(self.database)

    def topic(self, table: str) -> str:
        """The topic of a table's changes."""
        return f"{self.prefix}.{self.workload.schema}.{table}"

    @property
    def heartbeat_topic(self) -> str:
        return f"__debezium-heartbeat.{self.prefix}"

    @property
    def transaction_topic(self) -> str:
        return f"{self.prefix}.transaction"

    @property
    def slot(self) -> str:
        return self.worker_config["slot.name"]

    @property
    def worker_config(self) -> dict[str, str]:
        found: dict[str, str] = self.worker.request("GET", f"/connectors/{self.name}/config")
        return found

    def wait_running(self, timeout: float = 120.0) -> None:
        self.worker.wait_running(self.name, timeout=timeout)

    def kill_connect(self) -> None:
        """SIGKILL the Connect worker."""
        self.worker.kill()

    def restart_connect(self, timeout: float = 120.0) -> None:
        """Start the worker again; it resumes the connector from its committed offsets."""
        self.worker.restart(timeout)
        self.recover(timeout)

    def restart_postgres(self, timeout: float = 60.0, wait: bool = True) -> None:
        """Stop PostgreSQL at once (immediate shutdown: no checkpoint, crash recovery at the
        next start), start it again on the same port and data, and (``wait``: the worker
        runs) wait until the connector runs again."""
        process = self.postgres.process
        process.stop(signal.SIGQUIT)
        process.start(timeout)
        wait_until(lambda: _accepts(self.dsn), timeout, 0.2, "PostgreSQL to accept queries")
        if wait:
            self.recover(timeout)

    def recover(self, timeout: float = 120.0) -> None:
        """Wait until the connector runs, restarting its task if it failed (as an operator
        does: a task that lost PostgreSQL while it started fails for good)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.wait_running(max(deadline - time.monotonic(), 1.0))
                return
            except ConnectError:
                if time.monotonic() >= deadline:
                    raise
            self.worker.restart_connector(self.name)
            wait_until(self._not_failed, 30, 0.2, f"{self.name} to leave FAILED")

    def _restart_if_failed(self) -> None:
        """A task that lost PostgreSQL or its worker mid-way fails for good: restart it."""
        if not self._not_failed():
            # the worker may be busy or starting: asked again on the next poll
            with contextlib.suppress(ConnectError):
                self.worker.restart_connector(self.name)

    def _not_failed(self) -> bool:
        try:
            found = self.worker.status(self.name)
        except ConnectError:
            return False
        return all(t["state"] != "FAILED" for t in found["tasks"])

    def fence(self, timeout: float = 120.0) -> int:
        """Write the fence row and wait until the connector has streamed it and committed
        its offset, both in Connect's offsets topic and in PostgreSQL's slot: every change
        before it is in Kafka, and a connector restarted from then on streams on from there
        (it takes no new snapshot). Returns the fence's ``lsn``."""
        self.recover(timeout)
        # the fence of an earlier call may have the same number: only a later change counts
        floor = _lsn(_query(self.dsn, "SELECT pg_current_wal_lsn()::text")[0][0])
        number = self.workload.fence(self.dsn)
        query = "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s"
        nudged = time.monotonic()

        def nudge() -> None:
            # A connector restarted (worker or PostgreSQL) on an idle database may not confirm
            # what it sent until a change comes after it, and a snapshot may have read the
            # fence row instead of streaming it: write the row again (same round), as
            # Debezium's docs advise a heartbeat query for
            nonlocal nudged
            self._restart_if_failed()
            if time.monotonic() - nudged >= NUDGE_AFTER:
                self.workload.fence(self.dsn)
                nudged = time.monotonic()

        def sent() -> int | None:
            found = self._fence_lsn(number, floor)
            if found is None:
                nudge()
            return found

        seen = wait_until(sent, timeout, 0.5, f"fence {number} streamed")
        assert seen is not None
        lsn = seen

        def confirmed() -> bool:
            rows = _query(self.dsn, query, (self.slot,))
            slot = bool(rows) and rows[0][0] is not None and _lsn(rows[0][0]) >= lsn
            if slot and (self._committed_lsn() or 0) >= lsn:
                return True
            nudge()
            return False

        wait_until(confirmed, timeout, 0.5, f"the slot and Connect to confirm lsn {lsn}")
        return lsn

    def _committed_lsn(self) -> int | None:
        """The ``lsn`` of the streaming offset Connect has committed for the connector; None
        while it has none, or a snapshot's. (Debezium confirms to the slot the offset of the
        last record Kafka acknowledged, which can be ahead of what Connect wrote to its
        offsets topic: the slot alone does not say that a restart resumes past the
        snapshot.)"""
        try:
            entries = self.worker.offsets(self.name)
        except ConnectError:  # the worker is down or rebalancing: asked again
            return None
        for entry in entries:
            offset = entry.get("offset") or {}
            if offset.get("snapshot") in (None, False, "false") and "lsn" in offset:
                return int(offset["lsn"])
        return None

    def _fence_lsn(self, number: int, floor: int) -> int | None:
        for _, value in topic_messages(self.bootstrap, self.topic(FENCE)):
            if value is None:
                continue
            envelope = _payload(json.loads(value))
            after = envelope.get("after") or {}
            # A snapshot's read of the fence row carries the snapshot's lsn, which the slot
            # confirmed when it was made: only a streamed change says the snapshot is done.
            lsn: int = envelope["source"]["lsn"]
            if after.get("round") == number and envelope.get("op") != "r" and lsn >= floor:
                return lsn
        return None

    def close(self, keep_worker: bool = False) -> None:
        """Delete the connector and drop its replication slot (else PostgreSQL keeps the WAL
        for it); stop the worker too unless ``keep_worker``."""
        slot = None
        with contextlib.suppress(ConnectError):  # a worker killed and not started again
            slot = self.worker_config.get("slot.name")
            self.worker.delete_connector(self.name)
        if slot:
            drop = (
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                "WHERE slot_name = %s AND NOT active"
            )
            with contextlib.suppress(TimeoutError):
                wait_until(lambda: _query(self.dsn, drop, (slot,)), 30, 0.5, f"{slot} dropped")
        if not keep_worker:
            self.worker.close()


def _accepts(dsn: str) -> bool:
    import psycopg2

    try:
        psycopg2.connect(dsn, connect_timeout=2).close()
    except psycopg2.OperationalError:
        return False
    return True


def _query(dsn: str, statement: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    import psycopg2

    conn = psycopg2.connect(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute(statement, args)
            return list(cur.fetchall())
    finally:
        conn.close()


def topic_records(bootstrap: str, topic: str) -> list[Any]:
    """Every record of ``topic`` from its start to its end now (kafka-python records:
    ``partition``, ``offset``, ``key``, ``value``, ``timestamp``, ``headers``), by partition
    and offset."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        partitions = consumer.partitions_for_topic(topic) or set()
        assigned = [TopicPartition(topic, p) for p in sorted(partitions)]
        if not assigned:
            return []
        consumer.assign(assigned)
        consumer.seek_to_beginning(*assigned)
        ends = consumer.end_offsets(assigned)
        records: list[Any] = []
        deadline = time.monotonic() + 60
        while any(consumer.position(tp) < ends[tp] for tp in assigned):
            if time.monotonic() > deadline:
                raise TimeoutError(f"could not read {topic} to its end within 60 s")
            for batch in consumer.poll(timeout_ms=1000).values():
                records += batch
        return sorted(records, key=lambda r: (r.partition, r.offset))
    finally:
        consumer.close()


def topic_messages(bootstrap: str, topic: str) -> list[tuple[bytes | None, bytes | None]]:
    """(key, value) of every record of ``topic`` now."""
    return [(r.key, r.value) for r in topic_records(bootstrap, topic)]


def start_capture(
    bootstrap: str,
    postgres: PostgresServer,
    database: str,
    workload: Workload,
    converter: Converter,
    *,
    prefix: str | None = None,
    worker: ConnectWorker | None = None,
    extra: Mapping[str, str] | None = None,
    timeout: float = 180.0,
) -> Capture:
    """Debezium's PostgreSQL connector capturing ``workload``'s tables (made already, with
    their first rows: the snapshot) in a Connect worker (``worker``, else a new one of its
    own), its snapshot sent and committed, streaming once this returns."""
    prefix = prefix or f"cdc{uuid.uuid4().hex[:8]}"
    worker = worker or start_connect(bootstrap, [DEBEZIUM_POSTGRES], timeout=timeout)
    name = f"{prefix}-postgres"
    config = connector_config(
        postgres,
        database,
        prefix=prefix,
        tables=workload.captured,
        converter=converter,
        extra=extra,
    )
    capture = Capture(bootstrap, postgres, database, worker, workload, converter, prefix, name)
    worker.put_connector(name, config)
    capture.wait_running(timeout)
    # A task reports RUNNING while its first snapshot still runs. A worker killed then takes
    # a new snapshot on restart, from the slot it made the first time (no exported snapshot
    # then), and deletes committed while that second snapshot ran never reached Kafka. The
    # fence comes after the snapshot: the runs kill Connect only once it is done.
    capture.fence(timeout)
    return capture


def resolve_jars() -> int:
    """Resolve (download once) the jars of the Connect worker and of Debezium's connector;
    how many there are."""
    from .. import jars

    worker = connect_classpath(DEBEZIUM_POSTGRES.kafka_version)
    return len(worker) + len(jars.resolve(DEBEZIUM_POSTGRES.coordinates))


if __name__ == "__main__":  # python -m sluice.testing.debezium_postgres: fetch the jars
    print(f"{resolve_jars()} jars of Kafka Connect and Debezium in the cache")
