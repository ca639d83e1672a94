"""``sluice brokers up|down|status``: the embedded brokers, for trying Sluice out.

Apache Kafka (one KRaft node, or ``--kafka-nodes 3`` for a three-node cluster; the broker
Sluice's guarantees are tested on) and mosquitto (MQTT), or noida-db with ``--kafka noida``
or Tansu with ``--kafka tansu``, run detached (their own session, output to a log file) so
they outlive the command. Their pids,
ports and working directories are kept in ``$SLUICE_HOME`` (default ``~/.sluice``), so any
directory sees the same brokers; ``down`` stops them by pid, after checking that the pid is
still the broker it started.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import time
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from sluice.brokers import BrokerAddress, BrokerProcess

from . import output
from .errors import CliError

__all__ = ["app", "home", "start"]

HOME_ENV = "SLUICE_HOME"
STATE_FILE = "brokers.json"

app = typer.Typer(
    help="Start, stop and list embedded brokers: Apache Kafka, noida-db or Tansu (Kafka), "
    "mosquitto (MQTT); with --s3 an S3 server (SeaweedFS), with --registry a stand-in "
    "Schema Registry, with --iceberg-rest Apache Iceberg's REST catalog test server.",
    no_args_is_help=True,
)


class KafkaBroker(StrEnum):
    noida = "noida"
    apache = "apache"
    tansu = "tansu"
    none = "none"


@dataclass
class Entry(BrokerAddress):
    """One broker this state directory started (its ``url`` and ``bootstrap`` from
    :class:`~sluice.brokers.BrokerAddress`)."""

    name: str
    scheme: str
    host: str
    port: int
    pid: int
    workdir: str
    log: str
    executable: str

    @property
    def kind(self) -> str:
        if self.name == REGISTRY:
            return "Schema Registry"
        if self.name == ICEBERG_REST:
            return "Iceberg REST catalog"
        if self.scheme == "http":
            return "S3"
        return "Kafka" if self.scheme.startswith("kafka") else "MQTT"


def home() -> Path:
    """The state directory: ``$SLUICE_HOME``, else ``~/.sluice``."""
    return Path(os.environ.get(HOME_ENV) or Path.home() / ".sluice")


def _load() -> tuple[list[Entry], dict[str, int]]:
    path = home() / STATE_FILE
    if not path.exists():
        return [], {}
    try:
        data = json.loads(path.read_text())
        return [Entry(**e) for e in data.get("brokers", [])], dict(data.get("ports", {}))
    except (ValueError, TypeError) as exc:
        raise CliError(
            f"The broker state file {path} is damaged ({exc}); stop the brokers it lists by "
            "hand if they run, then delete it."
        ) from exc


def _save(entries: list[Entry], ports: dict[str, int]) -> None:
    path = home() / STATE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {"brokers": [asdict(e) for e in entries], "ports": ports}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2) + "\n")
    tmp.replace(path)


def running(entry: Entry) -> bool:
    """Whether ``entry.pid`` is alive and still runs the broker's executable (not a reused pid)."""
    proc = Path(f"/proc/{entry.pid}")
    if not Path("/proc/self").exists():  # no procfs: trust the pid
        try:
            os.kill(entry.pid, 0)
        except OSError:
            return False
        return True
    try:
        state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        argv = (proc / "cmdline").read_bytes().split(b"\0")
    except (OSError, IndexError):
        return False
    if state == "Z":
        _reap(entry.pid)
        return False
    return entry.executable.encode() in argv


def _reap(pid: int) -> None:
    """Collect an exited broker that is our own child (when this process started it)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def _stop(entry: Entry, timeout: float = 10.0) -> bool:
    """SIGTERM, then SIGKILL if the broker has not exited within ``timeout`` s."""
    if not running(entry):
        return False
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.kill(entry.pid, sig)
        except ProcessLookupError:
            return True
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            _reap(entry.pid)
            if not running(entry):
                return True
            time.sleep(0.05)
    return not running(entry)


#: The embedded S3 server's one identity and bucket: a local playground on loopback, like
#: MinIO's minioadmin (never a production credential).
S3_ACCESS_KEY, S3_SECRET_KEY, S3_BUCKET = "sluice", "sluice-local-secret", "lake"


def _start_s3(port: int | None = None, workdir: Path | None = None) -> BrokerProcess:
    from sluice.s3server import start_seaweedfs

    server = start_seaweedfs(port, workdir, S3_ACCESS_KEY, S3_SECRET_KEY)
    server.create_bucket(S3_BUCKET)
    return server


#: The stand-in Schema Registry's entry name (``--registry``).
REGISTRY = "registry"


def _start_registry(port: int | None = None, workdir: Path | None = None) -> BrokerProcess:
    """Sluice's stand-in Schema Registry as a process of its own, said plainly to be one."""
    import sys

    from sluice.brokers import free_port
    from sluice.registry_server import BANNER

    assert workdir is not None
    workdir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    module = "sluice.registry_server"
    _progress(BANNER)
    registry = BrokerProcess(
        name=REGISTRY,
        scheme="http",
        port=port,
        argv=[sys.executable, "-m", module, "--port", str(port)],
        workdir=workdir,
        log_path=workdir / f"{REGISTRY}.log",
        identity=module,
    )
    return registry.start()


