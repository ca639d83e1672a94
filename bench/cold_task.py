"""The cold task: each side as a fresh process from start to exit, as every Airflow task runs.

    .venv/bin/python bench/cold_task.py [--sizes 20000,200000,2000000] [--rounds 3]
                                        [--sides sluice,hand,connect,spark-job,sluice-spark]
                                        [--broker kafka|noida|tansu]

On Apache Kafka (one KRaft node) unless ``--broker`` names another (noida-db: Tansu for the
batches above 500,000, which noida-db 0.2.3 stalls on). For each batch size, one topic of
that many JSON readings (3 partitions, 1% malformed, the messages of bench/ingest.py) and,
interleaved, ``--rounds`` times:

- ``sluice``: a new Python process imports Airflow (what the task runner has loaded), starts a
  local SparkSession (``spark_session(batch_messages=...)``: Sluice's defaults, for the batch,
  as the Airflow operator does) and runs ``ingest()`` with no options beyond the schema
  (``mode="auto"``, the default reader), then exits;
- ``hand``: a new Python process that imports Airflow and does the same work by hand with the
  Airflow Kafka provider (``KafkaConsumerHook``: confluent-kafka, ``json.loads`` into typed
  columns, bad records set aside with a reason, pyarrow Parquet, a commit per poll: side (d) of
  bench/ingest.py), then exits;
- ``spark-job`` (optional): a new Python process that imports Airflow, starts a plain local
  SparkSession with Spark's Kafka source on its class path (``spark.jars``: the connector's
  jars, resolved once before anything is timed) and runs a Spark user's job: the ranges read by
  ``spark.read.format("kafka")``, ``from_json``, ``write.parquet``, then a commit of the
  offsets (side (j) of bench/ingest.py), then exits;
- ``driver`` (optional): as ``sluice``, with ``mode="driver"`` (what ``auto`` chose below
  1,000,000 messages until it moved to 100,000).
- ``sluice-spark`` (optional): as ``sluice``, with ``options.reader`` "spark" (Spark's Kafka
  source, ``spark_session(kafka_source=True)``: read, classified and written in the JVM,
  no Python worker, as ``spark-job``);
- ``connect`` (optional): as ``sluice``, on a warm Spark Connect server started once before
  anything is timed (``sc://``);
- ``no-archive`` (optional): as ``sluice``, with ``SLUICE_SPARK_CDS=0``: a JVM that loads
  Spark's classes from its jars, as before ``sluice.spark.class_archive``;
- ``before`` (optional): as ``sluice``, run by another checkout's interpreter
  (``--before-python``, e.g. the main branch's venv): the same task before a change;
- ``floor``, ``connect-floor`` (optional): as ``sluice`` and ``connect`` with no batch: the
  process imports Airflow, Sluice and PySpark, starts its session and exits. This is what any
  task that starts Spark pays before its first message, so floor/hand is the lowest ratio a
  Spark-based task can reach at that size.

The Sluice sides share a class archive in a cache directory of the benchmark's own. It is
written, before anything is timed, by the first Sluice process (the smallest batch), as on
a machine's first task; that process's time is printed apart, with the archive's size. The
class path with the Kafka source's jars is another archive: ``sluice-spark`` has a first
process of its own, and so has ``sluice`` for its batches of
``AUTO_SPARK_SOURCE_MESSAGES`` or more, whose session gets Spark's Kafka source from the
cache (the connector's jars are resolved before anything is timed, into the benchmark's cache
too, as on a machine that resolved them before: a Spark user's job needs them as well).

Each time is the parent's wall clock from the process's start to its exit. The Sluice
processes also report where their time went: interpreter and imports, session start, and
each stage of the ingest (``progress`` events), and how many Spark jobs the ingest ran.
It prints the medians, the ratio Sluice / hand, and the crossover: the batch size from which
the Sluice process is faster, from a straight line (fixed cost + cost per message) through
each side's medians.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from ingest import PARTITIONS, SCHEMA, produce

SLUICE_CHILD = """
import json, sys, time
marks = {}
started = time.monotonic()
import airflow  # the task runner's own imports: both sides pay them
marks["airflow"] = time.monotonic() - started
from sluice.batch import BatchSpec
from sluice.spark import ingest, spark_session
from sluice.spark.session import start_session
marks["imports"] = time.monotonic() - started
# as the Airflow operator does: the session is started for the batch it ingests, on a thread
# of its own while the batch is planned and read (the floor sides wait for it)
messages = BatchSpec.from_json(sys.argv[2]).message_count if sys.argv[2] else None
if "reader=spark" in sys.argv[4] or not sys.argv[2]:
    spark = spark_session(sys.argv[1] or None, kafka_source="reader=spark" in sys.argv[4],
                          batch_messages=messages)
