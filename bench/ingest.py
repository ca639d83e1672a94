"""Ingestion throughput, all sides measured in one run on one broker (``--broker``, started
here: Apache Kafka unless told).

    uv run python bench/ingest.py [--messages 200000[,2000000,...]] [--repeats 5]
                                  [--warm-rounds 1] [--big 1000000]

On 200,000 JSON messages (or each of ``--messages``' sizes in turn, in one SparkSession) of
about 200 bytes over 3 partitions, 1% of them malformed, it times:
  (a) a bare kafka-python loop that only reads them (assign, seek, poll);
  (b) sluice.spark.ingest in driver mode (read, parse with a schema, quarantine, Parquet, commit);
  (c) sluice.spark.ingest in executor mode (one Spark task per range);
  (d) the same work written by hand with today's Airflow Kafka provider: KafkaConsumerHook
      (confluent-kafka), json.loads into typed columns, bad records set aside with a reason,
      pyarrow Parquet, a commit per poll;
  (e), (f) as (b) and (c) with the confluent reader, and (g) as (e) without any fsync (what
      durability before the commit, invariant I9, costs: e/g);
  (h) at-least-once: (e)'s reading (the confluent reader on the driver), classification and
      Parquet writing (one Spark job, each task writing its good and bad rows with pyarrow),
      then the offset commit, and none of the exactly-once machinery: no lock, recovery,
      state, manifests or batch records, no attempt directories, no offsets reported by the
      tasks, no reconciliation, no fsync (what exactly-once costs: e/h);
  (i) sluice.spark.ingest with no options but the schema (mode and reader "auto"): what a
      fresh install does out of the box;
  (j) a hand-written Spark job, the way a Spark user writes it: spark.read.format("kafka")
      with startingOffsets/endingOffsets for the ranges (read_committed), from_json with the
      schema, write.parquet, then a commit of the offsets with kafka-python (no quarantine,
      no exactly-once machinery: malformed values become null columns);
  (k) sluice.spark.ingest with options.reader "spark" (Spark's Kafka source, as (j) reads);
  (l) as (i) with keep_message=True: the whole message kept beside the fields (a bronze copy);
and prints messages/s and the ratios, and each side's bytes on disk per message (the Parquet
files of its last round, data and quarantine) with, for (i) and (l), the bytes of each column.
Then it ingests a batch of --big messages in driver mode in
a child process and prints that process's peak RSS (Python driver, and the Spark JVM beside it).
The SparkSession is started before anything is timed. Every side then runs --warm-rounds
untimed rounds (default 1: the JVM's just-in-time compiler is still warming up; the first
one's numbers are printed as the "first round"; before the first size only) and --repeats
timed rounds, interleaved; the median counts. Before each side the benchmark flushes the
file system's dirty pages (the side before's files, 200 bytes a message for some, would be
written back during the next side) and waits until the broker is idle: an offset commit to
noida-db costs it about one CPU-second of work in the next two seconds, which would
otherwise land on whichever side runs next. The broker's CPU time during each side is
printed with it. With ``--broker noida``, more than 500,000 messages and the --big batch run
on Tansu (noida-db 0.2.3 stalls on fetches of a log that large). Spark's Kafka source (j, k)
needs right ListOffsets answers, which Tansu does not give.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMA = "device STRING, site STRING, temperature DOUBLE, humidity DOUBLE, ts STRING, note STRING"
PARTITIONS = 3
#: Messages of the first untimed ingests, which load what Spark and the readers load once.
WARM_UP = 3_000

LABELS = {
    "a": "bare kafka-python read loop (reads only)",
    "b": "sluice ingest, driver mode",
    "c": "sluice ingest, executor mode",
    "d": "by hand: Airflow Kafka hook + json + pyarrow",
    "e": "sluice ingest, driver mode, confluent reader",
    "f": "sluice ingest, executor mode, confluent reader",
    "g": "as (e), without fsync (no durability)",
    "h": "at-least-once: (e)'s read, sort, write; commit",
    "i": "sluice ingest, no options (mode and reader auto)",
    "j": "by hand: Spark job, Kafka source + from_json",
    "k": "sluice ingest, reader spark (Kafka source)",
    "l": "as (i), keep_message=True (a bronze copy)",
}

# The goal compares like with like: the hand-written path reads with librdkafka, as
# Sluice's confluent reader does; kafka-python (the default reader) is shown beside it.
RATIOS = [
    ("no options / Airflow hook", "i", "d", "goal >= 1.0 (fast by default)"),
    ("driver, confluent / Airflow hook", "e", "d", "goal >= 1.0"),
    ("executors, confluent / Airflow hook", "f", "d", "goal >= 1.0"),
    ("driver, kafka-python / Airflow hook", "b", "d", ""),
    ("executors, kafka-python / Airflow hook", "c", "d", ""),
    ("driver, confluent / bare loop", "e", "a", "stretch goal >= 0.9"),
    ("executors, confluent / bare loop", "f", "a", ""),
    ("fsync's cost: with / without (e/g)", "g", "e", "time ratio"),
    ("exactly-once / at-least-once (e/h)", "h", "e", "time ratio, goal <= 1.05"),
    ("no options / hand-written Spark job", "i", "j", "goal >= 1.0"),
    ("reader spark / hand-written Spark job", "k", "j", "goal >= 0.95"),
    ("reader spark / driver, confluent", "k", "e", "goal >= 1.5 at 2,000,000"),
    ("reader spark / driver, kafka-python", "k", "b", ""),
]
SIZE_RATIOS = [
    ("bytes on disk: no options / Spark job", "i", "j", "goal <= 1.1"),
    ("bytes on disk: reader spark / Spark job", "k", "j", "goal <= 1.1"),
    ("bytes on disk: keep_message=True / no options", "l", "i", ""),
]
#: What the goals of issue 46 are about, for ``--messages`` with several sizes.
GOAL_SIZES = "20000,200000,2000000,5000000"


def say(text: str) -> None:
    print(f"[bench] {text}", flush=True)


def reading(i: int) -> bytes:
    """A JSON reading; every 100th is malformed (every 200th not JSON at all, the others with
    a temperature that is not a number)."""
    if i % 200 == 99:
        return b'{"device": "sensor-broken", "temperature": '
    if i % 200 == 199:
        return b'{"device": "sensor-broken", "temperature": "hot"}'
    return json.dumps(
        {
            "device": f"sensor-{i % 500:05d}",
            "site": "plant-north",
            "temperature": round(random.uniform(-20, 45), 3),
            "humidity": round(random.random(), 4),
            "ts": "2026-11-22T15:00:00.000Z",
            "note": "reading within tolerance; calibration ok; firmware 4.2.1",
        }
    ).encode()


def produce(bootstrap: str, topic: str, count: int, partitions: int = PARTITIONS) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=50, batch_size=1 << 20)
    started = time.monotonic()
    for i in range(count):
        producer.send(topic, reading(i), key=b"k%d" % (i % 500), partition=i % partitions)
        if i % 50_000 == 0 and i:
            say(f"  produced {i:,} of {count:,}")
    producer.flush()
    producer.close()
    say(f"produced {count:,} messages in {time.monotonic() - started:.1f} s")


def cpu_seconds(process: Any) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


def wait_until_idle(
    process: Any, quiet_s: float = 2.0, timeout_s: float = 60.0, busy: float = 0.01
) -> float:
    """Wait until ``process`` has used under ``busy`` of a core (1%; Apache Kafka's JVM never
    goes that quiet) for ``quiet_s`` (its work after a commit starts about half a second
    late); the seconds waited."""
    started = time.monotonic()
    quiet_since, before = started, cpu_seconds(process)
    while time.monotonic() - started < timeout_s:
        time.sleep(0.25)
        now = cpu_seconds(process)
        if now - before > busy * 0.25:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= quiet_s:
            return time.monotonic() - started
        before = now
    raise TimeoutError(f"the broker did not go idle within {timeout_s:.0f} s")


def bare_loop(bootstrap: str, topic: str, count: int) -> float:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    started = time.monotonic()
    consumer.assign(tps)
    consumer.seek_to_beginning()
    seen = 0
    while seen < count:
        for records in consumer.poll(timeout_ms=500).values():
            seen += len(records)
    elapsed = time.monotonic() - started
    consumer.close()
    return elapsed


FIELDS = [(f.split()[0], f.split()[1]) for f in SCHEMA.split(", ")]
TYPES = {"STRING": (str,), "DOUBLE": (float, int)}


def parse_reading(value: bytes | None) -> tuple[list[Any] | None, str | None]:
    """The typed fields of one value, or why it is bad: what a hand-written task checks."""
    if not value:
        return None, "empty value"
    try:
        doc = json.loads(value)
    except ValueError:
        return None, "invalid JSON"
    if not isinstance(doc, dict):
        return None, "not a JSON object"
    row = []
    for name, kind in FIELDS:
        field = doc.get(name)
        if field is not None and (not isinstance(field, TYPES[kind]) or isinstance(field, bool)):
            return None, f"'{name}' is not {kind.lower()}"
        row.append(float(field) if kind == "DOUBLE" and field is not None else field)
    return row, None


def airflow_provider(bootstrap: str, topic: str, count: int, out: Path) -> float:
    """KafkaConsumerHook + pyarrow, the way a DAG author would write the same work with
    today's provider: parse each value into typed columns, set bad records aside with a
    reason, write both to Parquet, commit."""
    os.environ["AIRFLOW_CONN_BENCH_KAFKA"] = json.dumps(
        {
            "conn_type": "kafka",
            "extra": {
                "bootstrap.servers": bootstrap,
                "group.id": f"bench-airflow-{time.time_ns()}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            },
        }
    )
    import pyarrow as pa
    import pyarrow.parquet as pq
    from airflow.providers.apache.kafka.hooks.consume import KafkaConsumerHook

    out.mkdir(parents=True, exist_ok=True)

    started = time.monotonic()
    consumer = KafkaConsumerHook([topic], kafka_config_id="bench_kafka").get_consumer()
    seen, part = 0, 0
    while seen < count:
        messages = consumer.consume(num_messages=10_000, timeout=1.0)
        if not messages:
            continue
        good: list[list[Any]] = [[] for _ in FIELDS]
        good_meta: list[Any] = []
        bad: list[tuple[Any, str]] = []
        for m in messages:
            row, reason = parse_reading(m.value())
            if row is None:
                bad.append((m, str(reason)))
                continue
            for column, field in zip(good, row, strict=True):
                column.append(field)
            good_meta.append(m)
        types = {"STRING": pa.string(), "DOUBLE": pa.float64()}
        table = pa.table(
            {
                **{
                    name: pa.array(column, types[kind])
                    for (name, kind), column in zip(FIELDS, good, strict=True)
                },
                **message_columns(good_meta),
            }
        )
        pq.write_table(table, out / f"part-{part:05d}.parquet")
        if bad:
            quarantine = pa.table(
                {**message_columns([m for m, _ in bad]), "reason": [r for _, r in bad]}
            )
            pq.write_table(quarantine, out / f"quarantine-{part:05d}.parquet")
        part += 1
        seen += len(messages)
        consumer.commit(asynchronous=False)
    elapsed = time.monotonic() - started
    consumer.close()
    return elapsed


def message_columns(messages: list[Any]) -> dict[str, list[Any]]:
    return {
        "key": [m.key() for m in messages],
        "value": [m.value() for m in messages],
        "topic": [m.topic() for m in messages],
        "partition": [m.partition() for m in messages],
        "offset": [m.offset() for m in messages],
        "timestamp": [m.timestamp()[1] for m in messages],
    }


def without_fsync(side: Any) -> Any:
    """``side`` with sluice.spark.durable off (no fsync anywhere, tasks included)."""
    from sluice.spark import durable

    def run(out: Path) -> float:
        durable.ENABLED = False
        try:
            return float(side(out))
        finally:
            durable.ENABLED = True

    return run


def sluice_ingest(
    spark: Any,
    bootstrap: str,
    topic: str,
    count: int,
    mode: str,
    out: Path,
    reader: str | None = "kafka-python",
    keep_message: bool | None = None,
) -> float:

    from sluice.batch import BatchSpec, OffsetRange
    from sluice.kafka.offsets import topic_ends

    ends = topic_ends({"bootstrap_servers": bootstrap}, topic)
    spec = BatchSpec(
        "kafka",
        topic,
        group_id=f"bench-{mode}-{time.time_ns()}",
        ranges=tuple(OffsetRange(p, 0, end) for p, end in sorted(ends.items())),
    )
    assert spec.message_count == count, (spec.message_count, count)
    from sluice.spark import ingest

    started = time.monotonic()
    source = f"kafka://{bootstrap}" + (f"?reader={reader}" if reader else "")
    result = ingest(
        spark, spec, out, source=source, schema=SCHEMA, mode=mode, keep_message=keep_message
    )
    elapsed = time.monotonic() - started
    assert result.written + result.quarantined == count, result.to_dict()
    assert result.quarantined == count // 100, result.to_dict()
    return elapsed


def batch_ranges(bootstrap: str, topic: str) -> dict[int, int]:
    """{partition: end offset} of ``topic``: its batch is [0, end) of each partition."""
    from sluice.kafka.offsets import topic_ends

    return dict(sorted(topic_ends({"bootstrap_servers": bootstrap}, topic).items()))


def spark_job(spark: Any, bootstrap: str, topic: str, count: int, out: Path) -> float:
    """Side (j): the same batch read by Spark's Kafka source, parsed with from_json and
    written with write.parquet, then the offsets committed: a Spark user's job."""
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata
    from pyspark.sql import functions as F
    from spark_source import read_batch

    ends = batch_ranges(bootstrap, topic)
    group = f"bench-spark-job-{time.time_ns()}"
    started = time.monotonic()
    frame = read_batch(spark, bootstrap, topic, ends)
    parsed = frame.select(
        F.from_json(F.col("value").cast("string"), SCHEMA).alias("reading"),
        "key",
        "partition",
        "offset",
        "timestamp",
    ).select("reading.*", "key", "partition", "offset", "timestamp")
    parsed.write.mode("overwrite").parquet(str(out))
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group)
    try:
        consumer.commit(
            {TopicPartition(topic, p): OffsetAndMetadata(e, "", -1) for p, e in ends.items()}
        )
    finally:
        consumer.close(autocommit=False)
    elapsed = time.monotonic() - started
    assert sum(ends.values()) == count, (ends, count)
    return elapsed


