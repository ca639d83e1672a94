"""Executor-mode ingest on a standalone cluster: one worker core against two, in one run.

    uv run python bench/spark_scaling.py [--messages 240000] [--partitions 6] [--rounds 2]

Starts noida-db and a standalone Spark cluster (a master and two one-core workers, stopped
again at the end), publishes --messages JSON readings over --partitions partitions, and ingests
the same messages (each run with a consumer group of its own) in executor mode, one Spark task
per range of 20,000 messages, from a driver process of its own: once with ``spark.cores.max=1``
(one executor on one worker) and once with both workers. The rounds alternate. Prints each
ingest's time (``IngestResult.seconds``: the executors are up, the session is warm; it includes
the Parquet write and the commit) and the ratio. The driver, the broker and both workers
share the machine's cores, so on a 2-core machine the ratio shows the ceiling of what one
more core buys here, not what a cluster of real machines does.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from kafka import KafkaProducer

from sluice.batch import plan_batch
from sluice.brokers import create_kafka_topic, start_noida
from sluice.kafka import KafkaMessageQueue
from sluice.testing.spark_cluster import start_cluster

SCHEMA = "device STRING, site STRING, temperature DOUBLE, humidity DOUBLE, note STRING"
CHUNK = 20_000

#: The driver: a warm-up ingest of a small batch, then the measured one.
DRIVER = """
import json, sys
from sluice.spark import ingest, spark_session
job = json.loads(sys.argv[1])
spark = spark_session(job["master"], "sluice-bench-scaling", job["conf"])
ingest(spark, job["warmup"], job["sink"] + "-warmup", source=job["source"], mode="executors")
result = ingest(spark, job["spec"], job["sink"], source=job["source"], schema=job["schema"],
                mode="executors", chunk_size=job["chunk"])
print(json.dumps(result.to_dict()))
spark.stop()
"""


def say(text: str) -> None:
    print(f"[bench] {text}", flush=True)


def publish(bootstrap: str, topic: str, messages: int, partitions: int) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, batch_size=256 * 1024)
    for i in range(messages):
        value = {
            "device": f"dev-{i % 97}",
            "site": f"site-{i % 5}",
            "temperature": 20 + (i % 100) / 10,
            "humidity": 40 + (i % 50) / 5,
            "note": "x" * 60,
        }
        producer.send(topic, json.dumps(value).encode(), partition=i % partitions)
    producer.flush(120)
    producer.close()


def plan(bootstrap: str, topic: str, group: str, max_messages: int | None = None) -> Any:
    queue = KafkaMessageQueue(topic)
    queue.configure(
        {"connection.uri": bootstrap, "topic": topic, "group_id": group, "from_beginning": True}
    )
    queue.open(None)
    try:
        spec = plan_batch(queue, max_messages=max_messages)
    finally:
        queue.close(None)
    assert spec is not None
    return spec


def ingest_once(
    master: str, bootstrap: str, topic: str, group: str, sink: Path, cores: int
) -> dict[str, Any]:
    spec = plan(bootstrap, topic, group)
    warmup = plan(bootstrap, topic, f"{group}-warmup", max_messages=600)
    conf = {
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.ui.enabled": "false",
        "spark.cores.max": str(cores),
        "spark.executor.memory": "768m",
        "spark.sql.shuffle.partitions": "2",
    }
    job = {
        "master": master,
        "conf": conf,
        "source": f"kafka://{bootstrap}",
        "schema": SCHEMA,
        "spec": spec.to_dict(),
        "warmup": warmup.to_dict(),
        "sink": str(sink),
        "chunk": CHUNK,
    }
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, json.dumps(job)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"the driver failed:\n{done.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=240_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="sluice-bench-scaling-"))
    broker = start_noida(workdir=workdir / "noida")
    cluster = start_cluster(2, workdir / "cluster")
    try:
        say(f"cluster {cluster.url}: 2 workers of 1 core; noida-db at {broker.bootstrap}")
        create_kafka_topic(broker.bootstrap, "readings", args.partitions)
        publish(broker.bootstrap, "readings", args.messages, args.partitions)
        say(f"published {args.messages:,} messages over {args.partitions} partitions")
        times: dict[int, list[float]] = {1: [], 2: []}
        for round_ in range(args.rounds):
            for cores in (1, 2):
                group = f"bench-{round_}-{cores}"
                result = ingest_once(
                    cluster.url,
                    broker.bootstrap,
                    "readings",
                    group,
                    workdir / f"sink-{group}",
                    cores,
                )
                assert result["written"] == args.messages, result
                times[cores].append(result["seconds"])
                rate = args.messages / result["seconds"]
                seconds = result["seconds"]
                say(f"round {round_ + 1}, {cores} worker(s): {seconds:.1f} s, {rate:,.0f} msg/s")
        one, two = statistics.median(times[1]), statistics.median(times[2])
        print()
        print(f"executor-mode ingest of {args.messages:,} messages, {args.partitions} partitions")
        print(f"  one worker (1 core):   {one:6.1f} s  {args.messages / one:9,.0f} msg/s")
        print(f"  two workers (2 cores): {two:6.1f} s  {args.messages / two:9,.0f} msg/s")
        print(
            f"  speed-up: {one / two:.2f}x (median of {args.rounds} rounds; machine cores: "
            f"{os.cpu_count()}, shared with the driver and the broker)"
        )
    finally:
        cluster.close()
        broker.close()


if __name__ == "__main__":
    main()