else:
    spark = start_session(sys.argv[1] or None, batch_messages=messages)
marks["session"] = time.monotonic() - started
stages = {}
def progress(event):
    stages.setdefault(event.stage, time.monotonic() - started)
result = None
if sys.argv[2]:  # no batch for the floor sides: the session starts, nothing is ingested
    result = ingest(spark, sys.argv[2], sys.argv[3], source=sys.argv[4], schema=sys.argv[5],
                    progress=progress, mode=sys.argv[6] if len(sys.argv) > 6 else "auto")
marks["ingest"] = time.monotonic() - started
spark = spark.result() if hasattr(spark, "result") else spark  # a SessionStarting's session
jobs = None
try:
    jobs = spark.sparkContext._jsc.sc().statusStore().jobsList(None).size()
except Exception:
    pass
print("RESULT " + json.dumps({"marks": marks, "stages": stages, "jobs": jobs,
                  "mode": result.mode if result else "none",
                  "written": result.written if result else 0,
                  "quarantined": result.quarantined if result else 0}), flush=True)
"""

HAND_CHILD = """
import json, sys, time
from pathlib import Path
started = time.monotonic()
import airflow
airflow_s = time.monotonic() - started
sys.path.insert(0, sys.argv[1])
from ingest import airflow_provider
seconds = airflow_provider(sys.argv[2], sys.argv[3], int(sys.argv[4]), Path(sys.argv[5]))
print("RESULT " + json.dumps({"marks": {"airflow": airflow_s, "work": seconds,
                            "total": time.monotonic() - started}}), flush=True)
"""


SPARK_JOB_CHILD = """
import json, os, sys, time
from pathlib import Path
started = time.monotonic()
import airflow
marks = {"airflow": time.monotonic() - started}
os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"  # a local Spark on loopback only
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[*]").appName("spark-job")
         .config("spark.jars", sys.argv[6]).config("spark.driver.host", "127.0.0.1")
         .config("spark.driver.bindAddress", "127.0.0.1").config("spark.ui.enabled", "false")
         .getOrCreate())
