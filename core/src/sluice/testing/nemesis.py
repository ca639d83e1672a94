"""The nemesis: ingests that run while the environment fails, composed by a seed and checked
by ``sluice audit`` and the exact multiset of payloads (docs/fault-model.md).

A :class:`Scenario` is a transport (Kafka or MQTT), a sink (Parquet, Iceberg or Delta), a store
(the local disk, or a real S3 server: SeaweedFS behind the fault-injecting proxy of
:mod:`sluice.testing.s3proxy`, holding the Parquet dataset or the Iceberg warehouse) and a
seed; for Kafka, a broker (``Scenario.broker``): noida-db, one Apache Kafka node, or three
Apache Kafka nodes (replication 3, min ISR 2), whose own faults kill a partition's leader, pause
a node past its session timeout and move the group's coordinator, while an ``acks=all``
producer publishes; on Apache Kafka (one node or three) the broker's own retention also
deletes the topic's segments.
:func:`run_scenario` starts brokers of its own (so it may restart, truncate and recreate
them), then plays rounds. Each round publishes messages with unique ids (some malformed, for
the quarantine), lets the sensing model decide what to emit (:func:`sluice.sensing.next_emission`
with a cursor that survives a sensor restart, as the Airflow trigger's does), and ingests the
emitted batch with one fault injected at one step: a failpoint the fault is armed at
(:mod:`sluice.spark.failpoints`). Every fault of the transport and sink comes once, in an
order the seed chooses, then ``extra`` more chosen by the seed. A last phase ingests what is
left, accepting the losses the faults caused, as an operator would.

The oracle, after the last round:

- ``sluice audit`` of the sink passes (nothing missing below a committed offset, nothing
  doubled);
- no payload id is in the sink twice, and every id in it was published;
- every published id missing from the sink is accounted for: Kafka, an offset the nemesis
  deleted (retention) that a batch record lists as lost, or a message of a topic that was
  deleted and recreated before it was read, which a batch record lists as recreated; MQTT, a
  message the broker itself lost when it restarted without persistence;
- nothing waits: the group's lag is 0 (Kafka) or the session is empty (MQTT).

A change data capture scenario (``Scenario(write_mode="upsert")``, Kafka into a current-state
Iceberg or Delta table: :mod:`.nemesis_cdc`) publishes Debezium changes of a simulated source
table instead, plays every fault above but those that delete messages on purpose (retention,
segment-retention, recreate), and is judged by the table against the source table, the
quarantine against the bad messages sent, ``sluice audit`` and the lag.

A routed scenario (``Scenario(routes=True)``, Kafka: :mod:`.nemesis_routes`) publishes
payloads that carry a ``kind``, routed by it to route tables of every sink kind (Iceberg
tables on the scenario's faulty catalog, so the catalog's faults apply whatever its own sink,
Delta tables and a Parquet dataset), the scenario's sink the ingest's own (where the messages
with no route go); kills also fall between two tables' commits and inside a table's publish.
It is judged by ``sluice audit --routes`` and by every id in exactly the place its payload
names (its table, its table's quarantine, or the ingest's own sink), once.

Any failure names the seed, which replays the scenario. ``bench/nemesis.py --seeds N`` runs
many; the test suite runs a fixed set that covers every fault on each transport and sink.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from ..batch import BatchSpec, plan_batch
from ..brokers import (
    BrokerProcess,
    KafkaCluster,
    start_kafka,
    start_kafka_cluster,
    start_mosquitto,
    start_noida,
)
from ..cursor import BatchCursor
from ..kafka.config import DEFAULT_READER
from ..sensing import next_emission
from .waiting import wait_until

__all__ = ["FAULTS", "Fault", "Outcome", "RouteFindings", "Scenario", "faults_for", "run_scenario"]

log = logging.getLogger(__name__)
T = TypeVar("T")

Transport = Literal["kafka", "mqtt"]
SinkKind = Literal["parquet", "iceberg", "delta"]
Store = Literal["local", "s3"]
#: The Kafka world's broker: noida-db, one Apache Kafka node, or three Apache Kafka nodes.
KafkaBroker = Literal["noida", "kafka", "cluster"]
#: How the ingests write: appended messages, or Debezium changes applied to a current-state
#: table (``write_mode="upsert"``, Kafka into Iceberg or Delta: :mod:`.nemesis_cdc`).
WriteMode = Literal["append", "upsert"]

SCHEMA = "id STRING, device STRING, temperature DOUBLE"
#: Milliseconds a broker request may take in a scenario (a stalled read fails after this).
REQUEST_TIMEOUT_MS = 8000
#: The healing phase ingests at most this many batches.
HEALING_ROUNDS = 12
#: The three-node cluster's failover, shortened for the nemesis (Kafka's defaults: a broker
#: fenced after 9 s without a heartbeat, a follower out of the ISR after 30 s): a killed or
#: paused node loses its leaderships within seconds, and a restarted one is in sync again soon.
CLUSTER_FAILOVER = {
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
    "replica.lag.time.max.ms": "5000",
}
#: Seconds a node may take to start again, and the cluster to be whole again, after a fault.
CLUSTER_RECOVERY_S = 120.0


@dataclass(frozen=True)
class Fault:
    """A kind of failure of the environment (docs/fault-model.md)."""

    name: str
    steps: tuple[str, ...]  # failpoints it can be injected at
    transports: tuple[Transport, ...] = ("kafka", "mqtt")
    sinks: tuple[SinkKind, ...] = ("parquet", "iceberg", "delta")
    description: str = ""
    stores: tuple[Store, ...] = ("local", "s3")
    brokers: tuple[KafkaBroker, ...] = ("noida", "kafka", "cluster")  # Kafka only
    #: a fault that deletes messages on purpose is no fault of a current-state table's
    #: scenario, whose oracle is "the table equals the source table"
    write_modes: tuple[WriteMode, ...] = ("append", "upsert")


_DRIVER_STEPS = (
    "read.before",
    "read.after_first_chunk",
    "stage.after_write",
    "publish.after_intent",
    "publish.after_rename",
    "publish.after_state",
    "dead_letters.after_send",
    "commit.before",
    "commit.after",
)

#: The steps a routed batch adds to ``kill`` (``Scenario.routes``): after the first and the
#: second table's commit, after every table's; and the sinks' own points inside the second
#: and the third table's publish (a plain ``publish.*`` point fires in the first table's).
#: A batch that publishes to fewer tables passes none of those of a later table.
ROUTED_STEPS = (
    "routes.after_table",
    "routes.after_table@2",
    "routes.after_tables",
    "publish.after_intent@2",
    "publish.after_rename@3",
    "publish.after_state@2",
)

#: Every fault the nemesis injects.
FAULTS: dict[str, Fault] = {
    f.name: f
    for f in (
        Fault("kill", _DRIVER_STEPS, description="the ingest's process SIGKILLed at a step"),
        Fault(
            "second-run",
            ("read.before", "stage.after_write", "publish.after_intent", "commit.before"),
            description="a second run of the same batch starts while the first is at a step",
        ),
        Fault(
            "overlapping-run",
            ("read.before", "stage.after_write", "commit.before"),
            transports=("kafka",),
            description="a run of a batch planned anew (overlapping) starts meanwhile",
        ),
        Fault(
            "retention",
            ("read.before", "read.after_first_chunk", "stage.after_write", "commit.before"),
            transports=("kafka",),
            description="retention deletes the start of a partition at a step",
            write_modes=("append",),
        ),
        Fault(
            "segment-retention",
            ("read.before", "stage.after_write", "commit.before"),
            transports=("kafka",),
            brokers=("kafka", "cluster"),
            description="the broker's own retention deletes every segment of the topic "
            "(retention.ms 1 ms for a moment), not DeleteRecords",
            write_modes=("append",),
        ),
        Fault(
            "recreate",
            ("read.before", "stage.after_write", "commit.after"),
            transports=("kafka",),
            description="the topic is deleted and created again, and new messages arrive",
            write_modes=("append",),
        ),
        Fault(
            "partitions-added",
            ("read.before", "commit.after"),
            transports=("kafka",),
            description="the topic gets another partition, and messages in it",
        ),
        Fault(
            "broker-restart",
            ("read.after_first_chunk", "commit.before", "commit.midway"),
            description="the broker restarts (keeping its data) mid-read or mid-commit",
        ),
        Fault(
            "broker-restart-volatile",
            ("read.before", "commit.midway"),
            transports=("mqtt",),
            description="mosquitto restarts without its persistence: it forgets what it held",
        ),
        Fault("catalog-fail", ("read.before",), sinks=("iceberg",), description="refused"),
        Fault("catalog-conflict", ("read.before",), sinks=("iceberg",), description="conflict"),
        Fault(
            "catalog-unknown",
            ("read.before",),
            sinks=("iceberg",),
            description="the commit happens and its answer is lost",
        ),
        Fault(
            "catalog-unknown-before",
            ("read.before",),
            sinks=("iceberg",),
            description="the answer is lost and the commit did not happen",
        ),
        Fault("executor-lost", ("read.before",), description="a writing task's executor dies"),
        Fault(
            "sensor-restart",
            ("read.before",),
            description="the sensor (triggerer, daemon) restarts and resumes from its cursor",
        ),
        Fault(
            "s3-restart",
            ("stage.after_write", "publish.after_intent", "commit.before"),
            description="the S3 server is killed at a step and starts again while the ingest "
            "goes on (its requests meet a dead, then a starting server)",
            stores=("s3",),
        ),
        Fault(
            "s3-error",
            ("read.before", "stage.after_write", "publish.after_intent", "commit.before"),
            description="the store answers the next requests (some or all methods) with "
            "500 or 503, a few times or until the round ends",
            stores=("s3",),
        ),
        Fault(
            "leader-kill",
            ("read.after_first_chunk", "commit.before"),
            transports=("kafka",),
            brokers=("cluster",),
            description="the leader of a partition of the topic is SIGKILLed; acks=all "
            "messages are published while its partitions fail over; it starts again",
        ),
        Fault(
            "broker-pause",
            ("read.after_first_chunk", "commit.before"),
            transports=("kafka",),
            brokers=("cluster",),
            description="the leader of a partition is paused (SIGSTOP) until the cluster has "
            "fenced it (past its session timeout), then resumed (SIGCONT)",
        ),
        Fault(
            "coordinator-move",
            ("commit.before",),
            transports=("kafka",),
            brokers=("cluster",),
            description="the group's coordinator is SIGKILLed as the offsets are committed; "
            "the coordinator moves to another node; the node starts again",
        ),
    )
}


def faults_for(
    transport: Transport,
    sink: SinkKind,
    store: Store = "local",
    broker: KafkaBroker = "noida",
    write_mode: WriteMode = "append",
    routes: bool = False,
) -> list[Fault]:
    """The faults that apply to a transport, a sink, a store, (Kafka) a broker and a write
    mode; with ``routes``, the Iceberg faults whatever the sink (some route tables are
    Iceberg tables)."""
    return [
        f
        for f in FAULTS.values()
        if transport in f.transports
        and (sink in f.sinks or (routes and "iceberg" in f.sinks))
        and store in f.stores
        and (transport != "kafka" or broker in f.brokers)
        and write_mode in f.write_modes
    ]


@dataclass(frozen=True)
class Scenario:
    transport: Transport
    sink: SinkKind
    seed: int
    extra: int = 0  # rounds with faults chosen at random, after one of each
    value_format: str = "json"  # or "avro": payloads in the wire format of a schema registry
    only: tuple[str, ...] = ()  # play only these faults (default: every one that applies)
    store: Store = "local"  # or "s3": the sink on the real S3 server, through the fault proxy
    #: Kafka: noida-db, one Apache Kafka node, or the three-node Apache Kafka cluster
    broker: KafkaBroker = "noida"
    #: Kafka: the range reader (``options.reader``): "auto", "kafka-python", "confluent", or
    #: "spark" (Spark's own Kafka source; the session needs it on its class path)
    reader: str = DEFAULT_READER
    #: "upsert": Debezium changes of a simulated source table into a current-state table
    #: (Kafka into Iceberg or Delta, JSON envelopes; :mod:`.nemesis_cdc`)
    write_mode: WriteMode = "append"
    #: Kafka: each batch routed by a field of its payloads to route tables of every sink
    #: kind, this scenario's sink the ingest's own (:mod:`.nemesis_routes`)
    routes: bool = False

    def __post_init__(self) -> None:
        if self.write_mode == "upsert" and (
            self.transport != "kafka" or self.sink == "parquet" or self.value_format != "json"
        ):
            raise ValueError(
                "The nemesis plays write_mode='upsert' (change data capture) on Kafka into an "
                "Iceberg or Delta table, with JSON envelopes."
            )
        if self.routes and (
            self.transport != "kafka"
            or self.write_mode != "append"
            or self.value_format != "json"
            or self.store != "local"
        ):
            raise ValueError(
                "The nemesis plays routes on Kafka, appending JSON payloads, on the local "
                "disk (write_mode 'append', value_format 'json', store 'local')."
            )

    @property
    def replay(self) -> str:
        """The command that plays this scenario again."""
        broker = f" --broker {self.broker}" if self.transport == "kafka" else ""
        if self.transport == "kafka" and self.reader != DEFAULT_READER:
            broker += f" --reader {self.reader}"
        if self.write_mode != "append":
            broker += f" --write-mode {self.write_mode}"
        if self.routes:
            broker += " --routes"
        only = f" --only {','.join(self.only)}" if self.only else ""
        return (
            f"bench/nemesis.py --transport {self.transport} --sink {self.sink} "
            f"--store {self.store}{broker}{only} --extra {self.extra} --seed {self.seed}"
        )

    def __str__(self) -> str:
        fmt = "" if self.value_format == "json" else f" {self.value_format}"
        fmt += "" if self.write_mode == "append" else f" {self.write_mode}"
        fmt += " routed" if self.routes else ""
        store = "" if self.store == "local" else f" on {self.store}"
        broker = f" ({self.broker})" if self.transport == "kafka" else ""
        if self.transport == "kafka" and self.reader != DEFAULT_READER:
            broker = f" ({self.broker}, reader {self.reader})"
        return f"{self.transport}{broker}/{self.sink}{fmt}{store} seed {self.seed}"

    def faults(self) -> list[Fault]:
        """The faults that apply to this scenario (before ``only``)."""
        return faults_for(
            self.transport, self.sink, self.store, self.broker, self.write_mode, self.routes
        )


@dataclass
class CdcFindings:
    """What the oracle of a current-state table's scenario found besides the audit
    (:mod:`.nemesis_cdc`): the table against the simulated source table."""

    source_rows: int = 0  # rows of the source table at the end
    rows: int = 0  # rows of the current-state table
    differs: list[str] = field(default_factory=list)  # keys whose row is not the source's
    changes: int = 0  # good changes published (inserts, updates, deletes, truncates)
    bad: int = 0  # messages published that must be quarantined
    kinds: Counter[str] = field(default_factory=Counter)  # of the bad ones, by what is wrong
    quarantined: int = 0  # rows of the quarantine table
    moved: int = 0  # keys whose changes went to more than one partition
    #: changes committed in a later batch than a newer change of their key (after a key moved
    #: partition): each must lose to the newer one
    overtaken: int = 0
    truncates: int = 0

    @property
    def ok(self) -> bool:
        return not self.differs


@dataclass
class RouteFindings:
    """What the oracle of a routed scenario found besides the audit (:mod:`.nemesis_routes`):
    where each payload id is against where it belongs."""

    tables: int = 0  # route tables
    #: messages published, by what they are (routed, bad-in-route, no-route, ...)
    sent: Counter[str] = field(default_factory=Counter)
    #: ids found somewhere else than where they belong (a table, its quarantine, the home)
    misplaced: list[str] = field(default_factory=list)
    rows: Counter[str] = field(default_factory=Counter)  # rows found, by place

    @property
    def ok(self) -> bool:
        return not self.misplaced


@dataclass
class Outcome:
    """What a scenario did and what the oracle found. A current-state table's scenario
    (``cdc`` set) counts its bad messages in ``doubled`` (quarantined twice), ``missing``
    (not quarantined) and ``unknown`` (quarantined, not sent as bad)."""

    scenario: Scenario
    injected: list[str] = field(default_factory=list)  # "fault@step", in order
    published: int = 0
    held: int = 0  # distinct ids in the sink
    doubled: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)  # ids in the sink nobody published
    missing: list[str] = field(default_factory=list)  # published, not in the sink, unaccounted
    accounted: int = 0  # published, not in the sink, lost to an injected fault and recorded
    audit_ok: bool = False
    audit_lines: list[str] = field(default_factory=list)
    waiting: int = 0  # left on the broker after the last phase
    errors: list[str] = field(default_factory=list)  # what the rounds' ingests raised
    #: faults armed at a step that no ingest reached ("fault@step"), or in a round that
    #: emitted no batch: named, so a scenario that claims a fault can show it happened
    unfired: list[str] = field(default_factory=list)
    cdc: CdcFindings | None = None  # write_mode "upsert"
    routed: RouteFindings | None = None  # routes

    @property
    def ok(self) -> bool:
        return (
            self.audit_ok
            and not self.doubled
            and not self.unknown
            and not self.missing
            and not self.waiting
            and (self.cdc is None or self.cdc.ok)
            and (self.routed is None or self.routed.ok)
        )

    def report(self) -> str:
        verdict = "OK" if self.ok else "FAILED"
        lines = [
            f"{verdict}: {self.scenario} (replay: {self.scenario.replay})",
            f"  faults: {', '.join(self.injected)}",
        ]
        cdc = self.cdc
        if cdc is None:
            lines.append(
                f"  published {self.published}, in the sink {self.held}, lost to faults and "
                f"recorded {self.accounted}, doubled {len(self.doubled)}, missing "
                f"{len(self.missing)}, unknown {len(self.unknown)}, left waiting {self.waiting}"
            )
        else:
            lines += [
                f"  published {self.published} messages ({cdc.changes} changes, "
                f"{cdc.truncates} of them truncates, {cdc.bad} bad); {cdc.moved} keys moved "
                f"partition, {cdc.overtaken} changes read after a newer one of their key was "
                "committed",
                f"  the table: {cdc.rows} rows, the source table {cdc.source_rows}, rows that "
                f"differ {len(cdc.differs)}; quarantined {cdc.quarantined} (bad ones twice "
                f"{len(self.doubled)}, bad ones not quarantined {len(self.missing)}, good ones "
                f"quarantined {len(self.unknown)}); left waiting {self.waiting}",
                f"  bad messages: {', '.join(f'{k} {n}' for k, n in sorted(cdc.kinds.items()))}",
            ]
        routed = self.routed
        if routed is not None:
            sent = ", ".join(f"{k} {n}" for k, n in sorted(routed.sent.items()))
            lines.append(
                f"  routed to {routed.tables} tables: {sent}; misplaced {len(routed.misplaced)}"
            )
        if self.unfired:
            lines.append(f"  not reached: {', '.join(self.unfired)}")
        if not self.ok:
            lines += [f"  doubled: {self.doubled[:10]}", f"  missing: {self.missing[:10]}"]
            if routed is not None and routed.misplaced:
                lines.append(f"  misplaced: {routed.misplaced[:10]}")
            if self.unknown:
                lines.append(f"  unknown: {self.unknown[:10]}")
            if cdc is not None and cdc.differs:
                lines += ["  the table against the source:"]
                lines += [f"    {d}" for d in cdc.differs[:10]]
            lines += ["  audit:"] + [f"    {line}" for line in self.audit_lines]
            lines += ["  errors of the rounds:"] + [f"    {e}" for e in self.errors[-10:]]
        return "\n".join(lines)


def run_scenario(spark: Any, scenario: Scenario, workdir: Path) -> Outcome:
    """Play ``scenario`` on ``spark`` with brokers and a sink under ``workdir`` (see the
    module docstring); the brokers are stopped at the end."""
    workdir.mkdir(parents=True, exist_ok=True)
    world = _world(scenario)(spark, scenario, workdir)
    try:
        with world.store_environment(), world.catalog_environment():
            world.open()
            chooser = random.Random(scenario.seed)
            plan = [f for f in scenario.faults() if not scenario.only or f.name in scenario.only]
            chooser.shuffle(plan)
            plan += [chooser.choice(plan) for _ in range(scenario.extra)]
            for fault in plan:
                world.publish(chooser.randint(6, 30), chooser)
                world.round(fault, chooser.choice(_steps(fault, scenario)), chooser)
            world.heal()
            return world.judge()
    finally:
        world.close()


def _world(scenario: Scenario) -> type[_World]:
    if scenario.write_mode == "upsert":
        from .nemesis_cdc import CdcWorld

        return CdcWorld
    if scenario.routes:
        from .nemesis_routes import RoutedWorld

        return RoutedWorld
    return _KafkaWorld if scenario.transport == "kafka" else _MqttWorld


def _steps(fault: Fault, scenario: Scenario) -> tuple[str, ...]:
    if scenario.routes and fault.name == "kill":  # routes and dead letters do not combine
        steps = [s for s in fault.steps if not s.startswith("dead_letters")]
        return (*steps, *ROUTED_STEPS)
    if scenario.transport == "kafka":
        return tuple(s for s in fault.steps if s != "commit.midway") or ("commit.before",)
    return tuple(s for s in fault.steps if not s.startswith("dead_letters"))


# ---- the world of a scenario ------------------------------------------------------------


def _payload(message_id: str, chooser: random.Random) -> bytes:
    if chooser.random() < 0.1:
        return f"not json {message_id}".encode()
    reading = {"id": message_id, "device": f"d{chooser.randint(0, 4)}", "temperature": 1.5}
    return json.dumps(reading).encode()


_ID_IN_VALUE = re.compile(rb"not json (\S+)")
#: The payloads' Avro schema (``Scenario.value_format="avro"``): SCHEMA's fields.
AVRO_SCHEMA = {
    "type": "record",
    "name": "Reading",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "device", "type": "string"},
        {"name": "temperature", "type": "double"},
    ],
}


class _AvroPayloads:
    """Avro payloads in the wire format of a stand-in schema registry of the scenario's own;
    the malformed ones (a wrong magic byte, or a frame whose record is garbage) carry their
    id as JSON ones do, for the oracle."""

    def __init__(self, topic: str) -> None:
        from ..formats.encode import Encoder
        from ..registry_server import start_schema_registry

        self.registry = start_schema_registry()
        self.encoder = Encoder("avro", topic, json.dumps(AVRO_SCHEMA), self.registry.url)

    def __call__(self, message_id: str, chooser: random.Random) -> bytes:
        from ..formats.wire import frame

        if chooser.random() < 0.1:
            marker = f"not json {message_id}".encode()
            return b"\x07" + marker if chooser.random() < 0.5 else frame(1, b"\xff" + marker)
        reading = {"id": message_id, "device": f"d{chooser.randint(0, 4)}", "temperature": 1.5}
        return self.encoder.encode(reading)


class _World:
    """Brokers, a topic or session, a sink, and what was published (the truth the oracle
    compares the sink with)."""

    def __init__(self, spark: Any, scenario: Scenario, workdir: Path) -> None:
        self.spark = spark
        self.scenario = scenario
        self.workdir = workdir
        self.name = f"nemesis-{scenario.seed}-{scenario.transport}-{scenario.sink}"
        self.catalog = f"nemesis{scenario.seed}{scenario.transport}"
        self.sink = {
            "parquet": str(workdir / "sink"),
            "iceberg": f"iceberg://{self.catalog}/nemesis.readings",
            "delta": f"delta://{workdir / 'sink'}",
        }[scenario.sink]
        self.s3: Any = None  # the S3 server and its proxy (store "s3")
        if scenario.store == "s3" and scenario.sink == "delta":
            raise ValueError("The nemesis plays the Delta sink on the local disk only.")
        if scenario.store == "s3" and scenario.sink == "parquet":
            self.sink = f"s3://{S3_BUCKET}/sink"
        self.outcome = Outcome(scenario)
        self.published: list[str] = []
        self.counter = 0
        self.cursor = BatchCursor()
        self.saved_cursor = self.cursor.to_json()
        self.accept_loss = False
        self.quarantine_limit = True  # off once a batch went over it, as an operator would
        self.clock = 0.0  # the sensor's clock: one "hour" per round, so leases run out
        self.broker: BrokerProcess | None = None
        self.avro = _AvroPayloads(self.name) if scenario.value_format == "avro" else None

    def payload(self, message_id: str, chooser: random.Random) -> bytes:
        if self.avro is not None:
            return self.avro(message_id, chooser)
        return _payload(message_id, chooser)

    def formats(self) -> dict[str, Any]:
        """The ingest's format options (json: none)."""
        if self.avro is None:
            return {}
        return {"value_format": "avro", "schema_registry": self.avro.registry.url}

    # -- to implement --------------------------------------------------------------------

    def open(self) -> None:
        raise NotImplementedError

    def publish(self, count: int, chooser: random.Random) -> None:
        raise NotImplementedError

    def waiting(self) -> BatchSpec | None:
        """What the sensor sees waiting (Kafka: the whole backlog; MQTT: the next batch)."""
        raise NotImplementedError

    def source(self) -> dict[str, Any]:
        raise NotImplementedError

    def hook(self, fault: Fault, spec: BatchSpec, chooser: random.Random) -> Callable[[], None]:
        """What the fault does at its step (faults common to both transports here)."""
        if fault.name == "second-run":
            return lambda: self._ingest(spec, nested=True)
        if fault.name == "broker-restart":
            return self._restart_broker
        if fault.name.startswith("catalog-"):
            return lambda: self._plan_catalog_fault(fault.name, chooser)
        if fault.name.startswith("s3-"):
            return self.s3.hook(fault.name, chooser)  # type: ignore[no-any-return]
        raise NotImplementedError(fault.name)

    def accounted(self, missing: list[str]) -> tuple[list[str], int]:
        """Split ``missing`` ids into (unaccounted, number accounted for)."""
        raise NotImplementedError

    def left_waiting(self) -> int:
        raise NotImplementedError

    def close(self) -> None:
        if self.broker is not None:
            self.broker.close()
        if self.avro is not None:
            self.avro.registry.stop()

    # -- the rounds ----------------------------------------------------------------------

    def _new_id(self) -> str:
        self.counter += 1
        return f"s{self.scenario.seed}-{self.counter}"

    def round(self, fault: Fault, step: str, chooser: random.Random) -> None:
        from ..spark.failpoints import armed

        self.outcome.injected.append(f"{fault.name}@{step}")
        if fault.name == "sensor-restart":
            self._restart_sensor()
        self.clock += 3600
        spec = self._emit()
        if spec is None:
            self.outcome.unfired.append(f"{fault.name}@{step} (no batch emitted)")
            return
        mode = chooser.choice(["driver", "executors"])
        if fault.name == "kill":
            self._kill_at(spec, step, mode)
            return
        if fault.name == "executor-lost":
            with armed("task.lost", "kill"):
                self._ingest(spec, mode=mode)
            return
        if fault.name == "sensor-restart":
            self._ingest(spec, mode=mode)
            return
        action = _Once(self.hook(fault, spec, chooser))
        # A rerun of a batch already written (its commit failed in the round before) only
        # commits and never reads: the fault is played once more on the next batch.
        for attempt in range(2):
            try:
                with armed(step, action):
                    self._ingest(spec, mode=mode)
            finally:
                self.settle()
            if action.done or attempt == 1:
                break
            self.clock += 3600
            if (spec := self._emit()) is None:
                break
        if not action.done:
            self.outcome.unfired.append(f"{fault.name}@{step}")

    def settle(self) -> None:
        """After a round: what a fault set going in the background is over."""
        if self.s3 is not None:
            self.s3.settle()  # the server is up again, no error is left planned

    def _emit(self) -> BatchSpec | None:
        """The sensing model's next emission (one batch in flight; a failed one again). A
        sensor whose question fails restarts and pokes once more, as a trigger polls again; if
        that fails too, the round emits nothing (its fault is named in ``Outcome.unfired``)."""
        for attempt in range(2):
            try:
                waiting = self.waiting()
                break
            except Exception as exc:  # a sensor that cannot reach the broker restarts
                self.outcome.errors.append(f"sensing: {_describe(exc)}")
                self._restart_sensor()
                if attempt == 1:
                    return None
        cursor, decision = next_emission(self.cursor, waiting, self.clock, rerun_after=60)
        self.cursor = cursor
        self.saved_cursor = cursor.to_json()  # the trigger keeps it in its state store
        return None if isinstance(decision, str) else decision.spec

    def _restart_sensor(self) -> None:
        from ..kafka.watch import stop_watches

        stop_watches()
        self.cursor = BatchCursor.from_json(self.saved_cursor)

    def _ingest(self, spec: BatchSpec, mode: str = "driver", nested: bool = False) -> None:
        from ..spark import ingest

        try:
            ingest(
                self.spark,
                spec,
                self.sink,
                source=self.source(),
                mode=mode,  # type: ignore[arg-type]
                **self._write_options(),
                **self._operator_choices(),
                **self.formats(),
            )
        except Exception as exc:
            self.outcome.errors.append(f"{'nested ' if nested else ''}ingest: {_describe(exc)}")
            # the operator reads the error and accepts the loss, or lifts the quarantine limit
            # (an MQTT session redelivers the same few messages first: soak seed 54's batch of
            # three, two of them malformed, was refused on every retry)
            if type(exc).__name__ == "DataLossError":
                self.accept_loss = True
            if type(exc).__name__ == "QuarantineLimitError":
                self.quarantine_limit = False

    def _write_options(self) -> dict[str, Any]:
        """How the ingests write: messages appended as :data:`SCHEMA`'s columns."""
        return {"schema": SCHEMA}

    def _operator_choices(self) -> dict[str, Any]:
        """The ingest options an operator changes after an error (see :meth:`_ingest`)."""
        lifted = {} if self.quarantine_limit else {"max_quarantined": None}
        return {"fail_on_data_loss": not self.accept_loss, **lifted}

    def _kill_at(self, spec: BatchSpec, step: str, mode: str) -> None:
        from .crash import run_child

        arguments = {
            "spec": spec.to_dict(),
            "sink": self.sink,
            "source": self.source(),
            "mode": mode,
            **self._write_options(),
            **self._operator_choices(),
            **self.formats(),
        }
        code, stderr = run_child(self.spark, arguments, step)
        if code not in (-9, 0):
            self.outcome.errors.append(f"killed ingest exited {code}: {stderr[-300:]}")

    def _restart_broker(self) -> None:
        assert self.broker is not None
        self.broker.restart()

    def _plan_catalog_fault(self, name: str, chooser: random.Random) -> None:
        from .faulty_catalog import plan_fault

        fault = {
            "catalog-fail": "fail",
            "catalog-conflict": "conflict",
            "catalog-unknown": "unknown-after",
            "catalog-unknown-before": "unknown-before",
        }[name]
        plan_fault(fault, chooser.choice(["readings", "readings__quarantine"]))

    @contextlib.contextmanager
    def catalog_environment(self) -> Iterator[None]:
        """The Iceberg catalog of the scenario, configured by name (child processes inherit
        it): a real SQLite catalog whose commits fail on demand (the sink's, or a routed
        scenario's route tables')."""
        if self.scenario.sink != "iceberg" and not self.scenario.routes:
            yield
            return
        prefix = f"PYICEBERG_CATALOG__{self.catalog.upper()}__"
        warehouse = (self.workdir / "warehouse").as_uri()
        if self.scenario.store == "s3":
            warehouse = f"s3://{S3_BUCKET}/warehouse"
        values = {
            f"{prefix}URI": f"sqlite:///{self.workdir / 'catalog.db'}",
            f"{prefix}WAREHOUSE": warehouse,
            f"{prefix}PY_CATALOG_IMPL": "sluice.testing.faulty_catalog.FaultyCatalog",
        }
        before = {k: os.environ.get(k) for k in values}
        os.environ.update(values)
        try:
            yield
        finally:
            for key, value in before.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value

    @contextlib.contextmanager
    def store_environment(self) -> Iterator[None]:
        """Store "s3": the scenario's S3 server and its proxy, and the standard AWS variables
        pointing at the proxy (child processes inherit them; no profile is read)."""
        if self.scenario.store != "s3":
            yield
            return
        self.s3 = _S3Store(self.workdir / "seaweedfs")
        try:
            with _environment(self.s3.environment()):
                yield
        finally:
            self.s3.close()
            self.s3 = None

    # -- the end -------------------------------------------------------------------------

    def heal(self) -> None:
        """Ingest what is left, accepting losses, until nothing waits."""
        self.accept_loss = True
        self._restart_sensor()
        for _ in range(HEALING_ROUNDS):
            self.clock += 3600
            spec = self._emit()
            if spec is None and self.left_waiting() == 0:
                return
            if spec is not None:
                self._ingest(spec)

    def judge(self) -> Outcome:
        from ..audit import audit

        outcome = self.outcome
        found = sink_ids(self.sink)
        published = set(self.published)
        outcome.published = len(published)
        outcome.held = len(found)
        outcome.doubled = sorted(i for i, n in found.items() if n > 1)
        outcome.unknown = sorted(set(found) - published)
        missing = sorted(published - set(found))
        outcome.missing, outcome.accounted = self.accounted(missing)
        report = audit(self.sink, self.source() if self.scenario.transport == "kafka" else None)
        outcome.audit_ok = report.ok
        outcome.audit_lines = report.lines()
        outcome.waiting = self.left_waiting()
        return outcome


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    """``values`` in ``os.environ`` while the block runs, then what was there before."""
    before = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


