"""Where ``mode="auto"`` reads a batch (sluice.spark.ingest.auto_mode)."""

from __future__ import annotations

from sluice.spark.ingest import AUTO_EXECUTOR_MESSAGES, AUTO_EXECUTOR_MESSAGES_COLD, auto_mode


def test_executors_from_the_warm_threshold_once_the_workers_started() -> None:
    assert auto_mode(AUTO_EXECUTOR_MESSAGES - 1, warm=True) == "driver"
    assert auto_mode(AUTO_EXECUTOR_MESSAGES, warm=True) == "executors"


def test_a_sessions_first_ingest_keeps_the_driver_up_to_the_cold_threshold() -> None:
    assert AUTO_EXECUTOR_MESSAGES < AUTO_EXECUTOR_MESSAGES_COLD
    assert auto_mode(AUTO_EXECUTOR_MESSAGES, warm=False) == "driver"
    assert auto_mode(AUTO_EXECUTOR_MESSAGES_COLD - 1, warm=False) == "driver"
    assert auto_mode(AUTO_EXECUTOR_MESSAGES_COLD, warm=False) == "executors"
