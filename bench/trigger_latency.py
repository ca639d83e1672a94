"""QueueMessageTrigger against the Airflow Kafka provider's AwaitMessageTrigger, in one run.

1. Produce-to-event latency on the same noida-db broker, each trigger's ``run()`` driven in
   this process's asyncio loop, ``--samples`` messages each (after a warm-up message).
   QueueMessageTrigger runs once for all of them (a watcher emits an event per new batch),
   at its default ``poll_interval`` of 1 s and at 0.1 s; messages go out at random moments
   (a Poisson process, two per poll interval on average) and each one's latency is the time
   until an event's offset ranges include it. AwaitMessageTrigger ends after one event, so
   each message gets a new trigger, produced once its consumer has joined the group and been
   assigned the partition (its start-up is not counted).
2. One real ``airflow triggerer`` (with PostgreSQL and a dag processor) holding 0, 10, 100
   and 500 idle QueueMessageTriggers, the AssetWatchers of a generated DAG on an empty topic:
   user+system CPU seconds per wall second of the triggerer and its trigger runner over
   ``--idle-seconds``, once every trigger has opened its queue. For up to ``--fan-out-max``
   watchers, also the time from one new message until every watcher emitted its asset event.

Run: ``.venv/bin/python bench/trigger_latency.py [--samples 50] [--idle 10,100,500]``
(about 4 minutes). It starts and stops its own broker, database and Airflow processes.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import itertools
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # for tests.system.airflow.deployment

if "AIRFLOW_HOME" not in os.environ:  # Airflow reads its settings when first imported
    os.environ["AIRFLOW_HOME"] = tempfile.mkdtemp(prefix="sluice-bench-airflow-")
    atexit.register(shutil.rmtree, os.environ["AIRFLOW_HOME"], True)
os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "WARNING")  # no line per batch

import psutil  # noqa: E402
from tests.system.airflow.deployment import AirflowDeployment  # noqa: E402

from sluice.brokers import BrokerProcess, create_kafka_topic, start_noida  # noqa: E402

SLUICE_CONN = "sluice_bench"
KAFKA_CONN = "kafka_bench"
SETTLE_SECONDS = 0.3  # after AwaitMessageTrigger's consumer got its partition
TIMEOUT = 30.0
WARM_UP_SECONDS = 10.0  # from the last trigger's start to the CPU measurement


def say(text: str) -> None:
    print(text, flush=True)


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def progress(name: str, done: int, total: int, values: Sequence[float]) -> None:
    if values and (done % 10 == 0 or done == total):
        say(f"  {name}: {done}/{total} sent, p50 so far {percentile(values, 50) * 1000:.1f} ms")


# -- 1. latency ----------------------------------------------------------------------------


class Producer:
    """confluent-kafka producer; :meth:`send` runs on a worker thread, so the event loop (and
    the trigger in it) keeps going; returns (time just before producing, offset)."""

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka import Producer as KafkaProducer

        self._producer = KafkaProducer(
            {"bootstrap.servers": bootstrap, "linger.ms": 0, "log_level": 3}
        )

    def _send(self, topic: str, value: bytes) -> tuple[float, int]:
        offsets: list[int | None] = []
        started = time.perf_counter()
        self._producer.produce(topic, value, on_delivery=lambda _e, m: offsets.append(m.offset()))
        self._producer.flush(TIMEOUT)
        if not offsets or offsets[0] is None:
            raise RuntimeError(f"message to {topic} not delivered within {TIMEOUT} s")
        return started, offsets[0]

    async def send(self, topic: str, value: bytes) -> tuple[float, int]:
        return await asyncio.to_thread(self._send, topic, value)


async def sluice_latency(
    producer: Producer, topic: str, samples: int, poll_interval: float
) -> list[float]:
    """Messages at random moments (a Poisson process, one per ``poll_interval`` on average)
    to one running trigger; for each, the time until an event's ranges include its offset."""
    from sluice_airflow.triggers.queue import QueueMessageTrigger

    trigger = QueueMessageTrigger(
        conn_id=SLUICE_CONN,
        topic=topic,
        poll_interval=poll_interval,
        config={"group_id": f"bench-{uuid.uuid4().hex[:8]}"},
    )
    seen: dict[int, float] = {}  # offset -> when an event first covered it

    async def pump() -> None:
        async for event in trigger.run():
            now = time.perf_counter()
            for r in event.payload["ranges"]:
                for offset in range(r["start"], r["end"]):
                    seen.setdefault(offset, now)

    async def until_seen(offsets: Sequence[int]) -> None:
        deadline = time.monotonic() + TIMEOUT
        while not all(o in seen for o in offsets):
            if task.done() or time.monotonic() > deadline:
                task.result()  # the trigger's error, if it failed
                raise TimeoutError(f"no event for offsets {offsets} within {TIMEOUT} s")
            await asyncio.sleep(0.005)

    task = asyncio.create_task(pump())
    name = f"QueueMessageTrigger poll_interval={poll_interval}"
    try:
        _t, warm_up = await producer.send(topic, b'{"bench": "warm-up"}')  # opens the queue
        await until_seen([warm_up])
        sent: dict[int, float] = {}
        for i in range(1, samples + 1):
            await asyncio.sleep(random.expovariate(2 / poll_interval))
            at, offset = await producer.send(topic, b'{"bench": true}')
            sent[offset] = at
            progress(name, i, samples, [seen[o] - t for o, t in sent.items() if o in seen])
        await until_seen(list(sent))
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    return [seen[offset] - at for offset, at in sent.items()]


