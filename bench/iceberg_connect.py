"""Sluice beside Apache Iceberg's own Kafka Connect sink, into the same Iceberg REST catalog
from the same topics, in one run.

    .venv/bin/python bench/iceberg_connect.py [--sizes 200000,2000000] [--interval 10]
        [--throughput-interval 5] [--rate 1000] [--seconds 60] [--kill-messages 200000]
        [--parts throughput,freshness,kill] [--json bench/results/iceberg_connect.json]

It starts Apache Kafka (one KRaft node), SeaweedFS (S3 on loopback), the tests' Iceberg REST
catalog (its warehouse on SeaweedFS), a Kafka Connect worker of Apache Kafka's own with the
sink (``sluice.testing.iceberg_connect``: ``iceberg-kafka-connect`` 1.10.1, schemaless JSON,
Kafka's coordinates in each row by its ``KafkaMetadataTransform``) and a local SparkSession
for Sluice (``spark_session()``, Sluice's defaults; ``ingest()`` with no options beyond the
schema). Each side writes its own table of the catalog. The messages are the JSON readings of
``bench/ingest.py``, without its malformed ones: the sink stops at a record it cannot convert
(its ``errors.tolerance`` covers the converter, not the table's writer).

1. **Throughput** (``--sizes``): per size N, a topic of 3 partitions. Both sides first take
   3,000 messages (warm, each: the sink's connector created, its first commit seen, then
   paused; Sluice's session ingests them in executor mode, so its Python workers run), then
   N more are produced. Sluice: one ``ingest()``
   of the N waiting, timed from planning to its commit. The sink: resumed, timed until the
   snapshot that holds all of them (its ``timestamp-ms``, the catalog's clock), committing
   every ``--throughput-interval`` s (the last commit comes up to one interval after the
   last write: what a user of the sink waits for). Messages per second each, and
   Sluice / sink.
2. **Freshness** (``--rate`` messages a second for ``--seconds``), both sides at once on one
   topic, at the same commit interval ``--interval``: the sink's
   ``iceberg.control.commit.interval-ms``; Sluice's batch interval (a loop in a warm session
   that plans the group's waiting messages and ingests them every ``--interval`` s, at once
   if the last batch took longer). Each message carries its produce time; it is visible at
   the ``timestamp-ms`` of the first snapshot of its table that holds it. p50, p99, max,
   and the number of commits.
3. **Exactly once under a kill** (``--kill-messages``): the sink, committing every 2 s, is
   killed (SIGKILL of the Connect worker) as soon as its first commit is seen, then started
   again: it goes on by itself. Sluice's ingest runs as a child process, killed (SIGKILL, by
   its failpoint) at ``stage.after_write``, ``publish.after_rename`` and ``commit.before``
   in turn (``--failpoints``), each batch run again after its kill. Then each table's rows per
   (partition, offset) against the topic: rows, duplicates, missing.

The goal (issue 46): Sluice at least the sink's throughput (>= 1.0x) and no worse freshness at
equal commit intervals; both exactly once under the kill.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from ingest import PARTITIONS, SCHEMA, reading
from percentiles import percentile

CATALOG = "bench"  # the pyiceberg catalog name Sluice's sink URIs use
NAMESPACE = "bench"
WARM = 3_000
FAILPOINTS = ("stage.after_write", "publish.after_rename", "commit.before")
KILL_INTERVAL_MS = 2_000
GOAL = "Sluice >= 1.0x the sink's throughput; freshness no worse at equal commit intervals"

SLUICE_CHILD = """
import sys
sys.path.insert(0, sys.argv[1])
from iceberg_connect import plan, sluice_ingest
from sluice.spark import spark_session
spark = spark_session()
bootstrap, topic, group, table, limit = sys.argv[2:7]
spec = plan(bootstrap, topic, group, int(limit))
result = sluice_ingest(spark, bootstrap, spec, table)
print("RESULT", result.written, result.quarantined, flush=True)
"""


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


# -- topics ----------------------------------------------------------------------------------


def good_reading(i: int) -> bytes:
    """bench/ingest.py's reading ``i``, its malformed ones replaced by the one before."""
    return reading(i - 1 if i % 100 == 99 else i)


def produce(bootstrap: str, topic: str, count: int, start: int = 0) -> None:
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1 << 20, "log_level": 3}
    )
    started = time.monotonic()
    for i in range(start, start + count):
        while True:
            try:
                producer.produce(topic, good_reading(i), key=b"k%d" % (i % 500), partition=i % 3)
                break
            except BufferError:
                producer.poll(0.1)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120) != 0:
        raise RuntimeError(f"{topic}: messages still undelivered after 120 s")
    say(f"produced {count:,} messages into {topic} in {time.monotonic() - started:.1f} s")


