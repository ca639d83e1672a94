"""DAG files the tests write, and everything a run left in the database (``dag.test()`` runs
through :mod:`sluice_airflow.testing`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import select

from sluice_airflow.testing import DagRunResult
from tests.airflow_env import test_dags_folder


def write_dag(dag_id: str, source: str) -> Path:
    """A DAG file in the test bundle (``dag.test()`` needs the file inside a bundle)."""
    path = test_dags_folder() / f"{dag_id}.py"
    path.write_text(source)
    return path


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
