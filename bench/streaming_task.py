"""Sluice beside Spark Structured Streaming run as a scheduled batch: a Spark user's
``readStream.format("kafka")`` ... ``writeStream.trigger(availableNow=True)`` with a checkpoint
on local disk, each run a fresh process, as an Airflow task runs it, into Parquet, Delta and
Iceberg.

    .venv/bin/python bench/streaming_task.py [--sizes 20000,200000] [--batches 3]
        [--formats parquet,delta,iceberg] [--json bench/results/streaming_task.json]

On Apache Kafka (one KRaft node). Per batch size N and format, one topic (3 partitions, the
JSON readings of bench/ingest.py, 1% of them malformed); ``--batches`` times: N messages are
produced, then each side runs as a fresh process (in turn, alternating which goes first):

- ``sluice``: ``import airflow``, ``spark_session(batch_messages=...)`` (Sluice's defaults,
  for the batch, as the Airflow operator does), ``ingest()`` of the batch (planned from the
  group's committed offsets by the parent, as the Airflow trigger plans it for the task) with
  no options beyond the schema, then exit;
- ``streaming``: ``import airflow``, a plain local SparkSession with Spark's Kafka source
  (``sluice.spark.connector``'s jars) and the format's jars on ``spark.jars``, then
  ``readStream`` from the checkpoint's offsets, ``from_json`` with the same schema, the
  message's key, partition, offset and timestamp beside its fields (the columns of
  bench/ingest.py's Spark job), ``trigger(availableNow=True)``, ``awaitTermination()``, exit.
  Its checkpoint (its own exactly-once record) is a local directory kept across its runs.

Formats: ``parquet`` (Sluice: a dataset directory; streaming: Spark's file sink), ``delta``
(Sluice: delta-rs; streaming: ``io.delta:delta-spark_2.13`` :data:`DELTA_SPARK`, the newest
Maven Central serves, for Spark 4.2), ``iceberg`` (both into a table of the tests' Iceberg REST
catalog with a local warehouse; streaming: ``org.apache.iceberg:iceberg-spark-runtime-4.1_2.13``
:data:`ICEBERG_SPARK`: none is served for Spark 4.2 or 4.3). Each streaming side runs on the
Spark its connector is built for (:data:`STREAMING_SPARK`: pyspark 4.2.1 and 4.1.4, installed
once into Sluice's cache; Parquet's on the lock's pyspark, as Sluice), with that Spark's
Kafka source. Every jar comes through ``sluice.jars``, resolved before anything is timed;
those pyspark ships are left out.

Each time is the parent's wall clock from the process's start to its exit. Before anything
is timed, one Sluice process writes Spark's class archive into the benchmark's cache (what a
machine's first task does once). It prints every
batch's times, the medians and Sluice / streaming (the goal, issue 46: <= 1.0x), and checks
that both tables hold every good message once.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from cold_task import run_child  # a fresh process, timed, and the result it prints
from ingest import PARTITIONS, SCHEMA, produce

DELTA_SPARK = "io.delta:delta-spark_2.13:4.2.0"
ICEBERG_SPARK = "org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:1.12.0"
#: The Spark each format's streaming side runs on: the one its connector is built for (None:
#: the lock's pyspark, Sluice's), and the Kafka source for it. delta-spark 4.2.0 on pyspark
#: 4.3 wrote the first batch and failed the next (NoSuchMethodError: LogicalRDD.<init>).
STREAMING_SPARK: dict[str, tuple[str, str] | None] = {
    "parquet": None,
    "delta": ("4.2.1", "4.2.0"),
    "iceberg": ("4.1.4", "4.1.1"),
}
CATALOG = "bench"
FORMATS = ("parquet", "delta", "iceberg")
GOAL = "<= 1.0x"

SLUICE_CHILD = """
import json, sys, time
started = time.monotonic()
import airflow
from sluice.batch import BatchSpec
from sluice.spark import ingest
from sluice.spark.session import start_session
# as the Airflow operator does: the session is started for the batch it ingests, on a thread
# of its own while the batch is planned and read
spark = start_session(batch_messages=BatchSpec.from_json(sys.argv[1]).message_count)
marks = {"session": time.monotonic() - started}
result = ingest(spark, sys.argv[1], sys.argv[2], source=sys.argv[3], schema=sys.argv[4])
marks["ingest"] = time.monotonic() - started
print("RESULT " + json.dumps({"marks": marks, "written": result.written,
                  "quarantined": result.quarantined, "mode": result.mode}), flush=True)
