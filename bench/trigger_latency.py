"""QueueMessageTrigger against the Airflow Kafka provider's AwaitMessageTrigger, in one run.

1. Produce-to-event latency on one broker (``--broker``: Apache Kafka unless told), each
   trigger's ``run()`` driven in this process's asyncio loop, ``--samples`` messages each
   (after a warm-up message).
   QueueMessageTrigger runs once for all of them (a watcher emits an event per new batch),
   at its default ``poll_interval`` (0.25 s) and at 0.1 s; messages go out at random moments
   (a Poisson process, two per poll interval on average) and each one's latency is the time
   until an event's offset ranges include it. AwaitMessageTrigger ends after one event, so
   each message gets a new trigger, produced once its consumer has joined the group and been
   assigned the partition (its start-up is not counted).
2. One real ``airflow triggerer`` (with PostgreSQL and a dag processor) holding 0, 10, 100
   and 500 idle QueueMessageTriggers, the AssetWatchers of a generated DAG on an empty topic:
   user+system CPU seconds per wall second of the triggerer and its trigger runner over
   ``--idle-seconds``, with their threads, once every trigger runs. For up to
   ``--fan-out-max`` watchers, also the time from one new message until every watcher emitted
   its asset event. Then, in the same triggerer beside the fleet, one watcher with a
   :class:`clock_trigger.ClockTrigger`, whose events say when they were yielded: the asset
   event's timestamp minus that is what the triggerer itself adds to any trigger's latency
   (Airflow 3's trigger runner forwards events once per pass of a loop that sleeps up to 1 s).
3. ``--await-idle`` idle AwaitMessageTriggers (default settings) run in this process's
   asyncio loop, as a trigger runner runs them: CPU seconds per second and threads above the
   process's own. (In a real triggerer they were not assigned within minutes here, so they
   are measured in process; QueueMessageTrigger is measured the same way for the ratio.)

Run: ``.venv/bin/python bench/trigger_latency.py [--samples 50] [--idle 10,100,500]``
(about 6 minutes). It starts and stops its own broker, database and Airflow processes.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
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
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # for tests.system.airflow.deployment

if "AIRFLOW_HOME" not in os.environ:  # Airflow reads its settings when first imported
    os.environ["AIRFLOW_HOME"] = tempfile.mkdtemp(prefix="sluice-bench-airflow-")
    atexit.register(shutil.rmtree, os.environ["AIRFLOW_HOME"], True)
os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "WARNING")  # no line per batch

import psutil  # noqa: E402
from broker_choice import add_broker_option, broker_label, start_broker  # noqa: E402
from percentiles import percentile  # noqa: E402  (bench/, the script's directory)
from tests.system.airflow.deployment import AirflowDeployment  # noqa: E402

from sluice.brokers import BrokerProcess, create_kafka_topic  # noqa: E402

SLUICE_CONN = "sluice_bench"
KAFKA_CONN = "kafka_bench"
SETTLE_SECONDS = 0.3  # after AwaitMessageTrigger's consumer got its partition
TIMEOUT = 30.0
WARM_UP_SECONDS = 10.0  # from the last trigger's start to the CPU measurement, at least
SETTLE_WINDOW_SECONDS = 5.0  # the triggerer has settled when two such windows agree
SETTLE_MAX_SECONDS = 120.0


def say(text: str) -> None:
    print(text, flush=True)


def progress(name: str, done: int, total: int, values: Sequence[float]) -> None:
    if values and (done % 10 == 0 or done == total):
        say(f"  {name}: {done}/{total} sent, p50 so far {percentile(values, 50) * 1000:.1f} ms")


# -- 1. latency ----------------------------------------------------------------------------


class Producer:
    """confluent-kafka producer; :meth:`send` runs on a worker thread, so the event loop (and
    the trigger in it) keeps going; returns (time just before producing, offset)."""

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka import Producer as KafkaProducer

        self.bootstrap = bootstrap
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
    producer: Producer, topic: str, samples: int, poll_interval: float | None
) -> list[float]:
    """Messages at random moments (a Poisson process, two per poll interval on average) to
    one running trigger (``poll_interval`` None: its default); for each, the time until an
    event's ranges include its offset."""
    from sluice.spark.kafka_source import commit_offsets
    from sluice_airflow.triggers.queue import QueueMessageTrigger

    bootstrap = {"bootstrap_servers": producer.bootstrap}
    trigger = QueueMessageTrigger(
        conn_id=SLUICE_CONN,
        topic=topic,
        config={"group_id": f"bench-{uuid.uuid4().hex[:8]}"},
        **({} if poll_interval is None else {"poll_interval": poll_interval}),
    )
    poll_interval = trigger.poll_interval
    seen: dict[int, float] = {}  # offset -> when an event first covered it

    async def pump() -> None:
        """Note what each event covers, then commit its ends as the ingest would: a watcher
        keeps one batch in flight and emits the next once the last one is committed."""
        async for event in trigger.run():
            now = time.perf_counter()
            for r in event.payload["ranges"]:
                for offset in range(r["start"], r["end"]):
                    seen.setdefault(offset, now)
            ends = {r["partition"]: r["end"] for r in event.payload["ranges"]}
            await asyncio.to_thread(
                commit_offsets, bootstrap, topic, event.payload["group_id"], ends
            )

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
        # KafkaSharedStreamTrigger: one consumer group for all shared consumers, manual
        # commits (it refuses auto-commit).
        f"AIRFLOW_CONN_{SHARED_CONN.upper()}": json.dumps(
            {
                "conn_type": "kafka",
                "extra": {
                    "bootstrap.servers": broker.bootstrap,
                    "group.id": f"bench-shared-{uuid.uuid4().hex[:8]}",
                    # the topics are empty until the latency messages: from the start, so a
                    # message sent while the shared consumers' group still rebalances counts
                    "auto.offset.reset": "earliest",
                    "enable.auto.commit": "false",
                    "log_level": 3,
                },
            }
        ),
    }


