"""Change data capture into a current-state Iceberg table against appending the same messages,
in one run, batch by batch.

    uv run python bench/cdc.py [--changes 1000000] [--keys 100000] [--batches 10] [--json PATH]

Produces --changes Debezium-shaped changes (PostgreSQL envelopes, bare JSON; about 20% of
them deletes, each followed by its tombstone) over --keys keys to Apache Kafka (one KRaft
node, started here), 3 partitions, keyed by the row's id. Then, batch by batch (--batches
batches of the same size, planned by each side's own consumer group), ingests them with
sluice.spark.ingest into (u) an Iceberg table with write_mode="upsert" and (a) another
Iceberg table, appended (value_format bytes: the same messages as rows), both in a SQL
catalog on SQLite with a file:// warehouse. Prints per batch the seconds of each side, their
ratio, and the upsert table's rows and data files; then the ratio of the last batches' time
to the first ones': how the upsert's time grows with the table. With --compact, ``sluice
compact`` runs on the upsert table after every batch
(not timed). The SparkSession is started and warmed up on a small batch first.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from ingest import PARTITIONS, say


def produce_changes(bootstrap: str, topic: str, changes: int, keys: int) -> int:
    """The messages of ``changes`` changes (their tombstones included); how many."""
    from kafka import KafkaProducer

    from sluice.testing.debezium import SourceTable, random_changes

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=50, batch_size=1 << 20)
    started, sent = time.monotonic(), 0
    for key, value in random_changes(SourceTable(), changes, keys, deletes=0.2, seed=40):
        producer.send(topic, value, key=key)
        sent += 1
        if sent % 200_000 == 0:
            say(f"  produced {sent:,} messages")
    producer.flush()
    producer.close()
    say(f"produced {sent:,} messages ({changes:,} changes) in {time.monotonic() - started:.1f} s")
    return sent


def queue_of(bootstrap: str, topic: str, group: str) -> Any:
    from sluice.kafka import KafkaMessageQueue

    queue = KafkaMessageQueue(topic)
    queue.configure(
        {"connection.uri": bootstrap, "topic": topic, "group_id": group, "from_beginning": True}
    )
    queue.open(None)
    return queue


def timed_batch(spark: Any, queue: Any, source: str, sink: str, size: int, **options: Any) -> Any:
    """(seconds, result) of one ingest of the next ``size`` messages of ``queue``'s group."""
    from sluice.batch import plan_batch
    from sluice.spark import ingest

    spec = plan_batch(queue, max_messages=size)
    assert spec is not None, "nothing waiting"
    started = time.monotonic()
    result = ingest(spark, spec, sink, source=source, mode="driver", **options)
    return time.monotonic() - started, result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--changes", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--compact", action="store_true", help="sluice compact after each batch")
    parser.add_argument("--json", type=Path, help="write the results as JSON here")
    args = parser.parse_args()

    from sluice.brokers import create_kafka_topic, start_kafka
    from sluice.maintenance import compact
    from sluice.spark import spark_session

    work = Path(tempfile.mkdtemp(prefix="sluice-bench-cdc-"))
    prefix = "PYICEBERG_CATALOG__BENCH__"
    os.environ[f"{prefix}TYPE"] = "sql"
    os.environ[f"{prefix}URI"] = f"sqlite:///{work / 'catalog.db'}"
    os.environ[f"{prefix}WAREHOUSE"] = (work / "warehouse").as_uri()
    say("starting Apache Kafka")
    broker = start_kafka()
    try:
        topic, source = "bench-changes", f"kafka://{broker.bootstrap}"
        create_kafka_topic(broker.bootstrap, topic, PARTITIONS)
        total = produce_changes(broker.bootstrap, topic, args.changes, args.keys)
        size = -(-total // args.batches)

        say("starting and warming up Spark (not timed)")
        spark = spark_session("local[2]", "sluice-bench-cdc", {"spark.ui.enabled": "false"})
        warm = "bench-changes-warmup"
        create_kafka_topic(broker.bootstrap, warm, PARTITIONS)
        produce_changes(broker.bootstrap, warm, 2_000, 500)
        for group, sink, options in (
            ("w-u", "iceberg://bench/bench.warm_upsert", {"write_mode": "upsert"}),
            ("w-a", "iceberg://bench/bench.warm_append", {"value_format": "bytes"}),
        ):
            timed_batch(
                spark, queue_of(broker.bootstrap, warm, group), source, sink, 5_000, **options
            )

        upsert_sink, append_sink = "iceberg://bench/bench.current", "iceberg://bench/bench.log"
        upserts = queue_of(broker.bootstrap, topic, "bench-upsert")
        appends = queue_of(broker.bootstrap, topic, "bench-append")
        rows: list[dict[str, Any]] = []
        print(
            f"\n  {'batch':>5} {'upsert s':>9} {'append s':>9} {'ratio':>6} {'rows':>8} "
            f"{'files':>6}"
        )
        for number in range(args.batches):
            upsert_s, result = timed_batch(
                spark, upserts, source, upsert_sink, size, write_mode="upsert"
            )
            append_s, _ = timed_batch(
                spark, appends, source, append_sink, size, value_format="bytes"
            )
            table = _table("bench.current")
            table_rows = table.scan().to_arrow().num_rows
            files = len(list(table.scan().plan_files()))
            snapshots = len(table.snapshots())
            rows.append(
                {
                    "batch": number + 1,
                    "messages": result.read,
                    "upsert_s": round(upsert_s, 3),
                    "append_s": round(append_s, 3),
                    "rows": table_rows,
                    "files": files,
                    "snapshots": snapshots,
                    "changes": result.changes,
                }
            )
            print(
                f"  {number + 1:>5} {upsert_s:>9.2f} {append_s:>9.2f} "
                f"{upsert_s / append_s:>5.2f}x {table_rows:>8,} {files:>6}",
                flush=True,
            )
            if args.compact:
                compact(upsert_sink)
        upsert_total = sum(r["upsert_s"] for r in rows)
        append_total = sum(r["append_s"] for r in rows)
        first, last = _thirds(rows)
        full = [r for r in rows if r["rows"] >= 0.98 * rows[-1]["rows"]]
        full_first, full_last = _thirds(full)
        print(
            f"\n  total: upsert {upsert_total:.1f} s, append {append_total:.1f} s, ratio "
            f"upsert / append {upsert_total / append_total:.2f}x"
        )
        print(
            f"  upsert time per batch, last third / first third: {last / first:.2f}x "
            f"({first:.2f} s -> {last:.2f} s)"
        )
        print(
            f"  the same over the {len(full)} batches from the table's full size on (batch "
            f"{full[0]['batch']}: {full[0]['rows']:,} rows, within 2% of the last), while "
            f"its history grew from {full[0]['snapshots']} to {full[-1]['snapshots']} "
            f"snapshots: {full_last / full_first:.2f}x ({full_first:.2f} s -> "
            f"{full_last:.2f} s)"
        )
        if args.json:
            import json

            args.json.write_text(
                json.dumps(
                    {
                        "changes": args.changes,
                        "keys": args.keys,
                        "messages": total,
                        "batches": rows,
                        "ratio_upsert_append": round(upsert_total / append_total, 3),
                        "growth_last_first": round(last / first, 3),
                        "growth_at_full_size": round(full_last / full_first, 3),
                        "compact": args.compact,
                    },
                    indent=2,
                )
            )
        spark.stop()
    finally:
        broker.stop()


def _thirds(rows: list[dict[str, Any]]) -> tuple[float, float]:
    """The upsert's mean seconds per batch over the first and the last third of ``rows``."""
    third = max(1, len(rows) // 3)
    return (
        sum(r["upsert_s"] for r in rows[:third]) / third,
        sum(r["upsert_s"] for r in rows[-third:]) / third,
    )


def _table(name: str) -> Any:
    from pyiceberg.catalog import load_catalog

    return load_catalog("bench").load_table(name)


if __name__ == "__main__":
    main()
