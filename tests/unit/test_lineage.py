"""Lineage names (sluice.lineage) and the Prometheus exposition (sluice.prometheus): topics,
paths and Iceberg tables named the OpenLineage way, never with a password; what cannot be
known (MQTT lag) left out of the metrics."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice.lineage import DatasetName, path_dataset, sink_dataset, source_dataset, topic_asset_key
from sluice.metrics import MQTT_UNKNOWN, PartitionLag, StreamLag
from sluice.prometheus import exposition


def test_topics_are_named_by_their_first_server_without_credentials() -> None:
    uri = "kafka+ssl://svc:s3cret-pw@h1:9093,h2:9093/ignored"
    assert source_dataset("kafka", {"connection.uri": uri, "topic": "orders"}) == DatasetName(
        "kafka://h1:9093", "orders"
    )
    assert source_dataset("kafka", {"connection.host": "broker", "topic": "t"}).namespace == (
        "kafka://broker:9092"
    )
    mqtt = {"connection.uri": "mqtts://u:s3cret-pw@broker:8883", "topic": "plant/+/temp"}
    assert source_dataset("mqtt", mqtt) == DatasetName("mqtt://broker:8883", "plant/+/temp")
    assert source_dataset("mqtt", {"connection.host": "m"}, "x").uri == "mqtt://m:1883/x"
    with pytest.raises(ValueError, match="names no topic"):
        source_dataset("kafka", {"connection.host": "broker"})


def test_paths_are_named_as_file_systems_and_object_stores() -> None:
    assert path_dataset("data/readings") == DatasetName(
        "file", str(Path("data/readings").absolute())
    )
    assert path_dataset("file:///lake/readings").uri == "file:///lake/readings"
    assert path_dataset("s3a://key:secret@bucket/lake/readings") == DatasetName(
        "s3://bucket", "lake/readings"
    )
    assert path_dataset("gs://bucket/x") == DatasetName("gs://bucket", "x")
    assert path_dataset("abfss://lake@acct.dfs.core.windows.net/r") == DatasetName(
        "abfss://lake@acct.dfs.core.windows.net", "/r"
    )
    assert path_dataset("hdfs://nn:8020/lake/r") == DatasetName("hdfs://nn:8020", "/lake/r")
    assert topic_asset_key("mqtt", "plant/+/temp/#") == ["mqtt", "plant._.temp._"]


def test_an_iceberg_table_is_named_by_its_location_with_its_catalog_name_as_symlink(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("pyiceberg")
    import pyarrow as pa

    warehouse = f"file://{tmp_path}/warehouse"
    for key, value in {
        "TYPE": "sql",
        "URI": f"sqlite:///{tmp_path}/catalog.db",
        "WAREHOUSE": warehouse,
    }.items():
        monkeypatch.setenv(f"PYICEBERG_CATALOG__OBSLAKE__{key}", value)
    before = sink_dataset("iceberg://obslake/sensors.readings")
    assert before.dataset == DatasetName("file", f"{tmp_path}/warehouse/sensors.db/readings")
    assert before.symlink == DatasetName(warehouse, "sensors.readings")
    assert before.catalog is not None and (before.catalog.name, before.catalog.type) == (
        "obslake",
        "sql",
    )
    from sluice.spark.sinks.catalogs import load_iceberg_catalog

    catalog = load_iceberg_catalog("obslake")
    catalog.create_namespace_if_not_exists("sensors")
    location = f"{tmp_path}/elsewhere/readings"
    catalog.create_table(
        ("sensors", "readings"), pa.schema([("device", pa.string())]), location=location
    )
    after = sink_dataset("iceberg://obslake/sensors.readings")
    assert after.dataset == DatasetName("file", location) and after.storage == "iceberg"


def _samples(text: str) -> list[str]:
    return [line for line in text.splitlines() if not line.startswith("#")]


def test_the_exposition_escapes_labels_and_leaves_out_what_is_unknown() -> None:
    kafka = StreamLag(
        "kafka",
        'odd"topic\\',
        "g",
        measured_at=1000.0,
        partitions=[PartitionLag(0, 5, 9, 4, 990.0), PartitionLag(1, None, 0, 0)],
        sink="/lake",
        last_batch_id="b1",
        last_batch_at=900.5,
    )
    mqtt = StreamLag("mqtt", "plant/#", "ingest", 1000.0, unknown=MQTT_UNKNOWN)
    failed = StreamLag("kafka", "gone", "g", 1000.0, error="TopicNotFoundError: ...")
    text = exposition([kafka, mqtt, failed])
    labels = 'kind="kafka",topic="odd\\"topic\\\\",group="g"'
    assert _samples(text) == [
        f"sluice_up{{{labels}}} 1",
        'sluice_up{kind="mqtt",topic="plant/#",group="ingest"} 1',
        'sluice_up{kind="kafka",topic="gone",group="g"} 0',
        f'sluice_lag_messages{{{labels},partition="0"}} 4',
        f'sluice_lag_messages{{{labels},partition="1"}} 0',
        f"sluice_stream_lag_messages{{{labels}}} 4",
        f"sluice_oldest_waiting_message_age_seconds{{{labels}}} 10.0",
        f'sluice_last_batch_timestamp_seconds{{{labels},sink="/lake"}} 900.5',
    ]
    assert text.count("# TYPE ") == 5 and text.endswith("\n")
    assert kafka.behind(max_lag=3) and not kafka.behind(max_lag=4, max_age=10)
    assert mqtt.behind(max_lag=1) == [
        f"mqtt topic 'plant/#': lag and waiting time cannot be measured: {MQTT_UNKNOWN}"
    ]
