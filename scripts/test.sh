#!/usr/bin/env bash
# The one test command (docs/development.md): set up what is missing, then run the whole test suite.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || exit 1
UV="uv"; command -v uv >/dev/null 2>&1 || UV="python3 -m uv"
# The tests' Spark drivers live seconds, each on small batches: the JVM's second JIT tier (C2)
# only burns the CPU the other worker needs. C1 alone made tests/integration/cli/test_ingest.py
# 11% faster and cold 20,000-message tasks 14% faster (bench/cold_task.py; it is slower for
# big batches, which is why Sluice itself does not set it).
export SPARK_SUBMIT_OPTS="${SPARK_SUBMIT_OPTS:--XX:TieredStopAtLevel=1}"
# Two worker processes (pytest-xdist), a test file each at a time, the longest files first
# (tests/conftest.py): most of the suite waits on brokers, JVMs and subprocesses, so two
# workers finish it in about two thirds of the time on two cores. Each worker has its own
# brokers and SparkSession.
# --durations: the slowest tests at the end of every run, where the suite's time goes.
PATH="/usr/sbin:$PATH" $UV run --locked --all-packages pytest -n 2 --dist loadfile --no-loadscope-reorder \
    --durations=30 --durations-min=20 "$@"
status=$?
# pytest exits 5 when it collected no test (e.g. a -k that matches nothing): not a failure.
if [ "$status" -eq 5 ]; then status=0; fi
exit "$status"
