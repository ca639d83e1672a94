"""The nemesis suite on MQTT (mosquitto): every fault of docs/fault-model.md that applies to
MQTT, once per scenario, in an order a fixed seed chooses, on a Parquet dataset and on an
Iceberg table; checked by ``sluice audit`` and the exact multiset of payload ids."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sluice.testing.nemesis import Scenario

from .helpers import assert_survives


@pytest.mark.parametrize(("sink", "seed"), [("parquet", 3), ("iceberg", 4)])
def test_mqtt_ingests_survive_every_fault(spark: Any, sink: str, seed: int, tmp_path: Path) -> None:
    assert_survives(spark, Scenario("mqtt", sink, seed), tmp_path)  # type: ignore[arg-type]
