"""One topic, many tables and assets (issue 49): routed against what users run without routes.

Both comparisons run in one run on one broker (``--broker``, started here: Apache Kafka unless
told), each printing both sides and their ratio.

1. Ingest. ``--messages`` JSON messages over 3 partitions, their ``kind`` spread evenly over
   N kinds (``--routes``, default 10 and 100), ingested

   - by Sluice: one ``ingest(routes=...)`` (no other option: ``mode`` and reader "auto"), a
     route per kind, each into a Parquet table of its own; one read of the topic, every
     table, then one commit;
   - without routes: N Spark jobs, one per kind, each with a consumer group of its own,
     reading the whole batch with Spark's Kafka source (``startingOffsets`` and
     ``endingOffsets``, read_committed), ``from_json``, keeping its kind (``filter``),
     ``write.parquet`` into its table, then committing its group's offsets (side j of
     ``bench/ingest.py`` with the filter).

   Why that baseline and not N ingests of N pre-split topics: it is what the anchors' users do.
   apache/airflow#66476 describes users with N assets on one Kafka topic running N triggers,
   each with its own consumer offsets, polling the whole topic and filtering out the messages
   they do not own; the pipeline behind each asset reads the same way, a consumer group per
   table. Pre-splitting needs a fan-out service (the Lambda those users moved to) whose cost
   a benchmark of ingests would leave out. The baseline has none of Sluice's exactly-once work
   (no quarantine, records, fsync or reconciliation: malformed values become nulls), so the
   ratio understates what routing saves against N Sluice ingests. Each side runs
   ``--warm-rounds`` untimed rounds, then ``--rounds`` interleaved timed rounds; the median
   counts (the warm-up rounds run before the first route count only: the session's JVM is
   warm after them). Every table's rows are counted after each round (not timed).

2. Triggers. ``--triggers`` assets (default 100) on one topic, their triggers run as Airflow's
   triggerer runs them: each made again from its ``serialize()``, ``run()`` iterated in one
   asyncio event loop of a process of their own (a child of this one), that process holding
   nothing else; each asset's ingest is stood in for by this process, which commits the
   event's offsets for the event's group as the ingest would (a watcher keeps one batch in
   flight and plans the next once it is committed). Sides:

   - ``--triggers`` ``RoutedMessageTrigger``\\ s, a route each, sharing one poller (one group);
   - ``--triggers`` ``QueueMessageTrigger``\\ s, a consumer group each (what users do today,
     apache/airflow#66476; a QueueMessageTrigger cannot filter, so every one of them wakes
     for every message);
   - one ``RoutedMessageTrigger`` alone (one asset, one poller): what one poller costs.

   For each: user+system CPU seconds per wall second of the triggers' process over
   ``--idle-seconds`` once they run and the topic is quiet, its threads and resident memory;
   then ``--samples`` messages, one at a time, each of a random kind (of the one kind for the
   one trigger), and per message the time from just before it is produced until the event of
   its kind's asset (the right asset) covers it, the asset events it caused, and the CPU
   seconds of the triggers' process per message.

Run: ``uv run python bench/routes.py [--json bench/results/routes.json]`` (about 15 minutes on
a quiet 2-core machine); ``--quick`` for a smoke test (small sizes, about 2 minutes).
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import json
import os
import queue
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = "kind STRING, id BIGINT, amount DOUBLE, note STRING"
PARTITIONS = 3
CONN_ID = "sluice_bench_routes"
TIMEOUT = 30.0
SETTLE_SECONDS = 5.0  # from the triggers' start (and the warm-up message) to the CPU window


def say(text: str) -> None:
    print(f"[bench] {text}", flush=True)


def kind(i: int) -> str:
    return f"k{i:03d}"


def message(i: int, kinds: int) -> bytes:
    return json.dumps(
        {"kind": kind(i % kinds), "id": i, "amount": round(random.uniform(1, 500), 2),
         "note": "order placed; paid by card; shipped from the north warehouse"}
    ).encode()  # fmt: skip


def produce(bootstrap: str, topic: str, count: int, kinds: int) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=50, batch_size=1 << 20)
    for i in range(count):
        producer.send(topic, message(i, kinds), partition=i % PARTITIONS)
    producer.flush()
    producer.close()


def batch_ends(bootstrap: str, topic: str) -> dict[int, int]:
    from sluice.kafka.offsets import topic_ends

    return dict(sorted(topic_ends({"bootstrap_servers": bootstrap}, topic).items()))


def parquet_rows(folder: Path) -> int:
    import pyarrow.parquet as pq

    return sum(
        pq.read_metadata(f).num_rows
        for f in folder.rglob("*.parquet")
        if "_quarantine" not in f.parts
    )


# -- 1. ingest ---------------------------------------------------------------------------------


def routed_ingest(spark: Any, bootstrap: str, topic: str, kinds: int, out: Path) -> float:
    """One ``ingest(routes=...)`` of the whole topic: a Parquet table per kind."""
    from sluice.batch import BatchSpec, OffsetRange
    from sluice.spark import ingest

    ends = batch_ends(bootstrap, topic)
    spec = BatchSpec(
        "kafka", topic, group_id=f"bench-routed-{uuid.uuid4().hex[:8]}",
        ranges=tuple(OffsetRange(p, 0, end) for p, end in ends.items()),
    )  # fmt: skip
    routes = {"by": "field:kind", "tables": {kind(k): str(out / kind(k)) for k in range(kinds)}}
    started = time.monotonic()
    result = ingest(
        spark, spec, out / "home", source=f"kafka://{bootstrap}", schema=SCHEMA, routes=routes
    )
    elapsed = time.monotonic() - started
    assert result.committed and result.read == sum(ends.values()), result.to_dict()
    return elapsed


def filtered_jobs(spark: Any, bootstrap: str, topic: str, kinds: int, out: Path) -> float:
    """N Spark jobs, one per kind, each reading the whole batch for a group of its own and
    keeping its kind, then committing (see the module docstring)."""
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata
    from pyspark.sql import functions as F
    from spark_source import read_batch

    ends = batch_ends(bootstrap, topic)
    started = time.monotonic()
    for k in range(kinds):
        frame = read_batch(spark, bootstrap, topic, ends)
        parsed = frame.select(
            F.from_json(F.col("value").cast("string"), SCHEMA).alias("m"),
            "partition", "offset", "timestamp",
        ).select("m.*", "partition", "offset", "timestamp")  # fmt: skip
        parsed.where(F.col("kind") == kind(k)).write.mode("overwrite").parquet(str(out / kind(k)))
        consumer = KafkaConsumer(
            bootstrap_servers=bootstrap, group_id=f"bench-{kind(k)}-{out.name}"
        )
        try:
            consumer.commit(
                {TopicPartition(topic, p): OffsetAndMetadata(e, "", -1) for p, e in ends.items()}
            )
        finally:
            consumer.close(autocommit=False)
    return time.monotonic() - started


@dataclass
class IngestCase:
    kinds: int
    messages: int
    routed: list[float] = field(default_factory=list)
    filtered: list[float] = field(default_factory=list)

    def rate(self, seconds: list[float]) -> float:
        return self.messages / statistics.median(seconds)

    @property
    def ratio(self) -> float:
        """The N jobs' time over the routed ingest's (how many times faster routing is)."""
        return statistics.median(self.filtered) / statistics.median(self.routed)

    @property
    def paired(self) -> float:
        return statistics.median(f / r for r, f in zip(self.routed, self.filtered, strict=True))


def ingest_case(
    spark: Any, bootstrap: str, kinds: int, messages: int, rounds: int, warm: int, work: Path
) -> IngestCase:
    from sluice.brokers import create_kafka_topic

    topic = f"bench-routes-{kinds}"
    create_kafka_topic(bootstrap, topic, PARTITIONS)
    produce(bootstrap, topic, messages, kinds)
    case = IngestCase(kinds, messages)
    for r in range(warm + rounds):
        timed = r >= warm
        for side in ("routed", "filtered") if r % 2 == 0 else ("filtered", "routed"):
            out = work / f"{kinds}-{side}-{r}"
            run = routed_ingest if side == "routed" else filtered_jobs
            seconds = run(spark, bootstrap, topic, kinds, out)
            rows = [parquet_rows(out / kind(k)) for k in range(kinds)]
            if rows != [messages // kinds + (k < messages % kinds) for k in range(kinds)]:
                raise SystemExit(f"{side}, {kinds} routes: rows per table {rows}")
            say(
                f"  {kinds} routes, {'round ' + str(r - warm + 1) if timed else 'warm-up'}, "
                f"{side}: {seconds:.2f} s ({messages / seconds:,.0f} msg/s)"
            )
            if timed:
                getattr(case, side).append(seconds)
            shutil.rmtree(out, ignore_errors=True)
    return case


# -- 2. triggers, in a process of their own ------------------------------------------------------


def trigger_process(args: argparse.Namespace) -> None:
    """The child: run the triggers as a triggerer does, printing a line per event."""
    if "AIRFLOW_HOME" not in os.environ:
        os.environ["AIRFLOW_HOME"] = tempfile.mkdtemp(prefix="sluice-bench-airflow-")
        atexit.register(shutil.rmtree, os.environ["AIRFLOW_HOME"], True)
    os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "WARNING")
    from sluice_airflow.triggers.queue import QueueMessageTrigger
    from sluice_airflow.triggers.routed import RoutedMessageTrigger, shared_pollers

    tables = {kind(k): f"/tmp/unused/{kind(k)}" for k in range(args.kinds)}
    routes = {"by": "field:kind", "tables": tables}
    made: list[Any] = []
    for i in range(args.count):
        if args.side == "queue":
            group = {"group_id": f"{args.group}-{i}"}  # a group each
            made.append(QueueMessageTrigger(conn_id=CONN_ID, topic=args.topic, config=group))
        else:
            group = {"group_id": args.group}
            made.append(
                RoutedMessageTrigger(
                    conn_id=CONN_ID, topic=args.topic, routes=routes, route=kind(i), config=group
                )
            )
    triggers = [type(t)(**t.serialize()[1]) for t in made]  # as the triggerer makes them

    def emit(line: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(line) + "\n")
        sys.stdout.flush()

    async def pump(index: int, trigger: Any) -> None:
        async for event in trigger.run():
            emit({"trigger": index, "t": time.time(), "group": event.payload["group_id"],
                  "ranges": event.payload["ranges"]})  # fmt: skip

    async def main() -> None:
        tasks = [asyncio.create_task(pump(i, t)) for i, t in enumerate(triggers)]
        if args.side == "routed":
            while sum(len(p.subscribers) for p in shared_pollers()) < args.count:
                if any(t.done() for t in tasks):
                    break
                await asyncio.sleep(0.01)
        else:
            await asyncio.sleep(0.5)
        emit({"ready": True, "pollers": len(shared_pollers())})
        await asyncio.gather(*tasks)

    asyncio.run(main())


@dataclass
class TriggerSide:
    name: str
    count: int
    cpu_per_second: float = 0.0
    threads: int = 0
    rss_mib: float = 0.0
    latencies: list[float] = field(default_factory=list)  # publish -> the right asset's event
    fan_out: list[float] = field(default_factory=list)  # publish -> the last event it caused
    events_per_message: list[int] = field(default_factory=list)
    cpu_per_message: float = 0.0


class Triggers:
    """The child process running one side's triggers, its events, and the commits that stand
    in for each asset's ingest."""

    def __init__(self, side: str, count: int, kinds: int, bootstrap: str, topic: str) -> None:
        from kafka import KafkaConsumer

        self.side, self.count, self.bootstrap, self.topic = side, count, bootstrap, topic
        self.group = f"bench-{side}-{uuid.uuid4().hex[:8]}"
        self.events: queue.Queue[tuple[dict[str, Any], Future[None]]] = queue.Queue()
        self.ready = threading.Event()
        self._consumers: dict[str, Any] = {}
        self._make_consumer = lambda group: KafkaConsumer(
            bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False
        )
        self._commits = ThreadPoolExecutor(8)
        command = [
            sys.executable, __file__, "--child", side, "--count", str(count), "--kinds",
            str(kinds), "--topic", topic, "--group", self.group,
        ]  # fmt: skip
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if not line.startswith("{"):
                continue
            found = json.loads(line)
            if found.get("ready"):
                self.ready.set()
                continue
            self.events.put((found, self._commits.submit(self._commit, found)))

    def _commit(self, event: dict[str, Any]) -> None:
        from kafka import TopicPartition
        from kafka.structs import OffsetAndMetadata

        group = event["group"]
        consumer = self._consumers.get(group)
        if consumer is None:
            consumer = self._consumers[group] = self._make_consumer(group)
        ends = {TopicPartition(self.topic, r["partition"]): OffsetAndMetadata(r["end"], "", -1)
                for r in event["ranges"]}  # fmt: skip
        consumer.commit(ends)

    def usage(self) -> tuple[float, int, float]:
        import psutil

        proc = psutil.Process(self.process.pid)
        times = proc.cpu_times()
        return times.user + times.system, proc.num_threads(), proc.memory_info().rss / 2**20

    def wait_events(self, partition: int, offset: int, expected: int) -> list[dict[str, Any]]:
        """The events that cover (partition, offset), once ``expected`` of them arrived and
        their commits are done."""
        found: list[dict[str, Any]] = []
        commits: list[Future[None]] = []
        deadline = time.monotonic() + TIMEOUT
        while len(found) < expected:
            if self.process.poll() is not None:
                raise SystemExit(
                    f"the {self.side} triggers' process ended ({self.process.returncode})"
                )
            try:
                event, commit = self.events.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError(
                    f"{self.side}: {len(found)} of {expected} events within {TIMEOUT:.0f} s"
                ) from None
            commits.append(commit)
            if any(r["partition"] == partition and r["start"] <= offset < r["end"]
                   for r in event["ranges"]):  # fmt: skip
                found.append(event)
        for commit in commits:
            commit.result(TIMEOUT)
        return found

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._commits.shutdown(wait=True)
        for consumer in self._consumers.values():
            consumer.close(autocommit=False)