#: The Iceberg REST catalog's entry name (``--iceberg-rest``).
ICEBERG_REST = "iceberg-rest"


def _start_iceberg_rest(port: int | None = None, workdir: Path | None = None) -> BrokerProcess:
    """Apache Iceberg's REST catalog test server (:mod:`sluice.rest_catalog_server`): its
    warehouse ``s3://lake/warehouse`` on the S3 server ``--s3`` started, else a directory."""
    from sluice.rest_catalog_server import ICEBERG_VERSION, start_rest_catalog

    assert workdir is not None
    workdir.mkdir(parents=True, exist_ok=True)
    entries, _ = _load()
    s3 = next((e for e in entries if e.kind == "S3" and running(e)), None)
    _progress(
        f"Starting Apache Iceberg {ICEBERG_VERSION}'s REST catalog test server (a JVM; its "
        "jars, about 145 MB, are fetched from Maven Central the first time)..."
    )
    if s3 is None:
        server = start_rest_catalog((workdir / "warehouse").as_uri(), port=port, workdir=workdir)
    else:
        server = start_rest_catalog(
            f"s3://{S3_BUCKET}/warehouse",
            s3_endpoint=s3.url,
            s3_credentials={
                "AWS_ACCESS_KEY_ID": S3_ACCESS_KEY,
                "AWS_SECRET_ACCESS_KEY": S3_SECRET_KEY,
            },
            port=port,
            workdir=workdir,
        )
    return server.process


def _progress(line: str) -> None:
    output.err().print(line)


def _start_kafka(port: int | None = None, workdir: Path | None = None) -> BrokerProcess:
    from sluice.brokers import KAFKA_VERSION, start_kafka

    _progress(f"Starting Apache Kafka {KAFKA_VERSION} (one KRaft node; a JVM takes seconds)...")
    return start_kafka(port, workdir, progress=_progress)


#: Which entries each --kafka choice starts (a cluster's nodes are kafka-1, kafka-2, ...).
KAFKA_NAMES = {KafkaBroker.noida: "noida", KafkaBroker.tansu: "tansu", KafkaBroker.apache: "kafka"}


def _entry(broker: BrokerProcess) -> Entry:
    assert broker.pid is not None
    return Entry(
        name=broker.name,
        scheme=broker.scheme,
        host=broker.host,
        port=broker.port,
        pid=broker.pid,
        workdir=str(broker.workdir),
        log=str(broker.log_path),
        # what tells the process apart in /proc/PID/cmdline (Kafka: its own config file)
        executable=broker.identity or broker.argv[0],
    )


def _cli_error(exc: Exception, log: Path) -> CliError:
    first = str(exc).splitlines()[0].rstrip(".")
    return CliError(f"{first}. Its log: {log}" if log.exists() else f"{first}.")


def _start(name: str, port: int | None) -> Entry:
    from sluice.brokers import BrokerError, start_mosquitto, start_noida, start_tansu

    starters = {
        "noida": start_noida,
        "tansu": start_tansu,
        "kafka": _start_kafka,
        "mosquitto": start_mosquitto,
        "seaweedfs": _start_s3,
        REGISTRY: _start_registry,
        ICEBERG_REST: _start_iceberg_rest,
    }
    workdir = home() / name
    try:
        broker = starters[name](port=port, workdir=workdir)
    except BrokerError as exc:
        raise _cli_error(exc, workdir / f"{name}.log") from exc
    return _entry(broker)


def _start_cluster(nodes: int, ports: dict[str, int], first_port: int | None) -> list[Entry]:
    from sluice.brokers import BrokerError, start_kafka_cluster

    names = [f"kafka-{i}" for i in range(1, nodes + 1)]
    # last time's ports when all are free (the nodes' addresses stay the same), else free ones
    previous = [_port_for(n, None, ports) for n in names]
    chosen = [p for p in previous if p is not None]
    given = [first_port] if first_port is not None else chosen if len(chosen) == nodes else []
    workdir = home() / "kafka-cluster"
    _progress(f"Starting {nodes} Apache Kafka nodes (KRaft; JVMs take seconds)...")
    try:
        cluster = start_kafka_cluster(nodes, workdir, ports=given, progress=_progress)
    except BrokerError as exc:
        raise _cli_error(exc, workdir / "node-1" / "kafka-1.log") from exc
    return [_entry(node) for node in cluster.nodes]


