"""An Apache Iceberg REST catalog server for the tests and ``sluice brokers up
--iceberg-rest``, from Maven Central artifacts (the tests import it as
:mod:`sluice.testing.rest_catalog`).

It serves Apache Iceberg's REST catalog test fixture, from the ``test-fixtures`` jar of
``org.apache.iceberg:iceberg-open-api`` (the code of the ``apache/iceberg-rest-fixture``
image): its ``RESTServerCatalogAdapter`` and iceberg-core's ``RESTCatalogServlet`` in Jetty,
in front of Iceberg's ``JdbcCatalog``. Here that catalog is a SQLite file in the server's
working directory (so a restart keeps every table) and its FileIO is ``S3FileIO``, writing
the tables' metadata to a warehouse on the tests' S3 server (:mod:`sluice.s3server`).

That POM declares none of the fixture's dependencies (they live in Iceberg's Gradle build
only), so :data:`REST_CATALOG_COORDINATES` lists them, pinned; :mod:`sluice.jars` resolves
them once into its cache (about 145 MB, the AWS SDK bundle most of it).

The fixture's own main class (``RESTCatalogServer``) listens on every interface of the
machine (``new Server(port)``) and logs its catalog properties. So the process runs
:data:`LAUNCHER_SOURCE` instead, Java in the fixture's package that builds the same handlers
and listens on 127.0.0.1 only. It also makes the multi-table commit (``POST
/v1/transactions/commit``) atomic, as the REST specification says it is: the fixture's
``RESTCatalogAdapter`` checks every table's requirements, then commits the tables one after
the other, each in a JDBC transaction of its own, so a reader can see the first table
changed and the next not yet (and a conflict on a later table leaves the earlier ones
committed, answered 409). The launcher's adapter checks the requirements and writes each
table's new metadata file, then moves every table's pointer in one JDBC transaction, each
only from the metadata it checked, or none (as Apache Polaris commits them in one
transaction of its database, apache/polaris#238). It is compiled once per machine into the jar
cache by the runtime's own compiler module (``java -m jdk.compiler/...``: no JDK needed where
the runtime image has ``jdk.compiler``, as Debian's ``openjdk-17-jre-headless`` does).

The server reads its catalog properties from ``CATALOG_*`` environment variables, as the
fixture does (``__`` is ``-``, ``_`` is ``.``: ``CATALOG_S3_ENDPOINT`` is ``s3.endpoint``),
and its address from ``CATALOG_REST_HOST`` / ``CATALOG_REST_PORT``. The S3 keys are not
among them: they reach the AWS SDK as ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` in the
process's environment (never on its command line), and the server hands no credentials to
clients (``include-credentials`` is off): a client brings its own ``s3.*`` properties, as
pyiceberg's REST catalog does.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .brokers import HOST, BrokerError, BrokerProcess, free_port

__all__ = [
    "ICEBERG_VERSION",
    "LAUNCHER_SOURCE",
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
MAIN_CLASS = "org.apache.iceberg.rest.SluiceRESTCatalogServer"
#: The fixture's handlers (as its RESTCatalogServer.start builds them), on 127.0.0.1 only.
LAUNCHER_SOURCE = """\
package org.apache.iceberg.rest;

import java.lang.reflect.Field;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import org.apache.hadoop.conf.Configuration;
import org.apache.iceberg.BaseTable;
import org.apache.iceberg.CatalogProperties;
import org.apache.iceberg.CatalogUtil;
import org.apache.iceberg.TableMetadata;
import org.apache.iceberg.TableMetadataParser;
import org.apache.iceberg.TableOperations;
import org.apache.iceberg.catalog.Catalog;
import org.apache.iceberg.exceptions.CommitFailedException;
import org.apache.iceberg.exceptions.CommitStateUnknownException;
import org.apache.iceberg.jdbc.JdbcCatalog;
import org.apache.iceberg.jdbc.JdbcClientPool;
import org.apache.iceberg.rest.requests.CommitTransactionRequest;
import org.apache.iceberg.rest.requests.UpdateTableRequest;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;
import org.eclipse.jetty.server.handler.gzip.GzipHandler;
import org.eclipse.jetty.servlet.ServletContextHandler;
import org.eclipse.jetty.servlet.ServletHolder;

/** Apache Iceberg's REST catalog test fixture, listening on one address (rest.host). */
public final class SluiceRESTCatalogServer {
  static final String NAME = "rest_backend";

