"""The demo from start to end, and its clean-up."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

from .airflow_kafka import AirflowKafka
from .background import InBackground
from .brokers import Brokers, publish
from .chart import draw_chart
from .dagster_mqtt import DagsterMqtt
from .iceberg import ingest_into_iceberg
from .settings import (
    AIRFLOW_DAG,
    DAGSTER_JOB,
    DAGSTER_SENSOR,
    KAFKA_PARTITIONS,
    KAFKA_TOPIC,
    MQTT_TOPIC,
    OWNED_OUTPUTS,
    SPARK_MASTER,
    Closer,
    DemoError,
)
from .spark import start_spark, warm_up_spark
from .summary import SourceRuns, check_on_disk, describe, summary_table, write_summary
from .terminal import Steps


@dataclass
class Options:
    output: Path
    home: Path
    waves: int
    kafka_messages: int
    mqtt_messages: int
    malformed: int
    verbose: bool


def run_demo(options: Options, steps: Steps, brokers: Brokers, closers: list[Closer]) -> None:
    output = options.output
    started = time.perf_counter()

    with steps.step(f"Starting the brokers (sluice brokers up) and the topic {KAFKA_TOPIC}"):
        for leftover in brokers.up():
            steps.say(f"stopped {leftover}, left running by an earlier demo")
        for entry in brokers.entries:
            steps.say(
                f"{entry['name']}: {entry['scheme']}://{entry['host']}:{entry['port']} "
                f"(pid {entry['pid']})"
            )
        kafka_url, mqtt_url = brokers.url("kafka"), brokers.url("mqtt")
        from sluice.brokers import create_kafka_topic

        create_kafka_topic(kafka_url.split("://", 1)[1], KAFKA_TOPIC, KAFKA_PARTITIONS)

    os.environ["SLUICE_SPARK_MASTER"] = SPARK_MASTER
    airflow = AirflowKafka(kafka_url, output, options.home)
    closers.append(airflow.close)
    # Spark's JVM, `airflow db migrate` and the imports of Airflow and Dagster, side by side
    with steps.step(f"Starting Spark ({SPARK_MASTER}) and Airflow's database (sqlite)"):
        migrating = airflow.migrate()
        spark_starting = InBackground(start_spark)
        try:
            airflow.load()
            dagster = DagsterMqtt(mqtt_url, output, airflow.schema)
            closers.append(dagster.close)
            dagster.load()
            code = migrating.wait(timeout=300)
            spark = spark_starting.result(timeout=300)
            closers.append(spark.stop)
        finally:
            if migrating.poll() is None:
                migrating.kill()
                migrating.wait()
        if code != 0:
            raise DemoError(f"airflow db migrate failed (exit code {code})")
        InBackground(lambda: warm_up_spark(spark, airflow.home))
        steps.say(f"Spark {spark.version}; Airflow home {airflow.home}")
        steps.say(f"loaded the Airflow DAG {AIRFLOW_DAG} and the Dagster Definitions")

    with steps.step(f"Dagster: first tick of {DAGSTER_SENSOR} (opens its MQTT session)"):
        steps.say(f"skipped: {dagster.open_session(steps.say)}")

    kafka = SourceRuns("kafka", f"Airflow: {AIRFLOW_DAG}", output / AIRFLOW_DAG)
    mqtt = SourceRuns("mqtt", f"Dagster: {DAGSTER_JOB}", output / DAGSTER_JOB)
    for wave in range(1, options.waves + 1):
        what = f"wave {wave}/{options.waves}"
        with steps.step(f"Publishing {what}: readings to Kafka and MQTT, some malformed"):
            for url, topic, count, key in (
                (kafka_url, KAFKA_TOPIC, options.kafka_messages, "device"),
                (mqtt_url, MQTT_TOPIC, options.mqtt_messages, None),
            ):
                began = time.perf_counter()
                command = publish(url, topic, count, options.malformed, key)
                steps.say(f"{command}  ({time.perf_counter() - began:.1f} s)")

        with steps.step(f"Airflow: {AIRFLOW_DAG}.test() ({what}: sensor, then Spark ingest)"):
            result = airflow.run()
            kafka.results.append(result)
            steps.say(describe(result))

        with steps.step(f"Dagster: {DAGSTER_SENSOR} tick, then a run of {DAGSTER_JOB} ({what})"):
            request = dagster.next_request(steps.say)
            steps.say(f"run requested, run key {request.run_key}")
            result = dagster.run(request)
            mqtt.results.append(result)
            steps.say(describe(result))

    with steps.step("Iceberg: the Kafka readings again, into an Iceberg table (SQLite catalog)"):
        for line in ingest_into_iceberg(spark, kafka_url, airflow.schema, output / "iceberg"):
            steps.say(line)

    all_runs = [kafka, mqtt]
    chart = output / "ingested.png"
    with steps.step("Checking the Parquet datasets and drawing the chart"):
        for runs in all_runs:
            check_on_disk(runs)
        draw_chart(all_runs, chart)
        write_summary(all_runs, chart, output / "summary.json", time.perf_counter() - started)

    console = steps.console
    console.print()
    console.print(summary_table(all_runs))
    outputs: list[tuple[str, Path]] = []
    for runs in all_runs:
        outputs += [(f"{runs.source} dataset", runs.sink)]
        outputs += [(f"{runs.source} quarantine", runs.sink / "batch_id=*" / "_quarantine")]
    outputs += [
        ("iceberg table", output / "iceberg"),
        ("chart", chart),
        ("summary", output / "summary.json"),
    ]
    if not options.verbose:
        outputs.append(("log", output / "demo.log"))
    console.print("\nOutputs:")
    for label, path in outputs:
        console.print(f"  {label + ':':<18} {path}", highlight=False, soft_wrap=True)


def close_all(closers: list[Closer]) -> None:
    """Stop Spark, dispose of the Dagster instance, remove the Airflow home."""
    for close in reversed(closers):
        with contextlib.suppress(Exception):
            close()


def clear_outputs(output: Path) -> None:
    """Remove what an earlier run wrote to ``output`` (only the demo's own entries)."""
    output.mkdir(parents=True, exist_ok=True)
    for name in OWNED_OUTPUTS:
        target = output / name
        if target.is_dir():
            shutil.rmtree(target)
        else:
            target.unlink(missing_ok=True)


def quiet_libraries() -> None:
    """Drop the library warnings that say nothing to a demo user: Airflow's missing graphviz,
    Starlette's httpx deprecation (Airflow's in-process API client), Dagster's pointers to its
    ``dg`` tool. Python's -W / PYTHONWARNINGS still win; the tests filter nothing."""
    if sys.warnoptions:
        return
    warnings.filterwarnings("ignore", message="Could not import graphviz")
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
    warnings.filterwarnings("ignore", message=r"(?s).*superseded.*\bdg\b")
