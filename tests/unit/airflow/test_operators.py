"""Operators and the sensor, up to the point where a broker would be needed."""

from __future__ import annotations

import datetime
import json
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.api.datamodels._generated import AssetReferenceAssetEventDagRun
from airflow.sdk.execution_time.comms import AssetEventDagRunReferenceResult
from airflow.sdk.execution_time.context import TriggeringAssetEventsAccessor

from sluice.batch import BatchSpec, OffsetRange
from sluice_airflow.operators.publish import QueuePublishOperator, to_envelope
from sluice_airflow.operators.spark import (
    SparkIngestOperator,
    batches_from_context,
    submit_arguments,
)
from sluice_airflow.sensors.queue import QueueMessageSensor

SPEC = BatchSpec("kafka", "orders", group_id="g", ranges=(OffsetRange(0, 0, 5),))
LATER = BatchSpec("kafka", "orders", group_id="g", ranges=(OffsetRange(0, 5, 9),))


def asset_events(*payloads: Any) -> TriggeringAssetEventsAccessor:
    asset = AssetReferenceAssetEventDagRun(name="readings", uri="readings", extra={})
    return TriggeringAssetEventsAccessor.build(
        AssetEventDagRunReferenceResult(
            asset=asset,
            extra={"from_trigger": True, "payload": payload},
            source_task_id=None,
            source_dag_id=None,
            source_run_id=None,
            source_map_index=None,
            source_aliases=[],
            timestamp=datetime.datetime.now(datetime.UTC),
        )
        for payload in payloads
    )


# ---- publish -------------------------------------------------------------------------------


def test_a_dict_with_value_describes_a_message() -> None:
    envelope = to_envelope(
        {"value": {"t": 1}, "key": "dev-1", "headers": {"h": "v"}, "message_type": "reading"}
    )
    assert json.loads(envelope.message) == {"t": 1}
    assert envelope.key == b"dev-1"
    assert envelope.headers == [("h", b"v")]
    assert envelope.message_type == "reading"


@pytest.mark.parametrize("payload", [{"device": "d", "value": 2, "unit": "C"}, "text", 42])
def test_anything_else_is_the_payload(payload: Any) -> None:
    envelope = to_envelope(payload, "reading")
    expected = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
    assert envelope.message is not None
    assert envelope.message == expected or json.loads(envelope.message) == payload
    assert envelope.key is None
    assert envelope.message_type == "reading"


@pytest.mark.parametrize(
    "messages", [[1, 2], "[1, 2]", "[1, 2]".replace(",", " ,"), lambda: iter([1, 2])]
)
def test_messages_from_a_list_a_rendered_template_or_a_callable(messages: Any) -> None:
    task = QueuePublishOperator(task_id="p", topic="t", messages=messages)
    assert task._items() == [1, 2]


def test_messages_that_are_no_list_are_refused() -> None:
    with pytest.raises(TypeError, match="must be a list"):
        QueuePublishOperator(task_id="p", topic="t", messages="{'a': 1}")._items()
    with pytest.raises(ValueError, match="neither JSON nor a Python literal"):
        QueuePublishOperator(task_id="p", topic="t", messages="not a list")._items()


# ---- which batch the ingest takes ----------------------------------------------------------


def test_the_batch_argument_wins_as_dict_json_or_rendered_repr() -> None:
    events = {"triggering_asset_events": asset_events(LATER.to_dict())}
    for batch in (SPEC.to_dict(), SPEC.to_json(), str(SPEC.to_dict()), SPEC):
        assert batches_from_context(batch, events) == [SPEC]


def test_without_a_batch_every_triggering_event_is_one_batch_once() -> None:
    context = {
        "triggering_asset_events": asset_events(SPEC.to_dict(), LATER.to_dict(), SPEC.to_dict())
    }
    assert batches_from_context("None", context) == [SPEC, LATER]


def test_events_not_from_a_trigger_are_ignored_and_conf_is_the_last_resort() -> None:
    run = SimpleNamespace(conf={"batch": LATER.to_dict()})
    context = {"triggering_asset_events": asset_events({"other": 1}), "dag_run": run}
    assert batches_from_context(None, context) == [LATER]
    assert batches_from_context(None, {}) == []


def test_an_edited_batch_is_refused() -> None:
    edited = {**SPEC.to_dict(), "ranges": [{"partition": 0, "start": 0, "end": 99}]}
    with pytest.raises(ValueError, match="does not match its content"):
        batches_from_context(edited, {})