class Producer:
    """confluent-kafka, one message at a time: (the time just before producing, partition,
    offset)."""

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka import Producer as KafkaProducer

        self._producer = KafkaProducer(
            {"bootstrap.servers": bootstrap, "linger.ms": 0, "log_level": 3}
        )

    def send(self, topic: str, value: bytes) -> tuple[float, int, int]:
        delivered: list[Any] = []
        partition = random.randrange(PARTITIONS)
        at = time.time()
        self._producer.produce(topic, value, partition=partition,
                               on_delivery=lambda _e, m: delivered.append(m))  # fmt: skip
        self._producer.flush(TIMEOUT)
        if not delivered or delivered[0].error() is not None:
            raise RuntimeError(f"message to {topic} not delivered within {TIMEOUT} s")
        return at, delivered[0].partition(), delivered[0].offset()


def trigger_side(
    name: str, side: str, count: int, kinds: int, bootstrap: str, idle_s: float, samples: int
) -> TriggerSide:
    from sluice.brokers import create_kafka_topic

    topic = f"bench-assets-{side}-{count}-{uuid.uuid4().hex[:6]}"
    create_kafka_topic(bootstrap, topic, PARTITIONS)
    producer = Producer(bootstrap)
    found = TriggerSide(name, count)
    triggers = Triggers(side, count, kinds, bootstrap, topic)
    per_message = count if side == "queue" else 1  # a QueueMessageTrigger wakes for anything

    def one(k: int) -> tuple[float, float, int]:
        value = json.dumps({"kind": kind(k), "id": 0, "amount": 1.0, "note": "bench"}).encode()
        at, partition, offset = producer.send(topic, value)
        events = triggers.wait_events(partition, offset, per_message)
        right = [e["t"] for e in events if e["trigger"] == k]
        if not right:
            raise SystemExit(f"{name}: no event of asset {k} for a message of its kind")
        return right[0] - at, max(e["t"] for e in events) - at, len(events)

    try:
        if not triggers.ready.wait(120):
            raise SystemExit(f"{name}: the triggers did not start within 120 s")
        say(f"{name}: running; a warm-up message ...")
        one(0)
        time.sleep(SETTLE_SECONDS)
        cpu0, _, _ = triggers.usage()
        wall0 = time.monotonic()
        time.sleep(idle_s)
        cpu1, found.threads, found.rss_mib = triggers.usage()
        found.cpu_per_second = (cpu1 - cpu0) / (time.monotonic() - wall0)
        say(f"{name}: idle {found.cpu_per_second:.4f} CPU-s/s, {found.threads} threads, "
            f"{found.rss_mib:.0f} MiB; {samples} messages ...")  # fmt: skip
        for _ in range(samples):
            time.sleep(random.uniform(0.2, 0.7))  # not in step with the poll interval
            right, last, events = one(random.randrange(count))
            found.latencies.append(right)
            found.fan_out.append(last)
            found.events_per_message.append(events)
        cpu2, _, _ = triggers.usage()
        found.cpu_per_message = (cpu2 - cpu1) / max(1, samples)
    finally:
        triggers.close()
    return found


