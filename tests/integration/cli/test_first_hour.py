"""What a new user meets with `sluice ingest` (issue 25): every phase of a real ingest is
shown, wrong input fails naming the problem, an interruption says what the batch was left as,
and an empty MQTT session is "Nothing to ingest" without starting anything."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from sluice.queues import queue_from_uri
from sluice.spark.failpoints import armed
from sluice.testing.plugin import Broker
from tests.integration.cli.conftest import read_topic
from tests.unit.cli.runner import assert_error, assert_ok, run, table_rows

SCHEMA = "device STRING, temperature DOUBLE, humidity DOUBLE, ts STRING"
PHASES = [
    "starting Spark",
    "starting: checking that Spark's Python workers",
    "reading: ",
    "read: 40 of 40 messages",
    "writing: ",
    "publishing batch",
    "written: batch",
    "committing: ",
    "committed: batch",
]


def _lines(stderr: str) -> list[str]:
    return [line.removeprefix("sluice: ") for line in stderr.splitlines()]


def test_every_phase_of_a_real_ingest_is_shown_in_order(
    spark: Any, kafka: str, unique_name: str, tmp_path: Path
) -> None:
    topic = f"{kafka}/{unique_name}"
    assert_ok(run("publish", topic, "--sample", "iot", "--count", "40"))
    done = run("ingest", f"{topic}?group_id=g", "--sink", str(tmp_path), "--schema", SCHEMA)
    assert_ok(done)
    lines = _lines(done.stderr)
    found = [next(i for i, line in enumerate(lines) if line.startswith(p)) for p in PHASES]
    assert found == sorted(found), lines  # each phase, in the order an ingest passes them
    writing = [line for line in lines if line.startswith("writing: ")]
    assert any(" of " in line and "Spark tasks (files) done" in line for line in writing), lines


def test_a_schema_that_matches_nothing_fails_the_batch_before_publish_and_commit(
    spark: Any, kafka: str, unique_name: str, tmp_path: Path
) -> None:
    topic = f"{kafka}/{unique_name}"
    assert_ok(run("publish", topic, "--sample", "iot", "--count", "50"))
    uri, sink = f"{topic}?group_id=g", str(tmp_path / "lake")
    wrong = run("ingest", uri, "--sink", sink, "--schema", "device INT, temperature STRUCT<a: INT>")
    assert wrong.exit_code == 1, wrong.output
    error = wrong.stderr.strip().splitlines()[-1]  # the phases before it are progress lines
    for said in (
        "Error: Batch ",
        "50 of 50 messages (100%) went to quarantine, over max_quarantined (more than 50% of "
        "the batch). First reasons: 'does not match the schema: 'device' is not int",
        "Nothing was published or committed",
        "--max-quarantined none",
    ):
        assert said in error, error
    assert not list((tmp_path / "lake").glob("batch_id=*"))  # nothing published
    assert "Total lag: 50" in assert_ok(run("lag", uri))  # nothing committed
    anyway = run(
        "ingest", uri, "--sink", sink, "--schema", "device INT", "--max-quarantined", "none"
    )
    rows = {row[0]: row[1] for row in table_rows(assert_ok(anyway))}
    assert (rows["read"], rows["quarantined"], rows["committed"]) == ("50", "50", "yes")


def test_a_schema_naming_none_of_the_records_fields_fails_the_batch_with_a_did_you_mean(
    spark: Any, kafka: str, unique_name: str, tmp_path: Path
) -> None:
    """Issue 37, 6: it wrote 100 rows of nulls and committed."""
    topic = f"{kafka}/{unique_name}"
    assert_ok(run("publish", topic, "--sample", "iot", "--count", "100"))
    uri, sink = f"{topic}?group_id=g", str(tmp_path / "lake")
    wrong = run("ingest", uri, "--sink", sink, "--schema", "device_id STRING, temp DOUBLE")
    assert wrong.exit_code == 1, wrong.output
    error = wrong.stderr.strip().splitlines()[-1]
    for said in (
        "100 of 100 messages (100%) went to quarantine, over max_quarantined",
        "First reasons: 'does not match the schema: the record holds none of its fields "
        "(expected: device_id, temp; present: device, temperature, humidity, ts); did you mean "
        "device_id -> device, temp -> temperature? Fix the schema's field names",
        "Nothing was published or committed",
    ):
        assert said in error, error
    assert not list((tmp_path / "lake").glob("batch_id=*"))  # nothing published
    assert "Total lag: 100" in assert_ok(run("lag", uri))  # nothing committed


def test_a_topic_that_does_not_exist_is_an_error_and_is_not_created(
    noida_broker: Broker, kafka: str, unique_name: str, tmp_path: Path
) -> None:
    missing = run("ingest", f"{kafka}/{unique_name}?group_id=g", "--sink", str(tmp_path))
    assert_error(
        missing, 1, f"Topic '{unique_name}' does not exist at 127.0.0.1:", "check its name"
    )
    assert read_topic(noida_broker.bootstrap, unique_name) == []  # still no such topic
    typo = run("ingest", f"{kafka}/{unique_name}?group_id=g&from_begining=true", "--sink", "x")
    assert_error(
        typo, 2, "unknown config key 'options.from_begining'", "Did you mean 'from_beginning'?"
    )


@pytest.mark.parametrize(
    ("point", "said"),
    [
        ("read.after_first_chunk", "Interrupted while reading: nothing of batch "),
        ("commit.before", "was published, before its offsets or acknowledgements were all"),
    ],
)
def test_sigterm_says_what_the_batch_was_left_as_and_a_rerun_finishes_it(
    spark: Any, kafka: str, unique_name: str, tmp_path: Path, point: str, said: str
) -> None:
    topic = f"{kafka}/{unique_name}"
    assert_ok(run("publish", topic, "--sample", "iot", "--count", "20"))
    uri, sink = f"{topic}?group_id=g", str(tmp_path)
    with armed(point, lambda: os.kill(os.getpid(), signal.SIGTERM)):
        stopped = run("ingest", uri, "--sink", sink, "--schema", SCHEMA)
    assert stopped.exit_code == 130, stopped.output
    assert said in stopped.stderr and "Rerun to " in stopped.stderr, stopped.stderr
    assert signal.getsignal(signal.SIGTERM) is not None  # the handler was put back
    assert "Total lag: 20" in assert_ok(run("lag", uri))  # nothing committed either way
    assert_ok(run("ingest", uri, "--sink", sink, "--schema", SCHEMA))
    assert "Total lag: 0" in assert_ok(run("lag", uri))
    assert_ok(run("audit", sink, "--source", kafka))  # exits 1 if a message is missing or doubled


def test_an_empty_mqtt_session_is_nothing_to_ingest_and_creates_nothing(
    mqtt: str, unique_name: str, tmp_path: Path
) -> None:
    session = f"{mqtt}/empty/{unique_name}?qos=1&client_id={unique_name}"
    creator = queue_from_uri(session)
    creator.open(None)  # the session exists, with nothing queued for it
    creator.close(None)
    started = time.monotonic()
    done = run("ingest", session, "--sink", str(tmp_path / "lake"))
    assert "Nothing to ingest" in assert_ok(done)
    assert time.monotonic() - started < 10  # planned in seconds, no Spark started
    assert not (tmp_path / "lake").exists()
