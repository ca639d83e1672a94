"""An Iceberg sink when the catalog, a crash or a second run fails around a commit
(docs/fault-model.md), on real SQL catalogs:

- a commit whose answer is lost deletes no file the table may hold, and the rerun resolves it
  by reading the catalog;
- a batch and its quarantine rows become visible together: a crash between the two commits is
  finished by the next run, even one that plans a new batch (MQTT);
- the stream state survives a compaction and the expiry of every older snapshot;
- a second run of the same batch never destroys the first run's work;
- another writer's commit while a run holds the tables it loaded is met by the run's commit,
  which loads them again and publishes its batch beside the other's.
"""

from __future__ import annotations

import datetime
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.exceptions import CommitStateUnknownException

from sluice.audit import audit
from sluice.batch import BatchSpec, plan_batch
from sluice.spark import ingest
from sluice.spark.failpoints import armed
from sluice.spark.sinks import ConcurrentIngestError, StreamKey, open_sink
from sluice.testing.faulty_catalog import injected, planned
from sluice.testing.plugin import Broker

from ..spark.conftest import SCHEMA, KafkaTopic, open_topic, reading
from ..spark.crashes import assert_exactly_once, run_child
from ..spark.test_crash_matrix import BAD, publish_envelopes
from ..spark.test_fault_model import blocked_at
from .conftest import Lake, data_files, sluice_summaries, table_rows


@pytest.mark.parametrize("fault", ["unknown-after", "unknown-before"])
def test_a_commit_whose_answer_is_lost_keeps_its_files_and_the_rerun_reads_the_catalog(
    spark: Any, topic: KafkaTopic, faulty_lake: Lake, fault: str
) -> None:
    """The finding: a REST catalog's 504, a dropped database connection or a SIGTERM after
    the commit made discard() delete the files of the snapshot that did commit; the rerun
    found the batch and committed the offsets: the table was unreadable, the offsets
    committed. (unknown-before: the commit did not happen, and the rerun writes it.)"""
    topic.send([reading(i) for i in range(400)] + BAD)
    spec = topic.plan()
    sink = faulty_lake.sink()
    options = {"source": topic.source, "schema": SCHEMA}

    with planned((fault, "readings")), pytest.raises(CommitStateUnknownException):
        ingest(spark, spec, sink, **options)
    assert injected()[-1] == (fault, "readings")
    committed = fault == "unknown-after"
    assert len(table_rows(faulty_lake)) == (400 if committed else 0), "the table reads"
    assert plan_batch(topic.queue) is not None, "no offset was committed"

    again = ingest(spark, spec, sink, **options)

    assert again.written == (0 if committed else 400)
    rows = table_rows(faulty_lake)
    assert sorted(r["temperature"] for r in rows) == [i / 10 for i in range(400)]
    assert all(Path(f.removeprefix("file://")).exists() for f in data_files(faulty_lake))
    assert len(table_rows(faulty_lake, "readings__quarantine")) == 2
    assert plan_batch(topic.queue) is None
    assert_exactly_once(audit(sink, topic.source), 402)