# -- results -------------------------------------------------------------------------------------


def pct(values: list[float], q: float) -> float:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from percentiles import percentile

    return percentile(values, q)


def latency_text(side: TriggerSide) -> str:
    return (
        f"{side.name}: p50 {pct(side.latencies, 50) * 1000:.0f} ms, "
        f"p99 {pct(side.latencies, 99) * 1000:.0f} ms, "
        f"{statistics.median(side.events_per_message):.0f} asset event(s) per message"
    )


def report(cases: list[IngestCase], sides: dict[str, TriggerSide]) -> None:
    print()
    print("1. One routed ingest against N Spark jobs that each read the topic and keep one kind")
    for c in cases:
        print(
            f"  {c.kinds:>3} routes, {c.messages:,} messages: routed "
            f"{statistics.median(c.routed):6.2f} s ({c.rate(c.routed):8,.0f} msg/s); "
            f"{c.kinds} jobs {statistics.median(c.filtered):6.2f} s "
            f"({c.rate(c.filtered):8,.0f} msg/s); {c.ratio:.2f}x faster "
            f"(per round {c.paired:.2f}x)"
        )
    if not sides:
        return
    print()
    print("2. Assets on one topic in a triggerer's event loop")
    for side in sides.values():
        print(
            f"  {side.name:<42} idle {side.cpu_per_second:.4f} CPU-s/s, {side.threads:3d} threads, "
            f"{side.rss_mib:4.0f} MiB; {side.cpu_per_message:.3f} CPU-s per message"
        )
    for side in sides.values():
        print(f"  {latency_text(side)}; fan-out p50 {pct(side.fan_out, 50) * 1000:.0f} ms")
    routed, plain, one = sides["routed"], sides["queue"], sides["one"]
    print(
        f"  idle CPU: {plain.count} QueueMessageTriggers / {routed.count} routed = "
        f"{plain.cpu_per_second / routed.cpu_per_second:.1f}x; {routed.count} routed / one "
        f"poller = {routed.cpu_per_second / one.cpu_per_second:.2f}x"
    )
    print(
        f"  p50 latency: routed / QueueMessageTriggers = "
        f"{pct(routed.latencies, 50) / pct(plain.latencies, 50):.2f}x; routed / one poller = "
        f"{pct(routed.latencies, 50) / pct(one.latencies, 50):.2f}x"
    )


