"""Does an ingest cost more on a sink with a long history? (invariant I5)

    uv run python bench/ingest_history.py [--batches 10000] [--messages 100] [--rounds 5]

Builds a Parquet sink holding --batches published Kafka batches of one stream (and an MQTT
stream as long), then times ingests of a small batch (--messages) into it and into an empty
sink, alternating, on one broker (noida-db, started here) and one warm SparkSession. Prints
the median of each side and their ratio (goal: below 2x).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any


def say(text: str) -> None:
    print(f"[bench] {text}", flush=True)


def build_history(sink: Path, topic: str, group: str, batches: int) -> None:
    """``batches`` published batches of 10 offsets each (one small Parquet file apiece), made
    through the sink's own publish, plus as many MQTT batches of one message id each."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from sluice.batch import BatchSpec, OffsetRange
    from sluice.spark.sinks import BatchRecord, ParquetSink

    opened = ParquetSink(sink)
    started = time.monotonic()
    for n in range(batches):
        spec = BatchSpec(
            "kafka", topic, group_id=group, ranges=(OffsetRange(9, n * 10, n * 10 + 10),)
        )
        staging = opened.stage(spec.batch_id)
        pq.write_table(pa.table({"x": [n]}), staging.data / "part-0.parquet")
        opened.publish(
            staging, BatchRecord(spec.batch_id, spec.to_dict(), ranges=list(spec.ranges))
        )
        mqtt = BatchSpec("mqtt", f"{topic}/#", client_id="c", max_messages=1)
        staging = opened.stage(f"m{n}")
        pq.write_table(pa.table({"x": [n]}), staging.data / "part-0.parquet")
        opened.publish(staging, BatchRecord(f"m{n}", mqtt.to_dict(), message_ids=[f"id-{n}"]))
        if n and n % 2000 == 0:
            say(f"  {n:,} of {batches:,} batches published ({time.monotonic() - started:.0f} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=10_000)
    parser.add_argument("--messages", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    from kafka import KafkaProducer

    from sluice.batch import BatchSpec, OffsetRange
    from sluice.brokers import create_kafka_topic, start_noida
    from sluice.spark import ingest, spark_session

    broker = start_noida()
    spark = spark_session("local[2]", "sluice-bench-history", {"spark.ui.enabled": "false"})
    try:
        with tempfile.TemporaryDirectory(prefix="sluice-history-") as tmp:
            topic, source = "readings", f"kafka://{broker.bootstrap}"
            create_kafka_topic(broker.bootstrap, topic, 1)
            producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
            total = args.messages * (args.rounds * 2 + 1)
            for i in range(total):
                producer.send(topic, json.dumps({"device": f"d{i % 7}", "t": i}).encode())
            producer.flush()
            producer.close()
            say(f"building a sink with {args.batches:,} published batches")
            (long_sink,) = [Path(tmp) / "long"]
            build_history(long_sink, topic, "history", args.batches)
            timings: dict[str, list[float]] = {"empty": [], "long": []}
            position = 0

            def timed(sink: Path, group: str) -> float:
                nonlocal position
                spec = BatchSpec(
                    "kafka",
                    topic,
                    group_id=group,
                    ranges=(OffsetRange(0, position, position + args.messages),),
                )
                position += args.messages
                started = time.monotonic()
                ingest(spark, spec, sink, source=source, schema="device STRING, t INT")
                return time.monotonic() - started

            timed(Path(tmp) / "warm-up", "warm-up")
            for round_ in range(args.rounds):
                timings["empty"].append(timed(Path(tmp) / f"empty-{round_}", f"empty-{round_}"))
                timings["long"].append(timed(long_sink, "history"))
            results: dict[str, Any] = {k: statistics.median(v) for k, v in timings.items()}
    finally:
        spark.stop()
        broker.stop()
    ratio = results["long"] / results["empty"]
    print()
    print(f"ingest of {args.messages} messages, median of {args.rounds}:")
    print(f"  into an empty sink:                      {results['empty'] * 1000:8.0f} ms")
    print(f"  into a sink of {args.batches:,} published batches: {results['long'] * 1000:8.0f} ms")
    print(f"  ratio: {ratio:.2f}x (goal: below 2x)")


if __name__ == "__main__":
    main()
