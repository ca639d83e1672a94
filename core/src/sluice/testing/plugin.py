"""pytest plugin: fixtures that start real brokers on free ports. Opt in with
``pytest -p sluice.testing.plugin`` (or ``addopts`` / ``pytest_plugins``): installing sluice-core
adds no fixtures to other projects.

- ``apache_kafka_broker``: Apache Kafka (one KRaft node), the reference broker, one per session.
- ``kafka_cluster``: three Apache Kafka nodes (replication factor 3, ``min.insync.replicas`` 2),
  started only for a session with a test that asks for it; nodes can be killed, paused,
  resumed and restarted (:class:`sluice.brokers.KafkaCluster`).
- ``secure_kafka_broker``: Apache Kafka with SASL and TLS listeners beside its PLAINTEXT one
  (:class:`sluice.brokers.KafkaSecurity`), one per session: ``listeners`` names each one's
  address, ``users`` holds user ``sluice`` and its password (PLAIN, SCRAM-SHA-256 and -512),
  ``security.certificates`` the CA, the server certificate and its key.
- ``noida_broker``, ``tansu_broker``: Kafka-protocol emulators, one per test session.
- ``kafka_broker``: parametrized over Apache Kafka, noida-db and Tansu, in that order (or the
  broker ``SLUICE_TEST_KAFKA_BOOTSTRAP`` names).
- ``mosquitto_broker``, ``mosquitto_auth_broker``: MQTT, anonymous and with a password file.
- ``mqtt_broker``: mosquitto (or the broker ``SLUICE_TEST_MQTT_URL`` names).
- ``stock_mosquitto``: mosquitto with its default queue limits (which drop messages) and
  ``$SYS`` topics updated every second.
- ``private_mosquitto``, ``private_noida``: a broker of the test's own, free to stop and restart.
- ``s3_server``: SeaweedFS serving S3 on loopback, one per test session
  (:mod:`sluice.s3server`); ``s3_proxy``: a counting, fault-injecting proxy in front of it
  (:mod:`sluice.testing.s3proxy`), cleared for each test; ``s3_bucket``: a fresh bucket, with
  the standard ``AWS_*`` variables pointing at the proxy for the test. ``moto_s3_server``,
  ``moto_s3_bucket``: the same on moto's S3 server, a second S3 implementation.
- ``azurite_server``: Azurite (Azure Blob Storage) on loopback, one per test session
  (:mod:`sluice.cloudservers`); ``azure_container``: a fresh container, with the standard
  ``AZURE_STORAGE_*`` variables pointing at it for the test. ``fake_gcs_server``,
  ``gcs_bucket``: the same with fake-gcs-server (Google Cloud Storage, its JSON API only) and
  ``STORAGE_EMULATOR_HOST``.
- ``postgres_server``: a PostgreSQL server of the tests' own (:mod:`.postgres`), one per test
  session, with a database ``test``.
- ``rest_catalog``: an Apache Iceberg REST catalog server of the tests' own
  (:mod:`.rest_catalog`), one per test session, its warehouse in a bucket of ``s3_server``.
- ``unique_name``: a fresh topic / group / client id for one test.
- ``schema_registry``: a stand-in Schema Registry on a free port for one test
  (:mod:`sluice.registry_server`).
- ``spark``: one local SparkSession for the whole test session (it takes ~6 s to start).

Every broker is stopped by its pid when its scope ends.
"""

from __future__ import annotations

import logging
import os
import secrets
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import pytest

from ..brokers import (
    BrokerAddress,
    BrokerProcess,
    KafkaCluster,
    KafkaSecurity,
    start_kafka,
    start_kafka_cluster,
    start_mosquitto,
    start_noida,
    start_tansu,
)

if TYPE_CHECKING:
    from ..cloudservers import AzuriteServer, FakeGcsServer
    from ..s3server import S3Server
    from .postgres import PostgresServer
    from .rest_catalog import RestCatalogServer
    from .s3proxy import S3Proxy

KAFKA_ENV = "SLUICE_TEST_KAFKA_BOOTSTRAP"
MQTT_ENV = "SLUICE_TEST_MQTT_URL"


@dataclass(frozen=True)
class ExternalBroker(BrokerAddress):
    """A broker the tests did not start (named by an environment variable); never stopped."""

    name: str
    scheme: str
    host: str
    port: int


Broker = BrokerProcess | ExternalBroker

#: ``kafka_broker``'s parameters and the session fixture each one names.
KAFKA_FIXTURES = {
    "apache": "apache_kafka_broker",
    "noida": "noida_broker",
    "tansu": "tansu_broker",
}


