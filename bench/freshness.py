"""Freshness: produce to visible in the sink, at a steady rate, through a real Airflow 3
deployment and a real Dagster daemon, in one run.

A producer (confluent-kafka) publishes ``--rate`` messages a second for ``--seconds`` into a
Kafka topic (``--broker``: Apache Kafka unless told; ``--partitions`` partitions), each a
JSON reading whose ``temperature`` carries the moment it was produced (``time.time()`` just
before ``produce()``, seconds since the epoch: a DOUBLE survives Spark and Parquet
untouched, where a timestamp would go through time zones and INT96) and whose ``device`` is
its sequence number. The sides, one after the
other (each with its own topic, group and sink):

a. Airflow: the example DAG ``dags_examples/airflow/kafka_event_driven.py`` unchanged (an
   AssetWatcher on Sluice's QueueMessageTrigger -> the SparkIngestOperator task ``ingest``),
   under ``airflow api-server``, ``scheduler`` (LocalExecutor), ``dag-processor`` and
   ``triggerer`` on a fresh PostgreSQL database (``tests/system/airflow/deployment``).
b. Dagster: the example Definitions ``dags_examples/dagster_defs.py`` (the asset
   ``kafka_events`` and its ``kafka_events_sensor``) under ``dagster-daemon run`` with a code
   server and the webserver (``tests/system/dagster/dagster_deployment.py``), the sensor's
   ``minimum_interval_seconds`` at ``--dagster-interval`` (the example's default, 30 s).

"Visible": the Parquet sink publishes a batch by renaming its ``batch_id=<id>/`` directory into
place (what ``sluice.read_dataset`` reads). This process looks for new batch directories every
``POLL_SECONDS``; the first look that finds one is the moment its rows became visible (late by
at most the poll period), and the rows' ``temperature`` values give each message's produce
time. Per message: visible - produced; per side p50, p99 and max, the number of batches and
messages per batch. The breakdown per batch (medians) comes from the orchestrator's own records
(Airflow: asset event, DAG run and task instance rows of the metadata database; Dagster: the
runs' creation, start and end times) and the batch record's ``published_at``.

Each ingest task (and Dagster run) starts a JVM and a SparkSession of its own by default, as
the examples do; ``--connect`` starts one warm Spark Connect server first and gives both sides
its URL as ``SLUICE_SPARK_MASTER`` (the examples read it), which shows what the JVM's start
costs in freshness.

Anchors printed beside: the Iceberg Kafka Connect sink commits every 300 s by default
(``iceberg.control.commit.interval-ms``); Amazon MSK's data delivery has a minimum freshness of
5 minutes. Goal (Airflow): p50 < 15 s, p99 < 60 s, batches bounded (not one per message).

Run: ``.venv/bin/python bench/freshness.py [--rate 1000] [--seconds 300] [--connect] [--sides
airflow,dagster]``; to try it: ``--rate 200 --seconds 30``. It starts and stops its own broker,
database, Airflow and Dagster processes; its files go to ``--work`` (a temporary directory).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.system.airflow.deployment
sys.path.insert(0, str(ROOT / "tests" / "system" / "dagster"))  # dagster_deployment

import pyarrow.parquet as pq  # noqa: E402
from broker_choice import add_broker_option, broker_label, start_broker  # noqa: E402
from percentiles import percentile  # noqa: E402  (bench/, the script's directory)

from sluice.brokers import BrokerProcess, create_kafka_topic  # noqa: E402

POLL_SECONDS = 0.25
AIRFLOW_DAG_FILE = ROOT / "dags_examples" / "airflow" / "kafka_event_driven.py"
AIRFLOW_DAG = "kafka_event_driven"
DAGSTER_DEFS = ROOT / "dags_examples" / "dagster_defs.py"
DAGSTER_SENSOR = "kafka_events_sensor"
ANCHORS = (
    "Iceberg Kafka Connect sink: commits every 300 s by default "
    "(iceberg.control.commit.interval-ms = 300000)",
    "Amazon MSK data delivery: minimum freshness 5 minutes",
)
GOAL = "Airflow: p50 < 15 s, p99 < 60 s, batches bounded (not one per message)"


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


# -- producing -----------------------------------------------------------------------------


def reading(sequence: int, produced: float, humidity: bool) -> bytes:
    """The JSON reading of message ``sequence``: its produce time in ``temperature``."""
    value: dict[str, Any] = {
        "device": f"m-{sequence}",
        "temperature": produced,
        "ts": datetime.fromtimestamp(produced, UTC).isoformat().replace("+00:00", "Z"),
    }
    if humidity:  # the Dagster example's schema has it
        value["humidity"] = 0.0
    return json.dumps(value).encode()


@dataclass
class Publisher:
    """Publishes ``rate`` messages a second for ``seconds`` on a thread of its own, on a fixed
    schedule (message i at start + i / rate; a late send does not shift the ones after it)."""

    bootstrap: str
    topic: str
    rate: float
    seconds: float
    humidity: bool
    sent: int = 0
    late_max: float = 0.0  # how far behind its schedule a send was, at most
    produced: list[float] = field(default_factory=list)  # message i's produce time
    error: BaseException | None = None
    _thread: threading.Thread | None = None

    @property
    def total(self) -> int:
        return int(self.rate * self.seconds)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="publisher", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            from confluent_kafka import Producer

            producer = Producer(
                {"bootstrap.servers": self.bootstrap, "linger.ms": 5, "log_level": 3}
            )
            start = time.time()
            for i in range(self.total):
                due = start + i / self.rate
                now = time.time()
                if now < due:
                    time.sleep(due - now)
                    now = time.time()
                self.late_max = max(self.late_max, now - due)
                self.produced.append(now)
                producer.produce(self.topic, reading(i, now, self.humidity), key=str(i).encode())
                producer.poll(0)
                self.sent = i + 1
            if producer.flush(60) != 0:
                raise RuntimeError("messages still undelivered 60 s after the last one")
        except BaseException as exc:
            self.error = exc

    def join(self, timeout: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout)
        if self.error is not None:
            raise self.error


# -- watching the sink ---------------------------------------------------------------------


@dataclass
class Batch:
    batch_id: str
    visible: float  # the first look that found its directory
    published_at: float  # its record's
    produced: list[float]  # its messages' produce times
    sequences: list[int]


@dataclass
class SinkWatcher:
    """Looks for new ``batch_id=*/`` directories of a Parquet sink every ``POLL_SECONDS``."""

    root: Path
    batches: dict[str, Batch] = field(default_factory=dict)
    error: BaseException | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="sink-watcher", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)

    @property
    def messages(self) -> int:
        return sum(len(b.produced) for b in self.batches.values())

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.look()
                self._stop.wait(POLL_SECONDS)
        except BaseException as exc:
            self.error = exc

    def look(self) -> None:
        if not self.root.exists():
            return
        for directory in self.root.glob("batch_id=*"):
            batch_id = directory.name.split("=", 1)[1]
            if batch_id in self.batches:
                continue
            seen = time.time()
            record = json.loads((directory / "_sluice_batch.json").read_text())
            files = sorted(directory.glob("*.parquet"))
            table = (
                pq.ParquetDataset(files).read(columns=["device", "temperature"]) if files else None
            )
            produced = table.column("temperature").to_pylist() if table is not None else []
            devices = table.column("device").to_pylist() if table is not None else []
            self.batches[batch_id] = Batch(
                batch_id,
                seen,
                float(record.get("published_at", 0.0)),
                [float(p) for p in produced],
                [int(d.split("-", 1)[1]) for d in devices],
            )


# -- one side ------------------------------------------------------------------------------


@dataclass
class Result:
    side: str
    latencies: list[float]
    batches: list[Batch]
    expected: int
    duplicates: int
    missing: int  # not visible by the end: counted in latencies at the end (a lower bound)
    stages: list[tuple[str, float | None]]  # (stage, median seconds over batches)
    notes: list[str] = field(default_factory=list)


def run_load(
    side: str,
    bootstrap: str,
    topic: str,
    sink: Path,
    args: argparse.Namespace,
    humidity: bool,
    check: Callable[[], None],
) -> tuple[SinkWatcher, tuple[list[float], int, int]]:
    """Publish at the steady rate while watching the sink, then wait until every message is
    visible (or ``--drain`` seconds passed)."""
    watcher = SinkWatcher(sink)
    publisher = Publisher(bootstrap, topic, args.rate, args.seconds, humidity)
    watcher.start()
    publisher.start()
    began = time.monotonic()
    say(f"{side}: publishing {publisher.total:,} messages at {args.rate:g}/s to {topic} ...")
    last = 0.0
    while True:
        time.sleep(1.0)
        check()
        if watcher.error is not None:
            raise watcher.error
        elapsed = time.monotonic() - began
        done_sending = publisher.sent >= publisher.total
        if watcher.messages >= publisher.total and done_sending:
            break
        if done_sending and elapsed > args.seconds + args.drain:
            say(f"{side}: gave up waiting {args.drain:.0f} s after the last message")
            break
        if elapsed - last >= 10:
            last = elapsed
            lat = [b.visible - p for b in watcher.batches.values() for p in b.produced]
            p50 = f"{percentile(lat, 50):.1f} s" if lat else "-"
            say(
                f"{side}: {elapsed:4.0f} s, sent {publisher.sent:,}/{publisher.total:,} "
                f"(at most {publisher.late_max * 1000:.0f} ms behind schedule), visible "
                f"{watcher.messages:,} in {len(watcher.batches)} batches, p50 so far {p50}"
            )
    publisher.join(60)
    watcher.stop()
    watcher.look()  # what the last look may have missed
    return watcher, summarise(watcher, publisher)


def summarise(watcher: SinkWatcher, publisher: Publisher) -> tuple[list[float], int, int]:
    """Each message's produce-to-visible seconds, how many were visible twice and how many
    not at all. A message never seen counts as visible at the end of the side (when it gave
    up waiting): a lower bound, so the percentiles are not flattered by leaving it out."""
    latencies = [b.visible - p for b in watcher.batches.values() for p in b.produced]
    sequences = [s for b in watcher.batches.values() for s in b.sequences]
    seen = set(sequences)
    end = time.time()
    missing = [i for i in range(len(publisher.produced)) if i not in seen]
    latencies += [end - publisher.produced[i] for i in missing]
    return latencies, len(sequences) - len(seen), len(missing)


def stage(values: Sequence[float | None]) -> float | None:
    return median([v for v in values if v is not None])


def airflow_side(broker: BrokerProcess, args: argparse.Namespace, work: Path) -> Result:
    from tests.system.airflow.deployment import AirflowDeployment

    name = f"fresh-airflow-{uuid.uuid4().hex[:6]}"
    create_kafka_topic(broker.bootstrap, name, args.partitions)
    home, dags, lake = work / "airflow-home", work / "airflow-dags", work / "airflow-lake"
    dags.mkdir(parents=True)
    shutil.copy(AIRFLOW_DAG_FILE, dags / AIRFLOW_DAG_FILE.name)
    env = {
        "AIRFLOW_CONN_SLUICE_KAFKA_DEFAULT": json.dumps(
            {"conn_type": "sluice_kafka", "host": broker.host, "port": broker.port}
        ),
        "SLUICE_EXAMPLE_KAFKA_TOPIC": name,
        "SLUICE_EXAMPLE_KAFKA_EVENT_GROUP": name,
        "SLUICE_EXAMPLE_SINK": str(lake),
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
    }
    if args.spark_master:
        env["SLUICE_SPARK_MASTER"] = args.spark_master
    deployment = AirflowDeployment(home=home, dags_folder=dags, extra_env=env)
    say("airflow: starting PostgreSQL database, api-server, scheduler, dag-processor, triggerer")
    try:
        deployment.start()

        def check() -> None:
            deployment.check_alive()
            deployment.check_no_failed_tasks(AIRFLOW_DAG)

        say("airflow: up; waiting for the DAG and the triggerer to run its AssetWatcher ...")
        assigned = "SELECT count(*) FROM trigger WHERE triggerer_id IS NOT NULL"
        wait(
            lambda: deployment.sql(assigned)[0][0] >= 1,
            300,
            "the AssetWatcher's trigger",
            deployment.check_alive,
        )
        time.sleep(3)  # its first look at the topic
        watcher, summary = run_load(
            "airflow",
            broker.bootstrap,
            name,
            lake / AIRFLOW_DAG,
            args,
            False,
            check,
        )
        stages, notes = airflow_breakdown(deployment, watcher)
        runs = deployment.sql(
            "SELECT count(*), min(start_date), max(end_date) FROM dag_run WHERE dag_id = %s",
            (AIRFLOW_DAG,),
        )[0]
        notes.append(f"DAG runs: {runs[0]}")
    finally:
        say("airflow: stopping it")
        deployment.close()
    latencies, duplicates, missing = summary
    return Result(
        "a. Airflow (AssetWatcher -> ingest task)",
        latencies,
        sorted(watcher.batches.values(), key=lambda b: b.visible),
        int(args.rate * args.seconds),
        duplicates,
        missing,
        stages,
        notes,
    )


#: Phases of the ingest task, by the first line of its log that starts so (the operator's
#: "starting Spark", then the ingest's progress lines, sluice.spark.progress).
TASK_PHASES = (
    ("starting Spark", "spark"),
    ("starting: checking", "session"),
    ("reading:", "reading"),
    ("read:", "read"),
    ("writing:", "writing"),
    ("written:", "written"),
    ("committed:", "committed"),
)


def task_phases(log: Path) -> dict[str, float]:
    """When each of :data:`TASK_PHASES` began, from the task's JSON log lines."""
    found: dict[str, float] = {}
    for path in sorted(log.parent.glob(log.name)):
        for line in path.read_text(errors="replace").splitlines():
            try:
                entry = json.loads(line)
                text, when = str(entry.get("event", "")), str(entry["timestamp"])
            except (ValueError, KeyError, AttributeError):
                continue
            for prefix, phase in TASK_PHASES:
                if phase not in found and text.startswith(prefix):
                    found[phase] = datetime.fromisoformat(when.replace("Z", "+00:00")).timestamp()
    return found