#: The bucket of a scenario's S3 server.
S3_BUCKET = "nemesis"


class _S3Store:
    """A scenario's own S3 server (SeaweedFS, its data under ``workdir``) behind the
    counting, fault-injecting proxy the ingests talk to; the faults of the store "s3"."""

    def __init__(self, workdir: Path) -> None:
        from ..s3server import start_seaweedfs
        from .s3proxy import S3Proxy

        self.server = start_seaweedfs(workdir=workdir)
        self.server.create_bucket(S3_BUCKET)
        self.proxy = S3Proxy(f"{self.server.host}:{self.server.port}").start()
        self._restarting: threading.Thread | None = None
        self._restart_error: BaseException | None = None

    def environment(self) -> dict[str, str]:
        return {
            **self.server.environment(),
            "AWS_ENDPOINT_URL": self.proxy.endpoint,
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def hook(self, name: str, chooser: random.Random) -> Callable[[], None]:
        if name == "s3-restart":
            return self._kill_and_start_again
        kind = chooser.choice(["500", "503"])
        method = chooser.choice(["*", "PUT", "GET"])
        times = chooser.choice([1, 2, 3, 1000])  # 1000: a store that fails all round
        return lambda: self.proxy.fail(kind, method, times=times)  # type: ignore[arg-type]

    def _kill_and_start_again(self) -> None:
        """Kill the server now; it starts again on a thread (same ports, same data), so the
        ingest goes on against a dead, then a starting server."""
        self.server.kill()

        def start() -> None:
            try:
                self.server.start()
            except BaseException as exc:
                self._restart_error = exc

        self._restarting = threading.Thread(target=start, daemon=True)
        self._restarting.start()

    def settle(self) -> None:
        """After a round: the server is up again and no planned error is left."""
        if self._restarting is not None:
            self._restarting.join(120)
            self._restarting = None
            if self._restart_error is not None:
                error, self._restart_error = self._restart_error, None
                raise RuntimeError(f"the S3 server did not start again: {error}") from error
        self.proxy.clear()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.settle()
        with contextlib.suppress(Exception):
            self.proxy.close()
        self.server.close()


class _Once:
    """``action`` the first time the failpoint is passed (a rerun inside it passes it too);
    ``done`` says whether it was."""

    def __init__(self, action: Callable[[], None]) -> None:
        self.action = action
        self.done = False

    def __call__(self) -> None:
        if not self.done:
            self.done = True
            self.action()


def _answered(question: Callable[[], T]) -> T | None:
    """``question``'s answer, or None while the cluster cannot answer it (a metadata client
    still tries the node a fault killed or paused; the condition is asked again)."""
    from kafka.errors import KafkaError

    try:
        return question()
    except (KafkaError, OSError) as exc:
        log.debug("the cluster did not answer yet: %s", exc)
        return None


def _describe(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text[:300]}"


# ---- Kafka ---------------------------------------------------------------------------------


class _KafkaWorld(_World):
    PARTITIONS = 3

    def __init__(self, spark: Any, scenario: Scenario, workdir: Path) -> None:
        super().__init__(spark, scenario, workdir)
        self.topic = self.name
        self.group = f"{self.name}-group"
        self.generation = 0
        self.partitions = self.PARTITIONS
        self.where: dict[str, tuple[int, int, int]] = {}  # id -> (generation, partition, offset)
        self.deleted: dict[tuple[int, int], int] = {}  # (generation, partition) -> below
        self.producer: Any = None
        self.queue: Any = None
        self.cluster: KafkaCluster | None = None  # broker "cluster"
        self.background: threading.Thread | None = None  # a fault's recovery, this round
        self.background_error: BaseException | None = None

    @property
    def replication(self) -> int:
        """The topic's replicas: one on a single node, three on the cluster (a topic created
        with the client's default of one replica loses a killed leader's messages)."""
        return len(self.cluster.nodes) if self.cluster is not None else 1

    @property
    def bootstrap(self) -> str:
        if self.cluster is not None:
            return self.cluster.bootstrap
        assert self.broker is not None
        return self.broker.bootstrap

    def _start_broker(self, attempt: int) -> None:
        kind = self.scenario.broker
        if kind == "noida":
            self.broker = start_noida(workdir=self.workdir / f"noida-{attempt}")
        elif kind == "kafka":
            self.broker = start_kafka(workdir=self.workdir / f"kafka-{attempt}")
        else:
            self.cluster = start_kafka_cluster(
                3, self.workdir / f"cluster-{attempt}", properties=CLUSTER_FAILOVER
            )

    def _stop_broker(self) -> None:
        if self.cluster is not None:
            self.cluster.close()
            self.cluster = None
        if self.broker is not None:
            self.broker.close()
            self.broker = None

    def open(self) -> None:
        """A broker with the scenario's topic. noida-db has once shown a new topic with fewer
        partitions than it was created with for longer than the wait (soak seed 131, before any
        fault): the harness then starts over on a fresh broker, once."""
        from ..brokers import create_kafka_topic

        for attempt in range(2):
            self._start_broker(attempt)
            create_kafka_topic(self.bootstrap, self.topic, self.partitions, self.replication)
            self._grow_an_auto_created_topic()
            try:
                self._new_producer()
                return
            except TimeoutError:
                if attempt == 1:
                    raise
                with contextlib.suppress(Exception):
                    self.producer.close(5)
                self.producer = None
                self._stop_broker()

    def _new_producer(self) -> None:
        """A producer that knows every partition of the topic: the broker's metadata may show a
        new topic or partition only a moment after the admin call returned (soak seeds 1008 and
        1049 sent to a partition the producer did not know yet)."""
        wait_until(self._producer_sees_every_partition, 30, 0.2, "the topic's partitions")

    def _producer_sees_every_partition(self) -> bool:
        from kafka import KafkaProducer

        if self.producer is not None:
            self.producer.close(5)
        # acks=all: an acknowledged message is on every in-sync replica (min ISR 2 of the
        # cluster's 3), so a leader killed after the acknowledgement cannot take it along
        self.producer = KafkaProducer(bootstrap_servers=self.bootstrap, linger_ms=5, acks="all")
        return len(self.producer.partitions_for(self.topic) or ()) >= self.partitions

    def source(self) -> dict[str, Any]:
        return {
            "connection.uri": self.bootstrap,
            "options.request_timeout": REQUEST_TIMEOUT_MS,
            "options.retry_timeout": 1000,
            "options.reader": self.scenario.reader,
        }

    def publish(self, count: int, chooser: random.Random) -> None:
        sent = []
        for _ in range(count):
            message_id = self._new_id()
            partition = chooser.randrange(self.partitions)
            payload = self.payload(message_id, chooser)
            sent.append((message_id, self._send(payload, message_id.encode(), partition)))
        self.producer.flush(30)
        for message_id, future in sent:
            metadata = future.get(30)
            self.where[message_id] = (self.generation, metadata.partition, metadata.offset)
            self.published.append(message_id)

    def _send(self, payload: bytes | None, key: bytes | None, partition: int | None) -> Any:
        """Send one message (``partition`` None: the one the producer's partitioner picks for
        ``key``, Kafka's default: the key's murmur2 hash); a producer whose metadata lost sight
        of a partition (the broker reported fewer for a moment: soak seeds 1137 and 1200) is
        replaced and the send tried again."""
        for attempt in range(3):
            try:
                return self.producer.send(self.topic, payload, key=key, partition=partition)
            except ValueError as exc:
                if "Unrecognized partition" not in str(exc) or attempt == 2:
                    raise
                self.producer.flush(30)  # what was sent before stays sent
                self._new_producer()
        raise AssertionError("unreachable")

    def _queue(self) -> Any:
        from ..kafka import KafkaMessageQueue

        if self.queue is None:
            queue = KafkaMessageQueue(self.topic)
            queue.configure(
                {
                    **self.source(),
                    "topic": self.topic,
                    "group_id": self.group,
                    "from_beginning": True,
                }
            )
            queue.open(None)
            self.queue = queue
        return self.queue

    def waiting(self) -> BatchSpec | None:
        spec = plan_batch(self._queue())
        return spec

    def _restart_sensor(self) -> None:
        if self.queue is not None:
            with contextlib.suppress(Exception):
                self.queue.close(None)
            self.queue = None
        super()._restart_sensor()

    def hook(self, fault: Fault, spec: BatchSpec, chooser: random.Random) -> Callable[[], None]:
        if fault.name == "overlapping-run":
            return lambda: self._overlapping_run()
        if fault.name == "retention":
            return lambda: self._delete_records(chooser)
        if fault.name == "segment-retention":
            return self._delete_segments
        if fault.name == "recreate":
            return lambda: self._recreate(chooser)
        if fault.name == "partitions-added":
            return lambda: self._add_partition(chooser)
        if fault.name == "broker-restart" and self.cluster is not None:
            return lambda: self._restart_node(chooser.randint(1, 3))
        if fault.name == "leader-kill":
            return lambda: self._kill_leader(chooser)
        if fault.name == "broker-pause":
            return lambda: self._pause_leader(chooser)
        if fault.name == "coordinator-move":
            return self._move_coordinator
        return super().hook(fault, spec, chooser)

    def _restart_broker(self) -> None:
        assert self.broker is not None
        self.broker.restart(90.0)  # Apache Kafka's JVM starts slower than noida-db

    # -- faults of the three-node cluster ------------------------------------------------

    def _restart_node(self, node: int) -> None:
        """broker-restart on the cluster: one node stops and starts again with its data."""
        assert self.cluster is not None
        self._note(f"node {node}")
        self.cluster.restart(node, CLUSTER_RECOVERY_S)

    def _note(self, what: str) -> None:
        """Say which node a fault hit, in the fault's entry of the outcome."""
        self.outcome.injected[-1] += f" ({what})"

    def _metadata_admin(self, without: int | None = None) -> contextlib.closing[Any]:
        """An admin client of the cluster's nodes but ``without`` (a killed or paused one)."""
        from kafka import KafkaAdminClient

        assert self.cluster is not None
        nodes = [n for i, n in enumerate(self.cluster.nodes, 1) if i != without]
        return contextlib.closing(
            KafkaAdminClient(
                bootstrap_servers=",".join(n.bootstrap for n in nodes), request_timeout_ms=5000
            )
        )

    def _leaders(self, without: int | None = None) -> dict[int, int]:
        """partition -> the node that leads it (-1: none), as a node but ``without`` says."""
        with self._metadata_admin(without) as admin:
            topic = self._topic(admin)
        partitions = (topic or {}).get("partitions") or []
        return {int(p["partition_index"]): int(p["leader_id"]) for p in partitions}

    def _coordinator(self, without: int | None = None) -> int:
        """The node that coordinates the scenario's group (FindCoordinator)."""
        with self._metadata_admin(without) as admin:
            return int(admin._manager.run(admin._find_coordinator_id, self.group))

    def _in_background(self, action: Callable[[], None]) -> None:
        """Run ``action`` on a thread while the ingest goes on; :meth:`settle` waits for it."""

        def run() -> None:
            try:
                action()
            except BaseException as exc:
                self.background_error = exc

        self.background = threading.Thread(target=run, daemon=True)
        self.background.start()

    def _kill_leader(self, chooser: random.Random) -> None:
        """SIGKILL the leader of a partition; publish (acks=all) while its partitions fail
        over; start the node again while the ingest goes on."""
        assert self.cluster is not None
        partition = chooser.randrange(self.partitions)
        node = self._leaders()[partition]
        self._note(f"node {node}, leader of partition {partition}")
        self.cluster.kill(node)
        self.publish(chooser.randint(3, 10), chooser)
        self._in_background(lambda: self._start_when_led_elsewhere(node))

    def _start_when_led_elsewhere(self, node: int) -> None:
        """Once the other nodes lead every partition the killed ``node`` led, start it."""
        assert self.cluster is not None
        wait_until(
            lambda: _answered(lambda: node not in self._leaders(without=node).values()),
            CLUSTER_RECOVERY_S,
            0.2,
            f"the partitions of node {node} led by another node",
        )
        self.cluster.start_node(node, CLUSTER_RECOVERY_S)

    def _pause_leader(self, chooser: random.Random) -> None:
        """SIGSTOP the leader of a partition; resume it once the cluster has fenced it (its
        partitions led by other nodes: past the broker session timeout)."""
        assert self.cluster is not None
        partition = chooser.randrange(self.partitions)
        node = self._leaders()[partition]
        self._note(f"node {node}, leader of partition {partition}")
        self.cluster.pause(node)
        cluster = self.cluster

        def resume_once_fenced() -> None:
            try:
                wait_until(
                    lambda: _answered(
                        lambda: self._leaders(without=node).get(partition, node) != node
                    ),
                    CLUSTER_RECOVERY_S,
                    0.2,
                    f"partition {partition} led by another node than the paused {node}",
                )
            finally:
                cluster.resume(node)

        self._in_background(resume_once_fenced)

    def _move_coordinator(self) -> None:
        """SIGKILL the group's coordinator as the offsets are about to be committed; start it
        again once another node coordinates the group."""
        assert self.cluster is not None
        node = self._coordinator()
        self._note(f"node {node}, the group's coordinator")
        self.cluster.kill(node)
        cluster = self.cluster

        def start_once_moved() -> None:
            moved = wait_until(
                lambda: _answered(lambda: (c := self._coordinator(without=node)) != node and c),
                CLUSTER_RECOVERY_S,
                0.2,
                f"a coordinator other than node {node}",
            )
            log.info("the group's coordinator moved from node %s to node %s", node, moved)
            cluster.start_node(node, CLUSTER_RECOVERY_S)

        self._in_background(start_once_moved)

    def settle(self) -> None:
        """After a round: a fault's recovery is over, and (cluster) every node runs and is
        in sync again for the topic and the group's offsets, so the next fault starts from
        a whole cluster."""
        super().settle()
        thread, self.background = self.background, None
        if thread is not None:
            thread.join(CLUSTER_RECOVERY_S * 2)
            if thread.is_alive():
                raise RuntimeError("a fault's recovery did not finish")
        error, self.background_error = self.background_error, None
        if error is not None:
            raise RuntimeError(f"a fault's recovery failed: {error}") from error
        if self.cluster is not None:
            for number, node in enumerate(self.cluster.nodes, 1):
                if node.pid is None:
                    self.cluster.start_node(number, CLUSTER_RECOVERY_S)
                node.resume()
            wait_until(self._cluster_in_sync, CLUSTER_RECOVERY_S, 0.2, "every replica in sync")

    def _cluster_in_sync(self) -> bool:
        assert self.cluster is not None
        every = len(self.cluster.nodes)
        with self._metadata_admin() as admin:
            topics = _answered(lambda: admin.describe_topics([self.topic, "__consumer_offsets"]))
        if topics is None:
            return False
        partitions = [p for t in topics for p in (t.get("partitions") or [])]
        return bool(partitions) and all(
            int(p["leader_id"]) >= 0 and len(p.get("isr_nodes") or ()) == every for p in partitions
        )

    def _admin(self) -> contextlib.closing[Any]:
        """An admin client of the broker, closed after the block."""
        from kafka import KafkaAdminClient

        return contextlib.closing(KafkaAdminClient(bootstrap_servers=self.bootstrap))

    def _overlapping_run(self) -> None:
        spec = plan_batch(self._queue())
        if spec is not None:
            self._ingest(spec, nested=True)

    def _delete_records(self, chooser: random.Random) -> None:
        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap)
        try:
            tps = [TopicPartition(self.topic, p) for p in range(self.partitions)]
            starts, ends = consumer.beginning_offsets(tps), consumer.end_offsets(tps)
        finally:
            consumer.close()
        held = [tp for tp in tps if ends[tp] > starts[tp]]
        if not held:
            return
        tp = chooser.choice(held)
        below = chooser.randint(starts[tp] + 1, ends[tp])
        with self._admin() as admin:
            admin.delete_records({tp: below})
        key = (self.generation, tp.partition)
        self.deleted[key] = max(self.deleted.get(key, 0), below)

    def _delete_segments(self) -> None:
        """Apache Kafka's own retention deletes the topic's logs: with ``retention.ms`` 1 ms
        every segment is past it (the active one is rolled first), and the next retention
        check (every second) deletes them all; then the topic keeps its messages again. The
        log starts the broker reports afterwards are what it deleted below."""
        from kafka.admin import ConfigResource, ConfigResourceType

        from ..kafka.ranges import log_bounds

        kwargs = {"bootstrap_servers": self.bootstrap}
        partitions = list(range(self.partitions))
        ends = {p: end for p, (_, end) in log_bounds(kwargs, self.topic, partitions).items()}

        def retention(ms: str) -> None:
            # AlterConfigs replaces the topic's settings: the scenario's topic has no others
            topic = ConfigResource(ConfigResourceType.TOPIC, self.topic, {"retention.ms": ms})
            with self._admin() as admin:
                admin.alter_configs([topic])

        def deleted() -> bool:
            found = log_bounds(kwargs, self.topic, partitions)
            return all(start >= ends[p] for p, (start, _) in found.items())

        retention("1")
        try:
            wait_until(deleted, 30, 0.2, "the broker's retention to delete the topic's segments")
        finally:
            retention("-1")
        for p, (start, _) in log_bounds(kwargs, self.topic, partitions).items():
            key = (self.generation, p)
            self.deleted[key] = max(self.deleted.get(key, 0), start)

    def _recreate(self, chooser: random.Random) -> None:
        from ..brokers import create_kafka_topic

        # The producer goes first: its next metadata request would create the deleted topic
        # again with the broker's default of one partition (soak seed 21 of the 200-seed run)
        self.producer.close(5)
        self.producer = None
        try:
            old = self._topic_id()
            with self._admin() as admin:
                admin.delete_topics([self.topic])
                wait_until(lambda: self.topic not in admin.list_topics(), 20, message="deletion")
            create_kafka_topic(self.bootstrap, self.topic, self.partitions, self.replication)
            self._grow_an_auto_created_topic()
            # Apache Kafka deletes a topic asynchronously: the new topic is there once the
            # metadata shows another topic id with every partition led
            wait_until(lambda: self._topic_led(old), 30, 0.1, "the recreated topic")
            self.generation += 1
            self._new_producer()
        finally:
            # a step above that raised is the round's error (the hook runs inside the ingest);
            # the scenario goes on with a producer (CI once published with none: an
            # AttributeError in the next round instead of the scenario's verdict)
            if self.producer is None:
                self._new_producer()
        self.publish(chooser.randint(3, 12), chooser)

    def _grow_an_auto_created_topic(self) -> None:
        """A client's metadata request between the deletion and the creation (soak seed 26 of
        the third 200-seed try; which client was not confirmed) makes noida-db create the
        topic with one partition, and the creation then finds it there: it gets the
        scenario's partitions now. It is a new topic all the same."""
        from kafka.admin import NewPartitions
        from kafka.errors import InvalidPartitionsError

        with self._admin() as admin:
            found = admin.describe_topics([self.topic])[0]["partitions"]
            if len(found) < self.partitions:
                with contextlib.suppress(InvalidPartitionsError):  # its metadata was late
                    admin.create_partitions({self.topic: NewPartitions(self.partitions)})

    def _topic(self, admin: Any) -> dict[str, Any] | None:
        """The topic's metadata (name, topic id, partitions), or None while there is none."""
        for topic in admin.describe_topics([self.topic]):
            if topic.get("name") == self.topic and not topic.get("error_code"):
                return dict(topic)
        return None

    def _topic_id(self) -> str | None:
        """The topic's id where the broker has ids (KIP-516), else None."""
        with self._admin() as admin:
            topic = self._topic(admin)
        found = str(topic.get("topic_id") or "") if topic else ""
        return None if not found or set(found) <= {"0", "-"} else found

    def _topic_led(self, old_id: str | None) -> bool:
        """The topic exists (with another id than ``old_id``, where ids exist) and each of its
        partitions has a leader."""
        with self._admin() as admin:
            topic = self._topic(admin)
        if topic is None:
            return False
        if old_id is not None and self._topic_id() in (old_id, None):
            return False
        partitions = topic.get("partitions") or []
        return len(partitions) >= self.partitions and all(
            int(p.get("leader_id", -1)) >= 0 for p in partitions
        )

    def _add_partition(self, chooser: random.Random) -> None:
        from kafka.admin import NewPartitions

        with self._admin() as admin:
            admin.create_partitions({self.topic: NewPartitions(self.partitions + 1)})
        self.partitions += 1
        self._new_producer()
        self.publish(chooser.randint(3, 10), chooser)

    def accounted(self, missing: list[str]) -> tuple[list[str], int]:
        """A missing id is accounted for when the fault that lost it is one Sluice cannot
        undo and its loss is recorded or happened before the stream ever read there: a
        message of a topic deleted before it was read; an offset retention deleted that a
        batch record lists as lost, or that lies below where the stream began reading that
        partition of the current topic."""
        from ..spark.sinks import open_sink

        records = sorted(open_sink(self.sink).records(), key=lambda r: r.published_at)
        lost_ranges = [
            (int(loss["partition"]), int(loss["start"]), int(loss["end"]))
            for record in records
            for loss in record.lost
            if loss.get("reason") == "retention"
        ]
        began: dict[int, int] = {}  # partition -> first offset read of the current topic
        for record in records:
            for partition in record.reset_partitions:
                began.pop(partition, None)
            for r in record.ranges:
                began[r.partition] = min(began.get(r.partition, r.start), r.start)
        unaccounted = []
        for message_id in missing:
            generation, partition, offset = self.where[message_id]
            if generation < self.generation:
                continue  # its topic was deleted before it was read
            deleted = offset < self.deleted.get((generation, partition), 0)
            recorded = any(p == partition and s <= offset < e for p, s, e in lost_ranges)
            before = offset < began.get(partition, offset + 1)
            if deleted and (recorded or before):
                continue
            unaccounted.append(message_id)
        return unaccounted, len(missing) - len(unaccounted)

    def left_waiting(self) -> int:
        try:
            spec = plan_batch(self._queue())
        except Exception:
            self._restart_sensor()
            spec = plan_batch(self._queue())
        return 0 if spec is None else spec.message_count

    def close(self) -> None:
        with contextlib.suppress(Exception):
            if self.queue is not None:
                self.queue.close(None)
        with contextlib.suppress(Exception):
            if self.producer is not None:
                self.producer.close(5)
        from ..kafka.watch import stop_watches

        stop_watches()
        if self.background is not None:
            self.background.join(CLUSTER_RECOVERY_S)
        super().close()
        self._stop_broker()