def _port_for(name: str, given: int | None, ports: dict[str, int]) -> int | None:
    """The port asked for, else the one this broker had last time if it is free."""
    if given is not None:
        return given
    previous = ports.get(name)
    return previous if previous and _is_free(previous) else None


def _is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@app.command()
def up(
    kafka: Annotated[
        KafkaBroker,
        typer.Option(
            help="Kafka-protocol broker to run: Apache Kafka (a JVM: Java 17+), the embedded "
            "noida-db or Tansu, or none."
        ),
    ] = KafkaBroker.apache,
    mqtt: Annotated[bool, typer.Option(help="Run mosquitto for MQTT.")] = True,
    kafka_port: Annotated[
        int | None, typer.Option(help="Port for Kafka (default: last time's, else a free one).")
    ] = None,
    mqtt_port: Annotated[
        int | None, typer.Option(help="Port for MQTT (default: last time's, else a free one).")
    ] = None,
    s3: Annotated[
        bool,
        typer.Option(
            help=f"Run an S3 server (SeaweedFS) on loopback with the bucket '{S3_BUCKET}'."
        ),
    ] = False,
    s3_port: Annotated[
        int | None, typer.Option(help="Port for S3 (default: last time's, else a free one).")
    ] = None,
    kafka_nodes: Annotated[
        int,
        typer.Option(
            min=1,
            help="Apache Kafka nodes (--kafka apache): 1, or 3 for a cluster with replication "
            "factor 3 and min.insync.replicas 2.",
        ),
    ] = 1,
    registry: Annotated[
        bool,
        typer.Option(
            help="Run Sluice's stand-in Schema Registry, for trying the Avro, Protobuf and "
            "JSON Schema formats (schemas in memory: not a registry for real work)."
        ),
    ] = False,
    registry_port: Annotated[
        int | None,
        typer.Option(help="Port for the registry (default: last time's, else a free one)."),
    ] = None,
    iceberg_rest: Annotated[
        bool,
        typer.Option(
            help="Run Apache Iceberg's REST catalog test server, its warehouse "
            f"s3://{S3_BUCKET}/warehouse with --s3, else a local directory (for trying "
            "Iceberg REST catalogs: not a catalog for real work)."
        ),
    ] = False,
    iceberg_rest_port: Annotated[
        int | None,
        typer.Option(help="Port for the REST catalog (default: last time's, else a free one)."),
    ] = None,
) -> None:
    """Start the brokers in the background and print the URIs to use."""
    entries, _ = _load()
    alive = [e for e in entries if running(e)]
    wanted: list[tuple[str, int | None]] = []
    if kafka_nodes != 1 and kafka is not KafkaBroker.apache:
        raise CliError("--kafka-nodes needs --kafka apache.", usage=True)
    if kafka is not KafkaBroker.none:
        name = KAFKA_NAMES[kafka] if kafka_nodes == 1 else f"kafka-{kafka_nodes}-nodes"
        mine = {name} if kafka_nodes == 1 else {f"kafka-{i}" for i in range(1, kafka_nodes + 1)}
        other = next((e for e in alive if e.kind == "Kafka" and e.name not in mine), None)
        if other is not None:
            raise CliError(
                f"{other.name} already runs as the Kafka broker ({other.url}); "
                "run 'sluice brokers down' first to switch.",
                usage=True,
            )
        wanted.append((name, kafka_port))
    if mqtt:
        wanted.append(("mosquitto", mqtt_port))
    if s3:
        wanted.append(("seaweedfs", s3_port))
    if registry:
        wanted.append((REGISTRY, registry_port))
    if iceberg_rest:
        wanted.append((ICEBERG_REST, iceberg_rest_port))
    _print_usage(start(wanted))


