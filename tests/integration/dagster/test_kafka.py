"""The queue sensor, the ingest schedule, the ingest job and the ingest asset on a real
Kafka-protocol broker (noida-db) and the session's local Spark: one run per batch, exactly
once; the sensor retries a failed run's batch unchanged, the schedule's next tick takes it
with what arrived since."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

import pytest
from dagster import (
    AssetsDefinition,
    DagsterInstance,
    Definitions,
    ExecuteInProcessResult,
    JobDefinition,
    RunRequest,
    SensorDefinition,
    materialize,
)

from sluice.audit import audit
from sluice.batch import BatchSpec, OffsetRange
from sluice.spark.failpoints import armed
from sluice.testing import BrokerProcess
from sluice.testing.topics import create_kafka_topic
from sluice_dagster import (
    KafkaQueueResource,
    SparkResource,
    make_ingest_asset,
    make_ingest_job,
    make_ingest_schedule,
    make_queue_sensor,
)
from sluice_dagster.testing import ScheduleTicker, SensorTicker

from .conftest import publish_kafka, sink_ids, spec_of

pytestmark = pytest.mark.kafka

SCHEMA = "id INT, name STRING"


def queue_resource(broker: BrokerProcess, topic: str) -> KafkaQueueResource:
    return KafkaQueueResource(bootstrap=broker.bootstrap, topic=topic, group_id=f"{topic}-lake")


class OrdersJob(NamedTuple):
    sink: Path
    job: JobDefinition
    sensor: SensorDefinition
    queue: KafkaQueueResource


def orders_job(broker: BrokerProcess, topic: str, tmp_path: Path, partitions: int) -> OrdersJob:
    """A new topic, and the job ``orders`` that ingests it into ``<tmp_path>/orders``, with its
    queue sensor and queue resource."""
    create_kafka_topic(broker.bootstrap, topic, partitions)
    sink = tmp_path / "orders"
    job = make_ingest_job("orders", "queue", str(sink), schema=SCHEMA)
    sensor = make_queue_sensor("orders_sensor", "queue", job=job)
    return OrdersJob(sink, job, sensor, queue_resource(broker, topic))


def output_metadata(result: ExecuteInProcessResult, node: str) -> dict[str, Any]:
    outputs = [e for e in result.events_for_node(node) if e.is_successful_output]
    assert len(outputs) == 1
    return {k: v.value for k, v in outputs[0].step_output_data.metadata.items()}


#: The first words of the ingest's progress lines (sluice.spark.progress.ProgressLog).
PHASES = ("starting:", "reading:", "read:", "writing:", "publishing batch", "committing:")


def test_the_sensor_requests_a_batch_the_job_ingests_once_and_commits(
    noida_broker: BrokerProcess,
    unique_name: str,
    spark: Any,
    instance: DagsterInstance,
    tmp_path: Path,
) -> None:
    sink, job, sensor, queue = orders_job(noida_broker, unique_name, tmp_path, 2)
    spark_resource = SparkResource()
    publish_kafka(noida_broker.bootstrap, unique_name, range(0, 3), partition=0)
    publish_kafka(noida_broker.bootstrap, unique_name, range(3, 5), partition=1)

    ticker = SensorTicker(sensor, {"queue": queue}, instance)
    request = ticker.request()
    spec = BatchSpec.from_dict(spec_of(request, "orders_ingest"))
    assert request.run_key == spec.batch_id
    assert request.tags["sluice/batch_id"] == spec.batch_id
    assert spec.ranges == (OffsetRange(0, 0, 3), OffsetRange(1, 0, 2))
    assert spec.group_id == f"{unique_name}-lake"

    # Asked again before its run exists: the same run key, which Dagster de-duplicates.
    assert ticker.request().run_key == request.run_key
    # While its run is queued or running, nothing new is asked for.
    queued = instance.create_run_for_job(job, run_config=request.run_config, tags=request.tags)
    assert "still being ingested" in ticker.skip()
    instance.delete_run(queued.run_id)

    result = job.execute_in_process(
        run_config=request.run_config,
        tags=request.tags,
        instance=instance,
        resources={"queue": queue, "spark": spark_resource},
    )
    assert result.success
    assert spark_resource.spark_session is spark, "the resource must reuse the active session"
    assert sink_ids(sink) == [0, 1, 2, 3, 4]
    metadata = output_metadata(result, "orders_ingest")
    assert metadata["batch_id"] == spec.batch_id
    assert (metadata["read"], metadata["written"], metadata["quarantined"]) == (5, 5, 0)
    assert metadata["committed"] is True
    assert metadata["lag"] == 0
    assert metadata["ranges"] == [
        {"partition": 0, "start": 0, "end": 3},
        {"partition": 1, "start": 0, "end": 2},
    ]
    assert metadata["duration_seconds"] > 0
    # the run's log (Dagster's UI and `dagster` CLI) tells every phase of the ingest
    logged = [e.user_message for e in instance.all_logs(result.run_id)]
    for phase in PHASES:
        assert any(m.startswith(phase) for m in logged), (phase, logged)

    assert "no messages waiting" in ticker.skip()

    publish_kafka(noida_broker.bootstrap, unique_name, range(5, 7), partition=1)
    following = ticker.request()
    following_spec = BatchSpec.from_dict(spec_of(following, "orders_ingest"))
    assert following_spec.ranges == (OffsetRange(1, 2, 4),)
    assert following.run_key == following_spec.batch_id != request.run_key


class EventsAsset(NamedTuple):
    """The asset ``events`` of a new one-partition topic, with its sensor's ticker."""

    sink: Path
    asset: AssetsDefinition
    ticker: SensorTicker
    resources: dict[str, Any]

    def materialize(self, request: RunRequest, instance: DagsterInstance) -> dict[str, Any]:
        """Materialize ``request``'s batch; the materialization's metadata."""
        result = materialize(
            [self.asset],
            run_config=request.run_config,
            tags=request.tags,
            instance=instance,
            resources=self.resources,
        )
        assert result.success
        [materialization] = result.asset_materializations_for_node("events")
        return {k: v.value for k, v in materialization.metadata.items()}