def plain_task_writer(good: list[str], bad: list[str], out: str) -> Any:
    """What an at-least-once pipeline's Spark tasks do: write their good rows and their bad
    rows to Parquet straight into place, one file per output per task (encoded as Sluice's);
    no attempt directories, no offsets or fingerprints reported, no fsync."""
    from sluice.spark.layout import arrow_writer_options

    def write(batches: Any) -> Any:
        import uuid

        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        name = f"part-{uuid.uuid4().hex}.parquet"
        writers: dict[str, Any] = {}
        rows = 0
        try:
            for batch in batches:
                table = pa.Table.from_batches([batch])
                is_bad = pc.is_valid(table["reason"])
                for kind, mask, columns in (
                    ("data", pc.invert(is_bad), good),
                    ("_quarantine", is_bad, bad),
                ):
                    part = table.filter(mask).select(columns)
                    if not part.num_rows:
                        continue
                    if kind not in writers:
                        os.makedirs(f"{out}/{kind}", exist_ok=True)
                        writers[kind] = pq.ParquetWriter(
                            f"{out}/{kind}/{name}",
                            part.schema,
                            **arrow_writer_options(part.schema),
                        )
                    writers[kind].write_table(part)
                    rows += part.num_rows
        finally:
            for writer in writers.values():
                writer.close()
        yield pa.RecordBatch.from_pylist([{"rows": rows}], schema=pa.schema([("rows", pa.int64())]))

    return write


