"""Object storage against local disk, on the same messages, in one run.

    uv run python bench/object_storage.py [--messages 200000] [--rounds 2] [--history 8]

Produces --messages JSON messages of about 200 bytes over 3 partitions to noida-db, starts
the S3 server (SeaweedFS, loopback) behind the counting proxy (sluice.testing.s3proxy), then
ingests all of them with sluice.spark.ingest (driver mode, a schema, quarantine, commit) into
an Iceberg table of a SQLite catalog whose warehouse is (l) on local disk, (s) on the S3
server, alternating --rounds times. Prints the best time of each and the ratio S3 / local.

Then the S3 requests of one batch (PUT, GET, HEAD, LIST, DELETE, POST, counted at the
proxy), for the Iceberg table and for a Parquet dataset on s3://, at the first and at the
last of --history batches of 1,000 messages each: a batch's requests must not grow with the
table's history (no listing of earlier batches). The SparkSession is started and warmed up
on small batches into both stores before anything is timed.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from ingest import PARTITIONS, produce, say, sluice_ingest

OPERATIONS = ("PUT", "GET", "HEAD", "LIST", "DELETE", "POST")


def configure(name: str, uri: str, warehouse: str, extra: dict[str, str]) -> None:
    prefix = f"PYICEBERG_CATALOG__{name.upper()}__"
    properties = {"type": "sql", "uri": uri, "warehouse": warehouse, **extra}
    for key, value in properties.items():
        os.environ[prefix + key.upper().replace(".", "__").replace("-", "_")] = value


def show(counts: Counter[str]) -> str:
    return ", ".join(f"{op} {counts[op]}" for op in OPERATIONS if counts[op]) or "none"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--history", type=int, default=8)
    parser.add_argument(
        "--json", metavar="PATH", help="also write the results (bench/results/object_storage.json)"
    )
    args = parser.parse_args()

    from sluice.brokers import create_kafka_topic, start_noida
    from sluice.s3server import start_seaweedfs
    from sluice.spark import spark_session
    from sluice.testing.s3proxy import S3Proxy

    work = Path(tempfile.mkdtemp(prefix="sluice-bench-s3-"))
    say("starting noida-db and the S3 server (SeaweedFS) behind the counting proxy")
    broker = start_noida()
    server = start_seaweedfs(workdir=work / "seaweedfs")
    proxy = S3Proxy(f"{server.host}:{server.port}").start()
    server.create_bucket("lake")
    os.environ.update({**server.environment(), "AWS_ENDPOINT_URL": proxy.endpoint})
    os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
    s3 = {**server.catalog_properties(), "s3.endpoint": proxy.endpoint}
    configure("benchlocal", f"sqlite:///{work / 'local.db'}", (work / "wh").as_uri(), {})
    configure("benchs3", f"sqlite:///{work / 's3.db'}", "s3://lake/warehouse", s3)
    try:
        topic = "bench-readings"
        create_kafka_topic(broker.bootstrap, topic, PARTITIONS)
        produce(broker.bootstrap, topic, args.messages)

        say("starting and warming up Spark (not timed)")
        spark = spark_session("local[2]", "sluice-bench-s3", {"spark.ui.enabled": "false"})
        warm = "bench-warmup"
        create_kafka_topic(broker.bootstrap, warm, PARTITIONS)
        produce(broker.bootstrap, warm, 3000)
        for sink in ("iceberg://benchlocal/bench.warm", "iceberg://benchs3/bench.warm"):
            sluice_ingest(spark, broker.bootstrap, warm, 3000, "driver", sink)  # type: ignore[arg-type]

        n = args.messages
        best = {"local": float("inf"), "s3": float("inf")}
        per_batch: Counter[str] = Counter()
        for number in range(args.rounds):
            for store in ("local", "s3"):
                say(f"round {number + 1}: Iceberg, warehouse on {store}")
                table = f"iceberg://bench{store}/bench.readings_{number}"
                proxy.reset_counts()
                seconds = sluice_ingest(spark, broker.bootstrap, topic, n, "driver", table)  # type: ignore[arg-type]
                if store == "s3":
                    per_batch = proxy.reset_counts()
                best[store] = min(best[store], seconds)

        say(f"S3 requests per batch over {args.history} batches of 1,000 messages")
        history = "bench-history"
        create_kafka_topic(broker.bootstrap, history, PARTITIONS)
        counts: dict[str, list[Counter[str]]] = {"iceberg": [], "parquet": []}
        sinks = {"iceberg": "iceberg://benchs3/bench.history", "parquet": "s3://lake/history"}
        for _ in range(args.history):
            produce(broker.bootstrap, history, 1000)
            for kind, sink in sinks.items():
                proxy.reset_counts()
                ingest_waiting(spark, broker.bootstrap, history, kind, sink)
                counts[kind].append(proxy.reset_counts())

        print()
        for store, seconds in best.items():
            print(f"  Iceberg, {store:5s} warehouse {seconds:6.2f} s  {n / seconds:9,.0f} msg/s")
        print(f"  ratio S3 / local (time): {best['s3'] / best['local']:.2f}x  (goal <= 1.3x)")
        print(f"  S3 requests of the {n:,}-message batch: {show(per_batch)}")
        for kind, found in counts.items():
            totals = " ".join(str(sum(c.values())) for c in found)
            print(f"  {kind:8s} S3 requests of each 1,000-message batch, in order: {totals}")
            print(
                f"  {kind:8s} second batch: {show(found[min(1, len(found) - 1)])}; "
                f"last ({len(found)}th): {show(found[-1])}"
            )
        if args.json:
            from benchjson import row, write

            each = {
                kind: " ".join(str(sum(c.values())) for c in found)
                for kind, found in counts.items()
            }
            ratio = best["s3"] / best["local"]
            write(args.json, "object_storage", "Object storage: an Iceberg warehouse on S3", [
                row(
                    f"Iceberg table on the loopback S3 server (through the counting proxy) "
                    f"against one on local disk, {n:,} messages",
                    f"S3: {best['s3']:.2f} s, {n / best['s3']:,.0f} msg/s",
                    f"local: {best['local']:.2f} s, {n / best['local']:,.0f} msg/s",
                    f"{ratio:.2f}x time", "<= 1.3x", f"bench/object_storage.py --messages {n}",
                    {"unit": "s", "sides": ["S3", "local disk"], "values": {
                        f"{n:,}": [best["s3"], best["local"]],
                    }},
                ),
                row(
                    f"S3 requests per 1,000-message batch over a history of {args.history} "
                    "batches (must not grow)",
                    f"Iceberg: {each['iceberg']}", f"Parquet on S3: {each['parquet']}",
                    "", "flat", "the same",
                ),
            ])  # fmt: skip
        spark.stop()
    finally:
        proxy.close()
        server.close()
        broker.close()


def ingest_waiting(spark: object, bootstrap: str, topic: str, kind: str, sink: str) -> None:
    """Ingest what waits for the group of ``kind`` (a batch planned from its offsets)."""
    from ingest import SCHEMA

    from sluice.batch import plan_batch
    from sluice.kafka import KafkaMessageQueue
    from sluice.spark import ingest

    queue = KafkaMessageQueue(topic)
    queue.configure(
        {
            "connection.uri": bootstrap,
            "topic": topic,
            "group_id": f"history-{kind}",
            "from_beginning": True,
        }
    )
    queue.open(None)
    try:
        spec = plan_batch(queue)
        assert spec is not None
        ingest(spark, spec, sink, source=f"kafka://{bootstrap}", schema=SCHEMA, mode="driver")
    finally:
        queue.close(None)


if __name__ == "__main__":
    main()
