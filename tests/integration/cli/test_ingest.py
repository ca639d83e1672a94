"""sluice ingest: one batch from a real broker into Parquet with the session's local Spark."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from sluice.queues import queue_from_uri
from tests.unit.cli.runner import assert_error, assert_ok, run, table_rows

SCHEMA = "device STRING, temperature DOUBLE, humidity DOUBLE, ts STRING"


def _result(out: str) -> dict[str, str]:
    return {row[0]: row[1] for row in table_rows(out)}


def test_kafka_batch_with_malformed_records(
    spark: Any, kafka: str, unique_name: str, tmp_path: Path
) -> None:
    topic = f"{kafka}/{unique_name}"
    assert_ok(run("publish", topic, "--sample", "iot", "--count", "30", "--malformed", "2"))
    uri = f"{topic}?group_id={unique_name}"
    sink = tmp_path / "lake"
    result = _result(assert_ok(run("ingest", uri, "--sink", str(sink), "--schema", SCHEMA)))
    assert (result["read"], result["written"], result["quarantined"]) == ("30", "28", "2")
    assert result["committed"] == "yes" and result["ranges"] == "p0: 0..30"
    output = Path(result["output"])
    assert output.parent == sink and pq.read_table(output).num_rows == 28
    assert pq.read_table(result["quarantine"]).num_rows == 2
    assert "Total lag: 0" in assert_ok(run("lag", uri))
    assert "Nothing to ingest" in assert_ok(run("ingest", uri, "--sink", str(sink)))


def test_a_bad_schema_fails_before_reading(
    spark: Any, kafka: str, unique_name: str, tmp_path: Path
) -> None:
    topic = f"{kafka}/{unique_name}"
    assert_ok(run("publish", topic, "--sample", "iot", "--count", "3"))
    uri = f"{topic}?group_id={unique_name}"
    bad = run("ingest", uri, "--sink", str(tmp_path), "--schema", "device STRNG,, x")
    assert_error(bad, 2, "not a valid Spark DDL string", "device STRING, temperature DOUBLE")
    assert "Total lag: 3" in assert_ok(run("lag", uri))  # nothing was committed


def test_mqtt_session_batch(spark: Any, mqtt: str, unique_name: str, tmp_path: Path) -> None:
    topic = f"cli/{unique_name}"
    session = f"{mqtt}/{topic}?qos=1&client_id={unique_name}"
    creator = queue_from_uri(session)
    creator.open(None)  # the session exists from now on: the broker queues messages for it
    creator.close(None)
    assert_ok(run("publish", f"{mqtt}/{topic}?qos=1", "--sample", "iot", "--count", "6"))
    result = _result(assert_ok(run("ingest", session, "--sink", str(tmp_path), "--schema", SCHEMA)))
    assert (result["read"], result["written"], result["committed"]) == ("6", "6", "yes")
    assert pq.read_table(result["output"]).num_rows == 6
