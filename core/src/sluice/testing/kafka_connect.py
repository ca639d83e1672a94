"""A Kafka Connect worker of Apache Kafka's own (``org.apache.kafka:connect-runtime``, the
release of :data:`sluice.brokers.KAFKA_VERSION`) as a JVM on a free loopback port, for tests
and benchmarks that need a real connector (Debezium's, :mod:`.debezium_postgres`).

Its jars and each plugin's come from Maven Central through :mod:`sluice.jars` (pinned
coordinates, one cache). A plugin (:class:`ConnectPlugin`) is a set of coordinates laid out
as one directory of ``plugin.path`` (links to the cached jars), so Connect loads it in its own
class loader, as it would a plugin unpacked from an archive; the jars the worker itself has
(Kafka's clients, Connect's API, slf4j, Jackson) are left out of it.

The worker runs in distributed mode: the connectors' configurations, their source offsets
and their status live in Kafka topics of the worker's group, not in the worker's files. So a
worker killed by SIGKILL and started again (:meth:`ConnectWorker.kill`,
:meth:`ConnectWorker.restart`) resumes its connectors by itself from the offsets it last
committed to Kafka, the way a production deployment runs, and a connector is created once
over the REST API, whatever happens to the process afterwards. (Standalone mode keeps
offsets in a local file and takes connector configurations on its command line.)
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import jars
from ..brokers import (
    HOST,
    KAFKA_JVM_OPTIONS,
    KAFKA_VERSION,
    LOG4J_VERSION,
    BrokerProcess,
    free_port,
)
from .waiting import wait_until

__all__ = [
    "CONNECT_COORDINATES",
    "JSON_CONVERTER",
    "ConnectError",
    "ConnectPlugin",
    "ConnectWorker",
    "connect_classpath",
    "connect_coordinates",
    "start_connect",
]


def connect_coordinates(version: str = KAFKA_VERSION) -> tuple[str, ...]:
    """The worker's own jars of Apache Kafka ``version``: the runtime, the JSON converter and
    the built-in transforms, and a logging binding (Connect logs through slf4j 1.x)."""
    return (
        f"org.apache.kafka:connect-runtime:{version}",
        f"org.apache.kafka:connect-json:{version}",
        f"org.apache.kafka:connect-transforms:{version}",
        f"org.apache.logging.log4j:log4j-slf4j-impl:{LOG4J_VERSION}",
    )


CONNECT_COORDINATES = connect_coordinates()
JSON_CONVERTER = "org.apache.kafka.connect.json.JsonConverter"
_LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
logger.kafka.name = org.apache.kafka
logger.kafka.level = WARN
logger.connect.name = org.apache.kafka.connect
logger.connect.level = INFO
logger.reflections.name = org.reflections
logger.reflections.level = ERROR
"""


class ConnectError(RuntimeError):
    """The worker or a connector did not do what was asked; the message says what it said."""


@dataclass(frozen=True)
class ConnectPlugin:
    """A Connect plugin: its directory name under ``plugin.path`` and the pinned Maven
    coordinates of its jars (their dependencies are resolved too). ``kafka_version``: the
    Apache Kafka release whose Connect runtime it needs, if not the broker's."""

    name: str
    coordinates: tuple[str, ...]
    kafka_version: str = KAFKA_VERSION


def _artifact(path: Path) -> tuple[str, str]:
    """(organisation, module) of a jar in Ivy's cache (``<org>/<module>/jars/<file>``)."""
    parts = path.parts
    return parts[-4], parts[-3]


def _plugin_dirs(root: Path, plugins: Sequence[ConnectPlugin], worker: Sequence[Path]) -> None:
    """Lay out each plugin as a directory of links to its cached jars, without the jars the
    worker's class path has (a plugin's class loader finds those in the worker's)."""
    own = {_artifact(j) for j in worker}
    for plugin in plugins:
        try:
            found = jars.resolve(plugin.coordinates)
        except jars.JarError as exc:
            raise ConnectError(f"Connect plugin {plugin.name}: {exc}") from None
        where = root / plugin.name
        shutil.rmtree(where, ignore_errors=True)
        where.mkdir(parents=True)
        for jar in found:
            if _artifact(jar) not in own:
                (where / jar.name).symlink_to(jar)