def events_asset(
    broker: BrokerProcess,
    topic: str,
    tmp_path: Path,
    instance: DagsterInstance,
    sensor_max: int | None = None,
    **settings: Any,
) -> EventsAsset:
    """``events`` (``settings``: more of its IngestSettings) and its queue sensor, which asks
    for at most ``sensor_max`` messages; three messages wait on the topic."""
    create_kafka_topic(broker.bootstrap, topic, 1)
    sink = tmp_path / "events"
    events = make_ingest_asset("events", "queue", str(sink), schema=SCHEMA, **settings)
    sensor = make_queue_sensor(
        "events_sensor", "queue", asset_selection=[events], max_messages=sensor_max
    )
    publish_kafka(broker.bootstrap, topic, range(3), partition=0)
    resources = {"queue": queue_resource(broker, topic), "spark": SparkResource()}
    definitions = Definitions(assets=[events], sensors=[sensor], resources=resources)
    ticker = SensorTicker.from_definitions(definitions, "events_sensor", instance)
    return EventsAsset(sink, events, ticker, resources)


def test_an_asset_materialization_ingests_the_batch_cut_to_max_messages(
    noida_broker: BrokerProcess,
    unique_name: str,
    spark: Any,
    instance: DagsterInstance,
    tmp_path: Path,
) -> None:
    events = events_asset(noida_broker, unique_name, tmp_path, instance, sensor_max=2)
    request = events.ticker.request()
    assert request.asset_selection == [events.asset.key]
    assert BatchSpec.from_dict(spec_of(request, "events")).ranges == (OffsetRange(0, 0, 2),)

    metadata = events.materialize(request, instance)
    assert sink_ids(events.sink) == [0, 1]
    assert (metadata["written"], metadata["lag"]) == (2, 1)

    rest = events.ticker.request()
    assert BatchSpec.from_dict(spec_of(rest, "events")).ranges == (OffsetRange(0, 2, 3),)