def json_results(
    path: str, cases: list[IngestCase], sides: dict[str, TriggerSide], args: argparse.Namespace,
    broker: str, load_note: str | None,
) -> None:  # fmt: skip
    from benchjson import row, write

    command = (
        f"bench/routes.py --broker {args.broker} --routes {args.routes} --messages "
        f"{args.messages} --rounds {args.rounds} --warm-rounds {args.warm_rounds}"
    )
    rows = []
    for c in cases:
        rows.append(row(
            f"{c.kinds} routes, {c.messages:,} messages: one routed ingest against {c.kinds} "
            "Spark jobs (a group each, reading the whole topic, keeping one kind)",
            f"one routed ingest: {statistics.median(c.routed):.2f} s, "
            f"{c.rate(c.routed):,.0f} msg/s",
            f"{c.kinds} filtered Spark jobs: {statistics.median(c.filtered):.2f} s, "
            f"{c.rate(c.filtered):,.0f} msg/s",
            f"{c.ratio:.2f}x faster (per round {c.paired:.2f}x)",
            "none set (issue 49 asks for the figure)",
            command,
            {"unit": "seconds", "sides": ["one routed ingest", f"{c.kinds} filtered Spark jobs"],
             "values": {f"{c.kinds} routes": [statistics.median(c.routed),
                                              statistics.median(c.filtered)]}},
        ))  # fmt: skip
    if sides:
        routed, plain, one = sides["routed"], sides["queue"], sides["one"]
        tcommand = (
            f"bench/routes.py --broker {args.broker} --triggers {args.triggers} "
            f"--idle-seconds {args.idle_seconds:g} --samples {args.samples}"
        )

        def cpu(side: TriggerSide) -> str:
            return (f"{side.name}: {side.cpu_per_second:.4f} CPU-s/s, {side.threads} threads, "
                    f"{side.rss_mib:.0f} MiB")  # fmt: skip

        rows.append(row(
            f"{routed.count} assets on one topic, idle: CPU of the triggers' process",
            cpu(routed), cpu(plain),
            f"{plain.cpu_per_second / routed.cpu_per_second:.1f}x less CPU",
            "about one poller's CPU", tcommand,
            {"unit": "CPU seconds per second",
             "sides": [routed.name, plain.name],
             "values": {"idle": [routed.cpu_per_second, plain.cpu_per_second]}},
        ))  # fmt: skip
        rows.append(row(
            f"{routed.count} routed assets against one poller alone, idle",
            cpu(routed), cpu(one),
            f"{routed.cpu_per_second / one.cpu_per_second:.2f}x one poller's CPU",
            "about 1x (issue 49: 100 assets cost about what one poller costs)", tcommand,
            {"unit": "CPU seconds per second", "sides": [routed.name, one.name],
             "values": {"idle": [routed.cpu_per_second, one.cpu_per_second]}},
        ))  # fmt: skip
        rows.append(row(
            "publish -> the right asset's event",
            latency_text(routed), latency_text(plain),
            f"{pct(routed.latencies, 50) / pct(plain.latencies, 50):.2f}x their p50",
            "none set (issue 49 asks for the figure)", tcommand,
            {"unit": "milliseconds", "sides": [routed.name, plain.name],
             "values": {q: [pct(routed.latencies, n) * 1000, pct(plain.latencies, n) * 1000]
                        for q, n in (("p50", 50), ("p99", 99))}},
        ))  # fmt: skip
        rows.append(row(
            "publish -> the event of one asset alone (one poller)",
            latency_text(routed), latency_text(one),
            f"{pct(routed.latencies, 50) / pct(one.latencies, 50):.2f}x its p50",
            "about 1x", tcommand,
        ))  # fmt: skip
    write(path, "routes", "One topic, many tables and assets", rows, broker, load_note)