def test_a_crash_between_the_batch_and_its_quarantine_is_finished_by_the_next_new_batch(
    spark: Any, mosquitto_broker: Broker, unique_name: str, sqlite_lake: Lake
) -> None:
    """The finding: the quarantine rows were committed in a snapshot of their own before the
    batch's; a crash between the two, then a re-plan under a new batch id (every MQTT retry)
    left the bad records twice. Now the batch's commit comes first and names its quarantine
    files; whichever run comes next finishes it, once."""
    client_id = f"{unique_name}-ingest"
    source = {"connection.uri": mosquitto_broker.url}
    sink = sqlite_lake.sink()
    first = BatchSpec("mqtt", unique_name, client_id=client_id, max_messages=100, sequence=1)
    ingest(spark, first, sink, source=source, schema=SCHEMA)  # subscribes the session
    sent = publish_envelopes(
        mosquitto_broker, unique_name, [json.loads(reading(i)) for i in range(10)] + BAD
    )
    crashed = BatchSpec("mqtt", unique_name, client_id=client_id, max_messages=100, sequence=2)
    arguments = {"spec": crashed.to_dict(), "sink": sink, "source": source, "schema": SCHEMA}

    code, stderr = run_child(spark, arguments, "publish.after_rename")
    assert code == -9, stderr[-2000:]
    assert len(table_rows(sqlite_lake)) == 10, "the batch is published"
    # the session redelivers all 12 to the next plan, a new batch
    replan = BatchSpec("mqtt", unique_name, client_id=client_id, max_messages=100, sequence=3)
    result = ingest(spark, replan, sink, source=source, schema=SCHEMA)

    assert result.written == 0 and result.duplicates == 12
    bad = table_rows(sqlite_lake, "readings__quarantine")
    assert sorted(r["message_id"] for r in bad) == sorted(sent[-2:]), "each bad record once"
    ids = [r["message_id"] for r in table_rows(sqlite_lake) + bad]
    assert sorted(ids) == sorted(sent)
    assert audit(sink).ok


def compact_and_expire(lake: Lake) -> None:
    """What a maintenance job does: rewrite the table's files in one snapshot of its own
    (no Sluice summary), then expire every older snapshot."""
    table = lake.table()
    table.overwrite(table.scan().to_arrow())
    table = lake.table()
    later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=1)
    table.maintenance.expire_snapshots().older_than(later).commit()
    assert len(lake.table().snapshots()) == 1
    assert not sluice_summaries(lake), "no snapshot of Sluice's is left"


def test_the_stream_state_survives_compaction_and_snapshot_expiry(
    spark: Any, topic: KafkaTopic, sqlite_lake: Lake
) -> None:
    """The finding: state() and find() relied on the newest snapshot Sluice wrote; after a
    compaction on top and snapshot expiry the stream state was gone: the rerun window wrote
    again, MQTT de-duplication was forgotten, and the audit reported false losses."""
    sink = sqlite_lake.sink()
    options = {"source": topic.source, "schema": SCHEMA}
    specs = []
    for n in range(3):
        topic.send([reading(10 * n + i) for i in range(10)])
        specs.append(topic.plan())
        ingest(spark, specs[-1], sink, **options)
    stream = StreamKey.of(specs[0])
    before = open_sink(sink).state(stream)

    compact_and_expire(sqlite_lake)

    assert open_sink(sink).state(stream).written == before.written
    rerun = ingest(spark, specs[1], sink, **options)
    assert (rerun.written, rerun.skipped) == (0, specs[1].message_count)
    topic.send([reading(30 + i) for i in range(5)])
    ingest(spark, topic.plan(), sink, **options)
    temperatures = sorted(r["temperature"] for r in table_rows(sqlite_lake))
    assert temperatures == [i / 10 for i in range(35)]
    report = audit(sink, topic.source)
    assert report.ok and report.streams[0].batches == 4, "\n".join(report.lines())


def test_mqtt_de_duplication_survives_compaction_and_snapshot_expiry(
    spark: Any, mosquitto_broker: Broker, unique_name: str, sqlite_lake: Lake
) -> None:
    client_id = f"{unique_name}-ingest"
    source = {"connection.uri": mosquitto_broker.url}
    sink = sqlite_lake.sink()
    batch = BatchSpec("mqtt", unique_name, client_id=client_id, max_messages=100, sequence=1)
    ingest(spark, batch, sink, source=source, schema=SCHEMA)  # subscribes the session
    sent = publish_envelopes(
        mosquitto_broker, unique_name, [json.loads(reading(i)) for i in range(8)]
    )
    crashed = BatchSpec("mqtt", unique_name, client_id=client_id, max_messages=100, sequence=2)
    arguments = {"spec": crashed.to_dict(), "sink": sink, "source": source, "schema": SCHEMA}
    code, stderr = run_child(spark, arguments, "commit.before")  # published, not acknowledged
    assert code == -9, stderr[-2000:]

    compact_and_expire(sqlite_lake)
    replan = BatchSpec("mqtt", unique_name, client_id=client_id, max_messages=100, sequence=3)
    result = ingest(spark, replan, sink, source=source, schema=SCHEMA)

    assert (result.written, result.duplicates) == (0, 8), "the redelivered ids are known"
    assert sorted(r["message_id"] for r in table_rows(sqlite_lake)) == sorted(sent)
    assert audit(sink).ok


