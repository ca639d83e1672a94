"""``sluice brokers up|down|status``: the embedded brokers, for trying Sluice out.

noida-db (Kafka) and mosquitto (MQTT), or Tansu with ``--kafka tansu``, run detached (their own
session, output to a log file) so they outlive the command. Their pids, ports and working
directories are kept in ``$SLUICE_HOME`` (default ``~/.sluice``), so any directory sees the
same brokers; ``down`` stops them by pid,
after checking that the pid is still the broker it started.
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
    help="Start, stop and list embedded brokers: noida-db (Kafka), mosquitto (MQTT) and, with "
    "--s3, an S3 server (SeaweedFS).",
    no_args_is_help=True,
)


class KafkaBroker(StrEnum):
    noida = "noida"
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


def _start(name: str, port: int | None) -> Entry:
    from sluice.brokers import BrokerError, start_mosquitto, start_noida, start_tansu

    starters = {
        "noida": start_noida,
        "tansu": start_tansu,
        "mosquitto": start_mosquitto,
        "seaweedfs": _start_s3,
    }
    workdir = home() / name
    try:
        broker = starters[name](port=port, workdir=workdir)
    except BrokerError as exc:
        first = str(exc).splitlines()[0].rstrip(".")
        log = workdir / f"{name}.log"
        raise CliError(f"{first}. Its log: {log}" if log.exists() else f"{first}.") from exc
    assert broker.pid is not None
    return Entry(
        name=broker.name,
        scheme=broker.scheme,
        host=broker.host,
        port=broker.port,
        pid=broker.pid,
        workdir=str(broker.workdir),
        log=str(broker.log_path),
        executable=broker.argv[0],
    )


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
        KafkaBroker, typer.Option(help="Kafka-protocol broker to run (none: no Kafka).")
    ] = KafkaBroker.noida,
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
) -> None:
    """Start the brokers in the background and print the URIs to use."""
    entries, _ = _load()
    alive = [e for e in entries if running(e)]
    wanted: list[tuple[str, int | None]] = []
    if kafka is not KafkaBroker.none:
        other = next((e for e in alive if e.kind == "Kafka" and e.name != kafka.value), None)
        if other is not None:
            raise CliError(
                f"{other.name} already runs as the Kafka broker ({other.url}); "
                "run 'sluice brokers down' first to switch.",
                usage=True,
            )
        wanted.append((kafka.value, kafka_port))
    if mqtt:
        wanted.append(("mosquitto", mqtt_port))
    if s3:
        wanted.append(("seaweedfs", s3_port))
    _print_usage(start(wanted))


def start(wanted: list[tuple[str, int | None]]) -> list[Entry]:
    """Start the brokers ``wanted`` (name, port or None) that do not run yet and record them;
    one line each on stdout (never a credential). Returns every broker running now."""
    entries, ports = _load()
    alive = [e for e in entries if running(e)]
    console = output.out()
    for name, port in wanted:
        existing = next((e for e in alive if e.name == name), None)
        if existing is not None:
            console.print(f"{name} already runs at {existing.url} (pid {existing.pid}).")
            continue
        entry = _start(name, _port_for(name, port, ports))
        alive.append(entry)
        ports[name] = entry.port
        _save(alive, ports)
        console.print(
            f"Started {name} ({entry.kind}) at {entry.url} (pid {entry.pid}, "
            f"files in {entry.workdir})."
        )
    _save(alive, ports)
    return alive


def _print_usage(entries: list[Entry]) -> None:
    console = output.out()
    kafka = next((e for e in entries if e.kind == "Kafka"), None)
    mqtt = next((e for e in entries if e.kind == "MQTT"), None)
    if kafka is None and mqtt is None and not any(e.kind == "S3" for e in entries):
        return
    console.print("\nTry:")
    if kafka is not None:
        console.print(f"  sluice publish {kafka.url}/readings --sample iot --count 1000")
        console.print(f"  sluice peek '{kafka.url}/readings?group_id=demo'")
        console.print(f"  export SLUICE_KAFKA_BOOTSTRAP={kafka.host}:{kafka.port}")
    if mqtt is not None:
        console.print(f"  sluice publish '{mqtt.url}/readings?qos=1' --sample iot")
    s3 = next((e for e in entries if e.kind == "S3"), None)
    if s3 is not None:
        console.print(
            f"  export AWS_ENDPOINT_URL={s3.url} AWS_ACCESS_KEY_ID={S3_ACCESS_KEY} "
            f"AWS_SECRET_ACCESS_KEY={S3_SECRET_KEY} AWS_REGION=us-east-1  # bucket s3://{S3_BUCKET}"
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
        if _stop(entry):
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
