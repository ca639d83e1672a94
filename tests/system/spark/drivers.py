"""Spark drivers of their own: ``python -m tests.system.spark.drivers KIND JOB_JSON``.

A process holds one SparkSession, and a Spark Connect client changes how the whole process
creates sessions, so every cluster or Connect ingest runs in a child process like a user's
driver would. KIND is ``python`` (``spark_session`` + ``ingest``), ``airflow``
(``SparkIngestOperator.execute``) or ``dagster`` (``make_ingest_job`` with ``SparkResource``).
JOB_JSON: master, conf, ship, source, sink, schema, mode, chunk_size and spec (a BatchSpec
dict; or ``specs``, a list: each ingested in turn, on one session). The results are printed
as one JSON list on the last line of stdout.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def run_python(job: dict[str, Any]) -> list[dict[str, Any]]:
    from sluice.spark import ingest, spark_session

    spark = spark_session(
        job["master"],
        "sluice-system-test",
        job.get("conf"),
        ship_sluice=job.get("ship", False),
        kafka_source=job.get("kafka_source", False),
    )
    results = [
        ingest(
            spark,
            spec,
            sink,
            source=job["source"],
            schema=job.get("schema"),
            mode=mode,
            chunk_size=job.get("chunk_size", 100_000),
        ).to_dict()
        for spec, sink, mode in _jobs(job)
    ]
    spark.stop()
    return results


def _jobs(job: dict[str, Any]) -> list[tuple[dict[str, Any], str, Any]]:
    specs = job.get("specs") or [job["spec"]]
    sinks = job.get("sinks") or [job["sink"]]
    modes = job.get("modes") or [job.get("mode", "executors")] * len(specs)
    return list(zip(specs, sinks, modes, strict=True))


def run_airflow(job: dict[str, Any]) -> list[dict[str, Any]]:
    import os

    from tests.airflow_env import configure

    configure()
    from sluice_airflow.operators.spark import SparkIngestOperator

    os.environ["AIRFLOW_CONN_SLUICE_SYSTEM"] = json.dumps(job["connection"])
    results = []
    for number, (spec, sink, mode) in enumerate(_jobs(job)):
        task = SparkIngestOperator(
            task_id=f"ingest_{number}",
            conn_id="sluice_system",
            sink=sink,
            batch=spec,
            schema=job.get("schema"),
            mode=mode,
            spark_master=job["master"],
            spark_conf=job.get("conf"),
            submit=job.get("submit", False),
        )
        result = task.execute({})  # type: ignore[arg-type]
        assert isinstance(result, dict)
        results.append(result)
    return results


def run_dagster(job: dict[str, Any]) -> list[dict[str, Any]]:
    from sluice_dagster import KafkaQueueResource, SparkResource, make_ingest_job
    from sluice_dagster.ops import ingest_run_config

    results = []
    spark = SparkResource(
        master=job["master"], conf=job.get("conf") or {}, ship_sluice=job.get("ship", False)
    )
    for number, (spec, sink, mode) in enumerate(_jobs(job)):
        name = f"system_{number}"
        queue = KafkaQueueResource(
            bootstrap=job["bootstrap"], topic=spec["topic"], group_id=spec["group_id"]
        )
        ingest_job = make_ingest_job(name, "queue", sink, schema=job.get("schema"), mode=mode)
        done = ingest_job.execute_in_process(
            run_config=ingest_run_config(_spec(spec), f"{name}_ingest"),
            resources={"queue": queue, "spark": spark},
        )
        assert done.success
        outputs = [e for e in done.events_for_node(f"{name}_ingest") if e.is_successful_output]
        metadata = outputs[0].step_output_data.metadata
        results.append({key: value.value for key, value in metadata.items()})
    return results


def _spec(spec: dict[str, Any]) -> Any:
    from sluice.batch import BatchSpec

    return BatchSpec.from_dict(spec)


RUNNERS = {"python": run_python, "airflow": run_airflow, "dagster": run_dagster}

if __name__ == "__main__":
    kind, text = sys.argv[1], sys.argv[2]
    print(json.dumps(RUNNERS[kind](json.loads(text)), default=str), flush=True)