def _worker_properties(
    bootstrap: str, port: int, group: str, plugins: Path, extra: Mapping[str, str]
) -> str:
    settings = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "config.storage.topic": f"{group}.configs",
        "offset.storage.topic": f"{group}.offsets",
        "status.storage.topic": f"{group}.status",
        # -1: the broker's default.replication.factor (1 on one node, 3 on a cluster)
        "config.storage.replication.factor": "-1",
        "offset.storage.replication.factor": "-1",
        "status.storage.replication.factor": "-1",
        "offset.storage.partitions": "1",
        "status.storage.partitions": "1",
        "offset.flush.interval.ms": "1000",
        # A restarted worker is a new group member: the dead one's tasks wait out the
        # session timeout, then (with no scheduled delay) go to it at once.
        "scheduled.rebalance.max.delay.ms": "0",
        "session.timeout.ms": "6000",
        "heartbeat.interval.ms": "1000",
        "key.converter": JSON_CONVERTER,
        "value.converter": JSON_CONVERTER,
        "listeners": f"http://{HOST}:{port}",
        "rest.advertised.host.name": HOST,
        "rest.advertised.port": str(port),
        "plugin.path": str(plugins),
        "plugin.discovery": "hybrid_warn",
        **extra,
    }
    return "".join(f"{k}={v}\n" for k, v in settings.items())


@dataclass
class ConnectWorker:
    """One Connect worker process we started, its REST API at :attr:`url`."""

    process: BrokerProcess
    group: str
    plugins: tuple[ConnectPlugin, ...] = ()
    _owns_workdir: bool = field(default=False, repr=False)

    @property
    def url(self) -> str:
        return f"http://{self.process.host}:{self.process.port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid

    # -- the process --------------------------------------------------------------------

    def start(self, timeout: float = 120.0) -> ConnectWorker:
        """Start the worker (again) and wait until its REST API answers."""
        self.process.spawn()
        try:
            wait_until(self._serving, timeout, 0.2, f"Kafka Connect's REST API at {self.url}")
        except (TimeoutError, ConnectError) as exc:
            self.process.stop()
            raise ConnectError(f"{exc}. Its log:\n{self.process.log_tail(40)}") from None
        return self

    def _serving(self) -> bool:
        if self.process._proc is None or self.process._proc.poll() is not None:
            raise ConnectError("the Kafka Connect worker exited")
        try:
            self.request("GET", "/connectors")
        except ConnectError:
            return False
        return True

    def stop(self) -> None:
        """Stop the worker gracefully (SIGTERM: it commits its offsets and leaves the group)."""
        self.process.stop(signal.SIGTERM, timeout=30.0)

    def kill(self) -> None:
        """Stop the worker abruptly (SIGKILL): what it sent but did not commit is sent again."""
        self.process.kill()

    def restart(self, timeout: float = 120.0) -> ConnectWorker:
        """Start the worker again after :meth:`kill` or :meth:`stop` (same port, same group)."""
        self.process.stop()
        return self.start(timeout)

    def close(self) -> None:
        self.process.stop()
        if self._owns_workdir:
            shutil.rmtree(self.process.workdir, ignore_errors=True)

    def __enter__(self) -> ConnectWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the REST API -------------------------------------------------------------------

    def request(self, method: str, path: str, body: Any = None, timeout: float = 30.0) -> Any:
        """One REST call; its JSON answer (None if empty). Raises :class:`ConnectError`
        with the worker's message on an HTTP error."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        req.add_header("Accept", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as answer:
                text = answer.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            raise ConnectError(f"{method} {path}: HTTP {exc.code}: {detail}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise ConnectError(f"{method} {path}: {exc}") from None
        return json.loads(text) if text.strip() else None

    def put_connector(self, name: str, config: Mapping[str, str], timeout: float = 60.0) -> Any:
        """Create the connector ``name`` with ``config`` (or replace its configuration),
        retrying while the worker's group rebalances (HTTP 409)."""
        path = f"/connectors/{name}/config"
        body = {k: str(v) for k, v in config.items()}
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.request("PUT", path, body)
            except ConnectError as exc:
                if "HTTP 409" not in str(exc) or time.monotonic() >= deadline:
                    raise
                time.sleep(0.5)

    def delete_connector(self, name: str) -> None:
        self.request("DELETE", f"/connectors/{name}")

    def status(self, name: str) -> dict[str, Any]:
        """The connector's status: ``connector.state`` and each task's ``state`` (and
        ``trace`` when it failed)."""
        found: dict[str, Any] = self.request("GET", f"/connectors/{name}/status")
        return found

    def offsets(self, name: str) -> list[dict[str, Any]]:
        """The source offsets Connect has committed for the connector (its offsets topic):
        ``{"partition": ..., "offset": ...}`` each."""
        found: dict[str, Any] = self.request("GET", f"/connectors/{name}/offsets")
        entries: list[dict[str, Any]] = found.get("offsets") or []
        return entries

    def pause(self, name: str) -> None:
        """Pause the connector: its tasks keep their partitions and stop consuming."""
        self.request("PUT", f"/connectors/{name}/pause")

    def resume(self, name: str) -> None:
        """Resume a paused connector: its tasks go on from where they stopped."""
        self.request("PUT", f"/connectors/{name}/resume")

    def restart_connector(self, name: str, only_failed: bool = True) -> None:
        """Restart the connector and its (failed) tasks."""
        failed = "true" if only_failed else "false"
        self.request("POST", f"/connectors/{name}/restart?includeTasks=true&onlyFailed={failed}")

    def wait_running(self, name: str, tasks: int = 1, timeout: float = 120.0) -> dict[str, Any]:
        """Wait until the connector and ``tasks`` tasks run; a failed one raises with its
        trace."""

        def running() -> dict[str, Any] | None:
            try:
                found = self.status(name)
            except ConnectError:
                return None  # not known yet (404), or the worker is rebalancing
            states = [found["connector"]["state"], *(t["state"] for t in found["tasks"])]
            for task in found["tasks"]:
                if task["state"] == "FAILED":
                    raise ConnectError(f"{name} task {task['id']} failed:\n{task.get('trace')}")
            if found["connector"]["state"] == "FAILED":
                raise ConnectError(f"{name} failed:\n{found['connector'].get('trace')}")
            ok = len(found["tasks"]) >= tasks and all(s == "RUNNING" for s in states)
            return found if ok else None

        try:
            found = wait_until(running, timeout, 0.2, f"connector {name} to run")
        except TimeoutError as exc:
            raise ConnectError(f"{exc}. The worker's log:\n{self.process.log_tail(40)}") from None
        assert found is not None
        return found


