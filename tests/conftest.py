"""Suite-wide ordering: the files that take minutes start first.

pytest-xdist hands whole files to the two workers (``--dist loadfile``) in collection order
(``--no-loadscope-reorder``; its default order is by test count, which put the single-test
README run last and left one worker idle while it finished). Starting the longest files first
lets both workers end at about the same time.
"""

from __future__ import annotations

import pytest

#: Longest first, as measured by ``--durations`` on a two-core machine.
SLOW_FIRST = (
    "tests/system/test_docs.py",
    "tests/system/airflow/test_example_dags.py",
    "tests/system/dagster/test_dagster_deployment.py",
    "tests/system/test_demo.py",
    "tests/system/spark/test_cluster.py",
    "tests/system/spark/test_connect.py",
    "tests/system/test_pip_path.py",
    "tests/integration/nemesis/test_nemesis_kafka.py",
    "tests/integration/nemesis/test_nemesis_mqtt.py",
    "tests/integration/s3/test_s3_faults.py",
    # Not minutes each, but minutes in all: started early, none of them is the last file left.
    "tests/integration/spark/test_crash_matrix.py",
    "tests/integration/routes/test_routed_crashes.py",
    "tests/integration/cdc/test_debezium_end_to_end.py",
    "tests/contract/test_queue_contract.py",
    "tests/integration/kafka/test_kafka_queue.py",
    "tests/integration/iceberg/test_iceberg_crashes.py",
    "tests/integration/iceberg/test_iceberg_faults.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {path: place for place, path in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))
