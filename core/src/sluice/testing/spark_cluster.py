"""Real Spark on loopback: a standalone cluster and a Spark Connect server, from pyspark's own
package (``bin/spark-class``, ``bin/spark-submit``; Java 17 on PATH or in ``JAVA_HOME``).

- :func:`start_cluster`: a master and N one-core workers, each with its own ports and work
  directory; it returns once every worker has registered (the master's ``/json`` page).
- :func:`start_connect_server`: pyspark's Spark Connect server (``sc://127.0.0.1:PORT``).
- :func:`bare_python`: a virtualenv with only what PySpark's Python workers need (pyarrow,
  pandas, numpy; the versions of this environment) and no Sluice, as a cluster would have.

Every process is stopped by its pid (a killed worker's executors with it).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

from ..brokers import HOST, BrokerError, free_port, wait_for_port
from .waiting import wait_until

__all__ = [
    "ConnectServer",
    "SparkProcess",
    "StandaloneCluster",
    "bare_python",
    "spark_home",
    "start_cluster",
    "start_connect_server",
]

#: How long the master waits for a worker's heartbeat (workers beat every quarter of it; both
#: sides must be told): short, so that a killed worker is forgotten quickly, but loose enough
#: for a busy two-core machine.
WORKER_TIMEOUT_S = 10


def spark_home() -> Path:
    """The Spark distribution inside the installed pyspark package."""
    import pyspark

    return Path(pyspark.__file__).parent


def _environment(**extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "SPARK_HOME": str(spark_home()),
        "SPARK_LOCAL_IP": HOST,
        "SPARK_DAEMON_MEMORY": "384m",
        **extra,
    }


@dataclass
class SparkProcess:
    """One JVM (master, worker or Connect server), its log and its ports."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    port: int
    webui_port: int = 0

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self, timeout: float = 20.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def kill_with_children(self) -> None:
        """SIGKILL this JVM and what it started (a worker's executors and their Python
        workers), as if the machine died."""
        children = _descendants(self.pid)
        self.proc.send_signal(signal.SIGKILL)
        for child in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
        self.proc.wait(10)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def _descendants(pid: int) -> list[int]:
    """The pids of every process below ``pid`` (Linux: read from /proc)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parent = int(stat.rpartition(")")[2].split()[1])
            parents.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _on_a_disk_of_its_own(command: list[str], directories: Sequence[str | Path]) -> list[str]:
    """``command`` run in a mount namespace of its own with an empty tmpfs over each of
    ``directories`` (``unshare``, which needs root); it still replaces the process (exec),
    so its pid is the command's."""
    unshare = shutil.which("unshare")
    if unshare is None or os.geteuid() != 0:
        raise BrokerError("a worker with a disk of its own needs root and util-linux's unshare")
    mounts = " && ".join(
        f"mount -t tmpfs sluice-own-disk {shlex.quote(str(d))}" for d in directories
    )
    script = f'{mounts} && exec "$@"'
    return [unshare, "--mount", "--propagation", "private", "sh", "-c", script, "sh", *command]


def _launch(
    name: str, command: list[str], log: Path, env: dict[str, str]
) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        # spark-class and spark-submit exec java: the pid is the JVM's.
        return subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
        )


@dataclass
class StandaloneCluster:
    """A standalone master and its workers on loopback."""

    workdir: Path
    master: SparkProcess
    workers: list[SparkProcess] = field(default_factory=list)
    _owns_workdir: bool = False

    @property
    def url(self) -> str:
        return f"spark://{HOST}:{self.master.port}"

    def state(self) -> dict[str, Any]:
        """The master's JSON status page (workers, applications)."""
        address = f"http://{HOST}:{self.master.webui_port}/json/"
        with urllib.request.urlopen(address, timeout=5) as response:
            state: dict[str, Any] = json.load(response)
        return state

    def alive_worker_ports(self) -> set[int]:
        try:
            workers = self.state()["workers"]
        except (OSError, urllib.error.URLError, ValueError):
            return set()
        return {int(w["port"]) for w in workers if w["state"] == "ALIVE"}

    def add_worker(
        self,
        cores: int = 1,
        memory: str = "1g",
        timeout: float = 60.0,
        own_disk: Sequence[str | Path] = (),
    ) -> SparkProcess:
        """Start one more worker and wait until the master has registered it. ``own_disk``:
        directories the worker and its executors see as a disk of their own, as a worker on
        another host sees its local paths (an empty file system mounted over each, in a mount
        namespace of the worker's; root only): what they write there the driver never sees."""
        number = len(self.workers) + 1
        port, webui = free_port(), free_port()
        workdir = self.workdir / f"worker-{number}"
        workdir.mkdir(parents=True, exist_ok=True)
        command = [
            str(spark_home() / "bin" / "spark-class"),
            "org.apache.spark.deploy.worker.Worker",
            *("--host", HOST, "--port", str(port), "--webui-port", str(webui)),
            *("--cores", str(cores), "--memory", memory, "--work-dir", str(workdir)),
            self.url,
        ]
        if own_disk:
            command = _on_a_disk_of_its_own(command, own_disk)
        log = self.workdir / f"worker-{number}.log"
        env = _environment(SPARK_WORKER_OPTS=f"-Dspark.worker.timeout={WORKER_TIMEOUT_S}")
        worker = SparkProcess(
            f"worker-{number}", _launch("worker", command, log, env), log, port, webui
        )
        self.workers.append(worker)
        self._wait_registered(worker, timeout)
        return worker

    def _wait_registered(self, worker: SparkProcess, timeout: float) -> None:
        def registered() -> bool:
            if worker.proc.poll() is not None:
                raise BrokerError(f"{worker.name} exited:\n{worker.log_tail()}")
            return worker.port in self.alive_worker_ports()

        wait_until(registered, timeout, 0.2, f"{worker.name} registered with {self.url}")

    @property
    def live_workers(self) -> list[SparkProcess]:
        return [w for w in self.workers if w.proc.poll() is None]

    def worker_executors(self, worker: SparkProcess) -> list[dict[str, Any]]:
        """The executors ``worker`` runs now (its JSON status page)."""
        address = f"http://{HOST}:{worker.webui_port}/json/"
        try:
            with urllib.request.urlopen(address, timeout=5) as response:
                executors: list[dict[str, Any]] = json.load(response)["executors"]
        except (OSError, urllib.error.URLError, ValueError):
            return []
        return executors

    def close(self) -> None:
        for worker in self.workers:
            worker.stop()
        self.master.stop()
        if self._owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)