def external_broker(env: str, scheme: str, default_port: int) -> ExternalBroker | None:
    value = os.environ.get(env)
    if not value:
        return None
    parts = urlsplit(value if "://" in value else f"{scheme}://{value}")
    return ExternalBroker(
        "external", scheme, parts.hostname or "127.0.0.1", parts.port or default_port
    )


def _session_broker(
    start: Callable[[], BrokerProcess], before_close: Callable[[], None] = lambda: None
) -> Iterator[BrokerProcess]:
    broker = start()
    try:
        yield broker
    finally:
        before_close()
        broker.close()


def _kafka_broker(start: Callable[[], BrokerProcess]) -> Iterator[BrokerProcess]:
    from ..kafka.watch import stop_watches

    # a sensor's watch outlives its test, but not the broker it watches
    yield from _session_broker(start, before_close=stop_watches)


@pytest.fixture(scope="session")
def apache_kafka_broker() -> Iterator[BrokerProcess]:
    """Apache Kafka, one KRaft node (its jars resolved once per machine, under a file lock)."""
    yield from _kafka_broker(start_kafka)


@pytest.fixture(scope="session")
def kafka_cluster() -> Iterator[KafkaCluster]:
    """Three Apache Kafka nodes: replication factor 3 and ``min.insync.replicas`` 2 by default.
    A test that stops, pauses or kills a node must bring it back before it ends."""
    from ..kafka.watch import stop_watches

    cluster = start_kafka_cluster(3)
    try:
        yield cluster
    finally:
        stop_watches()
        cluster.close()


@pytest.fixture(scope="session")
def secure_kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """Apache Kafka with the listeners SASL_PLAINTEXT, SSL, SASL_SSL and CLIENT_CERT (TLS that
    requires a client certificate signed by the test CA) beside PLAINTEXT, for user ``sluice``
    with a fresh password; one JVM for the session."""
    from .certificates import make_certificates

    certificates = make_certificates(tmp_path_factory.mktemp("kafka-tls"))
    security = KafkaSecurity({"sluice": secrets.token_urlsafe(12)}, certificates)
    yield from _kafka_broker(lambda: start_kafka(security=security))


@pytest.fixture(scope="session")
def noida_broker() -> Iterator[BrokerProcess]:
    yield from _kafka_broker(start_noida)


@pytest.fixture(scope="session")
def tansu_broker() -> Iterator[BrokerProcess]:
    yield from _kafka_broker(start_tansu)


def kafka_params() -> list[str]:
    """The ids of the Kafka brokers ``kafka_broker`` runs on: every embedded one, or the
    external one."""
    return ["external"] if os.environ.get(KAFKA_ENV) else list(KAFKA_FIXTURES)


@pytest.fixture(scope="session", params=kafka_params())
def kafka_broker(request: pytest.FixtureRequest) -> Broker:
    """Each Kafka-protocol broker in turn: Apache Kafka, noida-db and Tansu, or the external
    one."""
    if request.param == "external":
        external = external_broker(KAFKA_ENV, "kafka", 9092)
        assert external is not None
        return external
    broker: BrokerProcess = request.getfixturevalue(KAFKA_FIXTURES[request.param])
    return broker


@pytest.fixture(scope="session")
def mosquitto_broker() -> Iterator[BrokerProcess]:
    yield from _session_broker(start_mosquitto)


@pytest.fixture(scope="session")
def mosquitto_auth_broker() -> Iterator[BrokerProcess]:
    """mosquitto that only admits user ``sluice`` with the password in ``broker.users``."""
    yield from _session_broker(lambda: start_mosquitto(users={"sluice": secrets.token_urlsafe(12)}))


@pytest.fixture(scope="session")
def mqtt_broker(request: pytest.FixtureRequest) -> Broker:
    external = external_broker(MQTT_ENV, "mqtt", 1883)
    if external is not None:
        return external
    broker: BrokerProcess = request.getfixturevalue("mosquitto_broker")
    return broker


@pytest.fixture
def stock_mosquitto() -> Iterator[BrokerProcess]:
    """mosquitto with its default limits: 20 QoS 1 messages in flight per client, and 1,000
    queued for an offline session (beyond that it drops them); ``sys_interval`` 1 s. A fresh
    one per test: mosquitto's retained ``$SYS`` values expire 60 s after they last changed,
    so on an older broker the drop count may not be readable at all."""
    yield from _session_broker(lambda: start_mosquitto(raise_limits=False, sys_interval=1))


@pytest.fixture
def private_mosquitto() -> Iterator[BrokerProcess]:
    yield from _session_broker(start_mosquitto)


