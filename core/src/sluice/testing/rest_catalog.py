"""An Apache Iceberg REST catalog server of the tests' own, from Maven Central artifacts.

It runs ``org.apache.iceberg.rest.RESTCatalogServer``, the server Apache Iceberg publishes in
the ``test-fixtures`` jar of ``org.apache.iceberg:iceberg-open-api`` (the code of the
``apache/iceberg-rest-fixture`` image): a Jetty servlet serving the REST catalog API in front
of Iceberg's ``JdbcCatalog``. Here its catalog is a SQLite file in the server's working
directory (so a restart keeps every table) and its FileIO is ``S3FileIO``, writing the
tables' metadata to a warehouse on the tests' S3 server (:mod:`sluice.s3server`).

That POM declares none of the fixture's dependencies (they live in Iceberg's Gradle build
only), so :data:`REST_CATALOG_COORDINATES` lists them, pinned; :mod:`sluice.jars` resolves
them once into its cache (about 145 MB, the AWS SDK bundle most of it).

The server reads its catalog properties from ``CATALOG_*`` environment variables (``__`` is
``-``, ``_`` is ``.``: ``CATALOG_S3_ENDPOINT`` is ``s3.endpoint``) and its port from
``CATALOG_REST_PORT`` (``rest.port``). It logs the properties it was given, so the S3 keys
are not among them: they reach the AWS SDK as ``AWS_ACCESS_KEY_ID`` /
``AWS_SECRET_ACCESS_KEY`` in the process's environment (never on its command line), and the
server hands no credentials to clients (``include-credentials`` is off): a client brings its
own ``s3.*`` properties, as pyiceberg's REST catalog does.

One thing the fixture does not let us choose: Jetty listens on every interface of the
machine (``new Server(port)``), not only 127.0.0.1. Clients here only use 127.0.0.1; the
port is a random free one, and the server lives as long as the test session.
"""

from __future__ import annotations

import json
import os
import signal
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..brokers import HOST, BrokerError, BrokerProcess, free_port

__all__ = [
    "ICEBERG_VERSION",
    "REST_CATALOG_COORDINATES",
    "RestCatalogServer",
    "rest_catalog_classpath",
    "start_rest_catalog",
]

#: Apache Iceberg's Java release whose REST catalog fixture runs (Java 11+; the REST API it
#: serves is the one pyiceberg 0.9+ speaks).
ICEBERG_VERSION = "1.10.0"
#: The fixture's runtime classpath: Iceberg's core (its ``tests`` jar holds the REST adapter
#: and servlet), S3FileIO (iceberg-aws, and the AWS SDK in iceberg-aws-bundle), Jetty 11 (as
#: Iceberg 1.10 builds with), SQLite's JDBC driver, Hadoop's ``Configuration`` (the shaded
#: client jars: no Hadoop dependency tree) and a logger for slf4j.
REST_CATALOG_COORDINATES = (
    f"org.apache.iceberg:iceberg-open-api:{ICEBERG_VERSION}:test-fixtures",
    f"org.apache.iceberg:iceberg-core:{ICEBERG_VERSION}",
    f"org.apache.iceberg:iceberg-core:{ICEBERG_VERSION}:tests",
    f"org.apache.iceberg:iceberg-aws:{ICEBERG_VERSION}",
    f"org.apache.iceberg:iceberg-aws-bundle:{ICEBERG_VERSION}",
    "org.eclipse.jetty:jetty-servlet:11.0.25",
    "org.xerial:sqlite-jdbc:3.50.3.0",
    "org.apache.hadoop:hadoop-client-api:3.4.1",
    "org.apache.hadoop:hadoop-client-runtime:3.4.1",
    "org.slf4j:slf4j-simple:2.0.17",
)
MAIN_CLASS = "org.apache.iceberg.rest.RESTCatalogServer"
#: A small heap, the serial collector and C1 only: it starts faster and needs less memory.
JVM_OPTIONS = (
    "-Xms32m",
    "-Xmx256m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Xss512k",
    "-Djava.awt.headless=true",
    "-Djava.net.preferIPv4Stack=true",
    "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
    "-Dorg.slf4j.simpleLogger.log.org.apache.iceberg.rest.RESTCatalogServer=info",
    "-Daws.java.v1.disableDeprecationAnnouncement=true",
)


def rest_catalog_classpath() -> str:
    """The server's jars from the cache, resolved (downloaded) the first time."""
    from .. import jars

    try:
        found = jars.resolve(REST_CATALOG_COORDINATES)
    except jars.JarError as exc:
        raise BrokerError(f"Iceberg REST catalog {ICEBERG_VERSION}: {exc}") from None
    return os.pathsep.join(str(j) for j in found)


