"""An Iceberg sink on a REST catalog (Apache Iceberg's REST catalog server, the session's own,
its warehouse on the S3 server), where a REST catalog fails differently from a SQL one:

- a batch and its quarantine rows are one commit, the REST specification's multi-table
  commit (``POST /v1/transactions/commit``): no commit of either table alone; the server's
  multi-table commit lands every table or, when one moved since, none;
- a commit whose answer is lost: a proxy in front of the server forwards the commit's POST
  and drops the connection before the answer (the commit happened: both tables have the
  batch), or answers 500 without forwarding it (it did not: neither has it), or the server is
  paused as the POST reaches it and the request times out (``connection.timeout``). The sink
  deletes nothing (invariant I8), the rerun resolves the outcome by reading the catalog, and
  ``sluice audit`` finds every message once; a batch without quarantine rows commits its
  table alone, and the same holds;
- a server whose multi-table commit is not atomic (Apache Iceberg's own REST fixture commits
  the tables one by one, and answers 409 if a later one meets a conflict): a refusal after
  the table was committed publishes the batch, deletes none of its files, and the quarantine
  follows;
- a run loads each table from the catalog a few times, not once per step (its commits keep
  what it loaded current);
- the server keeps its tables across a restart (its catalog is a SQLite file), listens on
  127.0.0.1 only, and the S3 keys are neither in its log nor on its command line;
- (``sluice compact`` and ``sluice expire`` on a table of the REST catalog: in
  test_iceberg_maintenance.py, beside the SQL catalog's.)
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import requests
from pyiceberg.exceptions import CommitStateUnknownException

from sluice.audit import audit
from sluice.batch import plan_batch
from sluice.spark import ingest
from sluice.testing.rest_catalog import RestCatalogServer
from sluice.testing.s3proxy import S3Proxy
from sluice.testing.waiting import wait_until

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


def test_a_run_loads_each_table_a_few_times_not_once_per_step(
    spark: Any, topic: KafkaTopic, rest_lake: Lake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A third batch loads the main table four times: to check it, to read the message
    columns it keeps, at the run's start, and after the multi-table commit (which leaves the
    table's object as it was); the quarantine table once. Every step between (the state,
    the batch's record, the write targets, the commit, the state after it) uses those. What
    the process's earlier ingests did stays done: the namespace is not asked for again, the
    table's location (probed by the second; the first probed the warehouse's) not probed
    again, the last batch's steps after its commit (still named in the table, as every run
    finds them) not checked again."""
    from pyiceberg.catalog.rest import RestCatalog

    from sluice.spark.sinks.s3 import S3Settings

    sink = rest_lake.sink()
    loads: list[str] = []
    load_table, make_namespace = RestCatalog.load_table, RestCatalog.create_namespace
    s3_client = S3Settings.client

    def counted(catalog: Any, identifier: Any) -> Any:
        loads.append(identifier if isinstance(identifier, str) else ".".join(identifier))
        return load_table(catalog, identifier)

    def namespace(catalog: Any, *args: Any, **kwargs: Any) -> Any:
        loads.append("create_namespace")
        return make_namespace(catalog, *args, **kwargs)

    def client(settings: Any, *args: Any, **kwargs: Any) -> Any:
        loads.append("s3 client")
        return s3_client(settings, *args, **kwargs)

    for _ in range(3):
        topic.send([reading(i) for i in range(30)] + BAD)
        spec = topic.plan()
        loads.clear()
        with monkeypatch.context() as patched:
            patched.setattr(RestCatalog, "load_table", counted)
            patched.setattr(RestCatalog, "create_namespace", namespace)
            patched.setattr(S3Settings, "client", client)
            ingest(spark, spec, sink, source=topic.source, schema=SCHEMA)
    main, quarantine = (f"{rest_lake.namespace}.{t}" for t in ("readings", "readings__quarantine"))
    assert sorted(loads) == sorted([main] * 4 + [quarantine]), loads
    assert len(sluice_summaries(rest_lake)) == 3
    assert_exactly_once(audit(sink, topic.source), 3 * (30 + len(BAD)))


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


@pytest.mark.parametrize("commit", sorted(COMMITS))
def test_a_commit_to_a_paused_rest_catalog_times_out_as_one_of_unknown_outcome(
    spark: Any,
    topic: KafkaTopic,
    rest_catalog: RestCatalogServer,
    rest_proxy: S3Proxy,
    monkeypatch: pytest.MonkeyPatch,
    commit: str,
) -> None:
    """The server paused (SIGSTOP) just as the commit's POST reaches it: pyiceberg's REST
    client set no timeout, so the ingest waited as long as the catalog did. Now the request
    gives up after the catalog's ``connection.timeout``, as a commit of unknown outcome: no
    file deleted, no offset committed. Resumed, the server commits what it held; the rerun
    reads the catalog, finds the batch and only finishes it."""
    lake = configure_rest(monkeypatch, rest_catalog, rest_proxy.endpoint, connection__timeout="2")
    bad = BAD if commit == "together" else []  # with quarantine rows: one commit of both
    topic.send([reading(i) for i in range(400)] + bad)
    spec, sink = topic.plan(), lake.sink()
    options = {"source": topic.source, "schema": SCHEMA}
    path = "transactions/commit" if bad else f"namespaces/{lake.namespace}/tables/readings"
    rest_proxy.on("POST", COMMITS[commit], rest_catalog.process.pause)

    try:
        with pytest.raises(CommitStateUnknownException) as failed:
            ingest(spark, spec, sink, **options)
    finally:
        rest_catalog.process.resume()

    message = str(failed.value)
    assert f"did not answer POST /v1/{path} within 2 s" in message
    assert "catalog property connection.timeout" in message and "outcome is unknown" in message
    assert rest_proxy.injected == [f"on POST {path}"]
    assert plan_batch(topic.queue) is not None, "no offset was committed"
    wait_until(lambda: len(table_rows(lake)) == 400, 60, 0.2, "the held commit to land")
    assert all(file_exists(lake, f) for f in data_files(lake)), "no file was deleted"

    again = ingest(spark, spec, sink, **options)

    assert again.written == 0, "the rerun found the batch in the catalog"
    assert len(table_rows(lake, "readings__quarantine")) == len(bad)
    assert [s["sluice.batch-id"] for s in sluice_summaries(lake)] == [spec.batch_id]
    assert plan_batch(topic.queue) is None
    assert_exactly_once(audit(sink, topic.source), 400 + len(bad))


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