  public static void main(String[] args) throws Exception {
    Map<String, String> properties = new HashMap<>(RCKUtils.environmentCatalogConfig());
    String host = properties.remove("rest.host");
    int port = Integer.parseInt(properties.remove("rest.port"));
    boolean atomic = !"false".equals(properties.remove("sluice.atomic-commits"));
    properties.putIfAbsent(CatalogProperties.CATALOG_IMPL, JdbcCatalog.class.getName());
    properties.putIfAbsent("jdbc.schema-version", "V1");
    properties.putIfAbsent(CatalogProperties.CLIENT_POOL_SIZE, "1");
    Catalog catalog = CatalogUtil.buildIcebergCatalog(NAME, properties, new Configuration());
    RESTCatalogServer.CatalogContext backend =
        new RESTCatalogServer.CatalogContext(catalog, properties);
    RESTCatalogAdapter adapter =
        atomic
            ? new AtomicCommits(backend)
            : new RESTServerCatalogAdapter(backend);
    ServletContextHandler context = new ServletContextHandler(ServletContextHandler.NO_SESSIONS);
    context.addServlet(new ServletHolder(new RESTCatalogServlet(adapter)), "/*");
    context.insertHandler(new GzipHandler());
    Server server = new Server();
    ServerConnector connector = new ServerConnector(server);
    connector.setHost(host);
    connector.setPort(port);
    server.addConnector(connector);
    server.setHandler(context);
    server.start();
    System.out.println("sluice: Iceberg REST catalog serving on http://" + host + ":" + port);
    server.join();
  }

  /**
   * The fixture's adapter with an atomic multi-table commit: every table's requirements
   * checked and its new metadata file written, then one JDBC transaction moves every table's
   * pointer, each only from the metadata it was checked against, or none.
   */
  static final class AtomicCommits extends RESTServerCatalogAdapter {
    private final Catalog catalog;

    AtomicCommits(RESTCatalogServer.CatalogContext context) {
      super(context);
      this.catalog = context.catalog();
    }

    @Override
    public <T extends RESTResponse> T handleRequest(
        Route route, Map<String, String> vars, Object body, Class<T> responseType) {
      if (route != Route.COMMIT_TRANSACTION) {
        return super.handleRequest(route, vars, body, responseType);
      }
      commitTogether(castRequest(CommitTransactionRequest.class, body));
      return null;
    }

    private void commitTogether(CommitTransactionRequest request) {
      List<String[]> moves = new ArrayList<>();
      for (UpdateTableRequest change : request.tableChanges()) {
        TableOperations ops = ((BaseTable) catalog.loadTable(change.identifier())).operations();
        TableMetadata base = ops.current();
        change.requirements().forEach(requirement -> requirement.validate(base));
        TableMetadata.Builder builder = TableMetadata.buildFrom(base);
        change.updates().forEach(update -> update.applyTo(builder));
        TableMetadata updated = builder.build();
        if (updated.changes().isEmpty()) {
          continue;
        }
        String previous = base.metadataFileLocation();
        String name =
            String.format("%05d-%s.metadata.json", version(previous) + 1, UUID.randomUUID());
        String location = ops.metadataFileLocation(name);
        TableMetadataParser.write(updated, ops.io().newOutputFile(location));
        String namespace = change.identifier().namespace().toString();
        moves.add(new String[] {location, previous, namespace, change.identifier().name()});
      }
      String move =
          "UPDATE iceberg_tables SET metadata_location = ?, previous_metadata_location = ?"
              + " WHERE catalog_name = ? AND table_namespace = ? AND table_name = ?"
              + " AND metadata_location = ?";
      try {
        pool().run(
            connection -> {
              boolean autoCommit = connection.getAutoCommit();
              connection.setAutoCommit(false);
              try (PreparedStatement statement = connection.prepareStatement(move)) {
                for (String[] row : moves) {
                  statement.setString(1, row[0]);
                  statement.setString(2, row[1]);
                  statement.setString(3, NAME);
                  statement.setString(4, row[2]);
                  statement.setString(5, row[3]);
                  statement.setString(6, row[1]);
                  if (statement.executeUpdate() != 1) {
                    connection.rollback();
                    throw new CommitFailedException(
                        "Table %s.%s was changed by another commit", row[2], row[3]);
                  }
                }
                connection.commit();
              } catch (SQLException | RuntimeException e) {
                connection.rollback();
                throw e;
              } finally {
                connection.setAutoCommit(autoCommit);
              }
              return null;
            });
      } catch (SQLException e) {
        throw new CommitStateUnknownException(e);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new CommitStateUnknownException(e);
      }
    }

    /**
     * The catalog's own connection (its pool holds one: "clients" is 1): a second connection
     * of ours waited on a read lock the catalog's connection kept after a restart (sqlite-jdbc
     * keeps the metadata query of the catalog's start-up open), and failed SQLITE_BUSY.
     */
    private JdbcClientPool pool() {
      try {
        Field field = JdbcCatalog.class.getDeclaredField("connections");
        field.setAccessible(true);
        return (JdbcClientPool) field.get(catalog);
      } catch (ReflectiveOperationException e) {
        throw new IllegalStateException("JdbcCatalog has no connection pool field", e);
      }
    }

    private static int version(String location) {
      String name = location.substring(location.lastIndexOf('/') + 1);
      try {
        return Integer.parseInt(name.substring(0, name.indexOf('-')));
      } catch (RuntimeException e) {
        return -1;
      }
    }
  }
}
"""
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
    "-Daws.java.v1.disableDeprecationAnnouncement=true",
)


def rest_catalog_classpath(java: str | None = None) -> str:
    """The server's classpath: its jars from the cache, resolved (downloaded) the first
    time, and the launcher's classes, compiled the first time (with ``java``)."""
    from . import jars

    try:
        found = jars.resolve(REST_CATALOG_COORDINATES)
        java = java or jars.find_java()
    except jars.JarError as exc:
        raise BrokerError(f"Iceberg REST catalog {ICEBERG_VERSION}: {exc}") from None
    classpath = os.pathsep.join(str(j) for j in found)
    return os.pathsep.join([str(_launcher(java, classpath)), classpath])