"""

STREAMING_CHILD = """
import json, os, sys, time
started = time.monotonic()
import airflow
os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
from pyspark.sql import SparkSession, functions as F
bootstrap, topic, fmt, target, checkpoint, schema, jars, conf = sys.argv[1:9]
builder = (SparkSession.builder.master("local[*]").appName("streaming-task")
           .config("spark.jars", jars).config("spark.driver.host", "127.0.0.1")
           .config("spark.driver.bindAddress", "127.0.0.1").config("spark.ui.enabled", "false"))
for key, value in json.loads(conf).items():
    builder = builder.config(key, value)
spark = builder.getOrCreate()
marks = {"session": time.monotonic() - started}
frame = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
         .option("subscribe", topic).option("startingOffsets", "earliest")
         .option("kafka.isolation.level", "read_committed").load())
parsed = frame.select(
    F.from_json(F.col("value").cast("string"), schema).alias("reading"),
    "key", "partition", "offset", "timestamp",
).select("reading.*", "key", "partition", "offset", "timestamp")
writer = (parsed.writeStream.format(fmt).option("checkpointLocation", checkpoint)
          .trigger(availableNow=True))
if fmt == "iceberg":
    query = writer.toTable(target)
else:
    query = writer.start(target)
query.awaitTermination()
progress = query.recentProgress
rows = sum(p["numInputRows"] for p in progress) if progress else 0
marks["ingest"] = time.monotonic() - started
print("RESULT " + json.dumps({"marks": marks, "written": rows, "spark": spark.version}), flush=True)
"""


def say(text: str) -> None:
    print(f"[streaming] {text}", flush=True)


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def streaming_pyspark(fmt: str) -> dict[str, str]:
    """The environment of ``fmt``'s streaming side: its pyspark (:data:`STREAMING_SPARK`),
    installed once into Sluice's cache and put first on ``PYTHONPATH``; nothing for the
    lock's."""
    from sluice.jars import cache_dir

    wanted = STREAMING_SPARK[fmt]
    if wanted is None:
        return {}
    version = wanted[0]
    target = cache_dir() / "bench" / f"pyspark-{version}"
    if not (target / "pyspark").is_dir():
        say(f"installing pyspark {version} into {target} (once, for the {fmt} streaming side)")
        subprocess.run(
            ["uv", "pip", "install", "--quiet", "--python", sys.executable, "--target",
             str(target), f"pyspark=={version}"],
            check=True,
        )  # fmt: skip
    return {"PYTHONPATH": str(target), "SPARK_HOME": str(target / "pyspark")}