def main() -> None:
    from broker_choice import add_broker_option

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--routes", default="10,100", help="route counts of the ingest part")
    parser.add_argument("--messages", type=int, default=50_000, help="messages per topic")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds; the median counts")
    parser.add_argument("--warm-rounds", type=int, default=1, help="untimed rounds first")
    parser.add_argument("--triggers", type=int, default=100, help="assets on one topic")
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    parser.add_argument("--samples", type=int, default=30, help="messages timed per side")
    parser.add_argument("--parts", default="ingest,triggers", help="which parts to run")
    parser.add_argument("--quick", action="store_true", help="small sizes, a smoke test")
    parser.add_argument("--load-note", help="said beside the load in the --json results")
    parser.add_argument(
        "--json", metavar="PATH", help="also write the results (bench/results/routes.json)"
    )
    parser.add_argument("--child", choices=("routed", "queue"), help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--kinds", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    parser.add_argument("--group", help=argparse.SUPPRESS)
    add_broker_option(parser)
    args = parser.parse_args()
    if args.load_note:  # said in the results' load, not in the command that measures again
        at = sys.argv.index("--load-note")
        del sys.argv[at : at + 2]
    if args.child:
        args.side = args.child
        trigger_process(args)
        return
    if args.quick:
        args.routes, args.messages, args.rounds, args.warm_rounds = "3,10", 2_000, 1, 1
        args.triggers, args.idle_seconds, args.samples = 10, 3.0, 3

    from broker_choice import broker_label, start_broker

    parts = set(args.parts.split(","))
    say(f"starting {broker_label(args.broker)}")
    broker = start_broker(args.broker)
    os.environ[f"AIRFLOW_CONN_{CONN_ID.upper()}"] = json.dumps(
        {"conn_type": "sluice_kafka", "host": broker.host, "port": broker.port}
    )
    work = Path(tempfile.mkdtemp(prefix="sluice-bench-routes-"))
    cases: list[IngestCase] = []
    sides: dict[str, TriggerSide] = {}
    try:
        if "ingest" in parts:
            from sluice.spark import spark_session

            say("starting Spark (not timed)")
            spark = spark_session(
                "local[2]", "sluice-bench", {"spark.ui.enabled": "false"}, kafka_source=True
            )
            for index, kinds in enumerate(int(n) for n in args.routes.split(",")):
                say(f"{kinds} routes: {args.messages:,} messages")
                warm = args.warm_rounds if index == 0 else 0  # the JVM is warm by then
                cases.append(ingest_case(
                    spark, broker.bootstrap, kinds, args.messages, args.rounds, warm, work
                ))  # fmt: skip
            spark.stop()
        if "triggers" in parts:
            n = args.triggers
            plan = (
                ("routed", f"{n} RoutedMessageTriggers (one poller)", "routed", n),
                ("queue", f"{n} QueueMessageTriggers (a group each)", "queue", n),
                ("one", "1 RoutedMessageTrigger (one poller)", "routed", 1),
            )
            for key, name, side, count in plan:
                sides[key] = trigger_side(
                    name, side, count, n, broker.bootstrap, args.idle_seconds, args.samples
                )
    finally:
        broker.close()
        shutil.rmtree(work, ignore_errors=True)
    report(cases, sides)
    if args.json:
        json_results(args.json, cases, sides, args, broker_label(args.broker), args.load_note)


if __name__ == "__main__":
    main()