def connect_classpath(version: str = KAFKA_VERSION) -> list[Path]:
    """The jars of the worker of Apache Kafka ``version`` from the cache, resolved
    (downloaded) the first time."""
    try:
        return jars.resolve(connect_coordinates(version))
    except jars.JarError as exc:
        raise ConnectError(f"Kafka Connect {version}: {exc}") from None


def _runtime_version(plugins: Sequence[ConnectPlugin], version: str | None) -> str:
    """The Connect release to run: ``version``, else the one the plugins need (they must
    agree), else the broker's."""
    if version is not None:
        return version
    wanted = {p.kafka_version for p in plugins}
    if len(wanted) > 1:
        raise ConnectError(
            "the plugins need different Kafka Connect releases: "
            + ", ".join(f"{p.name} {p.kafka_version}" for p in plugins)
            + "; run them in workers of their own"
        )
    return wanted.pop() if wanted else KAFKA_VERSION


def start_connect(
    bootstrap: str,
    plugins: Sequence[ConnectPlugin] = (),
    *,
    port: int | None = None,
    workdir: str | Path | None = None,
    group: str | None = None,
    properties: Mapping[str, str] | None = None,
    version: str | None = None,
    environment: Mapping[str, str] | None = None,
    timeout: float = 180.0,
) -> ConnectWorker:
    """A Kafka Connect worker in distributed mode on a free loopback port, its group
    ``group`` (a fresh one by default) on the Kafka at ``bootstrap``, with ``plugins`` on its
    plugin path; returns once its REST API answers. ``properties``: worker settings that
    replace or add to the defaults (converters, timeouts). ``version``: the Apache Kafka
    release of the worker (default: the one the plugins need, else
    :data:`sluice.brokers.KAFKA_VERSION`). ``environment``: variables added to the worker's
    environment (a plugin's secrets, e.g. ``AWS_*`` keys: never on its command line or in a
    connector's configuration, which the REST API shows)."""
    try:
        java = jars.find_java()
    except jars.JarError as exc:
        raise ConnectError(f"Kafka Connect needs Java: {exc}") from None
    classpath = connect_classpath(_runtime_version(plugins, version))
    port = port or free_port()
    group = group or f"sluice-connect-{uuid.uuid4().hex[:8]}"
    if workdir is None:
        import tempfile

        path, owns = Path(tempfile.mkdtemp(prefix="sluice-connect-")), True
    else:
        path, owns = Path(workdir), False
        path.mkdir(parents=True, exist_ok=True)
    _plugin_dirs(path / "plugins", plugins, classpath)
    config = path / "worker.properties"
    settings = _worker_properties(bootstrap, port, group, path / "plugins", properties or {})
    config.write_text(settings)
    (path / "log4j2.properties").write_text(_LOG4J2)
    options = [o for o in KAFKA_JVM_OPTIONS if not o.startswith("-Xmx")]
    argv = [
        java,
        *options,
        "-Xmx768m",
        f"-Dlog4j2.configurationFile={path / 'log4j2.properties'}",
        "-cp",
        os.pathsep.join(str(j) for j in classpath),
        "org.apache.kafka.connect.cli.ConnectDistributed",
        str(config),
    ]
    process = BrokerProcess(
        name="connect",
        scheme="http",
        port=port,
        argv=argv,
        workdir=path,
        log_path=path / "connect.log",
        identity=str(config),
        env={**os.environ, **environment} if environment else None,
    )
    worker = ConnectWorker(process, group, tuple(plugins), _owns_workdir=owns)
    try:
        return worker.start(timeout)
    except BaseException:
        worker.close()
        raise
