"""The Iceberg sink against the Parquet dataset, on the same messages, in one run.

    uv run python bench/iceberg.py [--messages 200000] [--rounds 2]

Produces --messages JSON messages of about 200 bytes over 3 partitions to noida-db (started
here), then ingests all of them with sluice.spark.ingest (driver mode, a schema, quarantine,
commit) into (p) a Parquet dataset directory and (i) an Iceberg table of a SQL catalog on
SQLite (embedded, file:// warehouse), each with a group of its own, alternating --rounds times.
Prints the best time of each, messages/s and the ratio Iceberg / Parquet. The SparkSession is
started and warmed up on a small batch into both sinks before anything is timed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from ingest import PARTITIONS, produce, say, sluice_ingest


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    from sluice.brokers import create_kafka_topic, start_noida
    from sluice.spark import spark_session

    work = Path(tempfile.mkdtemp(prefix="sluice-bench-iceberg-"))
    prefix = "PYICEBERG_CATALOG__BENCH__"
    os.environ[f"{prefix}TYPE"] = "sql"
    os.environ[f"{prefix}URI"] = f"sqlite:///{work / 'catalog.db'}"
    os.environ[f"{prefix}WAREHOUSE"] = (work / "warehouse").as_uri()
    say("starting noida-db")
    broker = start_noida()
    try:
        topic = "bench-readings"
        create_kafka_topic(broker.bootstrap, topic, PARTITIONS)
        produce(broker.bootstrap, topic, args.messages)

        say("starting and warming up Spark (not timed)")
        spark = spark_session("local[2]", "sluice-bench-iceberg", {"spark.ui.enabled": "false"})
        warm = "bench-warmup"
        create_kafka_topic(broker.bootstrap, warm, PARTITIONS)
        produce(broker.bootstrap, warm, 3000)
        for sink in (work / "warm", "iceberg://bench/bench.warm"):
            sluice_ingest(spark, broker.bootstrap, warm, 3000, "driver", sink)  # type: ignore[arg-type]

        n = args.messages
        best = {"parquet": float("inf"), "iceberg": float("inf")}
        for number in range(args.rounds):
            say(f"round {number + 1}: Parquet dataset")
            directory = work / f"parquet-{number}"
            best["parquet"] = min(
                best["parquet"],
                sluice_ingest(spark, broker.bootstrap, topic, n, "driver", directory),
            )
            shutil.rmtree(directory, ignore_errors=True)
            say(f"round {number + 1}: Iceberg table")
            table = f"iceberg://bench/bench.readings_{number}"
            best["iceberg"] = min(
                best["iceberg"],
                sluice_ingest(spark, broker.bootstrap, topic, n, "driver", table),
            )
        print()
        for name, seconds in best.items():
            print(f"  {name:8s} {seconds:6.2f} s  {n / seconds:9,.0f} msg/s")
        print(f"  ratio Iceberg / Parquet (time): {best['iceberg'] / best['parquet']:.2f}x")
        spark.stop()
    finally:
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