def _launcher(java: str, classpath: str) -> Path:
    """The directory of :data:`LAUNCHER_SOURCE`'s compiled class, in the jar cache (compiled
    once, under a lock; a finished directory is only ever renamed into place)."""
    from . import jars

    key = hashlib.sha256(
        "\0".join([LAUNCHER_SOURCE, *REST_CATALOG_COORDINATES]).encode()
    ).hexdigest()[:16]
    root = jars.cache_dir() / "classes"
    done = root / f"rest-catalog-{key}"
    compiled = done / "org" / "apache" / "iceberg" / "rest" / "SluiceRESTCatalogServer.class"
    if compiled.is_file():
        return done
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "compile.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if compiled.is_file():
            return done
        work = Path(tempfile.mkdtemp(prefix="rest-catalog-", dir=root))
        try:
            source = work / "SluiceRESTCatalogServer.java"
            source.write_text(LAUNCHER_SOURCE)
            argv = [java, "-m", "jdk.compiler/com.sun.tools.javac.Main", "--release", "17"]
            argv += ["-proc:none", "-nowarn", "-cp", classpath, "-d", str(work / "out")]
            done_run = subprocess.run(
                [*argv, str(source)], capture_output=True, text=True, timeout=300, check=False
            )
            if done_run.returncode != 0:
                output = (done_run.stderr + done_run.stdout).strip()
                hint = (
                    " This Java has no compiler module (jdk.compiler): install Debian's "
                    "openjdk-17-jre-headless (its runtime image has it) or a JDK 17+ "
                    "(apt-get install -y openjdk-17-jdk-headless), or set JAVA_HOME to one."
                    if "jdk.compiler" in output
                    else ""
                )
                raise BrokerError(
                    f"Could not compile the Iceberg REST catalog's launcher with {java}:"
                    f"{hint}\n{output[-2000:]}"
                )
            os.replace(work / "out", done)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return done


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

    def s3_environment(self) -> dict[str, str]:
        """The AWS SDK's variables for another JVM that reads and writes this catalog's
        warehouse (a Kafka Connect sink's): its S3 keys and region, and no profile or
        instance metadata. Empty for a local warehouse."""
        if not self.s3_endpoint:
            return {}
        return {
            "AWS_REGION": self.s3_region,
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
            "AWS_EC2_METADATA_DISABLED": "true",
            **{k: v for k, v in self._credentials.items() if k.startswith("AWS_")},
        }

    def serves(self) -> bool:
        """True once ``GET /v1/config`` answers 200 with the catalog's configuration."""
        direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # no http_proxy
        try:
            with direct.open(f"{self.uri}/v1/config", timeout=5) as response:
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
    atomic_commits: bool = True,
) -> RestCatalogServer:
    """An Iceberg REST catalog on ``port`` (a free one by default) of 127.0.0.1 with its
    tables under ``warehouse`` (``s3://bucket/prefix``, or a local directory's ``file://``
    URI), serving once this returns. Its SQLite catalog is in ``workdir`` (a temporary
    directory by default, removed by :meth:`RestCatalogServer.close`).

    ``s3_credentials``: ``AWS_ACCESS_KEY_ID`` and ``AWS_SECRET_ACCESS_KEY`` for S3FileIO,
    passed to the server in its environment only. ``atomic_commits=False``: the fixture's
    own multi-table commit, one table after the other (to compare, see the module
    docstring)."""
    from . import jars

    try:
        java = jars.find_java()
    except jars.JarError as exc:
        raise BrokerError(f"The Iceberg REST catalog needs Java: {exc}") from None
    classpath = rest_catalog_classpath(java)
    port = port or free_port()
    owns = workdir is None
    path = Path(tempfile.mkdtemp(prefix="sluice-rest-catalog-") if workdir is None else workdir)
    path.mkdir(parents=True, exist_ok=True)
    credentials = dict(s3_credentials or {})
    environment = {
        # The catalog's properties (RCKUtils.environmentCatalogConfig).
        # a commit waits up to 30 s for the other requests' locks (sqlite-jdbc waits 3 s,
        # which a loaded machine's concurrent requests outlasted: SQLITE_BUSY)
        "CATALOG_URI": f"jdbc:sqlite:{path / 'catalog.db'}?busy_timeout=30000",
        "CATALOG_JDBC_SCHEMA__VERSION": "V1",
        "CATALOG_WAREHOUSE": warehouse,
        "CATALOG_REST_HOST": HOST,
        "CATALOG_REST_PORT": str(port),
    }
    if not atomic_commits:
        environment["CATALOG_SLUICE_ATOMIC__COMMITS"] = "false"
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
