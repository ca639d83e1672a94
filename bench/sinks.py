"""The Delta Lake and Iceberg sinks against the Parquet dataset, on the same messages, in one run.

    uv run python bench/sinks.py [--messages 200000] [--rounds 2] [--batches 20]

Produces --messages JSON messages of about 200 bytes over 3 partitions to noida-db (started
here), then ingests all of them with sluice.spark.ingest (driver mode, a schema, quarantine,
commit) into (p) a Parquet dataset directory, (d) a Delta table (delta://, delta-rs) and (i) an
Iceberg table of a SQL catalog on SQLite (file:// warehouse), each with a group of its own,
taking turns --rounds times. Prints the best time of each, messages/s and the ratios
Delta / Parquet and Iceberg / Parquet (goal: at most 1.2x).

Then the sinks' per-batch overhead: --batches small batches of 1,000 messages, one after the
other, into each sink; prints the median time of a batch and the same ratios (the commit and
the state's reading are most of a small batch). The SparkSession is started and warmed up on
a small batch into every sink before anything is timed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from ingest import PARTITIONS, SCHEMA, produce, say, sluice_ingest

SINKS = ("parquet", "delta", "iceberg")


def sink_of(kind: str, work: Path, name: str) -> Any:
    if kind == "parquet":
        return work / f"parquet-{name}"
    if kind == "delta":
        return f"delta://{work / f'delta-{name}'}"
    return f"iceberg://bench/bench.{name.replace('-', '_')}"


def small_batches(spark: Any, bootstrap: str, topic: str, sink: Any, batches: int) -> list[float]:
    """Ingest ``topic`` (``batches`` x 1,000 messages, 3 partitions) batch by batch, with one
    group; the seconds of each batch."""

    from sluice.batch import BatchSpec, OffsetRange
    from sluice.kafka.offsets import topic_ends
    from sluice.spark import ingest

    ends = topic_ends({"bootstrap_servers": bootstrap}, topic)
    group, per_partition, times = f"bench-small-{time.time_ns()}", {p: 0 for p in ends}, []
    step = 1000 // len(ends)
    for _ in range(batches):
        ranges = []
        for p in sorted(ends):
            start = per_partition[p]
            end = min(ends[p], start + step)
            ranges.append(OffsetRange(p, start, end))
            per_partition[p] = end
        spec = BatchSpec("kafka", topic, group_id=group, ranges=tuple(ranges))
        started = time.monotonic()
        ingest(spark, spec, sink, source=f"kafka://{bootstrap}", schema=SCHEMA, mode="driver")
        times.append(time.monotonic() - started)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument(
        "--json", metavar="PATH", help="also write the results there (bench/results/sinks.json)"
    )
    args = parser.parse_args()

    from sluice.brokers import create_kafka_topic, start_noida
    from sluice.spark import spark_session

    work = Path(tempfile.mkdtemp(prefix="sluice-bench-sinks-"))
    prefix = "PYICEBERG_CATALOG__BENCH__"
    os.environ[f"{prefix}TYPE"] = "sql"
    os.environ[f"{prefix}URI"] = f"sqlite:///{work / 'catalog.db'}"
    os.environ[f"{prefix}WAREHOUSE"] = (work / "warehouse").as_uri()
    say("starting noida-db")
    broker = start_noida()
    try:
        topic, small = "bench-readings", "bench-small"
        create_kafka_topic(broker.bootstrap, topic, PARTITIONS)
        produce(broker.bootstrap, topic, args.messages)
        create_kafka_topic(broker.bootstrap, small, PARTITIONS)
        produce(broker.bootstrap, small, args.batches * 1000)

        say("starting and warming up Spark (not timed)")
        spark = spark_session("local[2]", "sluice-bench-sinks", {"spark.ui.enabled": "false"})
        warm = "bench-warmup"
        create_kafka_topic(broker.bootstrap, warm, PARTITIONS)
        produce(broker.bootstrap, warm, 3000)
        for kind in SINKS:
            sluice_ingest(
                spark, broker.bootstrap, warm, 3000, "driver", sink_of(kind, work, "warm")
            )

        n = args.messages
        best = dict.fromkeys(SINKS, float("inf"))
        for number in range(args.rounds):
            for kind in SINKS:
                say(f"round {number + 1}: {kind}")
                sink = sink_of(kind, work, f"big-{number}")
                seconds = sluice_ingest(spark, broker.bootstrap, topic, n, "driver", sink)
                best[kind] = min(best[kind], seconds)
                say(f"  {seconds:.2f} s")
        per_batch = {}
        for kind in SINKS:
            say(f"{args.batches} batches of 1,000 messages: {kind}")
            times = small_batches(
                spark, broker.bootstrap, small, sink_of(kind, work, "small"), args.batches
            )
            per_batch[kind] = statistics.median(times)
        print()
        print(f"one batch of {n:,} messages (best of {args.rounds}):")
        for kind in SINKS:
            print(f"  {kind:8s} {best[kind]:6.2f} s  {n / best[kind]:9,.0f} msg/s")
        for kind in ("delta", "iceberg"):
            print(f"  ratio {kind} / parquet (time): {best[kind] / best['parquet']:.2f}x")
        print(f"{args.batches} batches of 1,000 messages (median of a batch):")
        for kind in SINKS:
            print(f"  {kind:8s} {per_batch[kind]:6.2f} s")
        for kind in ("delta", "iceberg"):
            print(f"  ratio {kind} / parquet (time): {per_batch[kind] / per_batch['parquet']:.2f}x")
        if args.json:
            from benchjson import row, write

            ratio = {kind: best[kind] / best["parquet"] for kind in ("delta", "iceberg")}
            write(args.json, "sinks", "Sinks: Delta and Iceberg against the Parquet dataset", [
                row(
                    f"{n:,} messages, best of {args.rounds}",
                    f"Delta {best['delta']:.2f} s; Iceberg {best['iceberg']:.2f} s",
                    f"Parquet {best['parquet']:.2f} s",
                    f"Delta {ratio['delta']:.2f}x, Iceberg {ratio['iceberg']:.2f}x", "<= 1.2x",
                    f"bench/sinks.py --rounds {args.rounds} --batches {args.batches}",
                    {"unit": "s", "sides": ["sink", "Parquet"], "values": {
                        "Delta": [best["delta"], best["parquet"]],
                        "Iceberg": [best["iceberg"], best["parquet"]],
                    }},
                ),
            ])  # fmt: skip
        spark.stop()
    finally:
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