def test_an_asset_with_up_to_latest_takes_what_arrived_after_its_request(
    noida_broker: BrokerProcess,
    unique_name: str,
    spark: Any,
    instance: DagsterInstance,
    tmp_path: Path,
) -> None:
    events = events_asset(
        noida_broker, unique_name, tmp_path, instance, up_to="latest", max_messages=5
    )
    request = events.ticker.request()
    assert BatchSpec.from_dict(spec_of(request, "events")).ranges == (OffsetRange(0, 0, 3),)
    # while the run is queued, four more arrive: it grows to max_messages, 5
    publish_kafka(noida_broker.bootstrap, unique_name, range(3, 7), partition=0)

    metadata = events.materialize(request, instance)
    assert sink_ids(events.sink) == [0, 1, 2, 3, 4]
    assert (metadata["written"], metadata["lag"]) == (5, 2)
    assert metadata["batch_id"] != request.run_key
    assert metadata["ranges"] == [{"partition": 0, "start": 0, "end": 5}]
    # committed past the requested batch: the next request starts there
    rest = events.ticker.request()
    assert BatchSpec.from_dict(spec_of(rest, "events")).ranges == (OffsetRange(0, 5, 7),)


def test_a_failed_run_gets_the_same_batch_again_once_the_broker_is_back(
    private_noida: BrokerProcess,
    unique_name: str,
    spark: Any,
    instance: DagsterInstance,
    tmp_path: Path,
) -> None:
    sink, job, sensor, queue = orders_job(private_noida, unique_name, tmp_path, 1)
    resources = {"queue": queue, "spark": SparkResource()}
    publish_kafka(private_noida.bootstrap, unique_name, range(4), partition=0)
    ticker = SensorTicker(sensor, {"queue": queue}, instance)
    request = ticker.request()
    batch_id = request.tags["sluice/batch_id"]

    private_noida.stop()
    down = ticker.skip()
    assert private_noida.bootstrap in down and "Check" in down

    failed = job.execute_in_process(
        run_config=request.run_config,
        tags=request.tags,
        instance=instance,
        resources=resources,
        raise_on_error=False,
    )
    assert not failed.success
    [failure] = failed.get_step_failure_events()
    assert failure.step_failure_data.error is not None
    assert private_noida.bootstrap in failure.step_failure_data.error.to_string()

    assert sink_ids(sink) == []

    assert private_noida.bootstrap in ticker.skip(), "still down: the failed batch waits"
    private_noida.start()
    publish_kafka(private_noida.bootstrap, unique_name, range(4, 5), partition=0)
    retry = ticker.request()
    assert retry.tags["sluice/batch_id"] == batch_id, "the batch is not widened by newcomers"
    assert spec_of(retry, "orders_ingest") == spec_of(request, "orders_ingest")
    assert retry.run_key == f"{batch_id}.1", "a new run key, or Dagster would drop the request"

    ok = job.execute_in_process(
        run_config=retry.run_config, tags=retry.tags, instance=instance, resources=resources
    )
    assert ok.success
    assert sink_ids(sink) == [0, 1, 2, 3]
    following = ticker.request()
    assert BatchSpec.from_dict(spec_of(following, "orders_ingest")).ranges == (
        OffsetRange(0, 4, 5),
    )


def test_dagster_pysparks_own_resource_can_run_the_ingest(
    noida_broker: BrokerProcess,
    unique_name: str,
    spark: Any,
    instance: DagsterInstance,
    tmp_path: Path,
) -> None:
    """A user of dagster-pyspark keeps their PySparkResource as the job's Spark resource."""
    from dagster_pyspark import PySparkResource

    sink, job, sensor, queue = orders_job(noida_broker, unique_name, tmp_path, 1)
    publish_kafka(noida_broker.bootstrap, unique_name, range(0, 3), partition=0)

    request = SensorTicker(sensor, {"queue": queue}, instance).request()
    pyspark = PySparkResource(spark_config={"spark.sql.session.timeZone": "UTC"})
    result = job.execute_in_process(
        run_config=request.run_config,
        tags=request.tags,
        instance=instance,
        resources={"queue": queue, "spark": pyspark},
    )
    assert result.success
    assert sink_ids(sink) == [0, 1, 2]
    assert output_metadata(result, "orders_ingest")["committed"] is True