async def kafka_provider_latency(producer: Producer, topic: str, samples: int) -> list[float]:
    from airflow.providers.apache.kafka.triggers.await_message import AwaitMessageTrigger

    latencies: list[float] = []
    for i in range(samples + 1):
        # poll_timeout 0.1 s instead of 1 s only shortens the wait for the partition
        # assignment (seen when a poll returns); a poll returns as soon as a message arrives.
        trigger = AwaitMessageTrigger(topics=[topic], kafka_config_id=KAFKA_CONN, poll_timeout=0.1)
        run = trigger.run()  # type: ignore[no-untyped-call]
        first = asyncio.ensure_future(anext(run))
        deadline = time.monotonic() + TIMEOUT
        while not (trigger._consumer is not None and trigger._consumer.assignment()):
            if first.done() or time.monotonic() > deadline:
                first.result()  # its error, if it failed
                raise RuntimeError("AwaitMessageTrigger got no partition assigned")
            await asyncio.sleep(0.01)
        await asyncio.sleep(SETTLE_SECONDS)
        value = json.dumps({"sample": i}).encode()
        sent, _offset = await producer.send(topic, value)
        event = await asyncio.wait_for(first, TIMEOUT)
        received = time.perf_counter()
        if event.payload != value.decode():
            raise RuntimeError(f"AwaitMessageTrigger yielded {event.payload!r}, not {value!r}")
        await run.aclose()
        await trigger.cleanup()
        if i:
            latencies.append(received - sent)
            progress("AwaitMessageTrigger", i, samples, latencies)
    return latencies


def connections(broker: BrokerProcess) -> dict[str, str]:
    """The two triggers' connections, as Airflow reads them from the environment."""
    return {
        f"AIRFLOW_CONN_{SLUICE_CONN.upper()}": json.dumps(
            {"conn_type": "sluice_kafka", "host": broker.host, "port": broker.port}
        ),
        f"AIRFLOW_CONN_{KAFKA_CONN.upper()}": json.dumps(
            {
                "conn_type": "kafka",
                "extra": {
                    "bootstrap.servers": broker.bootstrap,
                    "group.id": f"bench-await-{uuid.uuid4().hex[:8]}",
                    "auto.offset.reset": "earliest",
                    "enable.auto.commit": False,
                    "log_level": 3,  # librdkafka: errors only
                },
            }
        ),
    }


# -- 2. CPU of a real triggerer ------------------------------------------------------------

IDLE_DAG = '''
"""Generated by bench/trigger_latency.py: {count} AssetWatchers with idle QueueMessageTriggers."""
import datetime

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, Asset, AssetWatcher

from sluice_airflow.triggers.queue import QueueMessageTrigger

assets = [
    Asset(
        f"sluice_bench_idle_{{i}}",
        watchers=[
            AssetWatcher(
                name=f"sluice_bench_idle_{{i}}",
                trigger=QueueMessageTrigger(
                    conn_id={conn!r},
                    topic={topic!r},
                    # A new watcher starts at the end of the topic: idle from its first poll.
                    config={{"group_id": f"bench-idle-{{i}}", "from_beginning": False}},
                ),
            )
        ],
    )
    for i in range({count})
]
with DAG(
    "sluice_bench_idle_watchers",
    schedule=assets,
    start_date=datetime.datetime(2026, 1, 1),
    catchup=False,
):
    EmptyOperator(task_id="never_runs")
'''