marks["session"] = time.monotonic() - started
sys.path.insert(0, sys.argv[1])
from ingest import spark_job
marks["work"] = spark_job(spark, sys.argv[2], sys.argv[3], int(sys.argv[4]), Path(sys.argv[5]))
marks["total"] = time.monotonic() - started
print("RESULT " + json.dumps({"marks": marks}), flush=True)
"""

#: The sides that are not Sluice: their children print their own marks.
NOT_SLUICE = ("hand", "spark-job")


def say(text: str) -> None:
    print(f"[cold] {text}", flush=True)


def run_child(
    args: list[str], python: str = sys.executable, env: dict[str, str] | None = None
) -> tuple[float, dict[str, Any]]:
    started = time.monotonic()
    done = subprocess.run(
        [python, *args],
        capture_output=True,
        text=True,
        timeout=1800,
        env={**os.environ, **(env or {})},
    )
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(f"child failed ({done.returncode}):\n{done.stderr[-4000:]}")
    found = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if not found:
        raise RuntimeError(f"child printed no result:\n{done.stdout[-2000:]}")
    return seconds, json.loads(found[-1][len("RESULT ") :])


_ENDS: dict[tuple[str, str], dict[int, int]] = {}


def spec_json(bootstrap: str, topic: str, count: int) -> str:
    """A batch of the whole topic for a group of its own (the topic's ends asked once)."""

    from sluice.batch import BatchSpec, OffsetRange
    from sluice.kafka.offsets import topic_ends

    if (bootstrap, topic) not in _ENDS:
        _ENDS[bootstrap, topic] = topic_ends({"bootstrap_servers": bootstrap}, topic)
    ends = _ENDS[bootstrap, topic]
    spec = BatchSpec(
        "kafka",
        topic,
        group_id=f"cold-{time.time_ns()}",
        ranges=tuple(OffsetRange(p, 0, end) for p, end in sorted(ends.items())),
    )
    assert spec.message_count == count, (spec.message_count, count)
    return spec.to_json()


def crossover(sizes: list[int], sluice: list[float], hand: list[float]) -> str:
    """The batch size from which the Sluice line is below the hand-written one."""
    if len(sizes) < 2:
        return "n/a (one size)"

    def fit(ys: list[float]) -> tuple[float, float]:
        mx, my = statistics.fmean(sizes), statistics.fmean(ys)
        slope = sum((x - mx) * (y - my) for x, y in zip(sizes, ys, strict=True)) / sum(
            (x - mx) ** 2 for x in sizes
        )
        return my - slope * mx, slope

    (a_s, b_s), (a_h, b_h) = fit(sluice), fit(hand)
    line = (
        f"fixed cost {a_s:.1f} s + {1e6 * b_s:.2f} s per million (Sluice) against "
        f"{a_h:.1f} s + {1e6 * b_h:.2f} s per million (hand)"
    )
    if b_s >= b_h:
        return f"none: Sluice costs as much per message or more ({line})"
    return f"{max(0.0, (a_s - a_h) / (b_h - b_s)):,.0f} messages ({line})"


def main() -> None:
    from broker_choice import add_broker_option

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--sizes", default="20000,200000,2000000")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--sides",
        default="sluice,hand",
        help="sluice,hand[,driver][,spark-job][,sluice-spark][,connect][,no-archive][,before]"
        "[,floor]"
        "[,connect-floor]",
    )
    parser.add_argument(
        "--before-python",
        default="",
        help="side 'before': the Sluice side run by another checkout's interpreter "
        "(e.g. /work/main/.venv/bin/python: the code before this branch)",
    )
    parser.add_argument("--master", default="", help="the Sluice side's master (default: Sluice's)")
    parser.add_argument(
        "--json", metavar="PATH", help="also write the results (bench/results/cold_task.json)"
    )
    add_broker_option(parser)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    sides = args.sides.split(",")

    from broker_choice import broker_label, start_broker

    from sluice.brokers import create_kafka_topic

    work = Path(tempfile.mkdtemp(prefix="sluice-cold-"))
    servers: list[Any] = []
    bench_dir = str(Path(__file__).parent)
    try:
        say(f"starting {broker_label(args.broker)}")
        small = start_broker(args.broker)
        servers.append(small)
        big = None
        if args.broker == "noida" and any(n > 500_000 for n in sizes):
            # noida-db 0.2.3 stalls on fetches of logs of a million messages: Tansu beyond that
            big = start_broker("tansu")
            servers.append(big)
        connect_url = ""
        if {"connect", "connect-floor"} & set(sides):
            from sluice.testing.spark_cluster import start_connect_server

            server = start_connect_server()
            servers.append(server)
            connect_url = server.url
            say(f"Spark Connect server at {connect_url}")
        topics = {}
        for n in sizes:
            broker = big if n > 500_000 and big is not None else small
            topic = f"cold-{n}"
            create_kafka_topic(broker.bootstrap, topic, PARTITIONS)
            produce(broker.bootstrap, topic, n)
            spec_json(broker.bootstrap, topic, n)
            topics[n] = (broker, topic)
        cache = {"SLUICE_CACHE_DIR": str(work / "cache")}
        from sluice.jars import cache_dir
        from sluice.spark.connector import AUTO_SPARK_SOURCE_MESSAGES, kafka_source_jars

        # resolved untimed, and in the Sluice processes' cache as on a machine that resolved
        # them before: a session for a batch that auto reads with Spark's Kafka source gets
        # them from the cache (never a download)
        kafka_jars = ",".join(str(j) for j in kafka_source_jars())
        (work / "cache" / "classpaths").mkdir(parents=True, exist_ok=True)
        for manifest in (cache_dir() / "classpaths").glob("spark-sql-kafka-*.txt"):
            shutil.copy(manifest, work / "cache" / "classpaths" / manifest.name)
        big_sizes = [n for n in sizes if n >= AUTO_SPARK_SOURCE_MESSAGES]
        firsts = [
            (name, reader, n)
            for name, reader, named, n in (
                ("Sluice", "", {"sluice", "driver", "before", "floor"}, min(sizes)),
                # its session has the Kafka source's jars: a class path of its own
                ("Sluice (a large batch)", "", {"sluice"}, min(big_sizes, default=0)),
                ("sluice-spark", "?reader=spark", {"sluice-spark"}, min(sizes)),
            )
            if named & set(sides) and n
        ]
        for name, reader, n in firsts:
            broker, topic = topics[n]
            spec = spec_json(broker.bootstrap, topic, n)
            before = set((work / "cache" / "jvm").glob("*.jsa"))
            seconds, _ = run_child(
                [
                    "-c",
                    SLUICE_CHILD,
                    args.master,
                    spec,
                    str(work / f"first-{n}{reader and '-spark'}"),
                    f"kafka://{broker.bootstrap}{reader}",
                    SCHEMA,
                ],
                env=cache,
            )
            archives = sorted(set((work / "cache" / "jvm").glob("*.jsa")) - before)
            size = f"{archives[0].stat().st_size / 2**20:,.0f} MiB" if archives else "none"
            say(f"the first {name} process ({n:,} messages, writes the class archive): "
                f"{seconds:.1f} s; archive: {size}")  # fmt: skip
        results: dict[tuple[str, int], list[float]] = {}
        details: dict[tuple[str, int], list[dict[str, Any]]] = {}
        for n in sizes:
            broker, topic = topics[n]
            source = f"kafka://{broker.bootstrap}"
            for round_ in range(args.rounds):
                for side in sides:
                    out = work / f"{side}-{n}-{round_}"
                    if side == "hand":
                        seconds, detail = run_child(
                            ["-c", HAND_CHILD, bench_dir, broker.bootstrap, topic, str(n), str(out)]
                        )
                    elif side == "spark-job":
                        seconds, detail = run_child(
                            [
                                "-c",
                                SPARK_JOB_CHILD,
                                bench_dir,
                                broker.bootstrap,
                                topic,
                                str(n),
                                str(out),
                                kafka_jars,
                            ]
                        )
                    else:
                        master = connect_url if side.startswith("connect") else args.master
                        floor = side.endswith("floor")
                        spec = "" if floor else spec_json(broker.bootstrap, topic, n)
                        python = args.before_python if side == "before" else sys.executable
                        env = dict(cache)
                        if side == "no-archive":
                            env["SLUICE_SPARK_CDS"] = "0"
                        reader = "?reader=spark" if side == "sluice-spark" else ""
                        mode = ["driver"] if side == "driver" else []
                        child = [SLUICE_CHILD, master, spec, str(out), source + reader, SCHEMA]
                        seconds, detail = run_child(
                            ["-c", *child, *mode],
                            python,
                            env,
                        )
                        counted = detail["written"] + detail["quarantined"]
                        assert counted == (0 if floor else n), detail
                    results.setdefault((side, n), []).append(seconds)
                    details.setdefault((side, n), []).append(detail)
                    load = os.getloadavg()[0]
                    say(f"{n:>9,} {side:7} {seconds:6.1f} s  {json.dumps(detail)}  load {load:.1f}")
        print()
        print(f"Cold task, each side a fresh process start to exit ({os.cpu_count()} cores; "
              f"median of {args.rounds})")  # fmt: skip
        medians = {key: statistics.median(v) for key, v in results.items()}
        for n in sizes:
            line = f"  {n:>9,} messages:"
            for side in sides:
                line += f"  {side} {medians[side, n]:6.1f} s ({n / medians[side, n]:>7,.0f} msg/s)"
            if "sluice" in sides and "hand" in sides:
                line += f"  sluice/hand {medians['sluice', n] / medians['hand', n]:.2f}x"
            if "sluice" in sides and "no-archive" in sides:
                ratio = medians["sluice", n] / medians["no-archive", n]
                line += f"  sluice/no-archive {ratio:.2f}x"
            others = ("driver", "connect", "no-archive", "before", "floor", "connect-floor")
            for other in (*others, "spark-job", "sluice-spark"):
                if other in sides and "hand" in sides:
                    line += f"  {other}/hand {medians[other, n] / medians['hand', n]:.2f}x"
            for side in ("sluice", "sluice-spark"):
                if side in sides and "spark-job" in sides:
                    ratio = medians[side, n] / medians["spark-job", n]
                    line += f"  {side}/spark-job {ratio:.2f}x"
            print(line)

        def med(rows: list[dict[str, float]], key: str) -> float:
            return statistics.median(r.get(key, float("nan")) for r in rows)

        for side in [s for s in sides if s.endswith("floor")]:
            marks = [d["marks"] for n in sizes for d in details[side, n]]
            every = [seconds for n in sizes for seconds in results[side, n]]
            print(
                f"  {side} (every size): {statistics.median(every):.1f} s: import airflow "
                f"{med(marks, 'airflow'):.1f} s, sluice+pyspark "
                f"{med(marks, 'imports') - med(marks, 'airflow'):.1f} s, session "
                f"{med(marks, 'session') - med(marks, 'imports'):.1f} s, exit "
                f"{statistics.median(every) - med(marks, 'ingest'):.1f} s"
            )
        for side in [s for s in sides if s not in NOT_SLUICE and not s.endswith("floor")]:
            for n in sizes:
                marks = [d["marks"] for d in details[side, n]]
                stages = [d["stages"] for d in details[side, n]]
                print(
                    f"  {side} {n:,}: import airflow {med(marks, 'airflow'):.1f} s, "
                    f"sluice+pyspark {med(marks, 'imports') - med(marks, 'airflow'):.1f} s, "
                    f"session {med(marks, 'session') - med(marks, 'imports'):.1f} s, "
                    f"ingest {med(marks, 'ingest') - med(marks, 'session'):.1f} s "
                    f"(reading at {med(stages, 'reading') - med(marks, 'session'):.1f}, "
                    f"read {med(stages, 'read') - med(marks, 'session'):.1f}, "
                    f"publishing {med(stages, 'publishing') - med(marks, 'session'):.1f}, "
                    f"committed {med(stages, 'committed') - med(marks, 'session'):.1f}), "
                    f"exit {medians[side, n] - med(marks, 'ingest'):.1f} s; "
                    f"mode {details[side, n][0]['mode']}, Spark jobs {details[side, n][0]['jobs']}"
                )
        if "spark-job" in sides:
            for n in sizes:
                marks = [d["marks"] for d in details["spark-job", n]]
                print(
                    f"  spark-job {n:,}: import airflow {med(marks, 'airflow'):.1f} s, "
                    f"pyspark+session {med(marks, 'session') - med(marks, 'airflow'):.1f} s, "
                    f"work {med(marks, 'work'):.1f} s, "
                    f"exit {medians['spark-job', n] - med(marks, 'total'):.1f} s"
                )
        if "hand" in sides:
            for n in sizes:
                marks = [d["marks"] for d in details["hand", n]]
                print(
                    f"  hand {n:,}: import airflow "
                    f"{statistics.median(m['airflow'] for m in marks):.1f} s, work "
                    f"{statistics.median(m['work'] for m in marks):.1f} s"
                )
            for side in [s for s in sides if s not in NOT_SLUICE and not s.endswith("floor")]:
                print(
                    f"  crossover ({side}): "
                    + crossover(
                        sizes,
                        [medians[side, n] for n in sizes],
                        [medians["hand", n] for n in sizes],
                    )
                )
        print(f"  load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
        if args.json and "hand" in sides:
            json_results(args, sizes, sides, medians)
    finally:
        for server in servers:
            server.close()

        shutil.rmtree(work, ignore_errors=True)


def json_results(
    args: argparse.Namespace, sizes: list[int], sides: list[str], medians: dict[Any, float]
) -> None:
    """``--json``: per side, its medians against the hand-written task's at every size; and
    Sluice's sides against the Spark user's job, where it ran."""
    from benchjson import row, write
    from broker_choice import broker_label

    def sizes_of(side: str) -> str:
        return " / ".join(f"{medians[side, n]:.1f}" for n in sizes) + " s"

    count = " / ".join(f"{n:,}" for n in sizes)
    command = f"bench/cold_task.py --sizes {args.sizes} --rounds {args.rounds} --sides {args.sides}"

    def against(
        side: str, base: str, name: str, label: str, what: str, goal: str, charted: bool
    ) -> Any:
        """The row of ``side`` against ``base`` (``name`` in the chart, ``label`` before its
        times, ``what`` in the text)."""
        ratios = " / ".join(f"{medians[side, n] / medians[base, n]:.2f}x" for n in sizes)
        chart = {
            "unit": "s",
            "sides": [side, name],
            "values": {f"{n:,}": [medians[side, n], medians[base, n]] for n in sizes},
        }
        return row(
            f"{side}: a fresh process start to exit against {what}, {count} messages "
            f"(median of {args.rounds})",
            sizes_of(side),
            f"{label}: {sizes_of(base)}",
            f"{ratios} time",
            goal,
            command,
            chart if charted else None,
        )

    rows = [
        against(
            side,
            "hand",
            "hand-written task",
            "hand-written",
            "the hand-written task",
            "<= 1.5x at 200,000; faster from 1,000,000" if side == "sluice" else "",
            side == "sluice",
        )
        for side in sides
        if side != "hand"
    ]
    if "spark-job" in sides:
        rows += [
            against(
                side,
                "spark-job",
                "Spark user's job",
                "Spark user's job",
                "a Spark user's job in a fresh process",
                "<= 1.0x at every size",
                True,
            )
            for side in ("sluice", "sluice-spark")
            if side in sides
        ]
    title = "The cold task (a fresh process, as every Airflow task)"
    write(args.json, "cold_task", title, rows, broker_label(args.broker))


if __name__ == "__main__":
    main()