def start_cluster(
    workers: int = 2, workdir: str | Path | None = None, timeout: float = 90.0
) -> StandaloneCluster:
    """A standalone master and ``workers`` one-core workers, all registered."""
    owns = workdir is None
    root = Path(workdir or tempfile.mkdtemp(prefix="sluice-spark-cluster-"))
    root.mkdir(parents=True, exist_ok=True)
    port, webui = free_port(), free_port()
    command = [
        str(spark_home() / "bin" / "spark-class"),
        "org.apache.spark.deploy.master.Master",
        *("--host", HOST, "--port", str(port), "--webui-port", str(webui)),
    ]
    options = f"-Dspark.worker.timeout={WORKER_TIMEOUT_S} -Dspark.master.rest.enabled=false"
    log = root / "master.log"
    proc = _launch("master", command, log, _environment(SPARK_MASTER_OPTS=options))
    cluster = StandaloneCluster(root, SparkProcess("master", proc, log, port, webui), [], owns)
    try:
        wait_for_port(HOST, webui, timeout, proc)
        for _ in range(workers):
            cluster.add_worker(timeout=timeout)
    except BaseException:
        tail = cluster.master.log_tail()
        cluster.close()
        if tail:
            print(f"master log:\n{tail}", file=sys.stderr)
        raise
    return cluster


@dataclass
class ConnectServer:
    """pyspark's Spark Connect server (its own local Spark) on loopback."""

    process: SparkProcess
    workdir: Path
    _owns_workdir: bool = False

    @property
    def url(self) -> str:
        return f"sc://{HOST}:{self.process.port}"

    def close(self) -> None:
        self.process.stop()
        if self._owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)


def start_connect_server(
    master: str = "local[2]",
    python: str | None = None,
    workdir: str | Path | None = None,
    timeout: float = 120.0,
    jars: Sequence[str | Path] = (),
) -> ConnectServer:
    """Start pyspark's Spark Connect server on a free port; ``python`` is the interpreter of
    its Python workers (default: this one); ``jars`` go on its class path (e.g.
    :func:`sluice.spark.connector.kafka_source_jars` for ``options.reader`` ``spark``)."""
    owns = workdir is None
    root = Path(workdir or tempfile.mkdtemp(prefix="sluice-spark-connect-"))
    root.mkdir(parents=True, exist_ok=True)
    port = free_port()
    settings = {
        "spark.connect.grpc.binding.address": HOST,
        "spark.connect.grpc.binding.port": str(port),
        "spark.driver.host": HOST,
        "spark.driver.bindAddress": HOST,
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.local.dir": str(root / "local"),
        "spark.sql.warehouse.dir": str(root / "warehouse"),
    }
    command = [
        str(spark_home() / "bin" / "spark-submit"),
        *("--class", "org.apache.spark.sql.connect.service.SparkConnectServer"),
        *("--master", master, "--name", "sluice-connect-server", "--driver-memory", "1g"),
        *[arg for key, value in settings.items() for arg in ("--conf", f"{key}={value}")],
        *(["--jars", ",".join(map(str, jars))] if jars else []),
    ]
    python = python or sys.executable
    log = root / "connect.log"
    env = _environment(PYSPARK_PYTHON=python, SPARK_CONNECT_MODE="0")
    env.pop("SPARK_DAEMON_MEMORY")
    env.pop("SPARK_REMOTE", None)
    env.pop("SPARK_CONNECT_MODE_ENABLED", None)
    proc = subprocess.Popen(
        command,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=env,
        cwd=root,
    )
    server = ConnectServer(SparkProcess("connect", proc, log, port), root, owns)
    try:
        wait_for_port(HOST, port, timeout, proc)
    except BaseException:
        tail = server.process.log_tail()
        server.close()
        raise BrokerError(f"the Spark Connect server did not start:\n{tail}") from None
    return server


def bare_python(directory: str | Path) -> Path:
    """The interpreter of a virtualenv in ``directory`` that has pyarrow, pandas and numpy
    (this environment's versions, so Arrow data moves between them) and nothing of Sluice;
    made with uv once, then reused."""
    root = Path(directory)
    python = root / "bin" / "python"
    marker = root / ".complete"
    if marker.exists():
        return python
    uv = os.environ.get("UV") or shutil.which("uv")
    if uv is None:
        raise BrokerError("uv is needed to make a bare virtualenv: pip install uv")
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([uv, "venv", "-q", "--python", base, str(root)], check=True)
    pins = [f"{name}=={version(name)}" for name in ("pyarrow", "pandas", "numpy")]
    subprocess.run([uv, "pip", "install", "-q", "--python", str(python), *pins], check=True)
    marker.touch()
    return python