def start(wanted: list[tuple[str, int | None]]) -> list[Entry]:
    """Start the brokers ``wanted`` (name, port or None) that do not run yet and record them;
    one line each on stdout (never a credential). Returns every broker running now."""
    entries, ports = _load()
    alive = [e for e in entries if running(e)]
    console = output.out()
    for name, port in wanted:
        if name.endswith("-nodes"):  # an Apache Kafka cluster: kafka-N-nodes
            nodes = int(name.split("-")[1])
            names = [f"kafka-{i}" for i in range(1, nodes + 1)]
            running_nodes = [e for e in alive if e.name in names]
            if len(running_nodes) == nodes:
                console.print(f"The {nodes}-node Apache Kafka cluster already runs.")
                continue
            if running_nodes:
                raise CliError(
                    f"Only {len(running_nodes)} of the {nodes} Kafka nodes run; "
                    "run 'sluice brokers down' first, then up again."
                )
            started = _start_cluster(nodes, ports, port)
        else:
            existing = next((e for e in alive if e.name == name), None)
            if existing is not None:
                console.print(f"{name} already runs at {existing.url} (pid {existing.pid}).")
                continue
            started = [_start(name, _port_for(name, port, ports))]
        for entry in started:
            alive.append(entry)
            ports[entry.name] = entry.port
            _save(alive, ports)
            console.print(
                f"Started {entry.name} ({entry.kind}) at {entry.url} (pid {entry.pid}, "
                f"files in {entry.workdir})."
            )
    _save(alive, ports)
    return alive


def _print_usage(entries: list[Entry]) -> None:
    console = output.out()
    kafka = next((e for e in entries if e.kind == "Kafka"), None)
    bootstrap = ",".join(f"{e.host}:{e.port}" for e in entries if e.kind == "Kafka")
    mqtt = next((e for e in entries if e.kind == "MQTT"), None)
    if kafka is None and mqtt is None and not any(e.scheme == "http" for e in entries):
        return
    console.print("\nTry:")
    if kafka is not None:
        console.print(f"  sluice publish {kafka.url}/readings --sample iot --count 1000")
        console.print(f"  sluice peek '{kafka.url}/readings?group_id=demo'")
        console.print(f"  export SLUICE_KAFKA_BOOTSTRAP={bootstrap}")
    if mqtt is not None:
        console.print(f"  sluice publish '{mqtt.url}/readings?qos=1' --sample iot")
    found = next((e for e in entries if e.name == REGISTRY), None)
    if found is not None and kafka is not None:
        console.print(
            f"  sluice publish {kafka.url}/readings.avro --sample iot --format avro "
            f"--schema reading.avsc --registry {found.url}  # a stand-in registry"
        )
    s3 = next((e for e in entries if e.kind == "S3"), None)
    if s3 is not None:
        console.print(
            f"  export AWS_ENDPOINT_URL={s3.url} AWS_ACCESS_KEY_ID={S3_ACCESS_KEY} "
            f"AWS_SECRET_ACCESS_KEY={S3_SECRET_KEY} AWS_REGION=us-east-1  # bucket s3://{S3_BUCKET}"
        )
    rest = next((e for e in entries if e.name == ICEBERG_REST), None)
    if rest is not None:
        console.print(
            f"  export PYICEBERG_CATALOG__REST__TYPE=rest PYICEBERG_CATALOG__REST__URI={rest.url}"
            "  # sink iceberg://rest/NAMESPACE.TABLE"
        )
    console.print("Stop them with: sluice brokers down")


@app.command()
def down(
    purge: Annotated[bool, typer.Option(help="Also delete the brokers' data and logs.")] = False,
) -> None:
    """Stop the brokers that 'sluice brokers up' started here."""
    entries, ports = _load()
    console = output.out()
    if not entries:
        console.print(f"No brokers to stop (none recorded in {home()}).")
    for entry in entries:
        # SeaweedFS waits out its filer's 15 s gRPC grace before it exits (SIGKILL at 10 s):
        # say whom the command waits for (a spinner on a terminal), never a silent screen
        with output.err().status(f"Stopping {entry.name} (pid {entry.pid})..."):
            stopped = _stop(entry)
        if stopped:
            console.print(f"Stopped {entry.name} (pid {entry.pid}).")
        else:
            console.print(f"{entry.name} (pid {entry.pid}) was not running.")
    if purge:
        import shutil

        for entry in entries:
            shutil.rmtree(entry.workdir, ignore_errors=True)
        ports = {}
    _save([], ports)


@app.command()
def status(
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the brokers as JSON (for scripts).")
    ] = False,
) -> None:
    """List the brokers started here: name, URL, pid and whether each is alive."""
    entries, _ = _load()
    if as_json:
        listed = [
            {
                "name": e.name,
                "url": e.url,
                "host": e.host,
                "port": e.port,
                "pid": e.pid,
                "alive": running(e),
            }
            for e in entries
        ]
        output.out().print(json.dumps({"home": str(home()), "brokers": listed}, indent=2))
        return
    if not entries:
        output.out().print(f"No brokers recorded in {home()}. Start them with: sluice brokers up")
        return
    output.table(
        f"Brokers ({home()})",
        ["name", "url", "pid", "alive"],
        [(e.name, e.url, e.pid, "yes" if running(e) else "no") for e in entries],
    )
