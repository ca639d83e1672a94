"""Running a DAG with ``dag.test()`` and reading back what the run left in the database."""

from __future__ import annotations

import importlib.util
import sys
import uuid
from pathlib import Path
from typing import Any

from sqlalchemy import select

from tests.airflow_env import test_dags_folder


def load_module(path: Path) -> Any:
    """The DAG file at ``path``, imported afresh (it reads the environment at import)."""
    sys.modules.pop("_settings", None)  # the example DAGs' shared settings read the environment
    name = f"sluice_test_dag_{uuid.uuid4().hex[:8]}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load_dag(path: Path, dag_id: str) -> Any:
    """The DAG ``dag_id`` of the file at ``path``, imported afresh."""
    from airflow.sdk import DAG

    module = load_module(path)
    return next(v for v in vars(module).values() if isinstance(v, DAG) and v.dag_id == dag_id)


def write_dag(dag_id: str, source: str) -> Path:
    """A DAG file in the test bundle (``dag.test()`` needs the file inside a bundle)."""
    path = test_dags_folder() / f"{dag_id}.py"
    path.write_text(source)
    return path


def run(dag: Any, **kwargs: Any) -> tuple[Any, dict[str, str]]:
    """``dag.test()``; the run and each task's final state."""
    dag_run = dag.test(**kwargs)
    states = {ti.task_id: str(ti.state) for ti in dag_run.get_task_instances()}
    return dag_run, states


def xcoms(dag_run: Any) -> dict[str, Any]:
    """The run's XCom values by ``task_id`` (return values) or ``task_id.key``."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.scalars(
            select(XComModel).where(
                XComModel.dag_id == dag_run.dag_id, XComModel.run_id == dag_run.run_id
            )
        ).all()
        return {
            r.task_id if r.key == "return_value" else f"{r.task_id}.{r.key}": (
                XComModel.deserialize_value(r)
            )
            for r in rows
        }


def database_text(dag_run: Any) -> str:
    """Everything of the run a user can see in the UI, as text: XComs, rendered template
    fields, task instances (with their deferral kwargs), triggers and the serialized DAG."""
    from airflow.models.renderedtifields import RenderedTaskInstanceFields
    from airflow.models.serialized_dag import SerializedDagModel
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.trigger import Trigger
    from airflow.utils.session import create_session

    parts: list[str] = [repr(xcoms(dag_run))]
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
