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
from typing import Any

from .airflow_kafka import AirflowKafka
from .background import InBackground
from .brokers import Brokers, publish
from .chart import draw_chart, import_matplotlib
from .dagster_mqtt import DagsterMqtt
from .iceberg import GROUP as ICEBERG_GROUP
from .iceberg import WAREHOUSE, IcebergLake
from .lag import CountedLag, LagSampler
from .settings import (
    AIRFLOW_DAG,
    AIRFLOW_GROUP,
    DAGSTER_JOB,
    DAGSTER_SENSOR,
    KAFKA_PARTITIONS,
    KAFKA_TOPIC,
    MQTT_TOPIC,
    OWNED_OUTPUTS,
    S3_BUCKET,
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
    # Spark's JVM, `airflow db migrate`, the S3 server and the imports of Airflow and
    # Dagster, side by side
    with steps.step(
        f"Starting Spark ({SPARK_MASTER}), Airflow's database (sqlite) and the S3 server "
        "(sluice brokers up --s3)"
    ):
        migrating = airflow.migrate()
        spark_starting = InBackground(start_spark)
        s3_starting = InBackground(brokers.up_s3)
        InBackground(import_matplotlib)  # the chart's seconds of imports, meanwhile
        try:
            airflow.load()
            dagster = DagsterMqtt(mqtt_url, output, airflow.schema)
            closers.append(dagster.close)
            dagster.load()
            code = migrating.wait(timeout=300)
            spark = spark_starting.result(timeout=300)
            closers.append(spark.stop)
            s3_endpoint = s3_starting.result(timeout=120)
        finally:
            if migrating.poll() is None:
                migrating.kill()
                migrating.wait()
        if code != 0:
            raise DemoError(f"airflow db migrate failed (exit code {code})")
        InBackground(lambda: warm_up_spark(spark, airflow.home))
        steps.say(f"Spark {spark.version}; Airflow home {airflow.home}")
        steps.say(f"loaded the Airflow DAG {AIRFLOW_DAG} and the Dagster Definitions")
        steps.say(f"S3 (SeaweedFS): {s3_endpoint}, bucket s3://{S3_BUCKET}")

    with steps.step(f"Dagster: first tick of {DAGSTER_SENSOR} (opens its MQTT session)"):
        steps.say(f"skipped: {dagster.open_session(steps.say)}")

    from sluice.cli.brokers import S3_ACCESS_KEY, S3_SECRET_KEY

    lake = IcebergLake(output / "iceberg", s3_endpoint, S3_ACCESS_KEY, S3_SECRET_KEY)
    closers.append(lake.close)
    sampler = LagSampler(
        kafka_url.split("://", 1)[1],
        KAFKA_TOPIC,
        {
            f"kafka, Airflow's group {AIRFLOW_GROUP}": AIRFLOW_GROUP,
            f"kafka, the Iceberg table's group {ICEBERG_GROUP}": ICEBERG_GROUP,
        },
        started,
    ).start()
    mqtt_lag = CountedLag(sampler)
    kafka = SourceRuns("kafka", f"Airflow: {AIRFLOW_DAG}", output / AIRFLOW_DAG)
    mqtt = SourceRuns("mqtt", f"Dagster: {DAGSTER_JOB}", output / DAGSTER_JOB)
    iceberg = SourceRuns("iceberg", "ingest()", output / "iceberg")
    try:
        for wave in range(1, options.waves + 1):
            flows = Flows(kafka_url, mqtt_url, airflow, dagster, spark, lake, mqtt_lag)
            kafka_result, mqtt_result = run_wave(wave, options, steps, flows)
            kafka.results.append(kafka_result)
            mqtt.results.append(mqtt_result)
        iceberg.results = lake.results
    finally:
        sampler.stop()

    all_runs = [kafka, mqtt]
    chart = output / "ingested.png"
    with steps.step(f"Iceberg: the table's snapshots, read back from {WAREHOUSE}"):
        for line in lake.snapshot_lines():
            steps.say(line)
        snapshots = lake.snapshots()
        table_rows = lake.rows()
        if table_rows != iceberg.total("written"):
            raise DemoError(
                f"the Iceberg table holds {table_rows} rows, the ingests reported "
                f"{iceberg.total('written')}"
            )
        steps.say(f"{table_rows:,} rows; metadata at {lake.metadata_location()}")

    with steps.step("OpenLineage: what the Airflow runs told a lineage backend"):
        events = airflow.lineage_events(options.waves)
        if not events:
            steps.say("no events (install sluice-airflow[openlineage] to emit them)")
        for line in lineage_lines(events):
            steps.say(line)

    with steps.step("Checking the Parquet datasets and drawing the chart"):
        for runs in all_runs:
            check_on_disk(runs)
        lag = {
            **sampler.series,
            "mqtt, Dagster's session (counted: brokers do not tell)": (mqtt_lag.points),
        }
        draw_chart([*all_runs, iceberg], lag, snapshots, chart)
        write_summary(
            all_runs,
            chart,
            output / "summary.json",
            time.perf_counter() - started,
            iceberg={
                "table": lake.sink,
                "warehouse": WAREHOUSE,
                "rows": table_rows,
                "batch_ids": [r["batch_id"] for r in iceberg.results],
                "snapshots": [s.to_dict() for s in snapshots],
            },
            lag={label: [[round(t, 2), n] for t, n in points] for label, points in lag.items()},
        )

    console = steps.console
    console.print()
    console.print(summary_table([*all_runs, iceberg]))
    outputs: list[tuple[str, Path]] = []
    for runs in all_runs:
        outputs += [(f"{runs.source} dataset", runs.sink)]
        outputs += [(f"{runs.source} quarantine", runs.sink / "batch_id=*" / "_quarantine")]
    outputs += [
        ("iceberg catalog", output / "iceberg" / "catalog.db"),
        ("lineage events", airflow.lineage),
        ("chart", chart),
        ("summary", output / "summary.json"),
    ]
    if not options.verbose:
        outputs.append(("log", output / "demo.log"))
    console.print("\nOutputs:")
    for label, path in outputs:
        console.print(f"  {label + ':':<18} {path}", highlight=False, soft_wrap=True)
    console.print(
        f"  {'iceberg data:':<18} {WAREHOUSE} on the demo's S3 server (removed with it)",
        highlight=False,
        soft_wrap=True,
    )


@dataclass
class Flows:
    """What a wave runs on."""

    kafka_url: str
    mqtt_url: str
    airflow: AirflowKafka
    dagster: DagsterMqtt
    spark: Any
    lake: IcebergLake
    mqtt_lag: CountedLag


def lineage_lines(events: list[dict[str, Any]]) -> list[str]:
    """One line per COMPLETE event: the job, its input topics and output datasets with
    their row counts, and the batch it ingested."""

    def named(dataset: dict[str, Any], facets: str, statistics: str) -> str:
        rows = dataset.get(facets, {}).get(statistics, {}).get("rowCount")
        counted = f" ({rows} rows)" if rows is not None else ""
        return f"{dataset['namespace']}/{dataset['name']}{counted}"

    lines = []
    for event in events:
        inputs = ", ".join(named(d, "inputFacets", "inputStatistics") for d in event["inputs"])
        outputs = ", ".join(named(d, "outputFacets", "outputStatistics") for d in event["outputs"])
        batches = event["run"]["facets"].get("sluice_batch", {}).get("batches", [])
        ids = ", ".join(b["batch_id"] for b in batches)
        lines.append(f"{event['job']['name']}: {inputs} -> {outputs}; batch {ids}")
    return lines


def run_wave(
    wave: int, options: Options, steps: Steps, flows: Flows
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Publish a wave, ingest it with Airflow (Kafka to Parquet), into the Iceberg table
    (Kafka again, its own group) and with Dagster (MQTT to Parquet); returns what the Airflow
    and the Dagster run reported."""
    what = f"wave {wave}/{options.waves}"
    kafka_url, mqtt_url = flows.kafka_url, flows.mqtt_url
    with steps.step(f"Publishing {what}: readings to Kafka and MQTT, some malformed"):
        for url, topic, count, key in (
            (kafka_url, KAFKA_TOPIC, options.kafka_messages, "device"),
            (mqtt_url, MQTT_TOPIC, options.mqtt_messages, None),
        ):
            began = time.perf_counter()
            command = publish(url, topic, count, options.malformed, key)
            steps.say(f"{command}  ({time.perf_counter() - began:.1f} s)")
        flows.mqtt_lag.published(options.mqtt_messages)

    with steps.step(f"Airflow: {AIRFLOW_DAG}.test() ({what}: sensor, then Spark ingest)"):
        kafka_result = flows.airflow.run()
        steps.say(describe(kafka_result))

    with steps.step(f"Iceberg: {what} of the Kafka readings into demo.readings (on S3)"):
        for line in flows.lake.ingest(flows.spark, kafka_url, flows.airflow.schema):
            steps.say(line)

    with steps.step(f"Dagster: {DAGSTER_SENSOR} tick, then a run of {DAGSTER_JOB} ({what})"):
        request = flows.dagster.next_request(steps.say)
        steps.say(f"run requested, run key {request.run_key}")
        mqtt_result = flows.dagster.run(request)
        flows.mqtt_lag.read(int(mqtt_result["read"]))
        steps.say(describe(mqtt_result))
    return kafka_result, mqtt_result


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