# ---- MQTT ----------------------------------------------------------------------------------


class _MqttWorld(_World):
    MAX_MESSAGES = 40

    def __init__(self, spark: Any, scenario: Scenario, workdir: Path) -> None:
        super().__init__(spark, scenario, workdir)
        self.topic = f"nemesis/{scenario.seed}/{scenario.sink}"
        self.client_id = f"{self.name}-ingest"
        self.sequence = 0
        self.forgotten: set[str] = set()  # ids a broker without persistence lost
        self.publisher: Any = None

    def open(self) -> None:
        self.broker = start_mosquitto(workdir=self.workdir / "mosquitto")
        self._subscribe_session()
        self._new_publisher()

    def _queue(self, **config: Any) -> Any:
        from ..mqtt import MqttMessageQueue

        assert self.broker is not None
        queue = MqttMessageQueue()
        queue.configure({"connection.uri": self.broker.url, "options.qos": 1, **config})
        queue.open(None)
        return queue

    def _subscribe_session(self) -> None:
        self._queue(topic=self.topic, client_id=self.client_id).close(None)

    def _new_publisher(self) -> None:
        if self.publisher is not None:
            with contextlib.suppress(Exception):
                self.publisher.close(None)
        self.publisher = self._queue(topic=self.topic, **{"options.autosubscribe": False})

    def source(self) -> dict[str, Any]:
        assert self.broker is not None
        return {"connection.uri": self.broker.url}

    def publish(self, count: int, chooser: random.Random) -> None:
        from ..queues import MessageEnvelope

        for _ in range(count):
            message_id = self._new_id()
            envelope = MessageEnvelope(None, "reading", self.payload(message_id, chooser))
            envelope.message_id = message_id
            self.publisher.send(None, envelope)
            self.published.append(message_id)

    def waiting(self) -> BatchSpec | None:
        self.sequence += 1
        return BatchSpec(
            "mqtt",
            self.topic,
            client_id=self.client_id,
            max_messages=self.MAX_MESSAGES,
            sequence=self.sequence,
        )

    def hook(self, fault: Fault, spec: BatchSpec, chooser: random.Random) -> Callable[[], None]:
        if fault.name == "broker-restart-volatile":
            return self._forget_everything
        return super().hook(fault, spec, chooser)

    def _restart_broker(self) -> None:
        super()._restart_broker()
        self._new_publisher()

    def _forget_everything(self) -> None:
        """mosquitto killed, its persistence file gone: it comes back knowing no session and
        holding no message. What was published and is not in the sink is lost by the broker
        (the fault model says so); the session is subscribed again at once."""
        assert self.broker is not None
        self.broker.kill()
        for stored in self.broker.workdir.glob("*.db"):
            stored.unlink()
        self.broker.start()
        self.forgotten |= set(self.published) - set(sink_ids(self.sink))
        self._subscribe_session()
        self._new_publisher()

    def accounted(self, missing: list[str]) -> tuple[list[str], int]:
        unaccounted = [i for i in missing if i not in self.forgotten]
        return unaccounted, len(missing) - len(unaccounted)

    def left_waiting(self) -> int:
        from ..spark.mqtt_source import drain

        session = self._queue(topic=self.topic, client_id=self.client_id, autocommit=False)
        try:
            return len(drain(session, None, first_wait_s=2.0))
        finally:
            session.close(None)

    def heal(self) -> None:
        """Drain the session until a batch reads nothing."""
        self.accept_loss = True
        for _ in range(HEALING_ROUNDS):
            if self.left_waiting() == 0:
                return
            spec = self.waiting()
            assert spec is not None
            self._ingest(spec)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            if self.publisher is not None:
                self.publisher.close(None)
        super().close()