def test_no_batch_at_all_says_where_one_comes_from() -> None:
    task = SparkIngestOperator(task_id="ingest", sink="/tmp/x", batch=None)
    with pytest.raises(ValueError, match="no batch to ingest"):
        task.execute({})  # type: ignore[arg-type]


def test_a_task_that_plans_its_batch_needs_a_topic_and_only_it_takes_one() -> None:
    waiting = SparkIngestOperator(
        task_id="ingest", sink="/x", batch="waiting", topic="orders", max_messages=10
    )
    assert "topic" in waiting.template_fields
    assert (waiting.if_nothing_waiting, waiting.max_messages) == ("skip", 10)
    with pytest.raises(ValueError, match="give topic="):
        SparkIngestOperator(task_id="ingest", sink="/x", batch="waiting")
    with pytest.raises(ValueError, match='for batch="waiting"'):
        SparkIngestOperator(task_id="ingest", sink="/x", topic="orders")
    with pytest.raises(ValueError, match='for batch="waiting"'):
        SparkIngestOperator(task_id="ingest", sink="/x", batch=SPEC, max_messages=5)
    with pytest.raises(ValueError, match="at least 1"):
        SparkIngestOperator(task_id="i", sink="/x", batch="waiting", topic="t", max_messages=0)
    with pytest.raises(ValueError, match="'skip' or 'succeed'"):
        SparkIngestOperator(
            task_id="i",
            sink="/x",
            batch="waiting",
            topic="t",
            if_nothing_waiting="fail",  # type: ignore[arg-type]
        )


def test_up_to_latest_is_checked_and_takes_max_messages() -> None:
    latest = SparkIngestOperator(
        task_id="ingest", sink="/x", batch=SPEC, up_to="latest", max_messages=5
    )
    assert (latest.up_to, latest.max_messages) == ("latest", 5)
    assert SparkIngestOperator(task_id="ingest", sink="/x", batch=SPEC).up_to == "planned"
    with pytest.raises(ValueError, match="'planned' or 'latest'"):
        SparkIngestOperator(task_id="i", sink="/x", batch=SPEC, up_to="now")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at least 1"):
        SparkIngestOperator(task_id="i", sink="/x", batch=SPEC, up_to="latest", max_messages=0)


def test_submit_arguments_carry_no_credentials() -> None:
    options = {
        "schema": "a INT",
        "value_format": "raw",
        "dead_letter": True,
        "fail_on_data_loss": False,
        "chunk_size": 5,
    }
    assert submit_arguments(SPEC, "/data", options) == [
        "--spec", SPEC.to_json(), "--sink", "/data", "--schema", "a INT", "--format", "raw",
        "--dead-letter", "--accept-data-loss", "--chunk-size", "5",
    ]  # fmt: skip
    from sluice.spark import submit

    parsed = submit.parser().parse_args([*submit_arguments(SPEC, "/d", options), "--source", "x"])
    assert (parsed.value_format, parsed.chunk_size, parsed.dead_letter) == ("raw", 5, True)
    assert parsed.accept_data_loss
    default = submit_arguments(SPEC, "/d", {"fail_on_data_loss": True})
    assert "--accept-data-loss" not in default


def test_partition_by_reaches_the_ingest_in_process_and_through_spark_submit() -> None:
    task = SparkIngestOperator(
        task_id="ingest", sink="iceberg://lake/ns.readings", partition_by="day(ts),bucket(4,device)"
    )
    assert "partition_by" in task.template_fields
    options = task._options()
    assert options["partition_by"] == "day(ts),bucket(4,device)"
    from sluice.spark import submit

    arguments = submit_arguments(SPEC, "/d", options)
    assert arguments[arguments.index("--partition-by") + 1] == "day(ts),bucket(4,device)"
    parsed = submit.parser().parse_args([*arguments, "--source", "x"])
    assert parsed.partition_by == "day(ts),bucket(4,device)"
    plain = SparkIngestOperator(task_id="plain", sink="/d")._options()
    assert "--partition-by" not in submit_arguments(SPEC, "/d", plain)