def airflow_breakdown(
    deployment: Any, watcher: SinkWatcher
) -> tuple[list[tuple[str, float | None]], list[str]]:
    """Per batch, from the metadata database (asset event, DAG run and task instance times)
    and the task's log (its phases)."""
    rows = deployment.sql(
        "SELECT e.extra, r.run_id, extract(epoch FROM e.timestamp), "
        "extract(epoch FROM r.queued_at), extract(epoch FROM r.start_date), "
        "extract(epoch FROM t.start_date), extract(epoch FROM t.end_date), "
        "extract(epoch FROM r.end_date), x.value "
        "FROM asset_event e JOIN dagrun_asset_event d ON d.event_id = e.id "
        "JOIN dag_run r ON r.id = d.dag_run_id "
        "LEFT JOIN task_instance t ON t.dag_id = r.dag_id AND t.run_id = r.run_id "
        "AND t.task_id = 'ingest' "
        "LEFT JOIN xcom x ON x.dag_id = r.dag_id AND x.run_id = r.run_id "
        "AND x.task_id = 'ingest' AND x.key = 'return_value' WHERE r.dag_id = %s",
        (AIRFLOW_DAG,),
    )
    # (stage, from, to): times named by the columns above, the task's phases and the batch's
    stages = (
        (
            "oldest message produced -> asset event (trigger poll; the previous batch's run)",
            "produced",
            "event",
        ),
        ("asset event -> DAG run queued (scheduler)", "event", "queued"),
        ("DAG run queued -> running (scheduler)", "queued", "started"),
        ("DAG run running -> task started (executor, task process)", "started", "task"),
        ("task started -> 'starting Spark' (task runner, imports)", "task", "spark"),
        ("'starting Spark' -> ingest begins (JVM and SparkSession)", "spark", "session"),
        ("ingest begins -> reading (Python workers check, plan, lock)", "session", "reading"),
        ("reading -> read (the batch read)", "reading", "read"),
        ("read -> writing (classify, hand over)", "read", "writing"),
        ("writing -> published_at (Spark write job)", "writing", "published"),
        (
            "published_at -> visible (record fsync, lock, rename; this process's poll)",
            "published",
            "visible",
        ),
        ("published_at -> committed (offsets)", "published", "committed"),
        ("committed -> task ended (metrics, task exit)", "committed", "ended"),
        ("task ended -> DAG run ended", "ended", "run_ended"),
        ("total: oldest message produced -> visible", "produced", "visible"),
    )
    values: dict[str, list[float | None]] = {name: [] for name, _, _ in stages}
    matched = 0
    for extra, run_id, *times, summary in rows:
        # the batch the task wrote: the event's, or with up_to="latest" one taken further
        if isinstance(summary, str | bytes):
            summary = json.loads(summary)
        payload = (extra or {}).get("payload") or {}
        written = summary.get("batch_id") if isinstance(summary, dict) else None
        batch = watcher.batches.get(str(written or payload.get("batch_id")))
        if batch is None or not batch.produced:
            continue
        matched += 1
        names = ("event", "queued", "started", "task", "ended", "run_ended")
        at: dict[str, float] = {n: float(t) for n, t in zip(names, times, strict=True) if t}
        log = (
            deployment.logs_folder
            / f"dag_id={AIRFLOW_DAG}"
            / f"run_id={run_id}"
            / "task_id=ingest"
            / "attempt=*.log"
        )
        at.update(task_phases(log))
        at.update(produced=min(batch.produced), published=batch.published_at, visible=batch.visible)
        for name, start, end in stages:
            both = start in at and end in at
            values[name].append(at[end] - at[start] if both else None)
    notes = [f"asset events matched to visible batches: {matched} of {len(rows)} event rows"]
    return [(name, stage(v)) for name, v in values.items()], notes