@dataclass
class RestCatalogServer:
    """A running REST catalog: its URI, its warehouse, and how to restart or stop it."""

    process: BrokerProcess
    warehouse: str
    #: the S3 settings a client needs besides the URI (no keys: see :meth:`client_properties`)
    s3_endpoint: str = ""
    s3_region: str = ""
    _credentials: dict[str, str] = field(default_factory=dict, repr=False)

    @property
    def host(self) -> str:
        return self.process.host

    @property
    def port(self) -> int:
        return self.process.port

    @property
    def pid(self) -> int | None:
        return self.process.pid

    @property
    def uri(self) -> str:
        return f"http://{self.host}:{self.port}"

    def client_properties(self, uri: str | None = None) -> dict[str, str]:
        """pyiceberg catalog properties for this server (``uri``: e.g. a proxy's instead),
        with the S3 settings and keys of its warehouse's server."""
        properties = {"type": "rest", "uri": uri or self.uri}
        if self.s3_endpoint:
            properties.update(
                {
                    "s3.endpoint": self.s3_endpoint,
                    "s3.region": self.s3_region,
                    "s3.access-key-id": self._credentials.get("AWS_ACCESS_KEY_ID", ""),
                    "s3.secret-access-key": self._credentials.get("AWS_SECRET_ACCESS_KEY", ""),
                }
            )
        return properties

    def serves(self) -> bool:
        """True once ``GET /v1/config`` answers 200 with the catalog's configuration."""
        try:
            with urllib.request.urlopen(f"{self.uri}/v1/config", timeout=5) as response:
                return response.status == 200 and isinstance(json.load(response), dict)
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def wait_ready(self, timeout: float) -> RestCatalogServer:
        deadline = time.monotonic() + timeout
        proc = self.process._proc
        while not self.serves():
            if proc is None or proc.poll() is not None:
                code = None if proc is None else proc.returncode
                raise BrokerError(
                    f"the Iceberg REST catalog exited ({code}) before it served requests. "
                    f"Its log:\n{self.process.log_tail()}"
                )
            if time.monotonic() >= deadline:
                raise BrokerError(
                    f"the Iceberg REST catalog did not serve {self.uri}/v1/config within "
                    f"{timeout:.0f} s. Its log:\n{self.process.log_tail()}"
                )
            time.sleep(0.1)
        return self

    def restart(self, timeout: float = 60.0) -> RestCatalogServer:
        """Stop and start again on the same port with the same SQLite file (and warehouse)."""
        self.process.restart(timeout)
        return self.wait_ready(timeout)

    def kill(self) -> None:
        self.process.kill()

    def close(self) -> None:
        self.process.stop(signal.SIGTERM)
        self.process.close()


def _inherited() -> dict[str, str]:
    """Our environment without catalog or AWS settings (the server gets only its own)."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("CATALOG_", "AWS_"))}


def start_rest_catalog(
    warehouse: str,
    *,
    s3_endpoint: str | None = None,
    s3_region: str = "us-east-1",
    s3_credentials: Mapping[str, str] | None = None,
    port: int | None = None,
    workdir: str | Path | None = None,
    timeout: float = 90.0,
) -> RestCatalogServer:
    """An Iceberg REST catalog on ``port`` (a free one by default) of 127.0.0.1 with its
    tables under ``warehouse`` (``s3://bucket/prefix``, or a local directory's ``file://``
    URI), serving once this returns. Its SQLite catalog is in ``workdir`` (a temporary
    directory by default, removed by :meth:`RestCatalogServer.close`).

    ``s3_credentials``: ``AWS_ACCESS_KEY_ID`` and ``AWS_SECRET_ACCESS_KEY`` for S3FileIO,
    passed to the server in its environment only."""
    from .. import jars

    try:
        java = jars.find_java()
    except jars.JarError as exc:
        raise BrokerError(f"The Iceberg REST catalog needs Java: {exc}") from None
    classpath = rest_catalog_classpath()
    port = port or free_port()
    owns = workdir is None
    path = Path(tempfile.mkdtemp(prefix="sluice-rest-catalog-") if workdir is None else workdir)
    path.mkdir(parents=True, exist_ok=True)
    credentials = dict(s3_credentials or {})
    environment = {
        # The catalog's properties (RCKUtils.environmentCatalogConfig).
        "CATALOG_URI": f"jdbc:sqlite:{path / 'catalog.db'}",
        "CATALOG_JDBC_SCHEMA__VERSION": "V1",
        "CATALOG_WAREHOUSE": warehouse,
        "CATALOG_REST_PORT": str(port),
    }
    if s3_endpoint:
        environment.update(
            {
                "CATALOG_IO__IMPL": "org.apache.iceberg.aws.s3.S3FileIO",
                "CATALOG_S3_ENDPOINT": s3_endpoint,
                "CATALOG_S3_PATH__STYLE__ACCESS": "true",
                "CATALOG_CLIENT_REGION": s3_region,
                # The AWS SDK's own variables: the keys, and no profile or instance metadata.
                "AWS_REGION": s3_region,
                "AWS_CONFIG_FILE": os.devnull,
                "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
                "AWS_EC2_METADATA_DISABLED": "true",
                **{k: v for k, v in credentials.items() if k.startswith("AWS_")},
            }
        )
    argv = [java, *JVM_OPTIONS, "-cp", classpath, MAIN_CLASS]
    process = BrokerProcess(
        name="iceberg-rest",
        scheme="http",
        port=port,
        argv=argv,
        workdir=path,
        log_path=path / "rest-catalog.log",
        host=HOST,
        identity=MAIN_CLASS,
        env={**_inherited(), **environment},
        _owns_workdir=owns,
    )
    server = RestCatalogServer(
        process,
        warehouse,
        s3_endpoint=s3_endpoint or "",
        s3_region=s3_region if s3_endpoint else "",
        _credentials=credentials,
    )
    try:
        process.spawn()
        server.wait_ready(timeout)
    except BaseException:
        server.close()
        raise
    return server