def topic_ends(bootstrap: str, topic: str) -> dict[int, int]:
    from sluice.kafka.offsets import topic_ends as ends

    return ends({"bootstrap_servers": bootstrap}, topic)


# -- Sluice ----------------------------------------------------------------------------------


def planner(bootstrap: str, topic: str, group: str) -> Any:
    """An open queue that plans the group's batches (close it with ``close(None)``)."""
    from sluice.kafka import KafkaMessageQueue

    queue = KafkaMessageQueue(topic)
    queue.configure(
        {"connection.uri": bootstrap, "topic": topic, "group_id": group}
        | {"from_beginning": True, "autocommit": False}
    )
    queue.open(None)
    return queue


def plan(bootstrap: str, topic: str, group: str, limit: int = 0) -> Any:
    """The group's waiting messages (at most ``limit``, 0: all) as a batch, or None."""
    from sluice.batch import plan_batch

    queue = planner(bootstrap, topic, group)
    try:
        return plan_batch(queue, limit or None)
    finally:
        queue.close(None)


def sluice_ingest(spark: Any, bootstrap: str, spec: Any, table: str, **options: Any) -> Any:
    from sluice.spark import ingest

    return ingest(
        spark,
        spec,
        f"iceberg://{CATALOG}/{NAMESPACE}.{table}",
        source=f"kafka://{bootstrap}",
        schema=SCHEMA,
        **options,
    )


# -- tables ----------------------------------------------------------------------------------


@dataclass
class Lake:
    catalog: Any

    def table(self, name: str) -> Any | None:
        identifier = f"{NAMESPACE}.{name}"
        if not self.catalog.table_exists(identifier):
            return None
        return self.catalog.load_table(identifier)

    def records(self, name: str) -> int:
        table = self.table(name)
        if table is None or table.current_snapshot() is None:
            return 0
        return int(table.current_snapshot().summary.additional_properties["total-records"])

    def first_snapshot_with(self, name: str, count: int, timeout: float) -> Any:
        """The first snapshot of ``name`` that holds ``count`` rows, waiting up to
        ``timeout`` s for it."""
        deadline = time.monotonic() + timeout
        while self.records(name) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name}: {self.records(name):,} rows of {count:,}")
            time.sleep(0.5)
        table = self.table(name)
        assert table is not None
        for snapshot in sorted(table.snapshots(), key=lambda s: s.timestamp_ms):
            if int(snapshot.summary.additional_properties.get("total-records", 0)) >= count:
                return snapshot
        raise AssertionError("the current snapshot holds them")

    def first_seen(
        self, name: str, column: str, after: float = 0.0
    ) -> tuple[dict[str, float], int]:
        """Per value of ``column``, the ``timestamp-ms`` (s) of the first snapshot that
        holds it; and the number of snapshots that added rows after ``after`` (s)."""
        table = self.table(name)
        assert table is not None
        seen: dict[str, float] = {}
        commits = 0
        for snapshot in sorted(table.snapshots(), key=lambda s: s.timestamp_ms):
            added = int(snapshot.summary.additional_properties.get("added-records", 0))
            if not added:
                continue
            commits += snapshot.timestamp_ms / 1000 > after
            values = table.scan(snapshot_id=snapshot.snapshot_id, selected_fields=(column,))
            for value in values.to_arrow().column(column).to_pylist():
                seen.setdefault(value, snapshot.timestamp_ms / 1000)
        return seen, commits

    def offsets(self, name: str, partition: str, offset: str) -> Counter[tuple[int, int]]:
        table = self.table(name)
        assert table is not None
        rows = table.scan(selected_fields=(partition, offset)).to_arrow()
        return Counter(
            zip(rows.column(partition).to_pylist(), rows.column(offset).to_pylist(), strict=True)
        )


# -- the sink --------------------------------------------------------------------------------