def dagster_side(broker: BrokerProcess, args: argparse.Namespace, work: Path) -> Result:
    from dagster_deployment import (  # type: ignore[import-not-found]
        START_SENSOR,
        DagsterDeployment,
        runs,
        selector_of,
    )

    name = f"fresh-dagster-{uuid.uuid4().hex[:6]}"
    create_kafka_topic(broker.bootstrap, name, args.partitions)
    lake = work / "dagster-lake"
    env = {
        "SLUICE_EXAMPLE_KAFKA_BOOTSTRAP": broker.bootstrap,
        "SLUICE_EXAMPLE_KAFKA_TOPIC": name,
        "SLUICE_EXAMPLE_SINK": str(lake),
        "SLUICE_EXAMPLE_SENSOR_INTERVAL": str(args.dagster_interval),
    }
    if args.spark_master:
        env["SLUICE_SPARK_MASTER"] = args.spark_master
    deployment = DagsterDeployment(DAGSTER_DEFS, work / "dagster-home", env, ROOT)
    say("dagster: starting the code server, webserver and dagster-daemon ...")
    try:
        deployment.start()
        selector = wait(
            lambda: selector_of(deployment, DAGSTER_SENSOR, "sensors"),
            180,
            "the code location",
            lambda: None,
        )
        started = deployment.graphql(START_SENSOR, {"s": selector})["startSensor"]
        if started.get("__typename") != "Sensor":
            raise RuntimeError(f"could not start {DAGSTER_SENSOR}: {started}")
        say(f"dagster: {DAGSTER_SENSOR} on (minimum interval {args.dagster_interval} s)")

        def check() -> None:
            for component in (deployment.daemon, deployment.code_server):
                if not component.running():
                    raise RuntimeError(f"{component.name} exited:\n{component.log_tail()}")

        watcher, summary = run_load(
            "dagster", broker.bootstrap, name, lake / "kafka_events", args, True, check
        )
        found = runs(deployment, "sluice/sensor", DAGSTER_SENSOR)
    finally:
        say("dagster: stopping it")
        deployment.stop()
    keys = [
        "oldest message produced -> run created (sensor tick)",
        "run created -> run started (run queue, run worker process start, code load)",
        "run started -> batch published (imports, Spark session, read, write)",
        "batch published -> run ended (commit, exit)",
        "batch published -> seen by this process's poll",
    ]
    values: dict[str, list[float | None]] = {k: [] for k in keys}
    statuses: dict[str, int] = {}
    for run in found:
        statuses[run["status"]] = statuses.get(run["status"], 0) + 1
        tags = {t["key"]: t["value"] for t in run["tags"]}
        batch = watcher.batches.get(tags.get("sluice/run_key", "").split(".")[0])
        if batch is None or not batch.produced:
            continue
        created, start, end = run.get("creationTime"), run.get("startTime"), run.get("endTime")
        for key, a, b in zip(
            keys,
            (min(batch.produced), created, start, batch.published_at, batch.published_at),
            (created, start, batch.published_at, end, batch.visible),
            strict=True,
        ):
            values[key].append(b - a if a is not None and b is not None else None)
    latencies, duplicates, missing = summary
    return Result(
        f"b. Dagster (sensor every {args.dagster_interval} s -> asset run)",
        latencies,
        sorted(watcher.batches.values(), key=lambda b: b.visible),
        int(args.rate * args.seconds),
        duplicates,
        missing,
        [(k, stage(v)) for k, v in values.items()],
        [f"runs: {statuses}"],
    )