def at_least_once(
    spark: Any, bootstrap: str, topic: str, count: int, out: Path, reader: str = "confluent"
) -> float:
    """Sluice's reading, classification and Parquet writing, then a commit, and nothing of
    its exactly-once machinery: no lock, no recovery, no state, manifests or batch records,
    no remaining-work or recreated-topic checks, no attempt directories, no reconciliation,
    no fsync. The at-least-once pipeline the same engine would give (side h)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from sluice.batch import BatchSpec, OffsetRange
    from sluice.kafka.offsets import topic_ends
    from sluice.spark.classify import Classification, Rules, parse_schema
    from sluice.spark.formats import plan_formats
    from sluice.spark.ingest import MIN_ROWS_PER_TASK, source_config
    from sluice.spark.kafka_source import DEFAULT_CHUNK_BYTES, commit_offsets, reader_kwargs
    from sluice.spark.layout import message_columns
    from sluice.spark.reading import chunks_on_driver
    from sluice.spark.records import RAW_SCHEMA_DDL, largest_message_bytes
    from sluice.spark.writing import arrow_settings, batch_rows, lean_rows, session_conf

    ends = topic_ends({"bootstrap_servers": bootstrap}, topic)
    spec = BatchSpec(
        "kafka",
        topic,
        group_id=f"bench-alo-{time.time_ns()}",
        ranges=tuple(OffsetRange(p, 0, end) for p, end in sorted(ends.items())),
    )
    started = time.monotonic()
    config = source_config(spec, f"kafka://{bootstrap}?reader={reader}")
    kwargs = reader_kwargs(config)
    formats = plan_formats(spec, schema=parse_schema(SCHEMA))
    rules = Rules(
        parse_schema(formats.payload_schema),
        formats.value_format,
        message=message_columns((), "kafka"),  # the default table's columns, as (e) writes
    )
    classification = Classification.of(rules)
    scratch = out / "_scratch"
    scratch.mkdir(parents=True)
    stall_s = float(config["options.request_timeout"]) / 1000
    cores = int(spark.sparkContext.defaultParallelism)
    files: list[str] = []
    largest = 0
    chunks = chunks_on_driver(
        kwargs, topic, list(spec.ranges), 100_000, stall_s, DEFAULT_CHUNK_BYTES
    )
    for number, batch in enumerate(chunks):
        largest = max(largest, largest_message_bytes(batch))
        pieces = max(1, min(cores, batch.num_rows // MIN_ROWS_PER_TASK))
        size = -(-batch.num_rows // pieces)
        for piece in range(pieces):
            path = scratch / f"part-{number:05d}-{piece:03d}.parquet"
            pq.write_table(
                pa.Table.from_batches([batch.slice(piece * size, size)]), path, compression="none"
            )
            files.append(str(path))
    raw = spark.read.schema(RAW_SCHEMA_DDL).parquet(*files)
    good, bad = [*classification.good], [*classification.bad]
    # the good rows cross to the writers without the message, as (e)'s do (no row kept whole
    # for a fingerprint: that is exactly-once machinery)
    frame = lean_rows(classification.apply(formats.stage(raw)), good, bad, {})
    task = plain_task_writer(good, bad, str(out))
    with session_conf(spark, arrow_settings(batch_rows(largest))):
        rows = sum(r["rows"] for r in frame.mapInArrow(task, "rows BIGINT").collect())
    shutil.rmtree(scratch)  # as (e) deletes its own (and they are not the table's bytes)
    commit_offsets(kwargs, topic, str(spec.group_id), dict(ends))
    elapsed = time.monotonic() - started
    assert rows == count, (rows, count)
    return elapsed


def peak_rss_child(bootstrap: str, topic: str, count: int) -> None:
    """Run in a child: ingest ``count`` messages in driver mode, sampling RSS of this process
    and of the Spark JVM it starts; print both peaks as JSON."""
    import psutil

    me = psutil.Process()
    peaks = {"python": 0, "jvm": 0}
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peaks["python"] = max(peaks["python"], me.memory_info().rss)
            jvm = sum(
                c.memory_info().rss for c in me.children(recursive=True) if "java" in c.name()
            )
            peaks["jvm"] = max(peaks["jvm"], jvm)
            time.sleep(0.2)

    threading.Thread(target=sample, daemon=True).start()
    from sluice.spark import spark_session

    spark = spark_session("local[2]", "sluice-bench-rss", {"spark.ui.enabled": "false"})
    with tempfile.TemporaryDirectory() as out:
        seconds = sluice_ingest(spark, bootstrap, topic, count, "driver", Path(out))
    done.set()
    print(json.dumps({**peaks, "seconds": seconds}))


def main() -> None:
    from broker_choice import add_broker_option

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument(
        "--messages",
        default="200000",
        help=f"batch sizes, comma-separated (issue 46's goals: {GOAL_SIZES})",
    )
    parser.add_argument("--big", type=int, default=1_000_000, help="0 skips the RSS run")
    parser.add_argument(
        "--repeats", type=int, default=5, help="rounds over every side; the median counts"
    )
    parser.add_argument(
        "--warm-rounds",
        type=int,
        default=1,
        help="untimed rounds over every side first (the JVM's compiler warms up over several)",
    )
    parser.add_argument(
        "--sides", default="abcdefghijkl", help="which sides to run (letters; default all)"
    )
    parser.add_argument(
        "--json", metavar="PATH", help="also write the results (bench/results/ingest.json)"
    )
    parser.add_argument(
        "--child-rss", nargs=3, metavar=("BOOTSTRAP", "TOPIC", "COUNT"), help=argparse.SUPPRESS
    )
    add_broker_option(parser)
    args = parser.parse_args()
    if args.child_rss:
        peak_rss_child(args.child_rss[0], args.child_rss[1], int(args.child_rss[2]))
        return

    import psutil
    from broker_choice import broker_label, start_broker

    from sluice.brokers import create_kafka_topic
    from sluice.spark import spark_session

    # noida-db 0.2.3 stalls on fetches of logs of a million messages: Tansu beyond that.
    big_broker_name = "tansu" if args.broker == "noida" else args.broker
    sizes = [int(size) for size in args.messages.split(",")]
    broker_name = args.broker if max(sizes) <= 500_000 else big_broker_name
    say(f"starting {broker_label(broker_name)}")
    broker = start_broker(broker_name)
    broker_process = psutil.Process(broker.pid)
    # Apache Kafka's JVM never drops under 1% of a core: idle is under 10% there
    idle = 0.1 if broker_name == "kafka" else 0.01
    brokers = [broker]
    work = Path(tempfile.mkdtemp(prefix="sluice-bench-"))
    try:
        say(f"average value size: {len(reading(0))} bytes")

        say("starting and warming up Spark (not timed)")
        started = time.monotonic()
        spark = spark_session(
            "local[2]", "sluice-bench", {"spark.ui.enabled": "false"}, kafka_source=True
        )
        say(f"SparkSession ready in {time.monotonic() - started:.1f} s")
        warm = "bench-warmup"
        create_kafka_topic(broker.bootstrap, warm, PARTITIONS)
        produce(broker.bootstrap, warm, WARM_UP)
        for mode in ("driver", "executors"):
            for reader in ("kafka-python", "confluent"):
                out = work / f"warm-{mode}-{reader}"
                sluice_ingest(spark, broker.bootstrap, warm, WARM_UP, mode, out, reader)
        sluice_ingest(spark, broker.bootstrap, warm, WARM_UP, "auto", work / "warm-k", "spark")
        spark_job(spark, broker.bootstrap, warm, WARM_UP, work / "warm-j")
        if "h" in args.sides:
            at_least_once(spark, broker.bootstrap, warm, WARM_UP, work / "warm-h")

        results = []
        for index, n in enumerate(sizes):
            topic = f"bench-readings-{n}"
            create_kafka_topic(broker.bootstrap, topic, PARTITIONS)
            produce(broker.bootstrap, topic, n)
            say(f"{n:,} messages: every side, {args.repeats} timed rounds")
            warm_rounds = max(1, args.warm_rounds) if index == 0 else 0  # the JVM is warm now
            results.append(
                run_size(spark, broker, broker_process, idle, topic, n, args, work, warm_rounds)
            )
        if args.json:
            json_results(args.json, results, args, broker_label(broker_name))

        if args.big:
            # Not on noida-db: 0.2.3 stops answering fetches from the start of a log this
            # large (a broker bug, see docs/development.md's broker table).
            big_broker = start_broker(big_broker_name)
            brokers.append(big_broker)
            big = "bench-big"
            create_kafka_topic(big_broker.bootstrap, big, PARTITIONS)
            produce(big_broker.bootstrap, big, args.big)
            say(f"ingesting {args.big:,} messages in driver mode in a child process (peak RSS)")
            child = subprocess.run(
                [sys.executable, __file__, "--child-rss", big_broker.bootstrap, big, str(args.big)],
                capture_output=True,
                text=True,
                check=True,
            )
            peaks = json.loads(child.stdout.strip().splitlines()[-1])
            print(
                f"  {args.big:,}-message batch, driver mode: "
                f"{args.big / peaks['seconds']:,.0f} msg/s; "
                f"peak RSS of the Python driver {peaks['python'] / 2**20:,.0f} MiB, "
                f"of the Spark JVM {peaks['jvm'] / 2**20:,.0f} MiB"
            )
    finally:
        for running in brokers:
            running.close()
        shutil.rmtree(work, ignore_errors=True)


@dataclass
class SizeResult:
    """One batch size's timed rounds: seconds per side, msg/s (median), bytes on disk per
    message of the last round's files."""

    messages: int
    runs: dict[str, list[float]]
    rate: dict[str, float]
    on_disk: dict[str, float]