@dataclass
class Sink:
    worker: Any
    catalog: Any
    bootstrap: str

    def create(self, name: str, topic: str, table: str, interval_ms: int) -> None:
        from sluice.brokers import create_kafka_topic
        from sluice.testing.iceberg_connect import sink_config

        create_kafka_topic(self.bootstrap, f"{name}-control", 1)
        config = sink_config(
            topic,
            f"{NAMESPACE}.{table}",
            self.catalog,
            control_topic=f"{name}-control",
            commit_interval_ms=interval_ms,
        )
        self.worker.put_connector(name, config)
        self.worker.wait_running(name)

    def wait_state(self, name: str, state: str, timeout: float = 60.0) -> None:
        from sluice.testing.waiting import wait_until

        wait_until(
            lambda: self.worker.status(name)["connector"]["state"] == state,
            timeout,
            0.2,
            f"connector {name} {state}",
        )


# -- 1. throughput ---------------------------------------------------------------------------


def throughput(
    n: int, sink: Sink, lake: Lake, spark: Any, bootstrap: str, interval_ms: int
) -> dict[str, float]:
    from sluice.brokers import create_kafka_topic

    topic, name = f"tp-{n}", f"tp-{n}"
    create_kafka_topic(bootstrap, topic, PARTITIONS)
    produce(bootstrap, topic, WARM)
    sink.create(name, topic, f"connect_{n}", interval_ms)
    lake.first_snapshot_with(f"connect_{n}", WARM, 300)
    sink.worker.pause(name)
    sink.wait_state(name, "PAUSED")
    group = f"sluice-{n}"
    # warm as the sink's task is: the executors' Python workers started and their first
    # Iceberg file written (a driver-mode warm-up left the timed batch to pay that: the
    # first executor-mode 200,000 took 7.1 s, the next ones 2.8 s)
    spec = plan(bootstrap, topic, group)
    warm = sluice_ingest(spark, bootstrap, spec, f"sluice_{n}", mode="executors")
    assert warm.written == WARM, warm
    produce(bootstrap, topic, n, start=WARM)

    say(f"{n:,}: Sluice (load {load()})")
    started = time.monotonic()
    spec = plan(bootstrap, topic, group)
    result = sluice_ingest(spark, bootstrap, spec, f"sluice_{n}")
    sluice_s = time.monotonic() - started
    assert result.written == n, result
    assert lake.records(f"sluice_{n}") == WARM + n

    say(f"{n:,}: the sink (load {load()})")
    resumed = time.time()
    sink.worker.resume(name)
    snapshot = lake.first_snapshot_with(f"connect_{n}", WARM + n, max(600.0, n / 500))
    connect_s = snapshot.timestamp_ms / 1000 - resumed
    assert lake.records(f"connect_{n}") == WARM + n
    sink.worker.delete_connector(name)
    found = {"sluice_s": sluice_s, "connect_s": connect_s}
    say(
        f"{n:,}: Sluice {sluice_s:.1f} s ({n / sluice_s:,.0f} msg/s, mode {result.mode}), "
        f"the sink {connect_s:.1f} s ({n / connect_s:,.0f} msg/s), Sluice/sink throughput "
        f"{connect_s / sluice_s:.2f}x (load {load()})"
    )
    return found


# -- 2. freshness ----------------------------------------------------------------------------


@dataclass
class SluiceLoop:
    """Sluice's batch interval: plan and ingest the group's waiting messages every
    ``interval`` s (at once when the last batch took longer), in a warm session."""

    spark: Any
    bootstrap: str
    topic: str
    table: str
    interval: float
    group: str
    batches: list[tuple[float, int]] = field(default_factory=list)  # (seconds, messages)
    error: BaseException | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="sluice-loop", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from sluice.batch import plan_batch

        try:
            # one queue plans every batch, as the Airflow trigger and Dagster sensor keep one
            queue = planner(self.bootstrap, self.topic, self.group)
        except BaseException as exc:
            self.error = exc
            return
        try:
            due = time.monotonic()
            while not self._stop.is_set():
                due += self.interval
                spec = plan_batch(queue)
                if spec is not None:
                    started = time.monotonic()
                    sluice_ingest(self.spark, self.bootstrap, spec, self.table)
                    self.batches.append((time.monotonic() - started, spec.message_count))
                self._stop.wait(max(0.0, due - time.monotonic()))
                due = max(due, time.monotonic())
        except BaseException as exc:
            self.error = exc
        finally:
            queue.close(None)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(600)
        if self.error is not None:
            raise self.error