def wait(condition: Callable[[], Any], timeout: float, what: str, check: Callable[[], Any]) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        check()
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.5)


# -- the run -------------------------------------------------------------------------------


def report(results: list[Result], args: argparse.Namespace) -> None:
    say("")
    spark = args.spark_master or "a JVM per task (local[*])"
    say(
        f"Freshness, produce -> visible in the Parquet sink, {args.rate:g} msg/s for "
        f"{args.seconds:g} s ({int(args.rate * args.seconds):,} messages), "
        f"{args.partitions} partitions, {broker_label(args.broker)}, Spark: {spark}:"
    )
    say(
        f"  {'side':<52} {'p50 s':>7} {'p99 s':>7} {'max s':>7} {'visible':>10} "
        f"{'batches':>8} {'msg/batch':>10}"
    )
    for r in results:
        if not r.latencies:
            say(f"  {r.side:<52} nothing visible")
            continue
        per_batch = [len(b.produced) for b in r.batches]
        say(
            f"  {r.side:<52} {percentile(r.latencies, 50):7.1f} {percentile(r.latencies, 99):7.1f}"
            f" {max(r.latencies):7.1f} {len(r.latencies) - r.missing:>10,} {len(r.batches):>8}"
            f" {statistics.mean(per_batch):>10,.0f}"
        )
    for r in results:
        say(
            f"  {r.side}: {len(r.latencies) - r.missing:,} of {r.expected:,} visible, "
            f"{r.duplicates} twice; {r.missing:,} not visible by the end, counted as visible "
            "then (a lower bound)"
        )
        if r.batches:
            sizes = [len(b.produced) for b in r.batches]
            say(
                f"    messages per batch: min {min(sizes):,}, "
                f"median {statistics.median(sizes):,.0f}, max {max(sizes):,}"
            )
        say("    where the time goes (median over batches):")
        for name, value in r.stages:
            shown = f"{value:7.1f} s" if value is not None else "      -"
            say(f"      {shown}  {name}")
        for note in r.notes:
            say(f"    {note}")
    if len(results) == 2 and results[0].latencies and results[1].latencies:
        a, b = results
        p50 = percentile(a.latencies, 50) / percentile(b.latencies, 50)
        p99 = percentile(a.latencies, 99) / percentile(b.latencies, 99)
        say(f"  ratio {a.side[:10]} / {b.side[:10]}: p50 {p50:.2f}x, p99 {p99:.2f}x")
    say("  anchors: " + "; ".join(ANCHORS))
    for r in results:
        if r.latencies:
            say(
                f"  {r.side}: p50 / 300 s = {percentile(r.latencies, 50) / 300:.3f}, "
                f"p99 / 300 s = {percentile(r.latencies, 99) / 300:.3f}"
            )
    say(f"  goal: {GOAL}")
    airflow = [r for r in results if r.side.startswith("a.")]
    if airflow and airflow[0].latencies:
        r = airflow[0]
        p50, p99 = percentile(r.latencies, 50), percentile(r.latencies, 99)
        say(
            f"  Airflow: p50 {p50:.1f} s {'met' if p50 < 15 else 'NOT met'}, p99 {p99:.1f} s "
            f"{'met' if p99 < 60 else 'NOT met'}, {len(r.batches)} batches for "
            f"{len(r.latencies) - r.missing:,} messages"
        )