def test_each_schedule_tick_requests_what_waits_and_a_failed_runs_messages_go_with_the_next(
    noida_broker: BrokerProcess,
    unique_name: str,
    spark: Any,
    persistent_instance: DagsterInstance,
    tmp_path: Path,
) -> None:
    instance = persistent_instance
    sink, job, sensor, queue = orders_job(noida_broker, unique_name, tmp_path, 2)
    schedule = make_ingest_schedule("orders_hourly", "queue", "0 * * * *", job=job)
    assert (schedule.job_name, schedule.cron_schedule) == ("orders", "0 * * * *")
    resources = {"queue": queue, "spark": SparkResource()}
    source = f"kafka://{noida_broker.bootstrap}"
    ticker = ScheduleTicker(schedule, {"queue": queue}, instance)

    def run(request: Any, failpoint: str | None = None) -> ExecuteInProcessResult:
        def execute() -> ExecuteInProcessResult:
            return job.execute_in_process(
                run_config=request.run_config,
                tags=request.tags,
                instance=instance,
                resources=resources,
                raise_on_error=False,
            )

        if failpoint is None:
            return execute()
        with armed(failpoint):
            return execute()

    assert f"kafka topic '{unique_name}' at {noida_broker.bootstrap}: no messages waiting" in (
        ticker.skip()
    )

    publish_kafka(noida_broker.bootstrap, unique_name, range(0, 3), partition=0)
    publish_kafka(noida_broker.bootstrap, unique_name, range(3, 5), partition=1)
    request = ticker.request()
    spec = BatchSpec.from_dict(spec_of(request, "orders_ingest"))
    assert spec.ranges == (OffsetRange(0, 0, 3), OffsetRange(1, 0, 2))
    assert request.run_key == request.tags["sluice/batch_id"] == spec.batch_id
    assert request.tags["sluice/schedule"] == "orders_hourly"
    # One function builds the run requests of both: the sensor asks for the same run.
    by_sensor = SensorTicker(sensor, {"queue": queue}, instance).request()
    assert (by_sensor.run_key, by_sensor.run_config) == (request.run_key, request.run_config)

    # While a run of the schedule is queued or running, a tick asks for nothing.
    queued = instance.create_run_for_job(job, run_config=request.run_config, tags=request.tags)
    assert "still being ingested" in ticker.skip()
    instance.delete_run(queued.run_id)

    # The run fails after publishing the batch, before committing the group's offsets.
    assert not run(request, "commit.before").success
    publish_kafka(noida_broker.bootstrap, unique_name, range(5, 7), partition=1)
    following = ticker.request()
    assert BatchSpec.from_dict(spec_of(following, "orders_ingest")).ranges == (
        OffsetRange(0, 0, 3),
        OffsetRange(1, 0, 4),
    ), "the next tick takes the failed run's messages and the new ones"
    assert following.run_key == following.tags["sluice/batch_id"]
    result = run(following)
    assert result.success
    metadata = output_metadata(result, "orders_ingest")
    assert (metadata["written"], metadata["skipped"], metadata["lag"]) == (2, 5, 0)
    assert sink_ids(sink) == list(range(7))
    assert "no messages waiting" in ticker.skip()

    # A batch planned again unchanged (its run failed, nothing arrived since) gets a new key.
    publish_kafka(noida_broker.bootstrap, unique_name, range(7, 8), partition=0)
    last = ticker.request()
    assert not run(last, "commit.before").success
    again = ticker.request()
    assert again.tags["sluice/batch_id"] == last.tags["sluice/batch_id"]
    assert (again.run_key, again.tags["sluice/attempt"]) == (f"{last.run_key}.1", "1")
    assert run(again).success
    assert sink_ids(sink) == list(range(8))
    report = audit(sink, source)
    assert report.ok, "\n".join(report.lines())
    partitions = report.streams[0].partitions
    assert [(p.written, p.committed, p.log_end) for p in partitions] == [(4, 4, 4), (4, 4, 4)]