def freshness(
    sink: Sink, lake: Lake, spark: Any, bootstrap: str, rate: float, seconds: float, interval: float
) -> dict[str, Any]:
    from freshness import Publisher

    from sluice.brokers import create_kafka_topic

    topic, group = "fresh", "sluice-fresh"
    create_kafka_topic(bootstrap, topic, PARTITIONS)
    # Both sides warm before the measured messages: each has created its table with a first
    # commit, and Sluice's session has ingested (its first ingest in a session is a cold
    # one: run alone, this part's first batch took seconds and set the p99).
    produce(bootstrap, topic, WARM)
    sink.create("fresh", topic, "connect_fresh", int(interval * 1000))
    lake.first_snapshot_with("connect_fresh", WARM, 300)
    warm = sluice_ingest(spark, bootstrap, plan(bootstrap, topic, group), "sluice_fresh")
    assert warm.written == WARM, warm
    loop = SluiceLoop(spark, bootstrap, topic, "sluice_fresh", interval, group)
    publisher = Publisher(bootstrap, topic, rate, seconds, humidity=True)
    total = publisher.total
    say(f"freshness: {rate:g} msg/s for {seconds:g} s, commit interval {interval:g} s each side")
    measured = time.time()
    publisher.start()
    loop.start()
    publisher.join(seconds + 120)
    say(f"produced {publisher.sent:,} (late by {publisher.late_max:.2f} s at most)")
    lake.first_snapshot_with("sluice_fresh", WARM + total, 300)
    lake.first_snapshot_with("connect_fresh", WARM + total, 300)
    loop.stop()
    sink.worker.delete_connector("fresh")
    found: dict[str, Any] = {}
    for side, table in (("sluice", "sluice_fresh"), ("connect", "connect_fresh")):
        seen, commits = lake.first_seen(table, "device", measured)
        waits = [
            seen[f"m-{i}"] - produced
            for i, produced in enumerate(publisher.produced)
            if f"m-{i}" in seen
        ]
        assert len(waits) == total, (side, len(waits), total)
        found[side] = {
            "p50": percentile(waits, 50),
            "p99": percentile(waits, 99),
            "max": max(waits),
            "commits": commits,
        }
        say(
            f"freshness {side}: p50 {found[side]['p50']:.1f} s, p99 {found[side]['p99']:.1f} s, "
            f"max {found[side]['max']:.1f} s, {commits} commits for {total:,} messages"
        )
    if loop.batches:
        times = [t for t, _ in loop.batches]
        say(
            f"  Sluice's batches: {len(times)}, median {statistics.median(times):.1f} s, "
            f"median {statistics.median(m for _, m in loop.batches):,.0f} messages"
        )
    return found


# -- 3. exactly once under a kill ------------------------------------------------------------


def counted(
    lake: Lake, table: str, columns: tuple[str, str], ends: dict[int, int]
) -> dict[str, int]:
    rows = lake.offsets(table, *columns)
    expected = {(p, o) for p, end in ends.items() for o in range(end)}
    return {
        "rows": sum(rows.values()),
        "duplicates": sum(c - 1 for c in rows.values() if c > 1),
        "missing": len(expected - set(rows)),
        "unexpected": len(set(rows) - expected),
    }


def kill_connect(sink: Sink, lake: Lake, bootstrap: str, topic: str) -> dict[str, Any]:
    from sluice.testing.iceberg_connect import METADATA_COLUMNS

    ends = topic_ends(bootstrap, topic)
    total = sum(ends.values())
    sink.create("kill", topic, "connect_kill", KILL_INTERVAL_MS)
    first = lake.first_snapshot_with("connect_kill", 1, 300)
    at_kill = lake.records("connect_kill")
    sink.worker.kill()
    say(f"the sink: SIGKILL of the Connect worker with {at_kill:,} of {total:,} rows committed")
    assert first is not None
    restarted = time.monotonic()
    sink.worker.restart()
    lake.first_snapshot_with("connect_kill", total, 600)
    say(f"  restarted; all {total:,} rows in {time.monotonic() - restarted:.1f} s")
    time.sleep(3 * KILL_INTERVAL_MS / 1000)  # a later commit would show a duplicate
    sink.worker.delete_connector("kill")
    found = counted(lake, "connect_kill", (METADATA_COLUMNS[1], METADATA_COLUMNS[2]), ends)
    return {**found, "committed_at_kill": at_kill}