def run_size(
    spark: Any,
    broker: Any,
    broker_process: Any,
    idle: float,
    topic: str,
    n: int,
    args: argparse.Namespace,
    work: Path,
    warm_rounds: int,
) -> SizeResult:
    """Every side of ``args.sides`` on the ``n`` messages of ``topic``: ``warm_rounds``
    untimed rounds, then ``args.repeats`` timed ones, interleaved; printed as they go."""
    sides = {
        "a": lambda out: bare_loop(broker.bootstrap, topic, n),
        "b": lambda out: sluice_ingest(spark, broker.bootstrap, topic, n, "driver", out),
        "c": lambda out: sluice_ingest(spark, broker.bootstrap, topic, n, "executors", out),
        "e": lambda out: sluice_ingest(
            spark, broker.bootstrap, topic, n, "driver", out, "confluent"
        ),
        "f": lambda out: sluice_ingest(
            spark, broker.bootstrap, topic, n, "executors", out, "confluent"
        ),
        "d": lambda out: airflow_provider(broker.bootstrap, topic, n, out),
        "h": lambda out: at_least_once(spark, broker.bootstrap, topic, n, out),
        "i": lambda out: sluice_ingest(spark, broker.bootstrap, topic, n, "auto", out, None),
        "j": lambda out: spark_job(spark, broker.bootstrap, topic, n, out),
        "k": lambda out: sluice_ingest(spark, broker.bootstrap, topic, n, "auto", out, "spark"),
        "l": lambda out: sluice_ingest(
            spark, broker.bootstrap, topic, n, "auto", out, None, keep_message=True
        ),
        "g": without_fsync(
            lambda out: sluice_ingest(spark, broker.bootstrap, topic, n, "driver", out, "confluent")
        ),
    }
    sides = {key: side for key, side in sides.items() if key in args.sides}
    first: dict[str, float] = {}
    runs: dict[str, list[float]] = {key: [] for key in sides}
    broker_cpu: dict[str, list[float]] = {key: [] for key in sides}
    for repeat in range(1 - warm_rounds, args.repeats + 1):
        for key, side in sides.items():
            os.sync()  # the last side's files are on disk, not written back during this one
            waited = wait_until_idle(broker_process, busy=idle)
            before = cpu_seconds(broker_process)
            seconds = side(work / f"{key}-{n}-{repeat}")
            used = cpu_seconds(broker_process) - before
            detail = f"{seconds:.2f} s (broker idle after {waited:.1f} s; {used:.2f} CPU-s)"
            if repeat <= 0:
                first.setdefault(key, seconds)
                say(f"untimed round {repeat + warm_rounds} of {warm_rounds}: ({key}) {detail}")
            else:
                runs[key].append(seconds)
                broker_cpu[key].append(used)
                say(f"round {repeat} of {args.repeats}: ({key}) {detail}")
            if repeat < args.repeats:  # only the last round's files are measured
                shutil.rmtree(work / f"{key}-{n}-{repeat}", ignore_errors=True)
    timings = {key: statistics.median(times) for key, times in runs.items()}
    rate = {k: n / v for k, v in timings.items()}
    print()
    print(
        f"{n:,} messages of ~{len(reading(0))} bytes, {PARTITIONS} partitions, "
        f"{os.cpu_count()} cores"
    )
    for key in [k for k in "abcdefghijkl" if k in runs]:
        each = " ".join(f"{t:.2f}" for t in runs[key])
        untimed = f"first round {n / first[key]:,.0f} msg/s; " if key in first else ""
        print(
            f"  ({key}) {LABELS[key]:<46} {rate[key]:>8,.0f} msg/s  (median of {each} s; "
            f"{untimed}broker {statistics.median(broker_cpu[key]):.2f} CPU-s)"
        )
    for label, side, base, goal in RATIOS:
        if side not in rate or base not in rate:
            continue
        # the same ratio per round (the two sides ran minutes apart at most), median: on
        # a shared machine it moves less than the ratio of the medians
        paired = statistics.median(b / s for s, b in zip(runs[side], runs[base], strict=True))
        print(
            f"  {label + f' ({side}/{base})':<46} {rate[side] / rate[base]:.2f}   "
            f"(per round, median {paired:.2f})   {goal}"
        )
    last = {key: work / f"{key}-{n}-{args.repeats}" for key in runs}
    on_disk = {key: disk_bytes(path) / n for key, path in last.items() if disk_bytes(path)}
    print("  bytes on disk per message (Parquet files of the last round, with quarantine):")
    for key, per_message in on_disk.items():
        print(f"  ({key}) {LABELS[key]:<46} {per_message:>8.1f} B/msg")
    for label, side, base, goal in SIZE_RATIOS:
        if side in on_disk and base in on_disk:
            ratio = on_disk[side] / on_disk[base]
            print(f"  {label + f' ({side}/{base})':<46} {ratio:.2f}   {goal}")
    for key in ("i", "l"):
        if key in last and disk_bytes(last[key]):
            columns = column_bytes(last[key])
            shown = ", ".join(f"{c} {b / n:.2f}" for c, b in columns.items())
            print(f"  ({key}) bytes per message by column: {shown}")
    return SizeResult(n, runs, rate, on_disk)


