"""Scale: one big batch on one machine, ingested by ``sluice.spark.ingest`` into a Parquet sink.

Two cases, each one batch:

- ``many``: ``--partitions`` (64) partitions holding ``--messages`` (5,000,000) messages of
  ``--size`` bytes (1,024) in all: throughput (messages/s and MB/s of payload);
- ``large``: ``--large-messages`` (1,000) messages of ``--large-size`` bytes (5 MiB) in
  ``--large-partitions`` (4) partitions: the same, with ``max_value_bytes`` raised to take them.

For each: the peak resident memory of this process (the Python driver), of the Spark JVM it
starts and of the JVM's Python workers, sampled from /proc every 0.1 s while the batch is
ingested, printed beside their bounds: the driver holds one reading chunk at a time, of at most
``chunk_bytes`` (256 MiB, ``DEFAULT_CHUNK_BYTES`` in ``sluice/spark/kafka_source.py``) of keys
and values (a larger message is a chunk alone); the JVM's heap is ``spark.driver.memory``; a
Python worker handles Arrow batches of at most ``BATCH_BYTES`` (64 MiB,
``sluice/spark/writing.py``). The chunk sizes printed are the real ones:
``sluice.spark.reading.chunks_on_driver`` is wrapped in this process, and each chunk it
yields is measured (bytes of keys and values, and the Arrow batch's own size) as the ingest
takes it. That is driver mode (``--mode driver``, the default
here; ``auto`` picks executors from 1,000,000 messages, where the chunks are read in the Spark
tasks and are not seen here).

The broker is Tansu with in-memory storage by default (``--broker tansu``: RAM for the whole
payload). noida-db (``--broker noida``, on disk) answers a fetch with everything the partitions
hold, whatever ``fetch.max.bytes`` and ``max.partition.fetch.bytes`` say: at 64 partitions x
500,000 messages of 1 KB a fetch response of 517,204,212 bytes, which librdkafka refuses
(above ``receive.message.max.bytes``) and retries for ever.

Payloads are incompressible (random bytes with the message number in front), so the Parquet
output is as large as the input. Publishing uses a batching confluent-kafka producer, with a
progress line every 5 s. Before anything is published, free disk is checked against what the
run writes, each about the size of the payload: the chunks handed over to Spark (uncompressed
Parquet in the batch's scratch directory until it is published), the output, and with noida-db
the broker's log. The broker's data and the output are deleted at the end.

Run: ``.venv/bin/python bench/scale.py [--messages 5000000] [--partitions 64] [--size 1024]
[--large-messages 1000] [--large-size 5242880] [--cases many,large]``; smaller:
``--messages 200000 --large-messages 100``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pyarrow as pa
import pyarrow.compute as pc

MIB = 1 << 20
SAMPLE_SECONDS = 0.1


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


# -- publishing ----------------------------------------------------------------------------


def payloads(size: int, seed: int = 7) -> Callable[[int], bytes]:
    """Message ``i``: 8 bytes of ``i``, then ``size - 8`` random bytes (a window of a random
    block that moves with ``i``, so no two payloads are alike and none compresses)."""
    block = random_block(max(2 * size, 1 << 20), seed)
    span = len(block) - size

    def make(i: int) -> bytes:
        start = (i * 7919) % (span + 1)
        return i.to_bytes(8, "big") + block[start : start + size - 8]

    return make


def random_block(length: int, seed: int) -> bytes:
    import random

    return random.Random(seed).randbytes(length)


def create_topic(bootstrap: str, topic: str, partitions: int, size: int) -> None:
    """``topic`` with ``max.message.bytes`` above ``size`` (noida-db refuses a 5 MiB message
    into a topic created with its defaults)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    limit = str(max(1 << 20, 2 * size))
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    wanted = NewTopic(topic, partitions, 1, config={"max.message.bytes": limit})
    admin.create_topics([wanted])[topic].result(60)