def format_jars(fmt: str) -> tuple[list[str], dict[str, str]]:
    """The jars (not in pyspark) and the settings a plain session needs for ``fmt``."""
    from sluice import jars
    from sluice.spark.connector import _not_in_pyspark, kafka_source_jars

    wanted = STREAMING_SPARK[fmt]
    found = [str(j) for j in kafka_source_jars(wanted[1] if wanted else None)]
    conf: dict[str, str] = {}
    if fmt == "delta":
        found += [str(j) for j in _not_in_pyspark(jars.resolve([DELTA_SPARK]))]
        conf = {
            "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
            "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        }
    elif fmt == "iceberg":
        found += [str(j) for j in _not_in_pyspark(jars.resolve([ICEBERG_SPARK]))]
    return found, conf


def iceberg_conf(uri: str) -> dict[str, str]:
    return {
        "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        f"spark.sql.catalog.{CATALOG}": "org.apache.iceberg.spark.SparkCatalog",
        f"spark.sql.catalog.{CATALOG}.type": "rest",
        f"spark.sql.catalog.{CATALOG}.uri": uri,
    }


def plan(bootstrap: str, topic: str, group: str) -> str:
    from iceberg_connect import plan as plan_batch

    spec = plan_batch(bootstrap, topic, group)
    assert spec is not None
    return str(spec.to_json())


def rows_of(fmt: str, target: str, catalog: Any) -> int:
    """The rows a side's table holds (good rows only)."""
    if fmt == "parquet":
        import pyarrow.dataset as ds

        root = Path(target)
        files = [
            f
            for f in root.rglob("*.parquet")
            if "_quarantine" not in f.parts and not any(p.startswith(("_", ".")) for p in f.parts)
        ]
        return sum(ds.dataset(str(f)).count_rows() for f in files)
    if fmt == "delta":
        from deltalake import DeltaTable

        return int(DeltaTable(target.removeprefix("delta://")).to_pyarrow_dataset().count_rows())
    if target.startswith("iceberg://"):  # Sluice's: iceberg://<catalog>/<namespace>.<table>
        name = target.split("/", 3)[-1]
    else:  # the streaming side's: <catalog>.<namespace>.<table>
        name = target.removeprefix(f"{CATALOG}.")
    return int(catalog.load_table(name).scan().to_arrow().num_rows)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--sizes", default="20000,200000")
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--formats", default=",".join(FORMATS))
    parser.add_argument("--json", metavar="PATH", help="bench/results/streaming_task.json")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop what it started, on TERM too
    sizes = [int(s) for s in args.sizes.split(",")]
    formats = args.formats.split(",")

    from pyiceberg.catalog import load_catalog

    from sluice.brokers import create_kafka_topic, start_kafka
    from sluice.testing.rest_catalog import start_rest_catalog

    work = Path(tempfile.mkdtemp(prefix="sluice-streaming-"))
    stack: list[Any] = []
    try:
        kafka = start_kafka()
        stack.append(kafka)
        bootstrap = kafka.bootstrap
        catalog = None
        if "iceberg" in formats:
            (work / "warehouse").mkdir()
            rest = start_rest_catalog((work / "warehouse").as_uri(), workdir=work / "catalog")
            stack.append(rest)
            for key, value in rest.client_properties().items():
                variable = key.upper().replace(".", "__").replace("-", "_")
                os.environ[f"PYICEBERG_CATALOG__{CATALOG.upper()}__{variable}"] = value
            catalog = load_catalog(CATALOG, **rest.client_properties())
            catalog.create_namespace("bench")
        setups = {}
        for fmt in formats:
            found, conf = format_jars(fmt)  # resolved before anything is timed
            if fmt == "iceberg":
                conf = {**conf, **iceberg_conf(rest.uri)}
            setups[fmt] = (",".join(found), json.dumps(conf), streaming_pyspark(fmt))
        cache = {"SLUICE_CACHE_DIR": str(work / "cache")}
        # untimed: the first Sluice process of a cache writes Spark's class archive and exits
        subprocess.run(
            [sys.executable, "-c", "from sluice.spark import spark_session; spark_session()"],
            env={**os.environ, **cache},
            capture_output=True,
            timeout=3600,
        )
        times: dict[tuple[int, str, str], list[float]] = {}
        for n in sizes:
            for fmt in formats:
                topic = f"st-{fmt}-{n}"
                create_kafka_topic(bootstrap, topic, PARTITIONS)
                targets = {
                    "parquet": (str(work / f"sluice-{topic}"), str(work / f"stream-{topic}")),
                    "delta": (f"delta://{work / f'sluice-{topic}'}", str(work / f"stream-{topic}")),
                    "iceberg": (
                        f"iceberg://{CATALOG}/bench.sluice_{fmt}_{n}",
                        f"{CATALOG}.bench.stream_{fmt}_{n}",
                    ),
                }
                sluice_target, stream_target = targets[fmt]
                jars, conf, streaming_env = setups[fmt]
                for batch in range(args.batches):
                    produce(bootstrap, topic, n)
                    spec = plan(bootstrap, topic, f"sluice-{topic}")
                    order = ["sluice", "streaming"] if batch % 2 == 0 else ["streaming", "sluice"]
                    for side in order:
                        if side == "sluice":
                            child = [SLUICE_CHILD, spec, sluice_target, f"kafka://{bootstrap}"]
                            seconds, detail = run_child(["-c", *child, SCHEMA], env=cache)
                            assert detail["written"] + detail["quarantined"] == n, detail
                        else:
                            child = [STREAMING_CHILD, bootstrap, topic, fmt, stream_target]
                            checkpoint = str(work / f"checkpoint-{topic}")
                            seconds, detail = run_child(
                                ["-c", *child, checkpoint, SCHEMA, jars, conf], env=streaming_env
                            )
                            assert detail["written"] == n, detail
                        times.setdefault((n, fmt, side), []).append(seconds)
                        say(
                            f"{n:>9,} {fmt:8} batch {batch + 1} {side:9} {seconds:6.1f} s "
                            f"{json.dumps(detail)} load {load()}"
                        )
                good = n * args.batches * 99 // 100
                held = {
                    "sluice": rows_of(fmt, sluice_target, catalog),
                    "streaming": rows_of(fmt, stream_target, catalog),
                }
                # Spark's from_json keeps a malformed record as a row of nulls: the streaming
                # table holds every message, Sluice's the good ones (the rest quarantined)
                say(f"  rows held: {held} (good messages {good:,}, all {n * args.batches:,})")
        report(args, sizes, formats, times)
    finally:
        for thing in reversed(stack):
            thing.close()
        import shutil

        shutil.rmtree(work, ignore_errors=True)


def report(
    args: argparse.Namespace,
    sizes: list[int],
    formats: list[str],
    times: dict[tuple[int, str, str], list[float]],
) -> None:
    print()
    print(
        f"Scheduled batches, each side a fresh process ({os.cpu_count()} cores, median of "
        f"{args.batches} batches; load average {load()} at the end)"
    )
    rows = []
    command = f"bench/streaming_task.py {' '.join(sys.argv[1:])}".strip()
    for fmt in formats:
        values = {}
        for n in sizes:
            s = statistics.median(times[n, fmt, "sluice"])
            t = statistics.median(times[n, fmt, "streaming"])
            values[f"{n:,}"] = [s, t]
            print(
                f"  {fmt:8} {n:>9,}: Sluice {s:6.1f} s, Structured Streaming (availableNow) "
                f"{t:6.1f} s: Sluice/streaming {s / t:.2f}x"
            )
        rows.append(
            {
                "what": f"{fmt}: a scheduled batch of "
                + " / ".join(f"{n:,}" for n in sizes)
                + f" messages, a fresh process each side (median of {args.batches} batches)",
                "sluice": " / ".join(f"{v[0]:.1f}" for v in values.values()) + " s",
                "other": "Structured Streaming, availableNow: "
                + " / ".join(f"{v[1]:.1f}" for v in values.values())
                + " s",
                "ratio": " / ".join(f"{v[0] / v[1]:.2f}x" for v in values.values()) + " time",
                "goal": GOAL,
                "command": command,
                "chart": {
                    "unit": "s",
                    "sides": ["Sluice", "Structured Streaming (availableNow)"],
                    "values": values,
                },
            }
        )
    if args.json:
        from benchjson import write

        write(
            args.json,
            "streaming_task",
            "Scheduled batches beside Spark Structured Streaming (availableNow, a fresh process)",
            rows,
            "Apache Kafka (one KRaft node)",
        )


if __name__ == "__main__":
    main()