@dataclass
class CpuSample:
    triggers: int
    cpu_per_second: float
    threads: int
    rss_mib: float
    fan_out_seconds: float | None = None  # until every watcher emitted for a new message


def triggerer_usage(processes: list[psutil.Process]) -> tuple[float, int, float]:
    """CPU seconds (user+system), threads and resident MiB of ``processes``, summed."""
    cpu, threads, rss = 0.0, 0, 0
    for proc in processes:
        try:
            times = proc.cpu_times()
            cpu += times.user + times.system
            threads += proc.num_threads()
            rss += proc.memory_info().rss
        except psutil.Error:
            continue
    return cpu, threads, rss / 2**20


def measure_triggerer(deployment: AirflowDeployment, triggers: int, seconds: float) -> CpuSample:
    processes = deployment.components["triggerer"].processes()
    cpu0, _, _ = triggerer_usage(processes)
    wall0 = time.monotonic()
    while (elapsed := time.monotonic() - wall0) < seconds:
        time.sleep(min(5.0, seconds - elapsed))
        cpu, threads, rss = triggerer_usage(processes)
        rate = (cpu - cpu0) / (time.monotonic() - wall0)
        say(f"  {triggers} triggers: {time.monotonic() - wall0:4.0f} s, {rate:.3f} CPU s/s")
    cpu1, threads, rss = triggerer_usage(processes)
    return CpuSample(triggers, (cpu1 - cpu0) / (time.monotonic() - wall0), threads, rss)


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.2)


def wait_for_watchers(deployment: AirflowDeployment, count: int) -> None:
    """Wait until the triggerer runs ``count`` triggers, then let them start polling."""
    say(f"waiting for the triggerer to run {count} watchers ...")
    assigned = "SELECT count(*) FROM trigger WHERE triggerer_id IS NOT NULL"
    wait_for(lambda: deployment.sql(assigned)[0][0] == count, 120, f"{count} triggers")
    # Each QueueMessageTrigger has a client thread of its own from its first step on.
    triggerer = deployment.components["triggerer"]
    wait_for(lambda: triggerer_usage(triggerer.processes())[1] >= count, 120, "their threads")
    time.sleep(WARM_UP_SECONDS)


def fan_out(deployment: AirflowDeployment, broker: BrokerProcess, topic: str, count: int) -> float:
    """Seconds from producing one message to the topic all ``count`` watchers watch until
    each of them has emitted its asset event."""
    last = deployment.sql("SELECT coalesce(max(id), 0) FROM asset_event")[0][0]
    new_events = "SELECT count(*) FROM asset_event WHERE id > %s"
    sent, _offset = asyncio.run(Producer(broker.bootstrap).send(topic, b'{"bench": "fan-out"}'))
    say(f"  one message to all {count} watchers ...")
    wait_for(lambda: deployment.sql(new_events, (last,))[0][0] >= count, 120, "asset events")
    took = time.perf_counter() - sent
    say(f"  every watcher emitted within {took:.1f} s")
    return took


def idle_cpu(
    broker: BrokerProcess, counts: Sequence[int], seconds: float, fan_out_max: int, workdir: Path
) -> list[CpuSample]:
    dags = workdir / "dags"
    dags.mkdir()
    env = {
        **connections(broker),
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "10",
    }
    deployment = AirflowDeployment(home=workdir / "airflow", dags_folder=dags, extra_env=env)
    say("starting a PostgreSQL database, airflow dag-processor and airflow triggerer ...")
    started = time.monotonic()
    results: list[CpuSample] = []
    try:
        deployment.start(["dag-processor", "triggerer"])
        say(f"  up in {time.monotonic() - started:.0f} s")
        results.append(measure_triggerer(deployment, 0, min(seconds, 5.0)))
        topic = "bench-idle"
        create_kafka_topic(broker.bootstrap, topic, 1)
        for count in counts:  # the watchers of a smaller count stay as they are
            (dags / "idle_watchers.py").write_text(
                IDLE_DAG.format(count=count, conn=SLUICE_CONN, topic=topic)
            )
            wait_for_watchers(deployment, count)
            sample = measure_triggerer(deployment, count, seconds)
            if count <= fan_out_max:
                sample.fan_out_seconds = fan_out(deployment, broker, topic, count)
            results.append(sample)
    finally:
        deployment.close()
    return results