def publish(bootstrap: str, topic: str, count: int, size: int, partitions: int) -> float:
    """``count`` messages of ``size`` bytes, round-robin over ``partitions``; seconds taken."""
    from confluent_kafka import KafkaException, Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 50,
            "batch.size": max(1 << 20, size + 1024),
            "message.max.bytes": max(1_000_000, size + 65536),
            "queue.buffering.max.kbytes": 1 << 20,  # 1 GiB in the producer's queue at most
            "queue.buffering.max.messages": 1_000_000,
            "compression.type": "none",
            "acks": "all",
            "log_level": 3,
        }
    )
    failed: list[str] = []

    def delivered(error: Any, _message: Any) -> None:
        if error is not None:
            failed.append(str(error))

    make = payloads(size)
    started = last = time.monotonic()
    for i in range(count):
        while True:
            try:
                producer.produce(topic, make(i), partition=i % partitions, on_delivery=delivered)
                break
            except BufferError:  # the local queue is full: let it drain
                producer.poll(0.05)
            except KafkaException as exc:
                raise RuntimeError(f"message {i}: {exc}") from None
        producer.poll(0)
        if failed:
            raise RuntimeError(f"delivery failed: {failed[0]}")
        now = time.monotonic()
        if now - last >= 5:
            last = now
            mb = (i + 1) * size / 1e6
            say(
                f"  published {i + 1:,} of {count:,} ({mb:,.0f} MB, "
                f"{mb / (now - started):,.1f} MB/s)"
            )
    if producer.flush(600) != 0 or failed:
        raise RuntimeError(f"not all delivered: {failed[:1]}")
    seconds = time.monotonic() - started
    say(
        f"  published {count:,} messages ({count * size / 1e6:,.0f} MB) in {seconds:.1f} s, "
        f"{count * size / 1e6 / seconds:,.1f} MB/s"
    )
    return seconds


# -- measuring -----------------------------------------------------------------------------