@pytest.fixture
def private_noida() -> Iterator[BrokerProcess]:
    yield from _kafka_broker(start_noida)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    from ..s3server import start_seaweedfs

    yield from _session_broker(start_seaweedfs)  # type: ignore[misc]


@pytest.fixture(scope="session")
def _s3_session_proxy(s3_server: S3Server) -> Iterator[S3Proxy]:
    from .s3proxy import S3Proxy

    with S3Proxy(f"{s3_server.host}:{s3_server.port}") as proxy:
        yield proxy


@pytest.fixture
def s3_proxy(_s3_session_proxy: S3Proxy) -> Iterator[S3Proxy]:
    """The session's proxy, with no fault planned and its counts at zero."""
    _s3_session_proxy.clear()
    _s3_session_proxy.reset_counts()
    yield _s3_session_proxy
    _s3_session_proxy.clear()


@dataclass(frozen=True)
class S3Bucket:
    """A bucket of the test's own on the session's S3 server, reached through the proxy."""

    name: str
    server: S3Server
    proxy: S3Proxy

    @property
    def endpoint(self) -> str:
        return self.proxy.endpoint

    def uri(self, path: str = "") -> str:
        return f"s3://{self.name}/{path}".rstrip("/")

    def environment(self) -> dict[str, str]:
        return {**self.server.environment(), "AWS_ENDPOINT_URL": self.endpoint}

    def catalog_properties(self) -> dict[str, str]:
        return {**self.server.catalog_properties(), "s3.endpoint": self.endpoint}

    def client(self) -> Any:
        return self.server.client(endpoint_url=self.endpoint)

    def keys(self, prefix: str = "") -> list[str]:
        client, found, token = self.client(), [], None
        while True:
            extra: dict[str, str] = {"ContinuationToken": token} if token else {}
            page = client.list_objects_v2(Bucket=self.name, Prefix=prefix, **extra)
            found += [item["Key"] for item in page.get("Contents", [])]
            if not page.get("IsTruncated"):
                return found
            token = page["NextContinuationToken"]


def _bucket(server: S3Server, proxy: S3Proxy, monkeypatch: pytest.MonkeyPatch) -> S3Bucket:
    bucket = S3Bucket(f"t-{uuid.uuid4().hex[:16]}", server, proxy)
    server.create_bucket(bucket.name)
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # never ask 169.254.169.254
    for name, value in bucket.environment().items():
        monkeypatch.setenv(name, value)
    return bucket


@pytest.fixture
def s3_bucket(s3_server: S3Server, s3_proxy: S3Proxy, monkeypatch: pytest.MonkeyPatch) -> S3Bucket:
    """A fresh bucket; ``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``
    and ``AWS_REGION`` point at it (through the proxy) for the test, no profile is read."""
    return _bucket(s3_server, s3_proxy, monkeypatch)


@pytest.fixture(scope="session")
def moto_s3_server() -> Iterator[S3Server]:
    from ..s3server import start_moto

    yield from _session_broker(start_moto)  # type: ignore[misc]


@pytest.fixture(scope="session")
def _moto_session_proxy(moto_s3_server: S3Server) -> Iterator[S3Proxy]:
    from .s3proxy import S3Proxy

    with S3Proxy(f"{moto_s3_server.host}:{moto_s3_server.port}") as proxy:
        yield proxy


@pytest.fixture
def moto_s3_bucket(
    moto_s3_server: S3Server, _moto_session_proxy: S3Proxy, monkeypatch: pytest.MonkeyPatch
) -> Iterator[S3Bucket]:
    """As ``s3_bucket``, on moto's S3 server (a second S3 implementation)."""
    _moto_session_proxy.clear()
    _moto_session_proxy.reset_counts()
    yield _bucket(moto_s3_server, _moto_session_proxy, monkeypatch)
    _moto_session_proxy.clear()


@dataclass(frozen=True)
class CloudBucket:
    """A bucket (Azure: a container) of the test's own on an emulator of GCS or Azure."""

    scheme: str  # "gs" or "az"
    name: str
    server: AzuriteServer | FakeGcsServer

    def uri(self, path: str = "") -> str:
        return f"{self.scheme}://{self.name}/{path}".rstrip("/")

    def keys(self, prefix: str = "") -> list[str]:
        import obstore

        from ..spark.sinks.cloud import azure_settings, gcs_settings

        settings = gcs_settings() if self.scheme == "gs" else azure_settings()
        found = obstore.list(settings.store(self.name), prefix or None)
        return sorted(str(m["path"]) for chunk in found for m in chunk)