# -- the run -------------------------------------------------------------------------------


def latency(broker: BrokerProcess, samples: int) -> dict[str, list[float]]:
    os.environ.update(connections(broker))
    topics = {name: f"bench-{name}-{uuid.uuid4().hex[:6]}" for name in ("sluice", "fast", "kafka")}
    for topic in topics.values():
        create_kafka_topic(broker.bootstrap, topic, 1)
    producer = Producer(broker.bootstrap)

    async def run_all() -> dict[str, list[float]]:
        return {
            "QueueMessageTrigger (poll_interval=1.0, default)": await sluice_latency(
                producer, topics["sluice"], samples, 1.0
            ),
            "QueueMessageTrigger (poll_interval=0.1)": await sluice_latency(
                producer, topics["fast"], samples, 0.1
            ),
            "AwaitMessageTrigger": await kafka_provider_latency(producer, topics["kafka"], samples),
        }

    return asyncio.run(run_all())


def report(results: dict[str, list[float]], cpu: list[CpuSample], samples: int) -> None:
    say("")
    say(f"Produce-to-event latency, {samples} samples each, noida-db, 1 partition:")
    say(f"  {'trigger':<50} {'p50 ms':>8} {'p99 ms':>8}")
    for name, values in results.items():
        p50, p99 = percentile(values, 50) * 1000, percentile(values, 99) * 1000
        say(f"  {name:<50} {p50:8.1f} {p99:8.1f}")
    *ours, theirs = results
    for name in ours:
        say(
            f"  ratio {name} / {theirs}: "
            f"p50 {percentile(results[name], 50) / percentile(results[theirs], 50):.1f}x, "
            f"p99 {percentile(results[name], 99) / percentile(results[theirs], 99):.1f}x"
        )
    if not cpu:
        return
    say("")
    say("One real `airflow triggerer` (supervisor + trigger runner) holding idle triggers:")
    header = f"{'triggers':>8} {'CPU s/s':>8} {'ms/s each':>10} {'threads':>8} {'RSS MiB':>8}"
    say(f"  {header} {'all emitted after a new message':>32}")
    base = cpu[0]
    for c in cpu:
        each = (c.cpu_per_second - base.cpu_per_second) / c.triggers * 1000 if c.triggers else 0
        fan = f"{c.fan_out_seconds:.1f} s" if c.fan_out_seconds is not None else "-"
        say(
            f"  {c.triggers:>8} {c.cpu_per_second:8.3f} {each:10.2f} {c.threads:8} "
            f"{c.rss_mib:8.0f} {fan:>32}"
        )
    for smaller, larger in itertools.pairwise(cpu[1:]):
        say(
            f"  ratio {larger.triggers} / {smaller.triggers} triggers: "
            f"{larger.cpu_per_second / smaller.cpu_per_second:.1f}x CPU "
            f"for {larger.triggers / smaller.triggers:.0f}x triggers"
        )
    say(
        "  (a trigger runner is one Python process whose threads share one GIL: about 1 CPU s/s"
        " is its ceiling, beyond which its triggers poll less often than asked)"
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=50)
    parser.add_argument("--idle", default="10,100,500", help="idle trigger counts ('' to skip)")
    parser.add_argument("--idle-seconds", type=float, default=20.0)
    parser.add_argument(
        "--fan-out-max",
        type=int,
        default=100,
        help="time the asset events of one message to all watchers up to this many",
    )
    args = parser.parse_args(argv)
    counts = [int(c) for c in args.idle.split(",") if c.strip()]
    # SIGTERM ends the run through the finally blocks: brokers and Airflow processes stop.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.monotonic()
    broker = start_noida()
    say(f"noida-db on {broker.bootstrap} (pid {broker.pid})")
    try:
        with tempfile.TemporaryDirectory(prefix="sluice-bench-") as workdir:
            say(f"1. latency, {args.samples} samples per trigger")
            results = latency(broker, args.samples)
            cpu: list[CpuSample] = []
            if counts:
                say(f"2. idle CPU with {', '.join(map(str, counts))} triggers")
                cpu = idle_cpu(broker, counts, args.idle_seconds, args.fan_out_max, Path(workdir))
    finally:
        broker.close()
    report(results, cpu, args.samples)
    say(f"\n(total {time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()