def test_a_second_run_of_the_same_batch_never_destroys_the_first_runs_work(
    spark: Any, topic: KafkaTopic, sqlite_lake: Lake
) -> None:
    """Iceberg holds no lock: the commit is the fence. A first run waits with its batch
    staged; a second run of the same batch publishes it; the first then finds the offsets
    taken, gives up its own files only, and the table holds every message once."""
    topic.send([reading(i) for i in range(40)] + BAD)
    spec = topic.plan()
    sink = sqlite_lake.sink()
    options = {"source": topic.source, "schema": SCHEMA}
    hold, reached, release = blocked_at("stage.after_write")
    errors: list[BaseException] = []

    def first() -> None:
        try:
            ingest(spark, spec, sink, **options)
        except BaseException as exc:
            errors.append(exc)

    with armed("stage.after_write", hold):
        runner = threading.Thread(target=first)
        runner.start()
        try:
            assert reached.wait(120), f"the first run never staged its batch: {errors}"
            ingest(spark, spec, sink, **options)
            published = set(data_files(sqlite_lake))
        finally:
            release.set()
            runner.join(120)

    assert len(errors) == 1 and isinstance(errors[0], ConcurrentIngestError), errors
    assert set(data_files(sqlite_lake)) == published, "the second run's files are intact"
    assert all(Path(f.removeprefix("file://")).exists() for f in published)
    assert len(table_rows(sqlite_lake)) == 40
    assert_exactly_once(audit(sink, topic.source), 42)


@pytest.mark.parametrize("catalog", ["sqlite", "rest"])
def test_another_writers_commit_while_a_run_holds_its_tables_is_met_and_both_are_kept(
    spark: Any,
    topic: KafkaTopic,
    noida_broker: Broker,
    unique_name: str,
    request: pytest.FixtureRequest,
    catalog: str,
) -> None:
    """A run keeps the tables it loaded until its commit (no catalog request for each step).
    Another stream's batch is published into the same table while the run is held with its
    batch staged: the run's commit meets the conflict, loads the tables again, and publishes;
    both batches and both streams' states are in the table. (REST: both tables in one
    commit, the batches have quarantine rows.)"""
    lake: Lake = request.getfixturevalue(f"{catalog}_lake")
    sink = lake.sink()
    topic.send([reading(i) for i in range(30)] + BAD)
    spec = topic.plan()
    hold, reached, release = blocked_at("stage.after_write")
    errors: list[BaseException] = []

    def first() -> None:
        try:
            ingest(spark, spec, sink, source=topic.source, schema=SCHEMA)
        except BaseException as exc:
            errors.append(exc)

    other = open_topic(noida_broker, f"{unique_name}-other")
    try:
        other.send([reading(i) for i in range(20)] + BAD)
        other_spec = other.plan()
        with armed("stage.after_write", hold):
            runner = threading.Thread(target=first)
            runner.start()
            try:
                assert reached.wait(120), f"the first run never staged its batch: {errors}"
                ingest(spark, other_spec, sink, source=other.source, schema=SCHEMA)
            finally:
                release.set()
                runner.join(120)
        assert errors == []
        assert len(sluice_summaries(lake)) == 2
        assert len(table_rows(lake)) == 50
        assert len(table_rows(lake, "readings__quarantine")) == 2 * len(BAD)
        opened = open_sink(sink)
        for stream in (StreamKey.of(spec), StreamKey.of(other_spec)):
            assert opened.state(stream).batches == 1, stream
        assert_exactly_once(audit(sink, topic.source), 50 + 2 * len(BAD))
    finally:
        other.close()
