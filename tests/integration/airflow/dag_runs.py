"""DAG files the tests write and run, and everything a run left behind (``dag.test()`` runs
through :mod:`sluice_airflow.testing`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from sluice_airflow.testing import DagRunResult, load_dag_file, run_dag
from tests.airflow_env import test_dags_folder

#: What every test DAG file starts with, and the DAG a source names ``{dag}``
DAG_FILE_HEADER = "import datetime\n\nfrom airflow.sdk import DAG\n"
TEST_DAG = (
    "DAG(dag_id={dag_id!r}, schedule=None, catchup=False, "
    "start_date=datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC))"
)


def write_dag(dag_id: str, source: str) -> Path:
    """A DAG file in the test bundle (``dag.test()`` needs the file inside a bundle)."""
    path = test_dags_folder() / f"{dag_id}.py"
    path.write_text(source)
    return path


def run_test_dag(dag_id: str, source: str, **values: Any) -> DagRunResult:
    """``source`` formatted with ``values`` and ``dag`` (the DAG's constructor call: write
    ``with {dag} as dag:``; ``datetime`` and ``DAG`` are imported), written to the test bundle
    and run with ``dag.test()``."""
    source = source.format(dag=TEST_DAG.format(dag_id=dag_id), **values)
    path = write_dag(dag_id, DAG_FILE_HEADER + source)
    return run_dag(load_dag_file(path, dag_id))


def everything_seen(dag_run: Any, capfd: pytest.CaptureFixture[str]) -> dict[str, str]:
    """Where a secret could show, by name: the run in the database (:func:`database_text`),
    the test's captured output and every task log file."""
    seen = {"database": database_text(dag_run), "task output": "".join(capfd.readouterr())}
    logs = test_dags_folder().parent / "logs"
    seen.update({str(p): p.read_text(errors="replace") for p in logs.rglob("*") if p.is_file()})
    return seen


def database_text(dag_run: Any) -> str:
    """Everything of the run a user can see in the UI, as text: XComs, rendered template
    fields, task instances (with their deferral kwargs), triggers and the serialized DAG."""
    from airflow.models.renderedtifields import RenderedTaskInstanceFields
    from airflow.models.serialized_dag import SerializedDagModel
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.trigger import Trigger
    from airflow.utils.session import create_session

    parts: list[str] = [repr(DagRunResult(dag_run, {}).xcoms())]
    with create_session() as session:
        for ti in session.scalars(
            select(TaskInstance).where(
                TaskInstance.dag_id == dag_run.dag_id, TaskInstance.run_id == dag_run.run_id
            )
        ):
            parts.append(repr((ti.task_id, ti.next_kwargs, ti.next_method)))
        for fields in session.scalars(
            select(RenderedTaskInstanceFields).where(
                RenderedTaskInstanceFields.dag_id == dag_run.dag_id,
                RenderedTaskInstanceFields.run_id == dag_run.run_id,
            )
        ):
            parts.append(repr(fields.rendered_fields))
        for trigger in session.scalars(select(Trigger)):
            parts.append(repr((trigger.classpath, trigger.kwargs)))
        for serialized in session.scalars(
            select(SerializedDagModel).where(SerializedDagModel.dag_id == dag_run.dag_id)
        ):
            parts.append(repr(serialized.data))
    return "\n".join(parts)