def test_upsert_and_its_key_columns_reach_the_ingest_in_process_and_through_spark_submit() -> None:
    task = SparkIngestOperator(
        task_id="cdc",
        sink="iceberg://lake/ns.customers",
        write_mode="upsert",
        key_columns=["t", "id"],
    )
    options = task._options()
    assert (options["write_mode"], options["key_columns"]) == ("upsert", ["t", "id"])
    from sluice.spark import submit

    parsed = submit.parser().parse_args([*submit_arguments(SPEC, "/d", options), "--source", "x"])
    assert (parsed.write_mode, parsed.key_columns) == ("upsert", "t,id")
    plain = submit.parser().parse_args(
        [
            *submit_arguments(SPEC, "/d", SparkIngestOperator(task_id="p", sink="/d")._options()),
            "--source",
            "x",
        ]
    )
    assert (plain.write_mode, plain.key_columns) == ("append", None)


@pytest.mark.parametrize("submit", [False, True], ids=["in-process", "spark-submit"])
def test_empty_key_columns_are_one_config_error_whether_the_ingest_runs_here_or_is_submitted(
    submit: bool,
) -> None:
    """key_columns=[] through spark-submit became ``--key-columns ""``, which the submitted
    script read as "the message keys' fields"; in process it was a ConfigError. Now both refuse
    it when the task is made, before anything is submitted."""
    from sluice.queues import ConfigError

    with pytest.raises(ConfigError, match=r"key_columns must be a list of column names.*\[\]"):
        SparkIngestOperator(
            task_id="cdc",
            sink="iceberg://lake/ns.customers",
            write_mode="upsert",
            key_columns=[],
            submit=submit,
        )


def test_the_submitted_script_refuses_empty_key_columns_before_spark_starts() -> None:
    from sluice.queues import ConfigError
    from sluice.spark import submit

    arguments = ["--spec", SPEC.to_json(), "--sink", "iceberg://lake/ns.c", "--source", "x"]
    with pytest.raises(ConfigError, match="key_columns must be a list of column names"):
        submit.main([*arguments, "--write-mode", "upsert", "--key-columns", ""])


# ---- the sensor returns the trigger's batch ---------------------------------------------------


def test_a_deferrable_sensor_returns_the_triggers_batch() -> None:
    # Deferring (poke first, then the trigger) is shown on a real broker in
    # tests/integration/airflow/test_sensor.py.
    sensor = QueueMessageSensor(task_id="wait", conn_id="c", topic="orders")
    assert sensor.execute_complete({}, SPEC.to_dict()) == SPEC.to_dict()  # type: ignore[arg-type]


def test_a_secret_in_a_task_config_is_refused() -> None:
    from sluice.queues.config import ConfigError

    for make in (
        lambda: QueueMessageSensor(task_id="s", topic="t", config={"credential.password": "x"}),
        lambda: QueuePublishOperator(
            task_id="p", topic="t", messages=[], config={"credential.password": "x"}
        ),
        lambda: SparkIngestOperator(task_id="i", sink="/x", config={"credential.password": "x"}),
    ):
        with pytest.raises(ConfigError, match="is a secret"):
            make()


@pytest.mark.parametrize(
    ("keep", "text"),
    [(True, "all"), (False, "none"), (["key", "headers"], "headers,key"), (None, None)],
)
def test_keep_message_reaches_the_ingest_in_process_and_through_spark_submit(
    keep: bool | list[str] | None, text: str | None
) -> None:
    from sluice.spark import submit
    from sluice.spark.layout import keep_of_text, normalize

    options = SparkIngestOperator(task_id="t", sink="/d", keep_message=keep)._options()
    assert options["keep_message"] == keep
    arguments = submit_arguments(SPEC, "/d", options)
    parsed = submit.parser().parse_args([*arguments, "--source", "x"])
    assert parsed.keep_message == text, "None: the flag is left out, the table's own choice"
    assert normalize(keep_of_text(parsed.keep_message)) == normalize(keep)


def test_routes_reach_the_ingest_in_process_and_through_spark_submit() -> None:
    from sluice.routes import Routes
    from sluice.spark import submit

    routes = {"by": "field:kind", "tables": {"orders": "delta:///lake/orders"}}
    task = SparkIngestOperator(task_id="ingest", sink="/lake/other", routes=routes)
    options = task._options()
    assert Routes.parse(options["routes"]) == Routes.parse(routes)
    arguments = submit_arguments(SPEC, "/d", options)
    parsed = submit.parser().parse_args([*arguments, "--source", "x"])
    assert Routes.parse(parsed.routes) == Routes.parse(routes)
    with pytest.raises(Exception, match="routes needs 'by'"):
        SparkIngestOperator(task_id="bad", sink="/x", routes={"tables": {"a": "/a"}})