# ---- reading a sink's ids ------------------------------------------------------------------


def sink_ids(sink: str) -> Counter[str]:
    """How many times each payload id is in the sink: good rows by their ``id`` column,
    quarantined ones by the id inside their value."""
    from ..spark.sinks import is_delta, is_iceberg

    if is_delta(sink) or is_iceberg(sink):
        good = table_columns(sink, False, ("id",)).column("id").to_pylist()
        bad = table_columns(sink, True, ("value",)).column("value").to_pylist()
    elif sink.startswith("s3://"):
        good, bad = _committed_rows(sink)
    else:
        good, bad = _parquet_rows(Path(sink))
    found: Counter[str] = Counter(i for i in good if i is not None)
    for value in bad:
        match = _ID_IN_VALUE.search(value or b"")
        if match:
            found[match.group(1).decode()] += 1
    return found


def _parquet_rows(root: Path) -> tuple[list[str | None], list[bytes | None]]:
    import pyarrow.parquet as pq

    good: list[str | None] = []
    bad: list[bytes | None] = []
    for directory in sorted(root.glob("batch_id=*")):
        for file in directory.glob("*.parquet"):
            good += pq.read_table(file, columns=["id"]).column("id").to_pylist()
        for file in (directory / "_quarantine").glob("*.parquet"):
            bad += pq.read_table(file, columns=["value"]).column("value").to_pylist()
    return good, bad


