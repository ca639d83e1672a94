"""What a reader of a table and of its quarantine table sees of each batch while ingests
crash, for each sink and catalog, in one run.

    .venv/bin/python bench/quarantine_visibility.py [--rounds 3] [--sides sqlite,rest,...]

Starts noida-db and a SparkSession here, and for the REST sides the tests' Iceberg REST
catalog (:mod:`sluice.testing.rest_catalog`, file:// warehouse). Sides:

- ``rest``: an Iceberg table on the REST catalog, whose multi-table commit is atomic; Sluice
  commits a batch and its quarantine rows in one commit;
- ``rest-stock``: the same, on Apache Iceberg's own REST fixture adapter, whose multi-table
  commit commits the tables one after the other;
- ``sqlite``: an Iceberg table on a SQL catalog (SQLite): two commits, the batch's first;
- ``delta``: a Delta table: two commits, the batch's first.

For each side, ``--rounds`` times, the kill loop of :func:`sluice.testing.visibility.kill_loop`:
an ingest SIGKILLed at every failpoint, each then run again, each batch ``--good`` good
records and 2 bad ones, while a :class:`~sluice.testing.visibility.VisibilityPoller` reads
both tables (the table, the quarantine table, the table again) as a user would. Prints, per
side, the polls, and each batch seen with rows but without its quarantine rows (or the
reverse): during an uninterrupted commit, or left by the ingest killed between the two
commits until its rerun (which the loop starts as soon as the poller has seen the crash's
state: in production, until the next run); how long the polls kept seeing it, and within
what time it was gone. Every message is checked once (``sluice audit``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from ingest import say

SIDES = ("rest", "rest-stock", "sqlite", "delta")
BETWEEN = "publish.after_rename"  # the batch's commit done, its quarantine's not (two commits)
BAD = [b"not json", b'{"temperature": "warm"}']
SCHEMA = "device STRING, temperature DOUBLE"


def reading(i: int) -> bytes:
    return json.dumps({"device": f"dev-{i % 7}", "temperature": i / 10}).encode()


def iceberg_catalog(name: str, properties: dict[str, str]) -> None:
    """Configure the pyiceberg catalog ``name`` through its environment variables."""
    for key, value in properties.items():
        variable = key.upper().replace(".", "__").replace("-", "_")
        os.environ[f"PYICEBERG_CATALOG__{name.upper()}__{variable}"] = value


def millis(values: list[float]) -> str:
    if not values:
        return "-"
    return f"median {statistics.median(values) * 1000:.0f} ms, max {max(values) * 1000:.0f} ms"


def run_side(
    side: str, spark: Any, bootstrap: str, work: Path, rounds: int, good: int
) -> dict[str, Any]:
    from kafka import KafkaProducer

    from sluice.audit import audit
    from sluice.batch import plan_batch
    from sluice.kafka import KafkaMessageQueue
    from sluice.spark.failpoints import FAILPOINTS
    from sluice.testing.rest_catalog import start_rest_catalog
    from sluice.testing.topics import create_kafka_topic
    from sluice.testing.visibility import (
        VisibilityPoller,
        delta_batches,
        iceberg_batches,
        kill_loop,
    )

    points = [p for p in FAILPOINTS if p != "commit.midway"]  # (MQTT's)
    name = f"vis-{side}-{uuid.uuid4().hex[:6]}"
    server = None
    rows: Callable[[], set[str]]
    if side == "delta":
        table = work / name
        sink = f"delta://{table}"
        rows, quarantine = delta_batches(table), delta_batches(table / "_quarantine")
    else:
        catalog = name.replace("-", "")
        if side == "sqlite":
            properties = {"type": "sql", "uri": f"sqlite:///{work / name}.db"}
            properties["warehouse"] = (work / name).as_uri()
        else:
            server = start_rest_catalog(
                (work / name).as_uri(), atomic_commits=side == "rest", workdir=work / f"{name}-rc"
            )
            properties = server.client_properties()
        iceberg_catalog(catalog, properties)
        sink = f"iceberg://{catalog}/bench.readings"
        rows = iceberg_batches(catalog, "bench.readings")
        quarantine = iceberg_batches(catalog, "bench.readings__quarantine")
    create_kafka_topic(bootstrap, name, 3)
    create_kafka_topic(bootstrap, f"{name}.dlq", 1)
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    queue = KafkaMessageQueue(name)
    queue.configure(
        {"connection.uri": bootstrap, "topic": name, "group_id": f"{name}-group"}
        | {"from_beginning": True}
    )
    queue.open(None)
    numbers = itertools.count()

    def next_batch() -> Any:
        first = next(numbers) * good
        for i in range(good):
            producer.send(name, reading(first + i), partition=i % 3)
        for value in BAD:
            producer.send(name, value, partition=0)
        producer.flush()
        spec = plan_batch(queue)
        assert spec is not None
        return spec

    options = {"source": f"kafka://{bootstrap}", "schema": SCHEMA, "dead_letter": True}
    poller = VisibilityPoller(rows, quarantine).start()
    killed: set[str] = set()
    started = time.monotonic()
    try:
        for number in range(rounds):
            say(f"{side}: round {number + 1} of {rounds} ({len(points)} failpoints)")
            batches = kill_loop(spark, sink, next_batch, points, poller, **options)
            killed.add(batches[points.index(BETWEEN)])
        seconds = time.monotonic() - started
        report = poller.stop()
        result = audit(sink, options["source"])
        assert result.ok, "\n".join(result.lines())
    finally:
        poller.stop()
        queue.close(None)
        producer.close()
        if server is not None:
            server.close()
    lagging = report.of_kind("rows without quarantine")
    crash = [e for e in lagging if e.batch_id in killed and e.label.endswith(BETWEEN)]
    during = [e for e in lagging if e not in crash]
    return {
        "side": side,
        "batches": rounds * len(points),
        "seconds": seconds,
        "report": report,
        "during": during,
        "crash": crash,
        "reverse": report.of_kind("quarantine without rows"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--good", type=int, default=20, help="good records per batch")
    parser.add_argument("--sides", default=",".join(SIDES))
    args = parser.parse_args()
    sides = [s.strip() for s in args.sides.split(",") if s.strip()]
    unknown = sorted(set(sides) - set(SIDES))
    if unknown:
        parser.error(f"unknown side(s) {', '.join(unknown)}; choose among {', '.join(SIDES)}")

    from sluice.brokers import start_noida
    from sluice.spark import spark_session

    work = Path(tempfile.mkdtemp(prefix="sluice-bench-visibility-"))
    say("starting noida-db and Spark")
    broker = start_noida()
    results = []
    try:
        spark = spark_session("local[2]", "sluice-bench-visibility", {"spark.ui.enabled": "false"})
        for side in sides:
            results.append(run_side(side, spark, broker.bootstrap, work, args.rounds, args.good))
        spark.stop()
    finally:
        broker.stop()
    print()
    for found in results:
        report = found["report"]
        print(f"{found['side']}: {found['batches']} batches in {found['seconds']:.0f} s")
        print(f"  {report.lines()[0]}")
        for what, episodes in (
            ("rows without quarantine, during an uninterrupted commit", found["during"]),
            (f"rows without quarantine, left by the ingest killed at {BETWEEN}", found["crash"]),
            ("quarantine without rows", found["reverse"]),
        ):
            seen = [e.seen_for for e in episodes]
            gone = [e.gone_within for e in episodes if e.gone_within is not None]
            print(f"  {what}: {len(episodes)} batch(es)")
            if episodes:
                print(f"    seen over: {millis(seen)}; gone within: {millis(gone)}")
    print()
    print("batches seen without their quarantine rows during an uninterrupted commit:")
    for found in results:
        print(f"  {found['side']:10s} {len(found['during'])} of {found['batches']}")


if __name__ == "__main__":
    main()