@dataclass
class Peaks:
    """Peak RSS of this process, of the JVM(s) it started and of the JVM's Python workers,
    sampled from /proc on a thread of its own."""

    driver: int = 0
    jvm: int = 0
    workers: int = 0  # all Python workers at one moment, summed
    worker: int = 0  # the largest single worker
    samples: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Peaks:
        self._thread = threading.Thread(target=self._run, name="rss", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> Peaks:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(SAMPLE_SECONDS)

    def sample(self) -> None:
        driver, jvm, workers = current_rss()
        self.driver = max(self.driver, driver)
        self.jvm = max(self.jvm, jvm)
        self.workers = max(self.workers, sum(workers))
        self.worker = max([self.worker, *workers])
        self.samples += 1


def current_rss() -> tuple[int, int, list[int]]:
    """RSS of this process, of its java descendants summed, and of each Python process
    under a JVM (Spark's Python daemon and workers)."""
    me = psutil.Process()
    jvm, workers = 0, []
    for child in me.children(recursive=True):
        try:
            name = child.name()
            rss = child.memory_info().rss
            if name == "java":
                jvm += rss
            elif name.startswith("python") and child.parent().name() in ("java", name):
                workers.append(rss)
        except psutil.Error:
            continue
    return me.memory_info().rss, jvm, workers


@dataclass
class Chunks:
    """What each chunk read on the driver held, as the ingest took it."""

    rows: list[int] = field(default_factory=list)
    payload_bytes: list[int] = field(default_factory=list)  # keys + values
    arrow_bytes: list[int] = field(default_factory=list)  # the record batch's buffers


def measured_chunks(chunks: Chunks) -> Callable[[], None]:
    """Wrap :func:`sluice.spark.reading.chunks_on_driver` (the ingest imports it when it reads)
    so that each chunk is measured; returns the undo."""
    from sluice.spark import reading

    original = reading.chunks_on_driver

    def measuring(*args: Any, **kwargs: Any) -> Iterator[pa.RecordBatch]:
        for batch in original(*args, **kwargs):
            size = 0
            for column in ("key", "value"):
                lengths = pc.binary_length(batch.column(batch.schema.get_field_index(column)))
                size += int(pc.sum(lengths).as_py() or 0)
            chunks.rows.append(batch.num_rows)
            chunks.payload_bytes.append(size)
            chunks.arrow_bytes.append(batch.nbytes)
            yield batch
            del batch  # as the ingest does: not held while the next chunk is read

    reading.chunks_on_driver = measuring

    def undo() -> None:
        reading.chunks_on_driver = original

    return undo


@dataclass
class CaseResult:
    name: str
    messages: int
    size: int
    partitions: int
    publish_seconds: float
    seconds: float
    written: int
    quarantined: int
    baseline: tuple[int, int, int]  # driver, JVM, workers before the ingest
    peaks: Peaks
    chunks: Chunks
    chunk_bound: int
    output_bytes: int
    batches: int


def run_case(
    spark: Any,
    broker: Any,
    name: str,
    messages: int,
    size: int,
    partitions: int,
    args: argparse.Namespace,
    work: Path,
) -> CaseResult:
    from sluice.batch import BatchSpec, OffsetRange
    from sluice.spark import ingest
    from sluice.spark.ingest import IngestEvent
    from sluice.spark.kafka_source import DEFAULT_CHUNK_BYTES
    from sluice.spark.sinks import open_sink

    topic = f"scale-{name}-{os.getpid()}"
    create_topic(broker.bootstrap, topic, partitions, size)
    say(f"{name}: publishing {messages:,} x {size:,} B over {partitions} partitions to {topic}")
    publish_seconds = publish(broker.bootstrap, topic, messages, size, partitions)
    per = [
        messages // partitions + (1 if p < messages % partitions else 0) for p in range(partitions)
    ]
    spec = BatchSpec(
        "kafka",
        topic,
        group_id=f"scale-{name}-{time.time_ns()}",
        ranges=tuple(OffsetRange(p, 0, n) for p, n in enumerate(per) if n),
    )
    out = work / f"sink-{name}"
    chunks = Chunks()
    undo = measured_chunks(chunks)
    last = [0.0]

    def progress(event: IngestEvent) -> None:
        now = time.monotonic()
        if now - last[0] >= 5 or event.stage not in ("reading", "writing"):
            last[0] = now
            read = f" ({event.read:,} of {event.total or 0:,} read)"
            parts = f", tasks {event.done}/{event.parts}" if event.parts else ""
            rss = current_rss()
            say(
                f"  {name}: {event.stage}{read}{parts}; RSS driver {rss[0] / MIB:,.0f} MiB, "
                f"JVM {rss[1] / MIB:,.0f} MiB, workers {sum(rss[2]) / MIB:,.0f} MiB"
            )

    baseline = current_rss()
    peaks = Peaks().start()
    say(f"{name}: ingesting {spec.message_count:,} messages ({args.mode} mode) into {out}")
    started = time.monotonic()
    try:
        result = ingest(
            spark,
            spec,
            str(out),
            source=f"kafka://{broker.bootstrap}",
            value_format="bytes",
            mode=args.mode,
            max_value_bytes=max(1_000_000, size + 1),
            progress=progress,
        )
    finally:
        seconds = time.monotonic() - started
        peaks.stop()
        undo()
    records = list(open_sink(str(out)).records())
    output_bytes = sum(p.stat().st_size for p in out.rglob("*.parquet"))
    say(f"{name}: {result.written:,} written, {result.quarantined:,} quarantined, {seconds:.1f} s")
    shutil.rmtree(out, ignore_errors=True)
    return CaseResult(
        name,
        messages,
        size,
        partitions,
        publish_seconds,
        seconds,
        result.written,
        result.quarantined,
        (baseline[0], baseline[1], sum(baseline[2])),
        peaks,
        chunks,
        DEFAULT_CHUNK_BYTES,
        output_bytes,
        len(records),
    )


def report(results: Sequence[CaseResult], heap: str, args: argparse.Namespace) -> None:
    from sluice.spark.writing import BATCH_BYTES

    say("")
    say(f"One batch, Parquet sink, {args.mode} mode, {args.master}, on {args.broker}:")
    for r in results:
        mb, rate = r.messages * r.size / 1e6, r.messages / r.seconds
        say(
            f"  {r.name}: {r.messages:,} x {r.size:,} B over {r.partitions} partitions "
            f"({mb:,.0f} MB): {r.seconds:.1f} s, {rate:,.{1 if rate < 100 else 0}f} msg/s, "
            f"{mb / r.seconds:,.1f} MB/s (published in {r.publish_seconds:.1f} s); "
            f"{r.written:,} written, {r.quarantined:,} quarantined, {r.batches} batch, "
            f"Parquet {r.output_bytes / 1e6:,.0f} MB"
        )
        p, (d0, j0, w0) = r.peaks, r.baseline
        bound = max(r.chunk_bound, r.size)  # a larger message is a chunk of its own
        grown = p.driver - d0
        say(
            f"    Python driver: peak RSS {p.driver / MIB:,.0f} MiB (before the ingest "
            f"{d0 / MIB:,.0f} MiB, +{grown / MIB:,.0f} MiB) against one chunk's bound "
            f"{bound / MIB:,.0f} MiB: growth / bound {grown / bound:.2f}x"
        )
        say(
            f"    JVM: peak RSS {p.jvm / MIB:,.0f} MiB (before {j0 / MIB:,.0f} MiB), heap "
            f"bound spark.driver.memory = {heap}"
        )
        say(
            f"    Python workers: peak {p.workers / MIB:,.0f} MiB together (before "
            f"{w0 / MIB:,.0f} MiB), largest one {p.worker / MIB:,.0f} MiB, against a write "
            f"batch's bound {BATCH_BYTES / MIB:,.0f} MiB ({p.samples:,} samples)"
        )
        c = r.chunks
        if c.rows:
            largest = max(c.payload_bytes)
            say(
                f"    chunks read on the driver: {len(c.rows):,}; rows per chunk median "
                f"{statistics.median(c.rows):,.0f}, max {max(c.rows):,}; the largest "
                f"{largest:,} B of keys and values ({max(c.arrow_bytes):,} B as Arrow) "
                f"against the bound chunk_bytes = {r.chunk_bound:,} B: "
                f"{largest / r.chunk_bound:.3f}x"
            )
        else:
            say("    chunks: none read on the driver (executor mode reads in the Spark tasks)")


def json_results(
    path: str, results: Sequence[CaseResult], heap: str, args: argparse.Namespace
) -> None:
    """``--json``: per case the throughput and memory, the largest chunk against its bound."""
    from benchjson import row, write

    rows, chart = [], {}
    for r in results:
        mb, rate = r.messages * r.size / 1e6, r.messages / r.seconds
        grown = r.peaks.driver - r.baseline[0]
        largest = max(r.chunks.payload_bytes) if r.chunks.rows else 0
        ratio = largest / r.chunk_bound
        chart[r.name] = [ratio, 1.0]
        rows.append(
            row(
                f"{r.name}: {r.messages:,} messages of {r.size:,} B over {r.partitions} "
                f"partitions in one batch, {args.mode} mode, {args.master}, {args.broker}",
                f"{rate:,.0f} msg/s ({mb / r.seconds:,.1f} MB/s), driver +{grown / MIB:,.0f} "
                f"MiB, JVM {r.peaks.jvm / MIB:,.0f} MiB (heap bound {heap})",
                f"the bound: chunk_bytes = {r.chunk_bound / MIB:,.0f} MiB per chunk",
                f"largest chunk {ratio:.3f}x", "no chunk over its bound (a larger message alone)",
                f"bench/scale.py --cases {r.name}",
            )
        )  # fmt: skip
    if rows:
        units = {"unit": "largest chunk / bound", "sides": ["largest chunk", "bound"]}
        rows[0]["chart"] = {**units, "values": chart}
    write(path, "scale", "One batch at full size", rows)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=64)
    parser.add_argument("--messages", type=int, default=5_000_000)
    parser.add_argument("--size", type=int, default=1024, help="bytes per message")
    parser.add_argument("--large-messages", type=int, default=1000)
    parser.add_argument("--large-size", type=int, default=5 * MIB)
    parser.add_argument("--large-partitions", type=int, default=4)
    parser.add_argument("--cases", default="many,large")
    parser.add_argument("--mode", default="driver", choices=("driver", "executors", "auto"))
    parser.add_argument("--master", default="local[2]")
    parser.add_argument(
        "--broker",
        default="tansu",
        choices=("tansu", "noida"),
        help="tansu (in memory: needs RAM for the payload) or noida (on disk: its fetches "
        "ignore the fetch size limits, see the module docstring)",
    )
    parser.add_argument("--work", type=Path, default=None, help="where the broker and sink write")
    parser.add_argument("--force", action="store_true", help="run even if disk looks short")
    parser.add_argument(
        "--json", metavar="PATH", help="also write the results (bench/results/scale.json)"
    )
    args = parser.parse_args(argv)
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    if set(cases) - {"many", "large"}:
        parser.error("--cases takes many and/or large")
    work = args.work or Path(tempfile.mkdtemp(prefix="sluice-bench-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    sizes = {"many": args.messages * args.size, "large": args.large_messages * args.large_size}
    payload = max(sizes[c] for c in cases)
    copies = 3 if args.broker == "noida" else 2  # scratch, output (and the broker's log)
    need = payload * copies * 1.1
    free = shutil.disk_usage(work).free
    say(
        f"work directory {work}: {free / 1e9:,.1f} GB free; the largest case writes about "
        f"{need / 1e9:,.1f} GB (payload {payload / 1e9:,.2f} GB, {copies} times: scratch, "
        f"output{', broker log' if copies == 3 else ''})"
        + (", and Tansu holds it in RAM" if copies == 2 else "")
        + f"; load {os.getloadavg()[0]:.1f}"
    )
    if need * 1.2 > free and not args.force:
        sys.exit("not enough free disk for this size (--force to run anyway)")
    from sluice.brokers import start_noida, start_tansu
    from sluice.spark import spark_session

    broker = (start_noida if args.broker == "noida" else start_tansu)(workdir=work / "broker")
    results: list[CaseResult] = []
    try:
        say(f"{args.broker} at {broker.bootstrap}; starting Spark ({args.master})")
        spark = spark_session(args.master, "sluice-bench-scale", {"spark.ui.enabled": "false"})
        heap = spark.conf.get("spark.driver.memory", "1g (Spark's default)")
        try:
            for case in cases:
                if case == "many":
                    shape = (args.messages, args.size, args.partitions)
                else:
                    shape = (args.large_messages, args.large_size, args.large_partitions)
                results.append(run_case(spark, broker, case, *shape, args, work))
                report(results[-1:], heap, args)  # now, in case a later case fails
                say(f"load {os.getloadavg()[0]:.1f}")
        finally:
            spark.stop()
        say("all cases:")
        report(results, heap, args)
        if args.json:
            json_results(args.json, results, heap, args)
    finally:
        broker.stop()
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
        else:
            shutil.rmtree(work / "broker", ignore_errors=True)


if __name__ == "__main__":
    main()