def disk_bytes(path: Path) -> int:
    """Bytes of the Parquet files under ``path`` (data and quarantine; not Spark's .crc files,
    nor Sluice's own small JSON files)."""
    return sum(f.stat().st_size for f in path.rglob("*.parquet")) if path.exists() else 0


def column_bytes(path: Path) -> dict[str, int]:
    """Compressed bytes of each top-level column of the good rows' files under ``path``."""
    import pyarrow.parquet as pq

    found: dict[str, int] = {}
    for file in path.rglob("*.parquet"):
        if "_quarantine" in file.parts:
            continue
        metadata = pq.read_metadata(file)
        for group in range(metadata.num_row_groups):
            row_group = metadata.row_group(group)
            for i in range(row_group.num_columns):
                column = row_group.column(i)
                name = column.path_in_schema.split(".")[0]
                found[name] = found.get(name, 0) + column.total_compressed_size
    return found


def json_results(
    path: str, results: list[SizeResult], args: argparse.Namespace, broker: str
) -> None:
    """``--json``: one row per ratio of the sides that ran (the printed tables), each size's
    figures side by side, with a chart of the two sides at each size."""
    from benchjson import row, write

    sizes = [f"{r.messages:,}" for r in results]
    command = (
        f"bench/ingest.py --broker {args.broker} --messages {args.messages} --repeats "
        f"{args.repeats} --warm-rounds {args.warm_rounds} --sides {args.sides} --big {args.big}"
    )

    def joined(values: list[str]) -> str:
        return " / ".join(values)

    rows = []
    for label, side, base, goal in RATIOS:
        if any(side not in r.rate or base not in r.rate for r in results):
            continue
        kind, first, second = "throughput", side, base
        if goal.startswith("time ratio"):  # (e) against (g) or (h): e's time over theirs
            kind, first, second = "time", base, side
        ratios, paired = [], []
        for r in results:
            ratios.append(f"{r.rate[first] / r.rate[second]:.2f}x")
            rounds = zip(r.runs[first], r.runs[second], strict=True)
            if kind == "throughput":
                paired.append(f"{statistics.median(b / a for a, b in rounds):.2f}x")
            else:
                paired.append(f"{statistics.median(a / b for a, b in rounds):.2f}x")
        if kind == "time":  # the time ratio is the throughput ratio upside down
            ratios = [f"{1 / float(x[:-1]):.2f}x" for x in ratios]
        chart = {
            "unit": "msg/s",
            "sides": [f"({first}) {LABELS[first]}", f"({second}) {LABELS[second]}"],
            "values": {f"{r.messages:,}": [r.rate[first], r.rate[second]] for r in results},
        }
        rows.append(
            row(
                f"{label}, {joined(sizes)} messages",
                f"{first}: {joined([f'{r.rate[first]:,.0f}' for r in results])} msg/s",
                f"{second}: {joined([f'{r.rate[second]:,.0f}' for r in results])} msg/s",
                f"{joined(ratios)} {kind} (per round {joined(paired)})",
                goal.removeprefix("goal ").removeprefix("time ratio, goal "),
                command,
                chart,
            )
        )
    for side, base in (("i", "j"), ("k", "j"), ("l", "i")):
        if any(side not in r.on_disk or base not in r.on_disk for r in results):
            continue
        chart = {
            "unit": "B/msg",
            "sides": [f"({side}) {LABELS[side]}", f"({base}) {LABELS[base]}"],
            "values": {f"{r.messages:,}": [r.on_disk[side], r.on_disk[base]] for r in results},
        }
        bytes_ratios = [f"{r.on_disk[side] / r.on_disk[base]:.2f}x" for r in results]
        rows.append(
            row(
                f"bytes on disk per message, {side}/{base}, {joined(sizes)} messages",
                f"{side}: {joined([f'{r.on_disk[side]:.1f}' for r in results])} B/msg",
                f"{base}: {joined([f'{r.on_disk[base]:.1f}' for r in results])} B/msg",
                f"{joined(bytes_ratios)} bytes",
                "<= 1.1" if base == "j" else "",
                command,
                chart,
            )
        )
    write(path, "ingest", "Ingest throughput (warm session)", rows, broker)


if __name__ == "__main__":
    main()
