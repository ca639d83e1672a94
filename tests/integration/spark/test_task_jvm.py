"""The JVM of a process that ingests one batch (an Airflow task, sluice.spark.session): it
compiles with C1 only for a small batch (asked of the running JVM itself, each Spark a process
of its own), and it starts on a thread of its own while the ingest plans and reads the batch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from sluice.spark import class_archive, ingest
from sluice.spark.ingest import IngestEvent
from sluice.spark.session import SHORT_JVM_MESSAGES, SessionStarting

from .conftest import SCHEMA, KafkaTopic, reading, run_spark_process

pytestmark = pytest.mark.timeout(600)

_TASK = """
import json, sys
from sluice.spark import spark_session
messages = json.loads(sys.argv[1])
conf = json.loads(sys.argv[2])
spark = spark_session("local[1]", "short-jvm-test", conf, batch_messages=messages)
assert spark.range(1000).selectExpr("sum(id)").first()[0] == 499500
jvm = spark._jvm
bean = jvm.java.lang.management.ManagementFactory.getPlatformMXBean(
    jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean")
)
print("RESULT " + json.dumps({
    "level": bean.getVMOption("TieredStopAtLevel").getValue(),
    "arguments": list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
                      .getInputArguments()),
}))
"""


def _environment() -> dict[str, str]:
    """This process's environment without the test runner's C1-only setting for every JVM
    (scripts/test.sh) and without a class archive: the compiler is the point here
    (test_class_archive has the archive)."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("SPARK_SUBMIT_OPTS", "JAVA_TOOL_OPTIONS")
    }
    return {**env, class_archive.CDS_ENV: "0"}


def _jvm_of(messages: int | None, conf: dict[str, str] | None = None) -> dict[str, Any]:
    return run_spark_process(_TASK, [json.dumps(messages), json.dumps(conf or {})], _environment())


@pytest.mark.parametrize(
    ("messages", "conf", "level"),
    [
        pytest.param(20_000, None, "1", id="small batch: C1 only"),
        pytest.param(SHORT_JVM_MESSAGES, None, "4", id="large batch: both compilers"),
        pytest.param(None, None, "4", id="no batch (a long-lived session): both compilers"),
        pytest.param(
            20_000,
            {"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=4"},
            "4",
            id="the user's own level wins",
        ),
        pytest.param(
            20_000,
            {class_archive.JAVA_OPTIONS_KEY: "-Xss4m"},
            "4",
            id="the user's default Java options: none of Sluice's",
        ),
    ],
)
def test_a_small_batchs_jvm_compiles_with_c1_only(
    messages: int | None, conf: dict[str, str] | None, level: str
) -> None:
    jvm = _jvm_of(messages, conf)
    assert jvm["level"] == level, jvm["arguments"]
    arguments = jvm["arguments"]
    assert isinstance(arguments, list)
    if conf and class_archive.JAVA_OPTIONS_KEY in conf:
        assert "-Xss4m" in arguments


_STARTING = """
import json, sys
from sluice.spark.session import SessionStarting, start_session
starting = start_session("local[1]", "starting-test", json.loads(sys.argv[1]))
print("STARTING " + type(starting).__name__, flush=True)
spark = starting.result()
assert spark.range(10).count() == 10
print("RESULT ok")
"""


def test_a_new_processs_session_starts_on_a_thread_and_says_why_it_could_not() -> None:
    def run(conf: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", _STARTING, json.dumps(conf)],
            env=_environment(),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )

    started = run({})
    assert started.returncode == 0, started.stderr[-3000:]
    assert "STARTING SessionStarting" in started.stdout and "RESULT ok" in started.stdout
    # a JVM that cannot start: the error comes out of result(), in the caller's thread
    failed = run({"spark.driver.memory": "not-a-size"})
    assert failed.returncode != 0
    assert "STARTING SessionStarting" in failed.stdout and "RESULT" not in failed.stdout
    assert "spark.driver.memory" in failed.stderr or "not-a-size" in failed.stderr


class _Starting(SessionStarting):
    """The test's session, handed over the way a starting one is: when the ingest first asks
    for it, which this records (with the stages the ingest had reported by then)."""

    def __init__(self, spark: Any, stages: list[str]) -> None:
        self._future: Future[Any] = Future()
        self._future.set_result(spark)
        self._stages = stages
        self.asked_after: list[str] | None = None

    def result(self) -> Any:
        if self.asked_after is None:
            self.asked_after = list(self._stages)
        return super().result()


def test_the_batch_is_planned_and_read_before_the_session_is_needed(
    spark: Any, topic: KafkaTopic, tmp_path: Path
) -> None:
    topic.send([reading(i) for i in range(30)] + [b"not json"])
    stages: list[str] = []
    starting = _Starting(spark, stages)

    def progress(event: IngestEvent) -> None:
        stages.append(event.stage)

    result = ingest(
        starting, topic.plan(), str(tmp_path / "sink"), source=topic.source, schema=SCHEMA,
        progress=progress,
    )  # fmt: skip
    assert starting.asked_after is not None, "the ingest never took the session"
    assert "read" in starting.asked_after, starting.asked_after  # read before Spark was asked
    assert "writing" not in starting.asked_after
    assert result.mode == "driver"  # a session still starting is a cold one
    assert (result.written, result.quarantined) == (30, 1)
    rows = pq.read_table(tmp_path / "sink", columns=["device"]).num_rows
    assert rows == 30
