"""What a deployment left behind, for a test to look at: task logs, failed tasks, the
processes running a task and the files holding a text."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import psutil

from .process import ComponentProcess, DeploymentError, readable, tail

__all__ = ["Inspection"]


class Inspection:
    """For a deployment that has ``home``, ``logs_folder``, ``components`` and ``sql()`` (see
    :class:`~tests.system.airflow.deployment.AirflowDeployment`)."""

    home: Path
    components: dict[str, ComponentProcess]

    @property
    def logs_folder(self) -> Path:
        return self.home / "logs"

    def sql(
        self, query: str, params: Sequence[Any] | Mapping[str, Any] = ()
    ) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def task_log(self, ti: Mapping[str, Any], lines: int = 30) -> str:
        """The end of a task's log files (worker and triggerer parts), readably."""
        folder = (
            self.logs_folder / f"dag_id={ti['dag_id']}" / f"run_id={ti['dag_run_id']}"
        ) / f"task_id={ti['task_id']}"
        files = sorted(folder.rglob("*.log")) if folder.exists() else []
        parts = []
        for path in files:
            text = "\n".join(readable(line) for line in tail(path, lines).splitlines())
            parts.append(f"--- {path.name}\n{text}")
        return "\n".join(parts) or "(no task log)"

    def check_no_failed_tasks(self, dag_id: str) -> None:
        """Raise, with the task's log, if a task of ``dag_id`` failed (a continuous DAG goes
        on to its next run, which would hide it)."""
        failed = self.sql(
            "SELECT task_id, run_id FROM task_instance WHERE dag_id = %s AND state = 'failed'",
            (dag_id,),
        )
        if failed:
            task_id, run_id = failed[0]
            log = self.task_log({"dag_id": dag_id, "dag_run_id": run_id, "task_id": task_id})
            # Why the scheduler failed it, where it did (e.g. an event "state mismatch").
            events = self.sql(
                "SELECT dttm, event, extra FROM log WHERE dag_id = %s AND task_id = %s "
                "AND run_id = %s ORDER BY dttm",
                (dag_id, task_id, run_id),
            )
            audit = "\n".join(f"{when} {event}: {extra}" for when, event, extra in events)
            raise DeploymentError(
                f"{dag_id}.{task_id} failed in run {run_id}:\n{log}\n--- audit log\n{audit}"
            )

    def processes_mentioning(self, text: str) -> list[str]:
        """``pid: command line`` of this deployment's processes whose title contains ``text``."""
        found = []
        for component in self.components.values():
            for proc in component.processes():
                try:
                    cmdline = " ".join(proc.cmdline())
                except psutil.Error:
                    continue
                if text in cmdline:
                    found.append(f"{proc.pid}: {cmdline}")
        return found

    @staticmethod
    def files_under(*roots: Path) -> Iterator[Path]:
        for root in roots:
            if root.exists():
                yield from (p for p in root.rglob("*") if p.is_file())

    def files_containing(self, text: str, *roots: Path) -> list[Path]:
        """Files under ``roots`` (default: AIRFLOW_HOME) whose bytes contain ``text``."""
        needle = text.encode()
        return [p for p in self.files_under(*(roots or (self.home,))) if needle in p.read_bytes()]