def _cloud_bucket(
    scheme: str, server: AzuriteServer | FakeGcsServer, monkeypatch: pytest.MonkeyPatch
) -> CloudBucket:
    bucket = CloudBucket(scheme, f"t{uuid.uuid4().hex[:16]}", server)
    for name in (
        "AZURE_STORAGE_CONNECTION_STRING",
        "AZURE_STORAGE_SAS_TOKEN",
        "GOOGLE_APPLICATION_CREDENTIALS",
    ):
        monkeypatch.delenv(name, raising=False)
    for name, value in server.environment().items():
        monkeypatch.setenv(name, value)
    if scheme == "az":
        server.create_container(bucket.name)  # type: ignore[union-attr]
    else:
        server.create_bucket(bucket.name)  # type: ignore[union-attr]
    return bucket


@pytest.fixture(scope="session")
def azurite_server() -> Iterator[AzuriteServer]:
    from ..cloudservers import start_azurite

    yield from _session_broker(start_azurite)  # type: ignore[misc]


@pytest.fixture
def azure_container(azurite_server: AzuriteServer, monkeypatch: pytest.MonkeyPatch) -> CloudBucket:
    """A fresh container on Azurite; ``AZURE_STORAGE_ACCOUNT_NAME``, ``..._ACCOUNT_KEY`` and
    ``AZURE_STORAGE_ENDPOINT`` point at it for the test."""
    return _cloud_bucket("az", azurite_server, monkeypatch)


@pytest.fixture(scope="session")
def fake_gcs_server() -> Iterator[FakeGcsServer]:
    from ..cloudservers import start_fake_gcs

    yield from _session_broker(start_fake_gcs)  # type: ignore[misc]


@pytest.fixture
def gcs_bucket(fake_gcs_server: FakeGcsServer, monkeypatch: pytest.MonkeyPatch) -> CloudBucket:
    """A fresh bucket on fake-gcs-server; ``STORAGE_EMULATOR_HOST`` points at it."""
    return _cloud_bucket("gs", fake_gcs_server, monkeypatch)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """PostgreSQL on a free port, with an empty database ``test``."""
    from .postgres import start_postgres

    server = start_postgres()
    try:
        server.create_database("test")
        yield server
    finally:
        server.close()


def rest_catalog_on(s3_server: S3Server, bucket: str) -> Iterator[RestCatalogServer]:
    """An Iceberg REST catalog on a free port, its warehouse ``s3://BUCKET/warehouse`` on
    ``s3_server`` (the bucket made here), closed (by its pid) when the generator ends."""
    from .rest_catalog import start_rest_catalog

    s3_server.create_bucket(bucket)
    server = start_rest_catalog(
        f"s3://{bucket}/warehouse",
        s3_endpoint=s3_server.endpoint,
        s3_region=s3_server.region,
        s3_credentials={
            "AWS_ACCESS_KEY_ID": s3_server.access_key,
            "AWS_SECRET_ACCESS_KEY": s3_server.secret_key,
        },
    )
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def rest_catalog(s3_server: S3Server) -> Iterator[RestCatalogServer]:
    """An Iceberg REST catalog on a free port, its warehouse ``s3://rest-warehouse/warehouse``
    on the session's S3 server; stopped by its pid at the end of the session."""
    yield from rest_catalog_on(s3_server, "rest-warehouse")


@pytest.fixture
def schema_registry() -> Iterator[Any]:
    """A stand-in Schema Registry of the test's own (HTTP on 127.0.0.1), stopped after it."""
    from ..registry_server import start_schema_registry

    server = start_schema_registry()
    yield server
    server.stop()


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> str:
    """A short name no other test uses: for topics, groups and client ids."""
    stem = "".join(c if c.isalnum() else "-" for c in request.node.name)[:40].strip("-")
    return f"{stem}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local SparkSession (two cores) shared by every test of the session, with
    Spark's Kafka source on its class path."""
    pytest.importorskip("pyspark")
    from sluice.spark import spark_session

    session = spark_session(
        "local[2]",
        "sluice-tests",
        {"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"},
        kafka_source=True,  # options.reader "spark"
    )
    yield session
    session.stop()
    # py4j logs from finalizers at interpreter exit, after pytest closed the log streams
    logging.getLogger("py4j").setLevel(logging.WARNING)


@pytest.fixture
def cold_spark(spark: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The shared session as a cold task's for one test: its Python workers taken as not
    started and nothing ingested yet, so an ingest writes as a fresh task's first does
    (Spark's own writer where it can)."""
    monkeypatch.setattr(spark, "_sluice_python_workers_checked", False, raising=False)
    monkeypatch.setattr(spark, "_sluice_ingested", False, raising=False)
    return spark