# -- 2. CPU of a real triggerer ------------------------------------------------------------

CLOCK_DAG = '''
"""Generated by bench/trigger_latency.py: one AssetWatcher on a ClockTrigger."""
import datetime

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, Asset, AssetWatcher
from clock_trigger import ClockTrigger

with DAG(
    "sluice_bench_clock",
    schedule=[Asset("{asset}", watchers=[AssetWatcher(name="{asset}", trigger=ClockTrigger())])],
    start_date=datetime.datetime(2026, 1, 1),
    catchup=False,
):
    EmptyOperator(task_id="never_runs")
'''
CLOCK_ASSET = "sluice_bench_clock"

IDLE_DAG = '''
"""Generated by bench/trigger_latency.py: {count} AssetWatchers with idle {kind}s."""
import datetime

from airflow.providers.apache.kafka.triggers.await_message import AwaitMessageTrigger
from airflow.providers.apache.kafka.triggers.shared_stream import KafkaSharedStreamTrigger
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, Asset, AssetWatcher

from sluice_airflow.triggers.queue import QueueMessageTrigger

assets = [
    Asset(
        f"sluice_bench_idle_{{i}}",
        watchers=[AssetWatcher(name=f"sluice_bench_idle_{{i}}", trigger={trigger})],
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


#: The trigger of watcher ``i``, on topic ``{topic}-{i % topics}``: a new QueueMessageTrigger
#: starts at the end of the topic (idle from its first look); the KafkaSharedStreamTrigger's
#: connection reads from the latest offset of a new group. Watchers of one topic share one
#: consumer (KafkaSharedStreamTrigger) or one queue (QueueMessageTrigger, per group: none).
IDLE_TRIGGERS = {
    "QueueMessageTrigger": (
        'QueueMessageTrigger(conn_id={conn!r}, topic=f"{topic}-{{i % {topics}}}", '
        'config={{"group_id": f"bench-idle-{{i}}", "from_beginning": False}})'
    ),
    "KafkaSharedStreamTrigger": (
        'KafkaSharedStreamTrigger(topics=[f"{topic}-{{i % {topics}}}"], '
        "kafka_config_id={shared_conn!r})"
    ),
}
SHARED_CONN = "kafka_bench_shared"


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


def settle(deployment: AirflowDeployment) -> None:
    """Wait until the triggerer's CPU use has settled: two successive windows of
    :data:`SETTLE_WINDOW_SECONDS` within 25% of each other (or 0.005 CPU-s/s), for up to
    :data:`SETTLE_MAX_SECONDS`. 500 triggers that start at once keep it busy for a while
    (loading their cursors, their first questions): measured from then, the idle figure
    falls window after window."""
    processes = deployment.components["triggerer"].processes()
    deadline = time.monotonic() + SETTLE_MAX_SECONDS
    previous: float | None = None
    while time.monotonic() < deadline:
        cpu0, _, _ = triggerer_usage(processes)
        time.sleep(SETTLE_WINDOW_SECONDS)
        rate = (triggerer_usage(processes)[0] - cpu0) / SETTLE_WINDOW_SECONDS
        if previous is not None and abs(rate - previous) <= max(0.25 * previous, 0.005):
            say(f"  settled at {rate:.3f} CPU s/s")
            return
        previous = rate
    say(f"  not settled within {SETTLE_MAX_SECONDS:.0f} s; measuring anyway")


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
    """Wait until the triggerer runs ``count`` triggers, then let them start polling. (Airflow
    keeps one trigger row for watchers whose triggers have the same arguments: the
    KafkaSharedStreamTriggers of one topic are one trigger, whose events go to each asset.)"""
    say(f"waiting for the triggerer to run {count} triggers ...")
    assigned = "SELECT count(*) FROM trigger WHERE triggerer_id IS NOT NULL"
    try:
        wait_for(lambda: deployment.sql(assigned)[0][0] == count, 180, f"{count} triggers")
    except TimeoutError:
        rows = deployment.sql(
            "SELECT classpath, triggerer_id IS NOT NULL, count(*) FROM trigger GROUP BY 1, 2"
        )
        say(f"  triggers in the database: {rows}")
        log = deployment.home / "processes"
        for path in sorted(log.rglob("*.log"))[-3:] if log.exists() else []:
            say(f"  {path}: {path.read_text()[-3000:]}")
        raise
    time.sleep(WARM_UP_SECONDS)
    settle(deployment)


def fan_out(deployment: AirflowDeployment, broker: BrokerProcess, topic: str, count: int) -> float:
    """Seconds from producing one message to the topic all ``count`` watchers watch until
    each of them has emitted its asset event."""
    last = deployment.sql("SELECT coalesce(max(id), 0) FROM asset_event")[0][0]
    new_events = "SELECT count(*) FROM asset_event WHERE id > %s"
    sent, offset = asyncio.run(Producer(broker.bootstrap).send(topic, b'{"bench": "fan-out"}'))
    end = offset + 1
    say(f"  one message to all {count} watchers ...")
    wait_for(lambda: deployment.sql(new_events, (last,))[0][0] >= count, 120, "asset events")
    took = time.perf_counter() - sent
    say(f"  every watcher emitted within {took:.1f} s")
    # Commit the batch for each watcher's group, as its ingest would: a watcher keeps one
    # batch in flight, so without the commit it would look for one from now on.
    from sluice.spark.kafka_source import commit_offsets

    for i in range(count):
        commit_offsets({"bootstrap_servers": broker.bootstrap}, topic, f"bench-idle-{i}", {0: end})
    return took


def idle_cpu(
    broker: BrokerProcess,
    kind: str,
    counts: Sequence[int],
    seconds: float,
    fan_out_max: int,
    workdir: Path,
    topics: int = 1,
    latency_samples: int = 0,
) -> tuple[list[CpuSample], list[tuple[float, float]], str, list[float]]:
    """CPU, threads and memory of one real triggerer holding ``counts`` idle ``kind``s, the
    watchers spread over ``topics`` topics; then, at the largest count, the produce -> asset
    event latency of ``latency_samples`` messages (first and last watcher of the topic), what
    the trigger committed, and the triggerer's own delay (:func:`triggerer_floor`)."""
    dags = workdir / kind / "dags"
    dags.mkdir(parents=True)
    env = {
        **connections(broker),
        "PYTHONPATH": str(Path(__file__).resolve().parent),  # clock_trigger, for the floor
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "10",
    }
    home = workdir / kind / "airflow"
    deployment = AirflowDeployment(home=home, dags_folder=dags, extra_env=env)
    say(f"starting a PostgreSQL database, airflow dag-processor and triggerer for {kind}s ...")
    started = time.monotonic()
    results: list[CpuSample] = []
    latencies: list[tuple[float, float]] = []
    commits = ""
    floor: list[float] = []
    try:
        deployment.start(["dag-processor", "triggerer"])
        say(f"  up in {time.monotonic() - started:.0f} s")
        results.append(measure_triggerer(deployment, 0, min(seconds, 5.0)))
        topic = f"bench-idle-{kind.lower()}"
        for j in range(topics):
            create_kafka_topic(broker.bootstrap, f"{topic}-{j}", 1)
        trigger = IDLE_TRIGGERS[kind].format(
            conn=SLUICE_CONN, topic=topic, topics=topics, shared_conn=SHARED_CONN
        )
        for count in counts:  # the watchers of a smaller count stay as they are
            (dags / "idle_watchers.py").write_text(
                IDLE_DAG.format(count=count, kind=kind, trigger=trigger)
            )
            distinct = count if kind == "QueueMessageTrigger" else min(count, topics)
            wait_for_watchers(deployment, distinct)
            sample = measure_triggerer(deployment, count, seconds)
            if count <= fan_out_max and topics == 1:
                sample.fan_out_seconds = fan_out(deployment, broker, f"{topic}-0", count)
            results.append(sample)
        if latency_samples and counts:
            latencies, commits = triggerer_latency(
                deployment, broker, kind, topic, topics, max(counts), latency_samples
            )
            floor = triggerer_floor(deployment, dags, latency_samples)
            say(
                f"  the triggerer's own delay, yield -> asset event, {len(floor)} ClockTrigger "
                f"events: p50 {percentile(floor, 50) * 1000:.0f} ms, "
                f"p99 {percentile(floor, 99) * 1000:.0f} ms"
            )
    finally:
        deployment.close()
    return results, latencies, commits, floor


def triggerer_latency(
    deployment: AirflowDeployment,
    broker: BrokerProcess,
    kind: str,
    topic: str,
    topics: int,
    count: int,
    samples: int,
) -> tuple[list[tuple[float, float]], str]:
    """One message at a time to topic ``k % topics``: seconds from producing it until the
    first and until the last of that topic's watchers has its asset event (the event rows'
    timestamps); then what the trigger committed of those topics."""
    from sluice.spark.kafka_source import committed_offsets

    producer = Producer(broker.bootstrap)
    events = (
        "SELECT a.name, extract(epoch from e.timestamp) FROM asset_event e "
        "JOIN asset a ON a.id = e.asset_id WHERE e.id > %s"
    )
    found: list[tuple[float, float]] = []
    sent_to: dict[int, int] = {}
    missed = 0
    for k in range(samples):
        j = k % topics
        watchers = {f"sluice_bench_idle_{i}" for i in range(count) if i % topics == j}
        last = deployment.sql("SELECT coalesce(max(id), 0) FROM asset_event")[0][0]
        at = time.time()
        _t, offset = asyncio.run(producer.send(f"{topic}-{j}", b'{"bench": "latency"}'))
        sent_to[j] = offset + 1
        seen: dict[str, float] = {}

        def all_seen(
            last: int = last, watchers: set[str] = watchers, seen: dict[str, float] = seen
        ) -> bool:
            for name, stamp in deployment.sql(events, (last,)):
                if name in watchers:
                    seen.setdefault(name, float(stamp))
            return len(seen) == len(watchers)

        try:
            wait_for(all_seen, 30, f"{kind} asset events")
        except TimeoutError:
            say(
                f"  {kind} message {k + 1}/{samples}: {len(seen)} of {len(watchers)} events in 30 s"
            )
            missed += 1
            continue
        found.append((min(seen.values()) - at, max(seen.values()) - at))
        if kind == "QueueMessageTrigger":  # as each watcher's ingest would, before the next
            from sluice.spark.kafka_source import commit_offsets

            for i in range(count):
                if i % topics == j:
                    commit_offsets(
                        {"bootstrap_servers": broker.bootstrap},
                        f"{topic}-{j}",
                        f"bench-idle-{i}",
                        {0: offset + 1},
                    )
        say(f"  {kind} message {k + 1}/{samples}: first {found[-1][0] * 1000:.0f} ms, "
            f"last of {len(watchers)} {found[-1][1] * 1000:.0f} ms")  # fmt: skip
    time.sleep(3)
    bootstrap = {"bootstrap_servers": broker.bootstrap}
    if kind == "KafkaSharedStreamTrigger":
        conn = json.loads(deployment.extra_env[f"AIRFLOW_CONN_{SHARED_CONN.upper()}"])
        group = conn["extra"]["group.id"]
        done = sum(
            committed_offsets(bootstrap, f"{topic}-{j}", group, [0]).get(0) == end
            for j, end in sent_to.items()
        )
        commits = (
            f"the shared consumer's group committed past the message on {done} of "
            f"{len(sent_to)} topics within 3 s of the events (after they were stored)"
        )
    else:
        commits = (
            "nothing: the trigger commits no offset (the ingest of each event commits after "
            "the sink holds the batch; here the bench committed for it)"
        )
    if missed:
        commits += f"; {missed} of {samples} messages got no (or not every) event within 30 s"
    return found, commits


def triggerer_floor(deployment: AirflowDeployment, dags: Path, samples: int) -> list[float]:
    """Seconds from a :class:`clock_trigger.ClockTrigger`'s yield to its asset event's row, for
    ``samples`` events, in the triggerer that runs the fleet."""
    (dags / "clock.py").write_text(CLOCK_DAG.format(asset=CLOCK_ASSET))
    delays = (
        "SELECT extract(epoch from e.timestamp) - (e.extra::json->'payload'->>'due')::float "
        "FROM asset_event e JOIN asset a ON a.id = e.asset_id WHERE a.name = %s ORDER BY e.id"
    )
    say(f"  {samples} ClockTrigger events in the same triggerer ...")
    # the first event or two may come while the runner is still starting the trigger
    wait_for(lambda: len(deployment.sql(delays, (CLOCK_ASSET,))) >= samples + 2, 300, "clock")
    return [float(d) for (d,) in deployment.sql(delays, (CLOCK_ASSET,))[2 : samples + 2]]


# -- 3. idle triggers in this process -------------------------------------------------------


def in_process_idle(broker: BrokerProcess, kind: str, count: int, seconds: float) -> CpuSample:
    """``count`` idle triggers of ``kind`` in one asyncio loop of this process: CPU s/s and
    threads added to what the process used before."""
    from airflow.providers.apache.kafka.triggers.await_message import AwaitMessageTrigger

    from sluice_airflow.triggers.queue import QueueMessageTrigger

    topic = f"bench-in-process-{kind.lower()}-{uuid.uuid4().hex[:6]}"
    create_kafka_topic(broker.bootstrap, topic, 1)
    me = psutil.Process()

    def make(i: int) -> Any:
        if kind == "AwaitMessageTrigger":
            return AwaitMessageTrigger(topics=[topic], kafka_config_id=KAFKA_CONN)
        return QueueMessageTrigger(
            SLUICE_CONN, topic, config={"group_id": f"idle-{i}", "from_beginning": False}
        )

    async def drain(trigger: Any) -> None:
        async for _ in trigger.run():
            raise RuntimeError(f"an idle {kind} emitted an event")

    async def run() -> CpuSample:
        threads0 = me.num_threads()
        triggers = [make(i) for i in range(count)]
        tasks = [asyncio.create_task(drain(trigger)) for trigger in triggers]
        try:
            await asyncio.sleep(WARM_UP_SECONDS)
            for task in tasks:
                if task.done():
                    task.result()
            times0, wall0 = me.cpu_times(), time.monotonic()
            await asyncio.sleep(seconds)
            times1, wall1 = me.cpu_times(), time.monotonic()
            cpu = (times1.user + times1.system - times0.user - times0.system) / (wall1 - wall0)
            rss = me.memory_info().rss / 2**20
            return CpuSample(count, cpu, me.num_threads() - threads0, rss)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            # as the triggerer does: AwaitMessageTrigger closes its consumer only here
            await asyncio.gather(*(t.cleanup() for t in triggers), return_exceptions=True)

    say(f"  {count} idle {kind}s in this process ...")
    sample = asyncio.run(run())
    say(f"  {sample.cpu_per_second:.3f} CPU s/s, {sample.threads} more threads")
    return sample


# -- the run -------------------------------------------------------------------------------


def latency(broker: BrokerProcess, samples: int) -> dict[str, list[float]]:
    os.environ.update(connections(broker))
    topics = {name: f"bench-{name}-{uuid.uuid4().hex[:6]}" for name in ("sluice", "fast", "kafka")}
    for topic in topics.values():
        create_kafka_topic(broker.bootstrap, topic, 1)
    producer = Producer(broker.bootstrap)

    async def run_all() -> dict[str, list[float]]:
        return {
            "QueueMessageTrigger (default poll_interval)": await sluice_latency(
                producer, topics["sluice"], samples, None
            ),
            "QueueMessageTrigger (poll_interval=0.1)": await sluice_latency(
                producer, topics["fast"], samples, 0.1
            ),
            "AwaitMessageTrigger": await kafka_provider_latency(producer, topics["kafka"], samples),
        }

    return asyncio.run(run_all())


def report(
    results: dict[str, list[float]],
    cpu: dict[str, list[CpuSample]],
    samples: int,
    in_process: dict[str, CpuSample],
    broker: str,
) -> None:
    say("")
    say(f"Produce-to-event latency, {samples} samples each, {broker}, 1 partition:")
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
    for kind, samples_of_kind in cpu.items():
        say("")
        say(f"One real `airflow triggerer` (supervisor + trigger runner) holding idle {kind}s:")
        header = f"{'triggers':>8} {'CPU s/s':>8} {'ms/s each':>10} {'threads':>8} {'RSS MiB':>8}"
        say(f"  {header} {'all emitted after a new message':>32}")
        base = samples_of_kind[0]
        for c in samples_of_kind:
            each = (c.cpu_per_second - base.cpu_per_second) / c.triggers * 1000 if c.triggers else 0
            fan = f"{c.fan_out_seconds:.1f} s" if c.fan_out_seconds is not None else "-"
            say(
                f"  {c.triggers:>8} {c.cpu_per_second:8.3f} {each:10.2f} {c.threads:8} "
                f"{c.rss_mib:8.0f} {fan:>32}"
            )
    if len(in_process) == 2:
        mine, provider = in_process["QueueMessageTrigger"], in_process["AwaitMessageTrigger"]
        say("")
        say(f"{mine.triggers} idle triggers in one asyncio loop of this process:")
        for name, c in in_process.items():
            say(f"  {name:<22} {c.cpu_per_second:8.3f} CPU s/s {c.threads:6} more threads")
        say(
            f"  ratio QueueMessageTrigger / AwaitMessageTrigger: "
            f"{mine.cpu_per_second / max(provider.cpu_per_second, 1e-9):.2f}x CPU, "
            f"threads {mine.threads} vs {provider.threads}"
        )


def report_fleet(
    cpu: dict[str, list[CpuSample]],
    latency: dict[str, list[tuple[float, float]]],
    commits: dict[str, str],
    floors: dict[str, list[float]],
    topics: int,
) -> None:
    """The fleet in a real triggerer, side by side: the largest count's CPU, threads and RSS,
    produce -> asset event latency and the triggerer's own part of it, what the trigger
    commits, and the ratios."""
    if not cpu:
        return
    say("")
    say(f"The fleet in one real triggerer each, watchers on {topics} topics:")
    largest = {kind: samples[-1] for kind, samples in cpu.items()}
    for kind, c in largest.items():
        say(
            f"  {kind:<26} {c.triggers} idle: {c.cpu_per_second:.3f} CPU s/s, "
            f"{c.threads} threads, {c.rss_mib:.0f} MiB RSS"
        )
        found = latency.get(kind) or []
        if found:
            first = [f for f, _ in found]
            last = [la for _, la in found]
            say(
                f"  {'':<26} produce -> first asset event p50 {percentile(first, 50) * 1000:.0f}"
                f" ms, p99 {percentile(first, 99) * 1000:.0f} ms; -> every watcher of the "
                f"topic p50 {percentile(last, 50) * 1000:.0f} ms, "
                f"p99 {percentile(last, 99) * 1000:.0f} ms ({len(found)} messages)"
            )
        if floors.get(kind):
            floor = floors[kind]
            say(
                f"  {'':<26} of which the triggerer's own (a ClockTrigger's yield -> its "
                f"asset event): p50 {percentile(floor, 50) * 1000:.0f} ms, "
                f"p99 {percentile(floor, 99) * 1000:.0f} ms"
            )
        if commits.get(kind):
            say(f"  {'':<26} commits: {commits[kind]}")
    if "QueueMessageTrigger" in largest and "KafkaSharedStreamTrigger" in largest:
        mine, theirs = largest["QueueMessageTrigger"], largest["KafkaSharedStreamTrigger"]
        say(
            f"  ratio QueueMessageTrigger / KafkaSharedStreamTrigger: CPU "
            f"{mine.cpu_per_second / max(theirs.cpu_per_second, 1e-9):.2f}x, threads "
            f"{mine.threads} vs {theirs.threads}, RSS {mine.rss_mib / theirs.rss_mib:.2f}x"
            "   (goal: CPU <= 1.0x, threads <= theirs)"
        )


def json_rows(
    results: dict[str, list[float]],
    cpu: dict[str, list[CpuSample]],
    latency: dict[str, list[tuple[float, float]]],
    floors: dict[str, list[float]],
    args: argparse.Namespace,
) -> list[dict[str, Any]]:
    """``--json``: the fleet's idle cost and produce -> asset event in the triggerer, ours
    against the provider's shared-stream trigger, and the in-process latencies."""
    from benchjson import row

    def ms(values: Sequence[float], q: int) -> float:
        return percentile(values, q) * 1000

    command = " ".join(["bench/trigger_latency.py", *sys.argv[1:]])
    rows = []
    largest = {kind: samples[-1] for kind, samples in cpu.items() if samples}
    mine, theirs = largest.get("QueueMessageTrigger"), largest.get("KafkaSharedStreamTrigger")
    if mine is not None and theirs is not None:
        rows.append(
            row(
                f"{mine.triggers} idle AssetWatchers on {args.topics} topics in one real airflow "
                f"triggerer: CPU-s/s (over {args.idle_seconds:g} s), threads, RSS",
                f"QueueMessageTrigger: {mine.cpu_per_second:.3f}, {mine.threads} threads, "
                f"{mine.rss_mib:.0f} MiB",
                f"KafkaSharedStreamTrigger: {theirs.cpu_per_second:.3f}, {theirs.threads} "
                f"threads, {theirs.rss_mib:.0f} MiB",
                f"CPU {mine.cpu_per_second / max(theirs.cpu_per_second, 1e-9):.2f}x; threads "
                f"{mine.threads / max(theirs.threads, 1):.2f}x; RSS "
                f"{mine.rss_mib / theirs.rss_mib:.2f}x",
                "CPU <= 1.0x, threads <= 1.0x", command,
                {"unit": "threads", "sides": ["QueueMessageTrigger", "KafkaSharedStreamTrigger"],
                 "values": {"threads": [mine.threads, theirs.threads]}},
            )
        )  # fmt: skip
    first = {kind: [f for f, _ in found] for kind, found in latency.items() if found}
    if "QueueMessageTrigger" in first:
        ours = first["QueueMessageTrigger"]
        other = first.get("KafkaSharedStreamTrigger", [])
        floor = floors.get("QueueMessageTrigger") or []
        own = f"; the triggerer's own p50 {ms(floor, 50):.0f} ms" if floor else ""
        chart = None
        if other:
            chart = {"unit": "ms", "sides": ["QueueMessageTrigger", "KafkaSharedStreamTrigger"],
                     "values": {"p50": [ms(ours, 50), ms(other, 50)],
                                "p99": [ms(ours, 99), ms(other, 99)]}}  # fmt: skip
        rows.append(
            row(
                f"produce -> first asset event in that triggerer ({len(ours)} messages)",
                f"p50 {ms(ours, 50):.0f} ms, p99 {ms(ours, 99):.0f} ms{own}",
                f"p50 {ms(other, 50):.0f} ms, p99 {ms(other, 99):.0f} ms" if other else "-",
                f"{ms(ours, 50) / ms(other, 50):.2f}x" if other else "", "p50 < 300 ms",
                command, chart,
            )
        )  # fmt: skip
    if results:
        cells = [
            f"{name}: p50 {ms(v, 50):.1f} ms, p99 {ms(v, 99):.1f} ms" for name, v in results.items()
        ]
        *ours_, theirs_ = cells
        rows.append(
            row(
                f"produce -> event, one trigger run in process ({args.samples} samples)",
                "; ".join(ours_), theirs_, "", "", command,
            )
        )  # fmt: skip
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=50)
    parser.add_argument("--idle", default="10,100,500", help="idle trigger counts ('' to skip)")
    parser.add_argument(
        "--await-idle", type=int, default=100, help="idle triggers of each kind in process"
    )
    parser.add_argument("--idle-seconds", type=float, default=20.0)
    parser.add_argument(
        "--fan-out-max",
        type=int,
        default=100,
        help="time the asset events of one message to all watchers up to this many",
    )
    parser.add_argument("--topics", type=int, default=50, help="topics the idle watchers watch")
    parser.add_argument(
        "--fleet",
        default=",".join(IDLE_TRIGGERS),
        help="the kinds of idle watchers, each in its own real triggerer",
    )
    parser.add_argument(
        "--fleet-samples",
        type=int,
        default=50,
        help="messages (one topic each, in turn) timed to the asset events in the triggerer",
    )
    parser.add_argument(
        "--json", metavar="PATH", help="also write the results (bench/results/trigger_fleet.json)"
    )
    add_broker_option(parser)
    args = parser.parse_args(argv)
    idle_counts = [int(c) for c in args.idle.split(",") if c.strip()]
    counts = {kind: idle_counts for kind in args.fleet.split(",") if kind}
    fleet_latency: dict[str, list[tuple[float, float]]] = {}
    fleet_commits: dict[str, str] = {}
    fleet_floors: dict[str, list[float]] = {}
    # SIGTERM ends the run through the finally blocks: brokers and Airflow processes stop.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.monotonic()
    in_process: dict[str, CpuSample] = {}
    label = broker_label(args.broker)
    broker = start_broker(args.broker)
    say(f"{label} on {broker.bootstrap} (pid {broker.pid})")
    try:
        with tempfile.TemporaryDirectory(prefix="sluice-bench-") as workdir:
            say(f"1. latency, {args.samples} samples per trigger")
            results = latency(broker, args.samples)
            cpu: dict[str, list[CpuSample]] = {}
            for kind, kind_counts in counts.items():
                if kind_counts:
                    say(f"2. idle CPU with {', '.join(map(str, kind_counts))} {kind}s")
                    fleet = idle_cpu(
                        broker,
                        kind,
                        kind_counts,
                        args.idle_seconds,
                        args.fan_out_max,
                        Path(workdir),
                        args.topics,
                        args.fleet_samples,
                    )
                    cpu[kind], fleet_latency[kind], fleet_commits[kind], fleet_floors[kind] = fleet
                    # at once, so a later failure does not lose it
                    report_fleet(
                        {kind: cpu[kind]},
                        {kind: fleet_latency[kind]},
                        {kind: fleet_commits[kind]},
                        {kind: fleet_floors[kind]},
                        args.topics,
                    )
            if args.await_idle:
                say(f"3. {args.await_idle} idle triggers of each kind in this process")
                for kind in ("QueueMessageTrigger", "AwaitMessageTrigger"):
                    in_process[kind] = in_process_idle(
                        broker, kind, args.await_idle, args.idle_seconds
                    )
    finally:
        broker.close()
    report(results, cpu, args.samples, in_process, label)
    report_fleet(cpu, fleet_latency, fleet_commits, fleet_floors, args.topics)
    if args.json:
        from benchjson import write

        rows = json_rows(results, cpu, fleet_latency, fleet_floors, args)
        write(args.json, "trigger_fleet", "Idle watchers and trigger latency", rows, label)
    say(f"\n(total {time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()
