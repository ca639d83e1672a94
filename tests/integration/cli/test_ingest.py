"""sluice ingest: one batch from a real broker into Parquet with the session's local Spark."""

from __future__ import annotations

import subprocess
import sys
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
    fields = [f.split()[0] for f in SCHEMA.split(", ")]
    assert pq.read_table(output).column_names == [*fields, "partition", "offset", "timestamp"]
    assert pq.read_table(result["quarantine"]).num_rows == 2
    assert "Total lag: 0" in assert_ok(run("lag", uri))
    assert "Nothing to ingest" in assert_ok(run("ingest", uri, "--sink", str(sink)))


def test_a_bad_schema_fails_before_reading(
    spark: Any, kafka: str, unique_name: str, tmp_path: Path
) -> None:
    topic = f"{kafka}/{unique_name}"
    assert_ok(run("publish", topic, "--sample", "iot", "--count", "3"))
    uri = f"{topic}?group_id={unique_name}"
    bad = run("ingest", uri, "--sink", str(tmp_path), "--schema", "device STRNG, x INT")
    assert_error(
        bad,
        2,
        "not a valid Spark DDL string: unknown type 'STRNG' for field 'device' (did you mean "
        "STRING?) at position 8",
        "device STRING, temperature DOUBLE",
    )
    unwritable = run("ingest", uri, "--sink", "/proc/nope", "--schema", "device STRING")
    assert_error(unwritable, 2, "The sink /proc/nope is not writable (No such file or directory)")
    assert "Total lag: 3" in assert_ok(run("lag", uri))  # nothing was committed


def test_spark_start_up_lines_are_hidden_without_debug(
    kafka: str, unique_name: str, tmp_path: Path
) -> None:
    """A real `sluice ingest` process, with a Spark of its own: only Sluice's lines print."""
    topic = f"{kafka}/{unique_name}"
    assert_ok(run("publish", topic, "--sample", "iot", "--count", "3"))
    sluice = Path(sys.executable).with_name("sluice")
    uri = f"{topic}?group_id={unique_name}"
    args = [str(sluice), "ingest", uri, "--sink", str(tmp_path / "lake"), "--schema", SCHEMA]
    done = subprocess.run(args, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert "Ingested batch" in done.stdout
    assert "WARN" not in done.stderr and "log4j" not in done.stderr, done.stderr


def test_mqtt_session_batch(spark: Any, mqtt: str, unique_name: str, tmp_path: Path) -> None:
    topic = f"cli/{unique_name}"
    session = f"{mqtt}/{topic}?qos=1&client_id={unique_name}"
    creator = queue_from_uri(session)
    creator.open(None)  # the session exists from now on: the broker queues messages for it
    creator.close(None)
    assert_ok(run("publish", f"{mqtt}/{topic}?qos=1", "--sample", "iot", "--count", "6"))
    result = _result(assert_ok(run("ingest", session, "--sink", str(tmp_path), "--schema", SCHEMA)))
    assert (result["read"], result["written"], result["committed"]) == ("6", "6", "yes")
    rows = pq.read_table(result["output"])
    assert rows.num_rows == 6 and set(rows.column("topic").to_pylist()) == {topic}
    assert None not in rows.column("message_id").to_pylist(), "MQTT rows keep their ids"


def test_keep_message_keeps_those_columns_and_the_dataset_keeps_the_choice(
    spark: Any, kafka: str, unique_name: str, tmp_path: Path
) -> None:
    topic = f"{kafka}/{unique_name}"
    uri = f"{topic}?group_id={unique_name}"
    typo = run("ingest", uri, "--sink", str(tmp_path), "--keep-message", "key,valu")
    assert_error(typo, 2, "--keep-message names 'valu', which is not a column of a message")
    assert_ok(run("publish", topic, "--sample", "iot", "--count", "6"))
    kept = ["--sink", str(tmp_path), "--schema", SCHEMA, "--keep-message", "key,value"]
    result = _result(assert_ok(run("ingest", uri, *kept)))
    columns = pq.read_table(result["output"]).column_names
    assert columns[-5:] == ["key", "value", "partition", "offset", "timestamp"]
    assert_ok(run("publish", topic, "--sample", "iot", "--count", "3"))
    other = run("ingest", uri, "--sink", str(tmp_path), "--schema", SCHEMA, "--keep-message", "all")
    assert_error(
        other, 2, "was made with keep_message=['key', 'value'], and keep_message=True was given"
    )
    result = _result(assert_ok(run("ingest", uri, "--sink", str(tmp_path), "--schema", SCHEMA)))
    assert pq.read_table(result["output"]).column_names == columns, "the dataset's own choice"


def test_upsert_into_a_parquet_dataset_is_refused_before_reading(
    kafka: str, unique_name: str, tmp_path: Path
) -> None:
    topic = f"{kafka}/{unique_name}"
    assert_ok(run("publish", topic, "--sample", "iot", "--count", "3"))
    uri = f"{topic}?group_id={unique_name}"
    refused = run("ingest", uri, "--sink", str(tmp_path), "--write-mode", "upsert", "--key", "id")
    assert_error(
        refused,
        2,
        "write_mode='upsert' (change data capture into a current-state table) needs an Iceberg "
        "table (iceberg://CATALOG/NAMESPACE.TABLE) or a Delta table (delta://PATH)",
    )
    assert "Total lag: 3" in assert_ok(run("lag", uri))  # nothing was read or committed