def json_rows(results: list[Result], args: argparse.Namespace) -> list[dict[str, Any]]:
    """``--json``: a row per side, its p50 against the 300 s anchor, charted."""
    from benchjson import row

    rows, chart = [], {}
    spark = "one warm Spark Connect server" if args.connect else "a JVM per task"
    for r in results:
        if not r.latencies:
            continue
        p50, p99 = percentile(r.latencies, 50), percentile(r.latencies, 99)
        chart[r.side.split(", ")[0]] = [p50, 300.0]
        rows.append(
            row(
                f"{r.side} ({spark})",
                f"p50 {p50:.1f} s, p99 {p99:.1f} s, {len(r.batches)} batches for "
                f"{len(r.latencies) - r.missing:,} messages",
                "; ".join(ANCHORS), f"{p50 / 300:.2f}x the 300 s anchor at p50", GOAL,
                f"bench/freshness.py --broker {args.broker} --rate {args.rate:g} "
                f"--seconds {args.seconds:g}"
                + (" --connect" if args.connect else ""),
            )
        )  # fmt: skip
    if rows:
        rows[0]["chart"] = {"unit": "s (p50)", "sides": ["Sluice", "300 s anchor"], "values": chart}
    return rows


@contextmanager
def broker_running(work: Path, name: str) -> Iterator[BrokerProcess]:
    broker = start_broker(name, workdir=work / name)
    try:
        yield broker
    finally:
        broker.stop()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=1000.0, help="messages a second")
    parser.add_argument("--seconds", type=float, default=300.0, help="how long to publish")
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--sides", default="airflow,dagster")
    parser.add_argument(
        "--dagster-interval",
        type=int,
        default=30,
        help="the Dagster sensor's minimum_interval_seconds (the example's default: 30)",
    )
    parser.add_argument(
        "--drain",
        type=float,
        default=300.0,
        help="seconds to wait for the last messages after publishing ends",
    )
    parser.add_argument("--spark-master", default=None, help="SLUICE_SPARK_MASTER for the tasks")
    parser.add_argument(
        "--connect",
        action="store_true",
        help="start a warm Spark Connect server first; the tasks and runs use it (their "
        "SLUICE_SPARK_MASTER) instead of starting a JVM each",
    )
    parser.add_argument("--work", type=Path, default=None, help="keep the files here")
    parser.add_argument(
        "--json", metavar="PATH", help="also write the results (bench/results/freshness.json)"
    )
    add_broker_option(parser)
    args = parser.parse_args(argv)
    sides = [s.strip() for s in args.sides.split(",") if s.strip()]
    unknown = set(sides) - {"airflow", "dagster"}
    if unknown:
        parser.error(f"unknown sides {sorted(unknown)}")
    work = args.work or Path(tempfile.mkdtemp(prefix="sluice-bench-fresh-"))
    work.mkdir(parents=True, exist_ok=True)
    say(f"work directory {work}; {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    results: list[Result] = []
    server: Any = None
    try:
        if args.connect:
            from sluice.testing.spark_cluster import start_connect_server

            say("starting a Spark Connect server (local[2]) for the ingests ...")
            server = start_connect_server(workdir=work / "spark-connect")
            args.spark_master = server.url
            say(f"Spark Connect server at {server.url}")
        with broker_running(work, args.broker) as broker:
            say(f"{broker_label(args.broker)} at {broker.bootstrap}")
            for side in sides:
                run = airflow_side if side == "airflow" else dagster_side
                results.append(run(broker, args, work / side))
                say(f"load {os.getloadavg()[0]:.1f}")
        report(results, args)
        if args.json:
            from benchjson import write

            title = f"Freshness: produce to visible, {args.rate:g} msg/s for {args.seconds:g} s"
            rows = json_rows(results, args)
            write(args.json, "freshness", title, rows, broker_label(args.broker))
    finally:
        if server is not None:
            server.close()
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
