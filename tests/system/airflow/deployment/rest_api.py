"""The api-server's REST API v2, as the deployment's methods (the simple auth manager treats
everyone as admin)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any

from sluice.testing import wait_until

from .process import DeploymentError

__all__ = ["RestApi"]


class RestApi:
    """REST calls for a deployment that has ``base_url``, ``check_alive()`` and
    ``task_log()`` (see :class:`~tests.system.airflow.deployment.AirflowDeployment`)."""

    _token: str | None

    @property
    def base_url(self) -> str:
        raise NotImplementedError

    def check_alive(self) -> None:
        raise NotImplementedError

    def task_log(self, ti: Mapping[str, Any], lines: int = 30) -> str:
        raise NotImplementedError

    def token(self) -> str:
        if self._token is None:
            self._token = str(self.api("GET", "/auth/token", auth=False)["access_token"])
        return self._token

    def api(self, method: str, path: str, body: Any = None, auth: bool = True) -> Any:
        """Call the api-server; the decoded JSON answer (DeploymentError on an HTTP error)."""
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if auth:
            headers["Authorization"] = f"Bearer {self.token()}"
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.base_url + path, data=data, method=method, headers=headers
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            raise DeploymentError(f"{method} {path}: HTTP {exc.code}: {detail}") from None
        return json.loads(raw) if raw else None

    def wait_for_dags(self, dag_ids: Sequence[str], timeout: float = 120.0) -> None:
        """Wait until the dag processor has parsed ``dag_ids``; a DAG file that does not
        import fails at once, with its import error."""

        def parsed() -> bool:
            self.check_alive()
            errors = self.api("GET", "/api/v2/importErrors")["import_errors"]
            if errors:
                raise DeploymentError(f"DAG import errors: {json.dumps(errors, indent=1)}")
            found = {d["dag_id"] for d in self.api("GET", "/api/v2/dags?limit=100")["dags"]}
            return set(dag_ids) <= found

        wait_until(parsed, timeout, interval=1.0, message=f"DAGs {list(dag_ids)} parsed")

    def unpause(self, dag_id: str) -> None:
        self.api("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})

    def pause(self, dag_id: str) -> None:
        self.api("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": True})

    def trigger_dag(self, dag_id: str, conf: Mapping[str, Any] | None = None) -> str:
        body = {"logical_date": None, "conf": dict(conf or {})}
        return str(self.api("POST", f"/api/v2/dags/{dag_id}/dagRuns", body)["dag_run_id"])

    def dag_runs(self, dag_id: str) -> list[dict[str, Any]]:
        answer = self.api("GET", f"/api/v2/dags/{dag_id}/dagRuns?limit=100")
        return list(answer["dag_runs"])

    def task_instance(self, dag_id: str, run_id: str, task_id: str) -> dict[str, Any]:
        path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}"
        return dict(self.api("GET", path))

    def xcom(self, dag_id: str, run_id: str, task_id: str, key: str = "return_value") -> Any:
        path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/{key}"
        return self.api("GET", path)["value"]

    def pool(self, name: str = "default_pool") -> dict[str, Any]:
        return dict(self.api("GET", f"/api/v2/pools/{name}"))

    def wait_for_run(self, dag_id: str, run_id: str, timeout: float = 180.0) -> str:
        """Wait until the run finishes; its final state ('success' or 'failed')."""

        def finished() -> str | None:
            self.check_alive()
            state = self.api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")["state"]
            return str(state) if state in ("success", "failed") else None

        state = wait_until(finished, timeout, interval=1.0, message=f"run {dag_id}/{run_id} done")
        assert state is not None
        return state

    def wait_for_task_state(
        self, dag_id: str, run_id: str, task_id: str, states: Sequence[str], timeout: float = 120.0
    ) -> dict[str, Any]:
        """Wait until the task instance is in one of ``states``; it, as the API shows it."""

        def reached() -> dict[str, Any] | None:
            self.check_alive()
            try:
                ti = self.task_instance(dag_id, run_id, task_id)
            except DeploymentError:
                return None  # the run's task instances are not created yet
            if ti["state"] in states:
                return ti
            if ti["state"] in ("failed", "upstream_failed") and "failed" not in states:
                raise DeploymentError(f"{dag_id}.{task_id} {ti['state']}:\n{self.task_log(ti)}")
            return None

        ti = wait_until(
            reached, timeout, interval=0.5, message=f"{dag_id}.{task_id} in {list(states)}"
        )
        assert ti is not None
        return ti