def kill_sluice(
    lake: Lake, bootstrap: str, topic: str, failpoints: Sequence[str]
) -> dict[str, Any]:
    ends = topic_ends(bootstrap, topic)
    total = sum(ends.values())
    share = -(-total // len(failpoints))
    killed = 0
    bench = str(Path(__file__).parent)
    argv = [sys.executable, "-c", SLUICE_CHILD, bench, bootstrap, topic, "sluice-kill"]
    for failpoint in failpoints:
        env = {**os.environ, "SLUICE_FAILPOINTS": failpoint}
        run = subprocess.run(
            [*argv, "sluice_kill", str(share)], env=env, capture_output=True, text=True
        )
        if run.returncode != -9:
            raise RuntimeError(f"{failpoint}: exit {run.returncode}\n{run.stderr[-3000:]}")
        killed += 1
        again = subprocess.run([*argv, "sluice_kill", str(share)], capture_output=True, text=True)
        if again.returncode != 0:
            raise RuntimeError(f"rerun after {failpoint}: {again.returncode}\n{again.stderr}")
        say(f"Sluice: SIGKILL at {failpoint}, run again: {again.stdout.strip()}")
    found = counted(lake, "sluice_kill", ("partition", "offset"), ends)
    return {**found, "kills": killed}


# -- main ------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--sizes", default="200000,2000000")
    parser.add_argument("--throughput-interval", type=float, default=5.0)
    parser.add_argument("--interval", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--kill-messages", type=int, default=200_000)
    parser.add_argument("--parts", default="throughput,freshness,kill")
    parser.add_argument(
        "--failpoints", default=",".join(FAILPOINTS), help="where Sluice's ingests are killed"
    )
    parser.add_argument("--json", metavar="PATH", help="bench/results/iceberg_connect.json")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop what it started, on TERM too
    sizes = [int(s) for s in args.sizes.split(",") if s]
    parts = set(args.parts.split(","))

    from pyiceberg.catalog import load_catalog

    from sluice.brokers import create_kafka_topic, start_kafka
    from sluice.s3server import start_seaweedfs
    from sluice.spark import spark_session
    from sluice.testing.iceberg_connect import start_iceberg_connect
    from sluice.testing.rest_catalog import start_rest_catalog

    stack: list[Any] = []
    work = Path(tempfile.mkdtemp(prefix="sluice-iceberg-connect-"))
    try:
        say("starting Apache Kafka, SeaweedFS, the REST catalog and the Connect worker")
        kafka = start_kafka()
        stack.append(kafka)
        s3 = start_seaweedfs()
        stack.append(s3)
        s3.create_bucket("benchwarehouse")
        rest = start_rest_catalog(
            "s3://benchwarehouse/warehouse",
            s3_endpoint=s3.endpoint,
            s3_region=s3.region,
            s3_credentials={
                "AWS_ACCESS_KEY_ID": s3.access_key,
                "AWS_SECRET_ACCESS_KEY": s3.secret_key,
            },
            workdir=work / "catalog",
        )
        stack.append(rest)
        properties = rest.client_properties()
        for key, value in properties.items():
            variable = key.upper().replace(".", "__").replace("-", "_")
            os.environ[f"PYICEBERG_CATALOG__{CATALOG.upper()}__{variable}"] = value
        lake = Lake(load_catalog(CATALOG, **properties))
        lake.catalog.create_namespace(NAMESPACE)
        worker = start_iceberg_connect(kafka.bootstrap, rest, workdir=work / "connect")
        stack.append(worker)
        sink = Sink(worker, rest, kafka.bootstrap)
        spark = spark_session()
        stack.append(spark)  # stopped with the rest (its JVM would outlive a TERM)
        say(f"ready (load {load()})")

        results: dict[str, Any] = {"throughput": {}, "load": {}}
        if "throughput" in parts:
            interval_ms = int(args.throughput_interval * 1000)
            for n in sizes:
                results["throughput"][n] = throughput(
                    n, sink, lake, spark, kafka.bootstrap, interval_ms
                )
            results["load"]["throughput"] = load()
        if "freshness" in parts:
            results["freshness"] = freshness(
                sink, lake, spark, kafka.bootstrap, args.rate, args.seconds, args.interval
            )
            results["load"]["freshness"] = load()
        if "kill" in parts:
            create_kafka_topic(kafka.bootstrap, "kill", PARTITIONS)
            produce(kafka.bootstrap, "kill", args.kill_messages)
            results["kill"] = {
                "sluice": kill_sluice(lake, kafka.bootstrap, "kill", args.failpoints.split(",")),
                "connect": kill_connect(sink, lake, kafka.bootstrap, "kill"),
            }
            results["load"]["kill"] = load()
        report(args, sizes, results)
    finally:
        for thing in reversed(stack):
            (getattr(thing, "close", None) or thing.stop)()  # a SparkSession has stop()
        import shutil

        shutil.rmtree(work, ignore_errors=True)


def report(args: argparse.Namespace, sizes: list[int], results: dict[str, Any]) -> None:
    print()
    print(f"Sluice beside Iceberg's Kafka Connect sink ({os.cpu_count()} cores, one run)")
    rows = []
    command = f"bench/iceberg_connect.py {' '.join(sys.argv[1:])}".strip()
    if results["throughput"]:
        values = {}
        for n, found in results["throughput"].items():
            ratio = found["connect_s"] / found["sluice_s"]
            values[f"{n:,}"] = [n / found["sluice_s"], n / found["connect_s"]]
            print(
                f"  throughput {n:>9,}: Sluice {n / found['sluice_s']:>9,.0f} msg/s, the sink "
                f"{n / found['connect_s']:>9,.0f} msg/s (commits every "
                f"{args.throughput_interval:g} s): Sluice/sink {ratio:.2f}x"
            )
        print(f"    load average: {results['load']['throughput']}")
        chart = {"unit": "msg/s", "sides": ["Sluice", "Iceberg Kafka Connect sink"]}
        rows.append(
            {
                "what": "throughput into an Iceberg table (REST catalog, S3), "
                + " / ".join(f"{n:,}" for n in results["throughput"])
                + f" messages; the sink commits every {args.throughput_interval:g} s",
                "sluice": " / ".join(f"{v[0]:,.0f}" for v in values.values()) + " msg/s",
                "other": " / ".join(f"{v[1]:,.0f}" for v in values.values()) + " msg/s",
                "ratio": " / ".join(f"{v[0] / v[1]:.2f}x" for v in values.values()),
                "goal": ">= 1.0x",
                "command": command,
                "chart": {**chart, "values": values},
            }
        )
    if "freshness" in results:
        s, c = results["freshness"]["sluice"], results["freshness"]["connect"]
        print(
            f"  freshness at a {args.interval:g} s commit interval, {args.rate:g} msg/s for "
            f"{args.seconds:g} s: Sluice p50 {s['p50']:.1f} s p99 {s['p99']:.1f} s "
            f"({s['commits']} commits), the sink p50 {c['p50']:.1f} s p99 {c['p99']:.1f} s "
            f"({c['commits']} commits): Sluice/sink p50 {s['p50'] / c['p50']:.2f}x"
        )
        print(f"    load average: {results['load']['freshness']}")
        rows.append(
            {
                "what": f"freshness, produce to visible, {args.rate:g} msg/s for "
                f"{args.seconds:g} s, both committing every {args.interval:g} s",
                "sluice": f"p50 {s['p50']:.1f} s, p99 {s['p99']:.1f} s, {s['commits']} commits",
                "other": f"p50 {c['p50']:.1f} s, p99 {c['p99']:.1f} s, {c['commits']} commits",
                "ratio": f"{s['p50'] / c['p50']:.2f}x at p50",
                "goal": "<= 1.0x",
                "command": command,
                "chart": {
                    "unit": "s (p50)",
                    "sides": ["Sluice", "Iceberg Kafka Connect sink"],
                    "values": {f"every {args.interval:g} s": [s["p50"], c["p50"]]},
                },
            }
        )
    if "kill" in results:
        s, c = results["kill"]["sluice"], results["kill"]["connect"]
        for name, found in (("Sluice", s), ("the sink", c)):
            print(
                f"  exactly once under a kill, {name}: {found['rows']:,} rows for "
                f"{args.kill_messages:,} messages, {found['duplicates']} duplicates, "
                f"{found['missing']} missing, {found['unexpected']} unexpected"
            )
        print(f"    load average: {results['load']['kill']}")
        rows.append(
            {
                "what": f"exactly once under a kill, {args.kill_messages:,} messages (Sluice: "
                f"SIGKILL at {args.failpoints.replace(',', ', ')}, each run again; the sink: "
                "SIGKILL of the Connect worker after its first commit, restarted)",
                "sluice": f"{s['rows']:,} rows, {s['duplicates']} duplicates, "
                f"{s['missing']} missing",
                "other": f"{c['rows']:,} rows, {c['duplicates']} duplicates, "
                f"{c['missing']} missing",
                "ratio": "",
                "goal": "no duplicate, none missing",
                "command": command,
            }
        )
    if args.json:
        from benchjson import write

        write(
            args.json,
            "iceberg_connect",
            "Sluice beside Iceberg's Kafka Connect sink (REST catalog, S3)",
            rows,
            "Apache Kafka (one KRaft node)",
        )


if __name__ == "__main__":
    main()