def _committed_rows(sink: str) -> tuple[list[str | None], list[bytes | None]]:
    """A Parquet dataset on S3, as Sluice's readers see it: the committed batches."""
    from ..datasets import read_dataset

    def column(quarantine: bool, name: str) -> list[Any]:
        dataset = read_dataset(sink, quarantine)
        if not dataset.files:
            return []
        return list(dataset.to_table(columns=[name]).column(name).to_pylist())

    return column(False, "id"), column(True, "value")


def table_columns(sink: str, quarantine: bool, columns: tuple[str, ...]) -> Any:
    """``columns`` of every row of an Iceberg or a Delta sink's table, or of its quarantine
    table (a pyarrow table; no rows while there is no table)."""
    import pyarrow as pa

    from ..spark.sinks import is_delta

    empty = pa.table({c: pa.array([], pa.null()) for c in columns})
    if is_delta(sink):
        from deltalake import DeltaTable

        from ..spark.sinks.delta import parse_delta_uri

        target = parse_delta_uri(sink)
        path = target.quarantine if quarantine else target.table
        if not (Path(path) / "_delta_log").is_dir():  # the nemesis's Delta tables are local
            return empty
        return DeltaTable(target.uri(path)).to_pyarrow_table(columns=list(columns))
    from ..spark.sinks.iceberg import IcebergSink

    opened = IcebergSink(sink)
    table = opened._load(opened.target.quarantine if quarantine else opened.target.table)
    if table is None or table.current_snapshot() is None:
        return empty
    return table.scan(selected_fields=columns).to_arrow().select(list(columns))
