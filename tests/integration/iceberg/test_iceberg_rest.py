"""An Iceberg sink on a REST catalog (Apache Iceberg's REST catalog server, the session's own,
its warehouse on the S3 server), where a REST catalog fails differently from a SQL one:

- a batch and its quarantine rows are one commit, the REST specification's multi-table
  commit (``POST /v1/transactions/commit``): no commit of either table alone; the server's
  multi-table commit lands every table or, when one moved since, none;
- a commit whose answer is lost: a proxy in front of the server forwards the commit's POST
  and drops the connection before the answer (the commit happened: both tables have the
  batch), or answers 500 without forwarding it (it did not: neither has it). The sink deletes
  nothing (invariant I8), the rerun resolves the outcome by reading the catalog, and
  ``sluice audit`` finds every message once; a batch without quarantine rows commits its
  table alone, and the same holds;
- a server whose multi-table commit is not atomic (Apache Iceberg's own REST fixture commits
  the tables one by one, and answers 409 if a later one meets a conflict): a refusal after
  the table was committed publishes the batch, deletes none of its files, and the quarantine
  follows;
- the Iceberg guide's REST configuration (``.pyiceberg.yaml``, and the variables) ingests as
  written;
- the server keeps its tables across a restart (its catalog is a SQLite file), listens on
  127.0.0.1 only, and the S3 keys are neither in its log nor on its command line;
- (``sluice compact`` and ``sluice expire`` on a table of the REST catalog: in
  test_iceberg_maintenance.py, beside the SQL catalog's.)
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import requests
from pyiceberg.exceptions import CommitStateUnknownException

from sluice.audit import audit
from sluice.batch import plan_batch
from sluice.s3server import S3Server
from sluice.spark import ingest
from sluice.testing.rest_catalog import RestCatalogServer
from sluice.testing.s3proxy import S3Proxy

from ..spark.conftest import SCHEMA, KafkaTopic, reading
from ..spark.crashes import assert_exactly_once
from .conftest import Lake, configure_rest, data_files, file_exists, sluice_summaries, table_rows

BAD = [b"not json", b'{"temperature": "warm"}']


@pytest.fixture
def rest_proxy(rest_catalog: RestCatalogServer) -> Iterator[S3Proxy]:
    """A loopback HTTP proxy in front of the REST catalog (the S3 tests' proxy: it passes
    any HTTP/1.1 exchange through byte for byte and fails the ones a test plans)."""
    with S3Proxy(f"{rest_catalog.host}:{rest_catalog.port}") as proxy:
        yield proxy


#: (the proxy's fault, whether the commit happened, what pyiceberg raises): the connection
#: dropped after the server committed; a gateway's 500 (the server never saw the request)
LOST_ANSWERS = [
    ("drop", True, requests.ConnectionError),
    ("500", False, CommitStateUnknownException),
]
#: The commit of a batch with quarantine rows (both tables: POST /v1/transactions/commit),
#: and of one without (its table alone: POST /v1/namespaces/<ns>/tables/readings).
COMMITS = {"together": r"^transactions/commit$", "alone": r"/tables/readings$"}


def test_a_batch_and_its_quarantine_are_one_rest_commit(
    spark: Any,
    topic: KafkaTopic,
    rest_catalog: RestCatalogServer,
    rest_proxy: S3Proxy,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lake = configure_rest(monkeypatch, rest_catalog, rest_proxy.endpoint)
    topic.send([reading(i) for i in range(30)] + BAD)
    spec = topic.plan()
    sink = lake.sink()
    # a commit of either table alone would meet these (and fail the ingest)
    for table in ("readings", "readings__quarantine"):
        rest_proxy.fail("500", "POST", rf"/tables/{table}$", times=10)

    ingest(spark, spec, sink, source=topic.source, schema=SCHEMA)

    assert rest_proxy.injected == [], "neither table was committed alone"
    (batch,) = sluice_summaries(lake)
    (quarantine,) = sluice_summaries(lake, "readings__quarantine")
    assert batch["sluice.batch-id"] == quarantine["sluice.batch-id"] == spec.batch_id
    assert len(table_rows(lake)) == 30 and len(table_rows(lake, "readings__quarantine")) == 2
    assert_exactly_once(audit(sink, topic.source), 32)


def test_the_rest_catalogs_multi_table_commit_is_all_or_nothing(rest_lake: Lake) -> None:
    """Two tables' changes in one commit (``sluice.spark.sinks.multi_table``): both land;
    when one of the tables moved since, neither."""
    import pyarrow as pa
    from pyiceberg.exceptions import CommitFailedException

    from sluice.spark.sinks.multi_table import can_commit_together, commit_together, landed

    catalog = rest_lake.catalog
    assert can_commit_together(catalog)
    catalog.create_namespace(rest_lake.namespace)
    for name in ("a", "b"):
        catalog.create_table(f"{rest_lake.namespace}.{name}", schema=pa.schema([("n", pa.int64())]))

    def appending(name: str, values: list[int]) -> Any:
        transaction = rest_lake.table(name).transaction()
        transaction.append(pa.table({"n": pa.array(values, pa.int64())}))
        return transaction

    commit_together(catalog, [appending("a", [1, 2]), appending("b", [3])])
    assert [len(table_rows(rest_lake, name)) for name in "ab"] == [2, 1]

    first, second = appending("a", [4]), appending("b", [5])
    rest_lake.table("b").append(pa.table({"n": pa.array([6], pa.int64())}))  # b moves
    with pytest.raises(CommitFailedException):
        commit_together(catalog, [first, second])
    assert landed(first) is False and landed(second) is False
    assert [len(table_rows(rest_lake, name)) for name in "ab"] == [2, 2]


@pytest.mark.parametrize("commit", sorted(COMMITS))
@pytest.mark.parametrize(("fault", "committed", "error"), LOST_ANSWERS)
def test_a_rest_commit_whose_answer_is_lost_is_resolved_by_reading_the_catalog(
    spark: Any,
    topic: KafkaTopic,
    rest_catalog: RestCatalogServer,
    rest_proxy: S3Proxy,
    monkeypatch: pytest.MonkeyPatch,
    fault: str,
    committed: bool,
    error: type[Exception],
    commit: str,
) -> None:
    lake = configure_rest(monkeypatch, rest_catalog, rest_proxy.endpoint)
    bad = BAD if commit == "together" else []
    topic.send([reading(i) for i in range(400)] + bad)
    spec = topic.plan()
    sink = lake.sink()
    options = {"source": topic.source, "schema": SCHEMA}
    rest_proxy.fail(fault, "POST", COMMITS[commit])  # type: ignore[arg-type]

    with pytest.raises(error):
        ingest(spark, spec, sink, **options)

    assert len(rest_proxy.injected) == 1, "the fault was injected once"
    assert re.search(COMMITS[commit], rest_proxy.injected[0].split()[-1])
    assert len(table_rows(lake)) == (400 if committed else 0), "the table reads"
    quarantined = len(table_rows(lake, "readings__quarantine"))
    assert quarantined == (len(bad) if committed else 0), "with its quarantine, or neither"
    assert plan_batch(topic.queue) is not None, "no offset was committed"
    assert all(file_exists(lake, f) for f in data_files(lake)), "no file of the table was deleted"

    again = ingest(spark, spec, sink, **options)

    assert again.written == (0 if committed else 400), "the rerun read the catalog"
    rows = table_rows(lake)
    assert sorted(r["temperature"] for r in rows) == [i / 10 for i in range(400)]
    assert all(file_exists(lake, f) for f in data_files(lake))
    assert len(table_rows(lake, "readings__quarantine")) == len(bad)
    assert [s["sluice.batch-id"] for s in sluice_summaries(lake)] == [spec.batch_id]
    assert plan_batch(topic.queue) is None
    assert_exactly_once(audit(sink, topic.source), 400 + len(bad))


def test_a_refusal_after_the_table_was_committed_publishes_the_batch(
    spark: Any,
    topic: KafkaTopic,
    rest_lake: Lake,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """What Apache Iceberg's REST fixture does when the quarantine table meets a conflict
    after the table's commit went in (it commits the tables one by one): the table committed,
    then 409. (Our server is atomic; the fixture's behaviour is replayed here, by committing
    the batch's transaction alone and refusing.)"""
    from pyiceberg.exceptions import CommitFailedException
    from pyiceberg.table.update import AssertTableUUID

    from sluice.spark.sinks import iceberg

    def committed_then_refused(catalog: Any, transactions: Any) -> None:
        first = transactions[0]
        uuid = AssertTableUUID(uuid=first.table_metadata.table_uuid)
        catalog.commit_table(first._table, (*first._requirements, uuid), first._updates)
        raise CommitFailedException("Requirement failed: branch main has changed")

    monkeypatch.setattr(iceberg, "commit_together", committed_then_refused)
    topic.send([reading(i) for i in range(30)] + BAD)
    spec = topic.plan()
    sink = rest_lake.sink()

    result = ingest(spark, spec, sink, source=topic.source, schema=SCHEMA)

    assert result.written == 30
    assert "yet committed the batch" in caplog.text
    assert all(file_exists(rest_lake, f) for f in data_files(rest_lake))
    assert all(file_exists(rest_lake, f) for f in data_files(rest_lake, "readings__quarantine"))
    assert len(table_rows(rest_lake, "readings__quarantine")) == 2
    assert plan_batch(topic.queue) is None
    assert_exactly_once(audit(sink, topic.source), 32)


def test_the_rest_catalog_keeps_its_tables_across_a_restart_on_loopback_without_showing_keys(
    spark: Any, topic: KafkaTopic, rest_catalog: RestCatalogServer, rest_lake: Lake
) -> None:
    sink = rest_lake.sink()
    topic.send([reading(i) for i in range(20)])
    ingest(spark, topic.plan(), sink, source=topic.source, schema=SCHEMA)
    before = rest_lake.table().metadata_location
    assert before.startswith(rest_catalog.warehouse), "the server placed the table"

    old_pid = rest_catalog.pid
    rest_catalog.restart()

    assert rest_catalog.pid != old_pid
    assert rest_lake.table().metadata_location == before
    assert len(table_rows(rest_lake)) == 20
    topic.send([reading(20 + i) for i in range(20)])
    ingest(spark, topic.plan(), sink, source=topic.source, schema=SCHEMA)
    assert_exactly_once(audit(sink, topic.source), 40)
    secret = rest_catalog.client_properties()["s3.secret-access-key"]
    assert secret
    log = Path(rest_catalog.process.log_path).read_text()
    assert f"serving on {rest_catalog.uri}" in log and secret not in log
    cmdline = Path(f"/proc/{rest_catalog.pid}/cmdline").read_bytes().decode()
    assert "RESTCatalogServer" in cmdline and secret not in cmdline
    listening = [
        c.laddr
        for c in psutil.Process(rest_catalog.pid).net_connections("tcp")
        if c.status == psutil.CONN_LISTEN
    ]
    assert listening and all(a.ip.removeprefix("::ffff:") == "127.0.0.1" for a in listening)


def guide_rest_blocks() -> tuple[str, str]:
    """The Iceberg guide's REST configuration: its ``.pyiceberg.yaml`` and its variables."""
    guide = (Path(__file__).parents[3] / "docs" / "guides" / "iceberg.md").read_text()
    blocks = re.findall(r"```text\n(.*?)```", guide, re.S)
    (yaml,) = [b for b in blocks if b.startswith("catalog:") and "type: rest" in b]
    (variables,) = [b for b in blocks if "PYICEBERG_CATALOG__LAKE__TYPE=rest" in b]
    return yaml, variables


def test_the_guides_rest_configuration_ingests_as_written(
    spark: Any,
    topic: KafkaTopic,
    rest_catalog: RestCatalogServer,
    s3_server: S3Server,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The Iceberg guide's two ways, with this session's addresses (and keys) put in: the
    ``.pyiceberg.yaml`` ingests one batch, the variables (keys in AWS_*) the next."""
    yaml, variables = guide_rest_blocks()
    ours = {"http://127.0.0.1:8181": rest_catalog.uri, "http://127.0.0.1:9000": s3_server.endpoint}
    for theirs, mine in ours.items():
        assert theirs in yaml and theirs in variables
        yaml, variables = yaml.replace(theirs, mine), variables.replace(theirs, mine)
    yaml = re.sub(r"(s3\.access-key-id:) \.\.\..*", rf"\1 {s3_server.access_key}", yaml)
    yaml = re.sub(r"(s3\.secret-access-key:) \.\.\..*", rf"\1 {s3_server.secret_key}", yaml)
    for name in [n for n in os.environ if n.startswith(("PYICEBERG_", "AWS_"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    (tmp_path / ".pyiceberg.yaml").write_text(yaml)
    monkeypatch.setenv("PYICEBERG_HOME", str(tmp_path))
    namespace = f"ns_{uuid.uuid4().hex[:8]}"
    sink = f"iceberg://lake/{namespace}.readings"
    options = {"source": topic.source, "schema": SCHEMA}
    topic.send([reading(i) for i in range(10)])
    assert ingest(spark, topic.plan(), sink, **options).written == 10

    (tmp_path / ".pyiceberg.yaml").unlink()
    for line in variables.strip().splitlines():
        name, _, value = line.removeprefix("export ").partition("=")
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_server.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_server.secret_key)
    topic.send([reading(10 + i) for i in range(10)])
    assert ingest(spark, topic.plan(), sink, **options).written == 10

    assert_exactly_once(audit(sink, topic.source), 20)
    catalog = configure_rest(monkeypatch, rest_catalog).catalog
    table = catalog.load_table(f"{namespace}.readings")
    assert table.metadata_location.startswith(rest_catalog.warehouse)
    assert len(table.scan().to_arrow()) == 20
