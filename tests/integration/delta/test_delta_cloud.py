"""The Delta sink on Azure Blob Storage (Azurite, Microsoft's emulator) and Google Cloud
Storage: batches through the sink's publish path, ``sluice compact`` and the audit; a
current-state table (write_mode="upsert") ingested by Spark; two runs of a stream at once,
refused by the lease. fake-gcs-server (the GCS emulator) serves no XML API, which Rust's
object_store writes with: the sink refuses it at its check, naming ``STORAGE_EMULATOR_HOST``,
before anything is written. The crash matrix's Delta points on Azurite are in
``test_delta_crashes``."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import PurePosixPath
from typing import Any

import pytest

from sluice.audit import audit
from sluice.batch import BatchSpec
from sluice.maintenance import compact
from sluice.queues.config import ConfigError
from sluice.spark import ingest
from sluice.spark.sinks import ConcurrentIngestError, StreamKey, open_sink
from sluice.spark.sinks.cloud import CloudObjects, _meta_tag, _mode, azure_settings, gcs_settings
from sluice.spark.sinks.delta import DeltaSink, app_id, parse_delta_uri
from sluice.spark.sinks.objects import PreconditionFailed
from sluice.testing.batches import publish_rows
from sluice.testing.debezium import SourceTable
from sluice.testing.plugin import CloudBucket
from tests.unit.cli.runner import assert_ok, run

from ..spark.conftest import KafkaTopic
from ..spark.test_cdc import current, delta_target, expected, send
from ..spark.test_compaction import mqtt_rows, small_mqtt_sink
from .conftest import DeltaPlace
from .test_ingest_delta import commits


def spec(n: int) -> BatchSpec:
    return BatchSpec("mqtt", "sensors/#", client_id="maintenance", max_messages=10, sequence=n)


def test_batches_compaction_and_the_audit_on_azure(
    delta_place: Callable[[str], DeltaPlace],
) -> None:
    where = delta_place("azurite")
    location = where.sink("t")
    specs = small_mqtt_sink(location)
    stream = StreamKey.of(specs[0])
    assert where.table("t").transaction_version(app_id(stream)) == 4
    assert len(commits(where.uri("t"))) == 4
    assert [k for k in where.files("t", "_delta_log") if k.endswith(".json")], "delta-rs's log"
    assert len(where.files("t", "_sluice", "batches")) == 4, "the sink's own records"
    compacted = compact(location, "1MB", min_files=2)
    assert compacted.tables["table"] == {"before": 4, "after": 1}, compacted.lines()

    report = audit(location)
    assert report.ok, "\n".join(report.lines())
    assert (report.streams[0].messages, report.streams[0].batches) == (18, 4)
    out = assert_ok(run("audit", location))  # the command, on the same variables
    assert "OK: every message is in the sink once" in out
    small_mqtt_sink(location, 1, first=4)  # the next batch lands once
    assert DeltaSink(location).state(stream).batches == 5
    report = audit(location)
    assert report.ok and report.streams[0].messages == 23, "\n".join(report.lines())


def test_a_second_run_of_a_stream_on_azure_is_refused_and_touches_nothing(
    delta_place: Callable[[str], DeltaPlace],
) -> None:
    where = delta_place("azurite")
    location = where.sink("t")
    small_mqtt_sink(location, 1)
    stream = StreamKey.of(spec(1))
    first, second = DeltaSink(location), DeltaSink(location)
    with first.exclusive(stream):
        with pytest.raises(ConcurrentIngestError, match=r"lease az://.*/t/_sluice/runs/"):
            publish_rows(second, spec(1), *mqtt_rows(1))
        staging = first.stage(spec(1).batch_id)
        assert not [k for k in where.files("t", "sluice") if spec(1).batch_id[:8] in k]
        first.discard(staging)
    publish_rows(first, spec(1), *mqtt_rows(1))
    report = audit(location)
    assert report.ok and report.streams[0].batches == 2, "\n".join(report.lines())


def test_a_state_object_another_run_replaced_is_refused_on_azure(
    delta_place: Callable[[str], DeltaPlace],
) -> None:
    """The sink's replace-if-unchanged on Azure: a state object another writer replaced after
    this run read it is never overwritten unseen."""
    where = delta_place("azurite")
    location = where.sink("t")
    small_mqtt_sink(location, 1)
    mine, other = DeltaSink(location), DeltaSink(location)
    path = mine.root / "_sluice" / "probe.json"
    assert mine.store.create_json(path, {"run": "mine"})
    assert not other.store.create_json(path, {"run": "other"}), "created once"
    assert other.store.read_json(path) == {"run": "mine"}
    other.store.write_json(path, {"run": "other"})
    with pytest.raises(ConcurrentIngestError, match=r"Another run wrote az://"):
        mine.store.write_json(path, {"run": "mine, again"})
    assert DeltaSink(location).store.read_json(path) == {"run": "other"}


def test_of_concurrent_conditional_writes_on_azurite_one_wins(
    azure_container: CloudBucket,
) -> None:
    """What the sink relies on Azurite for: of concurrent creates of one object, and of
    concurrent replacements of one version of it, exactly one succeeds."""
    objects = CloudObjects(azure_settings(), azure_container.name)

    def attempt(write: Callable[[], object]) -> bool:
        try:
            write()
        except PreconditionFailed:
            return False
        return True

    with ThreadPoolExecutor(8) as pool:
        created = list(
            pool.map(
                lambda n: attempt(lambda: objects.put_json("k.json", {"n": n}, if_none_match=True)),
                range(8),
            )
        )
        assert created.count(True) == 1, created
        _, version = objects.get_json("k.json")
        replaced = list(
            pool.map(
                lambda n: attempt(lambda: objects.put_json("k.json", {"m": n}, if_match=version)),
                range(8),
            )
        )
        assert replaced.count(True) == 1, replaced
    found, _ = objects.get_json("k.json")
    assert list(found) == ["m"]


def test_a_current_state_table_on_azure(
    spark: Any, topic: KafkaTopic, azure_container: CloudBucket
) -> None:
    """write_mode="upsert" on Azure: Spark's tasks write the files (pyarrow's
    AzureFileSystem), one Delta commit per batch applies the changes by key."""
    target = delta_target(azure_container.uri("customers"))
    source = SourceTable()
    messages = []
    for key in range(6):
        messages += source.upsert(key, name=f"c{key}")
    messages += source.delete(2) + source.upsert(3, name="c3-renamed")
    send(topic, messages)
    first = ingest(spark, topic.plan(), target.sink, source=topic.source, write_mode="upsert")
    assert first.written == len(messages)
    assert current(target) == expected(source, ["id", "name"])
    later = source.delete(4) + source.upsert(1, name="c1-renamed")
    send(topic, later)
    second = ingest(spark, topic.plan(), target.sink, source=topic.source, write_mode="upsert")
    assert current(target) == expected(source, ["id", "name"])
    assert target.batches() == [first.batch_id, second.batch_id]
    report = audit(target.sink, topic.source)
    assert report.ok, report.lines()
    assert report.current_state is not None and report.current_state.keys == len(source.rows)
    out = assert_ok(run("audit", target.sink, "--source", topic.source))
    assert "OK: every message is in the sink once" in out


def test_an_emulator_without_the_xml_api_is_refused_before_anything_is_written(
    gcs_bucket: CloudBucket,
) -> None:
    """fake-gcs-server answers object_store's PUT (GCS's XML API) with 400: the sink's check
    says which server, from which setting, before a file is written."""
    sink = open_sink(f"delta://{gcs_bucket.uri('t')}")
    with pytest.raises(ConfigError, match=r"STORAGE_EMULATOR_HOST.*XML API") as refused:
        sink.check()
    assert "Google Cloud Storage" in str(refused.value)
    assert not gcs_bucket.keys(), "nothing was written"


def test_a_missing_container_or_a_wrong_key_is_refused_saying_what_to_check(
    azure_container: CloudBucket, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ConfigError, match=r"az://nosuch/t .*Check the container exists"):
        open_sink("delta://az://nosuch/t").check()
    with monkeypatch.context() as wrong:
        wrong.setenv("AZURE_STORAGE_ACCOUNT_KEY", "d3Jvbmc=")
        with pytest.raises(ConfigError, match=r"AZURE_STORAGE_ACCOUNT_KEY") as refused:
            open_sink(f"delta://{azure_container.uri('t')}").check()
    assert "d3Jvbmc=" not in str(refused.value)
    assert not azure_container.keys(), "nothing was written"


def test_object_store_locations_name_their_bucket_and_account() -> None:
    target = parse_delta_uri("delta://abfss://lake@acct.dfs.core.windows.net/a/readings")
    assert (target.table, target.bucket, target.scheme, target.account) == (
        PurePosixPath("/lake/a/readings"),
        "lake",
        "az",
        "acct",
    )
    assert target.uri(target.quarantine) == "az://lake/a/readings/_quarantine"
    gs = parse_delta_uri("delta://gs://lake/readings?quarantine=gs://lake/bad")
    assert (gs.uri(gs.table), gs.uri(gs.quarantine)) == ("gs://lake/readings", "gs://lake/bad")
    with pytest.raises(ConfigError, match="in the same bucket"):
        parse_delta_uri("delta://az://lake/t?quarantine=s3://lake/q")


def test_the_settings_come_from_the_standard_variables() -> None:
    azurite = azure_settings(
        environ={"AZURE_STORAGE_CONNECTION_STRING": "UseDevelopmentStorage=true"}
    )
    assert azurite.endpoint == "http://127.0.0.1:10000/devstoreaccount1"
    assert azurite.storage_options()["allow_http"] == "true"
    keyed = azure_settings(
        environ={
            "AZURE_STORAGE_CONNECTION_STRING": (
                "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=c2VjcmV0"
            )
        }
    )
    assert keyed.endpoint is None
    assert keyed.storage_options() == {
        "azure_storage_account_name": "acct",
        "azure_storage_account_key": "c2VjcmV0",
    }
    assert "c2VjcmV0" not in repr(keyed)
    with pytest.raises(ConfigError, match="AZURE_STORAGE_ACCOUNT_NAME"):
        azure_settings(environ={})
    emulator = gcs_settings({"STORAGE_EMULATOR_HOST": "localhost:4443"})
    assert (emulator.endpoint, emulator.endpoint_source) == (
        "http://localhost:4443",
        "STORAGE_EMULATOR_HOST",
    )
    # GCS replaces on the generation, Azure on the ETag: a version keeps both
    assert _mode(_meta_tag({"e_tag": '"abc"', "version": "1795"})) == {
        "e_tag": '"abc"',
        "version": "1795",
    }
    assert _mode(_meta_tag({"e_tag": '"0x1F"', "version": None})) == {"e_tag": '"0x1F"'}
    with pytest.raises(ConfigError, match="GOOGLE_APPLICATION_CREDENTIALS names /nowhere"):
        gcs_settings({"GOOGLE_APPLICATION_CREDENTIALS": "/nowhere"})
