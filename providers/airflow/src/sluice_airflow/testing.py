"""Test utilities shipped beside the provider: import a DAG file and run it with ``dag.test()``;
run assets' watchers as the triggerer does (:func:`first_events`).

::

    from sluice_airflow.testing import load_dag_file, run_dag

    run = run_dag(load_dag_file(Path("dags/queue_to_parquet.py"), "kafka_to_parquet"))
    run.raise_for_state()
    print(run.xcom("ingest"))  # the IngestResult summary

Used by Sluice's own tests and by ``make demo``. Airflow must be configured (``AIRFLOW_HOME``,
a migrated database) before this module's functions run.
"""

from __future__ import annotations

import importlib.util
import signal
import sys
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = [
    "DagRunFailed",
    "DagRunResult",
    "first_events",
    "import_dag_file",
    "load_dag_file",
    "run_dag",
]


class DagRunFailed(AssertionError):
    """A DAG run did not succeed; the message names the tasks that did not."""


def import_dag_file(path: Path | str) -> ModuleType:
    """The DAG file at ``path``, imported afresh under a new module name (a DAG file reads
    the environment when it is imported)."""
    path = Path(path)
    name = f"sluice_dag_{path.stem}_{uuid.uuid4().hex[:8]}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path} is not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load_dag_file(path: Path, dag_id: str | None = None) -> Any:
    """The DAG ``dag_id`` of the file at ``path`` (imported afresh); with no ``dag_id``, the
    file's only DAG."""
    from airflow.sdk import DAG

    dags = [v for v in vars(import_dag_file(path)).values() if isinstance(v, DAG)]
    chosen = [d for d in dags if dag_id is None or d.dag_id == dag_id]
    if len(chosen) != 1:
        found = ", ".join(sorted(d.dag_id for d in dags)) or "none"
        wanted = f"DAG '{dag_id}'" if dag_id else "exactly one DAG"
        raise ValueError(f"{path} should hold {wanted}; it holds {found}")
    return chosen[0]


@dataclass(frozen=True)
class DagRunResult:
    """A finished ``dag.test()`` run: the DagRun and each task's final state."""

    dag_run: Any
    states: dict[str, str]

    @property
    def succeeded(self) -> bool:
        return str(self.dag_run.state) == "success"

    def raise_for_state(self) -> None:
        """:class:`DagRunFailed` naming the tasks that did not succeed, unless the run did."""
        if not self.succeeded:
            failed = ", ".join(f"{t} {s}" for t, s in self.states.items() if s != "success")
            raise DagRunFailed(
                f"the run {self.dag_run.run_id} of {self.dag_run.dag_id} ended "
                f"{self.dag_run.state} ({failed})"
            )

    def xcoms(self) -> dict[str, Any]:
        """The run's XCom values by ``task_id`` (return values) or ``task_id.key``."""
        from airflow.models.xcom import XComModel
        from airflow.utils.session import create_session
        from sqlalchemy import select

        with create_session() as session:
            rows = session.scalars(
                select(XComModel).where(
                    XComModel.dag_id == self.dag_run.dag_id,
                    XComModel.run_id == self.dag_run.run_id,
                )
            ).all()
            return {
                r.task_id if r.key == "return_value" else f"{r.task_id}.{r.key}": (
                    XComModel.deserialize_value(r)
                )
                for r in rows
            }

    def xcom(self, task_id: str, key: str = "return_value") -> Any:
        """One XCom value of the run (None if the task pushed none)."""
        return self.xcoms().get(task_id if key == "return_value" else f"{task_id}.{key}")


def run_dag(dag: Any, **test_kwargs: Any) -> DagRunResult:
    """``dag.test(**test_kwargs)``, then the run and its tasks' final states. The signal
    handlers the task runner may install are put back as they were."""
    handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    try:
        dag_run = dag.test(**test_kwargs)
    finally:
        signal.signal(signal.SIGINT, handlers[0])
        signal.signal(signal.SIGTERM, handlers[1])
    states = {ti.task_id: str(ti.state) for ti in dag_run.get_task_instances()}
    return DagRunResult(dag_run, states)


def first_events(assets: Sequence[Any], timeout: float = 60.0) -> dict[str, Any]:
    """Run the watchers of ``assets`` (Airflow ``Asset`` objects with one ``AssetWatcher``
    each) as the triggerer does, each trigger made again from its ``serialize()``, until the
    first batch is out: the payload (a ``BatchSpec`` dict) each asset got, by asset name; the
    assets the batch did not wake are left out. Routed watchers
    (:class:`~sluice_airflow.triggers.routed.RoutedMessageTrigger`) share one poller, which
    tells every route of a batch in one step: this returns once every watcher has joined it
    and the batch's events are out. ``TimeoutError`` when nothing is emitted in ``timeout``
    seconds."""
    import asyncio

    from .triggers.routed import shared_pollers

    triggers = {}
    for asset in assets:
        (watcher,) = asset.watchers
        _, kwargs = watcher.trigger.serialize()
        triggers[asset.name] = type(watcher.trigger)(**kwargs)

    async def run() -> dict[str, Any]:
        runs = {name: trigger.run() for name, trigger in triggers.items()}
        waiting = {asyncio.ensure_future(anext(r)): name for name, r in runs.items()}
        try:
            async with asyncio.timeout(timeout):
                await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                routed = sum(1 for t in triggers.values() if hasattr(t, "place"))
                # a watcher still starting joins the poller a moment later, and then gets the
                # batch in flight if its route is in it
                while sum(len(p.subscribers) for p in shared_pollers()) < routed and not any(
                    t.done() and t.exception() for t in waiting
                ):
                    await asyncio.sleep(0.01)
            for _ in range(10):  # the batch's other events are one step away
                await asyncio.sleep(0)
            return {
                waiting[task]: task.result().payload
                for task in waiting
                if task.done() and not task.cancelled()
            }
        finally:
            for task in waiting:
                task.cancel()
            await asyncio.wait(waiting)
            for r in runs.values():
                await r.aclose()

    return asyncio.run(run())
