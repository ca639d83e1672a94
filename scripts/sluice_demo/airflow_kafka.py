"""The Kafka flow: the Airflow example DAG, run with ``dag.test()``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .settings import AIRFLOW_DAG, AIRFLOW_DAG_FILE, AIRFLOW_DAGS, KAFKA_TOPIC, DemoError


class AirflowKafka:
    """The Airflow example DAG ``kafka_to_parquet`` in a private Airflow home, run with
    ``dag.test()``: its deferrable sensor returns the batch waiting on the topic, its
    SparkIngestOperator writes it to Parquet and commits the group's offsets."""

    def __init__(self, kafka_url: str, output: Path, state: Path) -> None:
        for stale in state.glob("airflow-*"):  # what a killed run left
            shutil.rmtree(stale, ignore_errors=True)
        self.home = state / f"airflow-{os.getpid()}"
        self.home.mkdir(parents=True)
        # OpenLineage: the provider's listener writes the runs' events to this file
        self.lineage = output / "openlineage.jsonl"
        self.lineage.unlink(missing_ok=True)
        host, port = kafka_url.split("://", 1)[1].rsplit(":", 1)
        # Airflow reads its configuration when it is first imported: all of it goes here.
        os.environ.update(
            {
                "AIRFLOW_HOME": str(self.home),
                "AIRFLOW__CORE__DAGS_FOLDER": str(AIRFLOW_DAGS),
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{self.home}/airflow.db",
                "AIRFLOW_CONN_SLUICE_KAFKA_DEFAULT": json.dumps(
                    {"conn_type": "sluice_kafka", "host": host, "port": int(port)}
                ),
                "SLUICE_EXAMPLE_KAFKA_TOPIC": KAFKA_TOPIC,
                "SLUICE_EXAMPLE_SINK": str(output),
                "SLUICE_EXAMPLE_SCHEDULE": "none",
                "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
                    {"type": "file", "log_file_path": str(self.lineage), "append": True}
                ),
                "AIRFLOW__OPENLINEAGE__NAMESPACE": "sluice-demo",
                # sent from a thread, not a fork of this process (it runs a JVM)
                "AIRFLOW__OPENLINEAGE__EXECUTE_IN_THREAD": "True",
            }
        )
        if "airflow" in sys.modules:
            raise DemoError("Airflow was imported before its home was set up")
        self.dag: Any = None

    def migrate(self) -> subprocess.Popen[bytes]:
        """``airflow db migrate`` in the background (it takes a few seconds)."""
        return subprocess.Popen(
            [sys.executable, "-m", "airflow", "db", "migrate"],
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C is the demo's to handle; it stops this by pid
        )

    def load(self) -> None:
        from sluice_airflow.testing import import_dag_file

        module = import_dag_file(AIRFLOW_DAGS / AIRFLOW_DAG_FILE)
        self.dag = getattr(module, AIRFLOW_DAG)
        self.schema: str = module.READING_SCHEMA  # the Spark DDL of the readings
        self._listen_for_lineage()

    def _listen_for_lineage(self) -> None:
        """``dag.test()`` runs the tasks in this process: the OpenLineage provider's listener
        joins the task runner's listeners here (a scheduler's workers load it as a plugin)."""
        try:
            from airflow.providers.openlineage.plugins.listener import get_openlineage_listener
        except ImportError:  # sluice-airflow without its openlineage extra
            return
        from airflow.sdk.listener import get_listener_manager

        manager, listener = get_listener_manager(), get_openlineage_listener()
        if not manager.pm.is_registered(listener):
            manager.add_listener(listener)

    def lineage_events(self, runs: int, timeout: float = 20.0) -> list[dict[str, Any]]:
        """The COMPLETE events of the ingest task, once there is one per run (the listener
        sends them from a thread): what each run read and wrote, as OpenLineage names it."""
        deadline = time.monotonic() + timeout
        while True:
            found = []
            if self.lineage.exists():
                for line in self.lineage.read_text().splitlines():
                    event = json.loads(line)
                    job = event.get("job", {}).get("name", "")
                    if event.get("eventType") == "COMPLETE" and job.endswith(".ingest"):
                        found.append(event)
            if len(found) >= runs or time.monotonic() >= deadline:
                return found
            time.sleep(0.2)

    def run(self) -> dict[str, Any]:
        from sluice_airflow.testing import DagRunFailed, run_dag

        run = run_dag(self.dag)
        try:
            run.raise_for_state()
        except DagRunFailed as exc:
            raise DemoError(f"Airflow: {exc}") from None
        result = run.xcom("ingest")
        if not isinstance(result, dict):
            raise DemoError(f"the Airflow task 'ingest' returned {result!r}, not a summary")
        return result

    def close(self) -> None:
        shutil.rmtree(self.home, ignore_errors=True)
