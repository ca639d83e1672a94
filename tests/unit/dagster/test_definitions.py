"""The factories' definitions: the example Definitions load, and misuse is a clear error."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
from dagster import Definitions

from sluice.batch import BatchSpec
from sluice_dagster import (
    KafkaQueueResource,
    SparkResource,
    make_ingest_asset,
    make_ingest_job,
    make_ingest_schedule,
    make_queue_sensor,
)
from sluice_dagster.ops import IngestSettings

EXAMPLE = Path(__file__).resolve().parents[3] / "dags_examples" / "dagster_defs.py"


def load_example(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> ModuleType:
    monkeypatch.setenv("SLUICE_EXAMPLE_SINK", str(tmp_path / "lake"))
    monkeypatch.setenv("SLUICE_EXAMPLE_KAFKA_TOPIC", "orders")
    monkeypatch.setenv("SLUICE_EXAMPLE_SENSOR_INTERVAL", "5")
    monkeypatch.setenv("SLUICE_EXAMPLE_INGEST_CRON", "*/5 * * * *")
    spec = importlib.util.spec_from_file_location("dagster_defs_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_example_definitions_load(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    defs: Definitions = load_example(monkeypatch, tmp_path).defs
    Definitions.validate_loadable(defs)
    repo = defs.get_repository_def()
    kafka_sensor = repo.get_sensor_def("kafka_events_sensor")
    assert kafka_sensor.minimum_interval_seconds == 5
    assert repo.get_sensor_def("mqtt_readings_sensor").job_name == "mqtt_readings"
    schedule = repo.get_schedule_def("mqtt_readings_schedule")
    assert (schedule.job_name, schedule.cron_schedule) == ("mqtt_readings", "*/5 * * * *")
    assert defs.resources["mqtt_queue"].client_id == "sluice-example"
    resource = defs.resources["kafka_queue"]
    assert resource.topic == "orders"
    assert resource.group_id == "sluice-example"
    assert defs.get_assets_def("kafka_events").metadata_by_key
    assert str(tmp_path / "lake" / "kafka_events") in str(
        defs.get_assets_def("kafka_events").metadata_by_key
    )


def test_the_sensor_finds_the_ingest_op_of_its_resource() -> None:
    job = make_ingest_job("orders", "queue", "/lake/orders")
    sensor = make_queue_sensor("s", "queue", job=job)
    assert sensor.job_name == "orders"
    asset = make_ingest_asset("events", "queue", "/lake/events", key_prefix=["raw"])
    assert make_queue_sensor("a", "queue", asset_selection=[asset]).asset_selection is not None


def test_the_schedule_finds_the_ingest_op_of_its_resource_as_the_sensor_does() -> None:
    job = make_ingest_job("orders", "queue", "/lake/orders")
    schedule = make_ingest_schedule("nightly", "queue", "0 2 * * *", job=job)
    assert (schedule.job_name, schedule.cron_schedule) == ("orders", "0 2 * * *")
    asset = make_ingest_asset("events", "queue", "/lake/events")
    hourly = make_ingest_schedule("hourly", "queue", "@hourly", asset_selection=[asset])
    resources = {
        "queue": KafkaQueueResource(bootstrap="b:9092", topic="t"),
        "spark": SparkResource(),
    }
    Definitions.validate_loadable(
        Definitions(assets=[asset], schedules=[hourly], jobs=[job], resources=resources)
    )
    with pytest.raises(ValueError, match="either job or asset_selection"):
        make_ingest_schedule("s", "queue", "@hourly")
    with pytest.raises(ValueError, match=r"make_ingest_schedule\('s'\).*ingest_op="):
        make_ingest_schedule("s", "other_queue", "@hourly", job=job)
    with pytest.raises(ValueError, match="min_messages"):
        make_ingest_schedule("s", "queue", "@hourly", job=job, min_messages=0)


def test_misuse_is_an_error_that_says_what_to_do() -> None:
    job = make_ingest_job("orders", "queue", "/lake/orders")
    with pytest.raises(ValueError, match="either job or asset_selection"):
        make_queue_sensor("s", "queue")
    with pytest.raises(ValueError, match="ingest_op="):
        make_queue_sensor("s", "other_queue", job=job)
    with pytest.raises(ValueError, match="min_messages"):
        make_queue_sensor("s", "queue", job=job, min_messages=10, max_messages=5)
    with pytest.raises(ValueError, match="value_format"):
        make_ingest_job("orders", "queue", "/lake", value_format="xml")


def test_one_settings_class_for_job_asset_and_op() -> None:
    settings = IngestSettings.of("queue", "/lake/orders", schema="id INT", mode="driver")
    assert (settings.schema_ddl, settings.mode, settings.spark_resource_key) == (
        "id INT",
        "driver",
        "spark",
    )
    assert "description" in IngestSettings.model_json_schema()["properties"]["sink"]
    with pytest.raises(ValueError, match="mode"):
        make_ingest_asset("orders", "queue", "/lake", mode="everywhere")


def test_partition_by_is_a_setting_a_run_may_override() -> None:
    from sluice_dagster.ops import IngestConfig

    settings = IngestSettings.of("queue", "iceberg://lake/ns.t", partition_by="day(timestamp)")
    assert settings.partition_by == "day(timestamp)"
    assert (
        "bucket(16,device)"
        in IngestSettings.model_json_schema()["properties"]["partition_by"]["description"]
    )
    assert IngestConfig(spec={}, partition_by="hour(timestamp)").partition_by == "hour(timestamp)"


def test_upsert_and_its_key_columns_are_settings() -> None:
    settings = IngestSettings.of(
        "queue", "iceberg://lake/ns.t", write_mode="upsert", key_columns=["tenant", "id"]
    )
    assert (settings.write_mode, settings.key_columns) == ("upsert", ["tenant", "id"])
    assert IngestSettings.of("queue", "/lake").write_mode == "append"
    with pytest.raises(ValueError, match="write_mode"):
        IngestSettings.of("queue", "/lake", write_mode="merge")


def test_keep_message_is_a_setting() -> None:
    assert IngestSettings.of("queue", "/lake", keep_message=["key"]).keep_message == ["key"]
    assert IngestSettings.of("queue", "/lake", keep_message=True).keep_message is True
    assert IngestSettings.of("queue", "/lake").keep_message is None, "the table's own choice"
    with pytest.raises(ValueError, match="keep_message"):
        IngestSettings.of("queue", "/lake", keep_message="key")


def test_run_request_config_has_no_nulls() -> None:
    from sluice_dagster import ingest_run_config

    spec = BatchSpec("mqtt", "plant/#", client_id="lake")
    config = ingest_run_config(spec, "ingest")["ops"]["ingest"]["config"]["spec"]
    assert None not in config.values()
    assert BatchSpec.from_dict(config) == spec


def test_routed_assets_are_an_asset_per_table_and_refuse_unknown_tables(tmp_path: Path) -> None:
    from sluice_dagster import make_routed_assets, make_routed_audit_checks

    routes = {
        "by": "field:kind",
        "template": f"delta://{tmp_path}/{{kind}}",
        "values": ["a", "b"],
        "tables": {"c-1": str(tmp_path / "c")},
    }
    events = make_routed_assets(
        "events", "q", str(tmp_path / "other"), routes, asset_names={"c-1": "cee"}
    )
    assert sorted(k.to_user_string() for k in events.keys) == [
        "cee",
        "events",
        "events_a",
        "events_b",
    ]
    checks = make_routed_audit_checks(events)
    assert {s.asset_key.to_user_string() for s in checks.check_specs} == {
        k.to_user_string() for k in events.keys
    }
    sensor = make_queue_sensor("events_sensor", "q", asset_selection=[events])
    Definitions.validate_loadable(
        Definitions(
            assets=[events],
            asset_checks=[checks],
            sensors=[sensor],
            resources={
                "q": KafkaQueueResource(bootstrap="localhost:9092", topic="t"),
                "spark": SparkResource(),
            },
        )
    )

    with pytest.raises(ValueError, match="name no table before a message arrives"):
        make_routed_assets("e", "q", "/x", {"by": "key", "template": "delta:///t/{k}"})
    with pytest.raises(ValueError, match=r"asset_names=\{'c-1'"):
        make_routed_assets("e", "q", "/x", {"by": "key", "tables": {"c-1": "/c"}})
    with pytest.raises(ValueError, match="a sensor of their own"):
        make_queue_sensor("s", "q", asset_selection=[events, make_ingest_asset("o", "q", "/o")])
