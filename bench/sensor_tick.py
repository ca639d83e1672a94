"""How long one tick of the Dagster queue sensor takes, by number of partitions.

Starts a noida-db broker (stopped again at the end), creates topics of 1, 12 and 48
partitions with messages waiting in every partition, and evaluates the sensor as the daemon
does (resources set up, ``evaluate_tick``, resources torn down) several times per topic:
each tick builds the Kafka queue, reads the group's committed, beginning and end offsets
and requests a run. Then the broker is stopped and a tick against it is timed too (it must
fail fast: Dagster gives a sensor tick 60 s). Prints the median and the maximum of each,
against the 1-partition median and against the 60 s limit.

    .venv/bin/python bench/sensor_tick.py [--ticks 7] [--messages 10]
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import time
import warnings

from dagster import DagsterInstance, build_sensor_context

from sluice.brokers import create_kafka_topic, start_noida
from sluice.kafka import KafkaConnection
from sluice_dagster import KafkaQueueResource, make_ingest_job, make_queue_sensor

PARTITIONS = (1, 12, 48)
TICK_LIMIT_S = 60.0


def publish(bootstrap: str, topic: str, partitions: int, per_partition: int) -> None:
    connection = KafkaConnection()
    connection.configure({"connection.uri": bootstrap})
    connection.open(None)
    try:
        for partition in range(partitions):
            values = [{"value": json.dumps({"id": i}).encode()} for i in range(per_partition)]
            connection.publish(topic, values, {"partition": partition})
    finally:
        connection.close(None)


def time_ticks(bootstrap: str, topic: str, ticks: int, expect_run: bool) -> list[float]:
    job = make_ingest_job("bench", "queue", "/tmp/sluice-bench-unused")
    sensor = make_queue_sensor("bench_sensor", "queue", job=job)
    resource = KafkaQueueResource(bootstrap=bootstrap, topic=topic, group_id=f"{topic}-g")
    seconds: list[float] = []
    with DagsterInstance.ephemeral() as instance:
        for _ in range(ticks):
            started = time.perf_counter()
            with build_sensor_context(
                instance=instance, resources={"queue": resource}, sensor_name=sensor.name
            ) as context:
                data = sensor.evaluate_tick(context)
            seconds.append(time.perf_counter() - started)
            requested = bool(data.run_requests)
            if requested != expect_run:
                raise SystemExit(f"unexpected tick result on {topic}: {data.skip_message}")
    return seconds


def line(label: str, seconds: list[float], baseline: float | None) -> str:
    median, worst = statistics.median(seconds), max(seconds)
    ratio = f"{median / baseline:6.2f}x" if baseline else "     - "
    share = 100 * worst / TICK_LIMIT_S
    return (
        f"{label:<34} median {median * 1000:8.1f} ms   max {worst * 1000:8.1f} ms   "
        f"vs 1 partition {ratio}   max = {share:5.2f}% of the 60 s tick limit"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=7, help="measured ticks per topic")
    parser.add_argument("--messages", type=int, default=10, help="messages per partition")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    logging.disable(logging.CRITICAL)  # the ticks' own log lines would bury the progress

    print("starting noida-db ...", flush=True)
    broker = start_noida()
    results: list[tuple[str, list[float]]] = []
    try:
        print(f"broker at {broker.bootstrap}; warming up (imports, first connection) ...")
        create_kafka_topic(broker.bootstrap, "bench-warmup", 1)
        publish(broker.bootstrap, "bench-warmup", 1, 1)
        time_ticks(broker.bootstrap, "bench-warmup", 2, expect_run=True)
        for partitions in PARTITIONS:
            topic = f"bench-{partitions}p"
            print(f"topic {topic}: creating, {args.messages} messages per partition ...")
            create_kafka_topic(broker.bootstrap, topic, partitions)
            publish(broker.bootstrap, topic, partitions, args.messages)
            print(f"topic {topic}: {args.ticks} ticks ...", flush=True)
            seconds = time_ticks(broker.bootstrap, topic, args.ticks, expect_run=True)
            results.append((f"{partitions:>2} partition(s), messages waiting", seconds))
        print("stopping the broker; ticks against it ...", flush=True)
        broker.stop()
        down = time_ticks(broker.bootstrap, "bench-1p", max(3, args.ticks // 2), expect_run=False)
        results.append(("broker down (tick skips)", down))
    finally:
        broker.close()
        print("broker stopped.")

    baseline = statistics.median(results[0][1])
    print()
    print(f"Dagster queue sensor: one tick, {args.ticks} ticks per topic (noida-db, this machine)")
    for label, seconds in results:
        print(line(label, seconds, baseline))


if __name__ == "__main__":
    main()
