"""The command without brokers: help, fast start, sample data."""

from __future__ import annotations

import json
import subprocess
import sys

from sluice.cli.publish import iot_readings

from .runner import assert_ok, run


def test_help_lists_every_command() -> None:
    out = assert_ok(run("--help"))
    for command in ("brokers", "publish", "peek", "lag", "ingest", "dlq"):
        assert command in out


def test_help_imports_no_broker_or_spark_library() -> None:
    # What makes `sluice --help` fast: nothing heavy is imported until a command runs.
    script = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from sluice.cli import app\n"
        "assert CliRunner().invoke(app, ['--help']).exit_code == 0\n"
        "heavy = ('kafka', 'paho', 'pyspark', 'pyarrow', 'pip_services3_commons', 'rich.table')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"


def test_iot_samples_are_reproducible_with_exactly_the_malformed_asked_for() -> None:
    first = list(iot_readings(40, malformed=3, seed=5))
    assert first == list(iot_readings(40, malformed=3, seed=5))
    parsed = []
    for text in first:
        try:
            parsed.append(json.loads(text))
        except ValueError:
            continue
    assert len(parsed) == 37
    assert all(set(p) == {"device", "temperature", "humidity", "ts"} for p in parsed)
