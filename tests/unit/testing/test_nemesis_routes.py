"""The nemesis' routed scenarios without brokers: the faults they play, and where the world
says each payload belongs against where the routes send it."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from sluice.testing.nemesis import Scenario, faults_for
from sluice.testing.nemesis_routes import KINDS, SHARES, RoutedWorld, payload_id


def test_a_routed_scenario_plays_the_catalogs_faults_whatever_its_sink() -> None:
    for sink in ("parquet", "iceberg", "delta"):
        plain = {f.name for f in faults_for("kafka", sink, broker="kafka")}  # type: ignore[arg-type]
        routed = {f.name for f in Scenario("kafka", sink, 1, broker="kafka", routes=True).faults()}  # type: ignore[arg-type]
        catalog = {"catalog-fail", "catalog-conflict", "catalog-unknown", "catalog-unknown-before"}
        assert routed == plain | catalog


def test_a_routed_scenario_is_kafka_appending_json_locally_and_its_replay_says_routes() -> None:
    scenario = Scenario("kafka", "delta", 8, broker="kafka", routes=True)
    assert "--routes" in scenario.replay and "routed" in str(scenario)
    for wrong in (
        {"transport": "mqtt"},
        {"write_mode": "upsert"},
        {"value_format": "avro"},
        {"store": "s3", "sink": "parquet"},
    ):
        arguments = {"transport": "kafka", "sink": "iceberg", "seed": 1, "routes": True, **wrong}
        with pytest.raises(ValueError, match="routes"):
            Scenario(**arguments)  # type: ignore[arg-type]


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_every_payload_belongs_where_the_routes_send_it(seed: int, tmp_path: Path) -> None:
    """The world's own account of each payload (its table or the ingest's sink, quarantined
    or not) is where sluice.routes sends it; and every payload carries its id."""
    world = RoutedWorld(None, Scenario("kafka", "parquet", seed, routes=True), tmp_path)
    chooser = random.Random(seed)
    for n in range(300):
        ident = f"s{seed}-{n}"
        value = world.payload(ident, chooser)
        assert payload_id(value) == ident
        decision = world.routes.route(None, value, [], "topic")
        location, quarantined = world.belongs[ident]
        if location == world.sink:  # no route: quarantined, or a row of the ingest's sink
            assert decision.table is None
            assert (decision.reason is not None) == quarantined, (value, decision)
        else:
            assert decision.table == location, value
    assert set(world.findings.sent) == {"routed", *(name for name, _ in SHARES)}
    assert set(world.tables) == set(KINDS)
