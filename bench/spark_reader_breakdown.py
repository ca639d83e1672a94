"""Where ``options.reader="spark"``'s time goes, beside the hand-written Spark job, in one run
on one broker (``--broker``, started here: Apache Kafka unless told).

    uv run python bench/spark_reader_breakdown.py [--messages 2000000] [--repeats 3]

On the messages of ``bench/ingest.py`` (JSON of about 200 bytes, 3 partitions, 1% malformed)
it times, interleaved, each the median of --repeats rounds after one untimed round:
  (j) the hand-written Spark job (``bench/ingest.py``'s side j);
  (r) Sluice's read with Spark's Kafka source alone (Spark's ``noop`` writer);
  (c) (r), Sluice's classification and its good rows written with Spark's Parquet writer;
  (o) (c) with the observation Sluice takes as the rows pass (counts, tasks, value bytes,
      the small quarantine);
  (n) (c) with the observation's row counts alone;
  (k) ``sluice.spark.ingest`` with ``options.reader="spark"`` (the whole batch and commit);
and prints each side's seconds, its Spark JVM's CPU seconds and its ratio to (j). (c), (o) and
(n) build Sluice's job from its own parts (:mod:`sluice.spark.classify`,
:mod:`sluice.spark.jvm_writer`), so the differences between them are the parts' costs.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ingest import (
    PARTITIONS,
    SCHEMA,
    batch_ranges,
    cpu_seconds,
    produce,
    say,
    sluice_ingest,
    spark_job,
)

LABELS = {
    "j": "by hand: Spark job, Kafka source + from_json",
    "r": "Sluice's read with Spark's Kafka source alone",
    "c": "(r) + classification + good rows written",
    "o": "(c) + Sluice's observation",
    "n": "(c) + an observation of row counts alone",
    "k": "sluice ingest, reader spark (whole batch)",
}


def job_parts(spark: Any, bootstrap: str, topic: str) -> dict[str, Callable[[Path], None]]:
    """Sides r, c, o and n: Sluice's job built from its parts."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    from sluice.batch import OffsetRange
    from sluice.spark import layout
    from sluice.spark.classify import Classification, Rules, parse_schema
    from sluice.spark.jvm_reader import read_with_spark
    from sluice.spark.jvm_writer import _BAD, _PARQUET_SETTINGS, _measures, _observed
    from sluice.spark.writing import session_conf

    ends = batch_ranges(bootstrap, topic)
    ranges = [OffsetRange(p, 0, end) for p, end in ends.items()]
    rules = Rules(parse_schema(SCHEMA), message=layout.message_columns((), "kafka"))
    classification = Classification.of(rules)
    good, bad = list(classification.good), list(classification.bad)

    def raw() -> Any:
        return read_with_spark(spark, {"bootstrap_servers": bootstrap}, topic, ranges)

    def write(out: Path, measures: list[Any] | None) -> None:
        frame = classification.apply(raw())
        observation = Observation("breakdown")
        if measures:
            frame = _observed(frame, good, bad).observe(observation, *measures)
        else:
            frame = frame.withColumn(_BAD, F.col("reason").isNotNull())
        with session_conf(spark, _PARQUET_SETTINGS):
            frame.filter(~F.col(_BAD)).select(good).write.options(
                **layout.spark_writer_options()
            ).parquet(str(out))
        if measures:
            assert observation.get["good"] + observation.get["bad"] == sum(ends.values())

    return {
        "r": lambda out: raw().write.format("noop").mode("overwrite").save(),
        "c": lambda out: write(out, None),
        "o": lambda out: write(out, _measures()),
        "n": lambda out: write(out, _measures()[:2]),
    }


def main() -> None:
    from broker_choice import add_broker_option, broker_label, start_broker

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=2_000_000)
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds; the median counts")
    parser.add_argument("--sides", default="jrconk", help="which sides to run (letters)")
    add_broker_option(parser)
    args = parser.parse_args()

    import psutil

    from sluice.brokers import create_kafka_topic
    from sluice.spark import spark_session

    say(f"starting {broker_label(args.broker)}")
    broker = start_broker(args.broker)
    work = Path(tempfile.mkdtemp(prefix="sluice-bench-breakdown-"))
    try:
        spark = spark_session(
            "local[2]", "sluice-bench", {"spark.ui.enabled": "false"}, kafka_source=True
        )
        jvm = psutil.Process(int(spark._jvm.java.lang.ProcessHandle.current().pid()))
        topic, n = "bench-breakdown", args.messages
        create_kafka_topic(broker.bootstrap, topic, PARTITIONS)
        produce(broker.bootstrap, topic, n)
        sides: dict[str, Callable[[Path], Any]] = {
            "j": lambda out: spark_job(spark, broker.bootstrap, topic, n, out),
            **job_parts(spark, broker.bootstrap, topic),
            "k": lambda out: sluice_ingest(spark, broker.bootstrap, topic, n, "auto", out, "spark"),
        }
        chosen = [s for s in args.sides if s in sides]
        seconds: dict[str, list[float]] = {s: [] for s in chosen}
        cpu: dict[str, list[float]] = {s: [] for s in chosen}
        for round_ in range(args.repeats + 1):
            for side in chosen:
                out = work / f"{side}-{round_}"
                before, started = cpu_seconds(jvm), time.monotonic()
                sides[side](out)
                took, used = time.monotonic() - started, cpu_seconds(jvm) - before
                shutil.rmtree(out, ignore_errors=True)
                timed = round_ > 0
                if timed:
                    seconds[side].append(took)
                    cpu[side].append(used)
                say(
                    f"{'round ' + str(round_) if timed else 'untimed round'}: ({side}) "
                    f"{took:.2f} s, JVM {used:.2f} CPU-s"
                )
        base = statistics.median(seconds["j"]) if "j" in seconds else None
        print(f"\n{n:,} messages, {PARTITIONS} partitions, 2 cores, {broker_label(args.broker)}")
        for side in chosen:
            median = statistics.median(seconds[side])
            ratio = f"  {base / median:.2f}x the Spark job's speed" if base else ""
            print(
                f"  ({side}) {LABELS[side]:48s} {median:6.2f} s  "
                f"JVM {statistics.median(cpu[side]):5.2f} CPU-s{ratio}"
            )
    finally:
        broker.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
