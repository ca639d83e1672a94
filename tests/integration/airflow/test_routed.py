"""Many assets on one routed topic: their RoutedMessageTriggers (made from ``serialize()``, as
the triggerer makes them) share one poller, which reads each batch once and wakes only the
assets whose routes have messages in it; nothing is committed at sensing. One ingest task
(``dag.test()``) writes every route of the batch and commits. On noida-db."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk import Asset, AssetWatcher

from sluice.batch import BatchSpec
from sluice.brokers import BrokerProcess
from sluice.cursor import BatchCursor
from sluice.route_index import HOME
from sluice.sensing import plan_now
from sluice.testing.topics import create_kafka_topic
from sluice_airflow.testing import first_events, load_dag_file, run_dag
from sluice_airflow.triggers.routed import RoutedMessageTrigger, shared_pollers
from tests.integration.airflow.dag_runs import DAG_FILE_HEADER, TEST_DAG, write_dag
from tests.integration.airflow.test_trigger import MemoryStateStore, publish

pytestmark = pytest.mark.usefixtures("airflow_db", "spark")

TIMEOUT = 30
ROUTES_OF = ("orders", "payments", None)  # None: the messages no route takes

INGEST_DAG = """
from sluice_airflow.operators.spark import SparkIngestOperator

with {dag} as dag:
    SparkIngestOperator(
        task_id="ingest",
        conn_id={conn!r},
        sink={home!r},
        batch=None,
        schema="kind STRING, n INT",
        routes={routes!r},
        config={{"group_id": {group!r}}},
    )
"""


def watchers(
    conn: str, topic: str, routes: dict[str, Any], group: str, rerun_after: float = 600.0
) -> list[Any]:
    made = [
        RoutedMessageTrigger(
            conn,
            topic,
            routes,
            route,
            poll_interval=0.1,
            config={"group_id": group},
            rerun_after=rerun_after,
        )
        for route in ROUTES_OF
    ]
    return [type(t)(**t.serialize()[1]) for t in made]  # as the triggerer does


async def sense(triggers: list[Any], expected: set[str | None]) -> dict[str | None, Any]:
    """Run the triggers until those of ``expected`` emitted; what each emitted (None for the
    silent ones), and the shared pollers' reads and subscribers at that moment."""
    runs = {t.route: t.run() for t in triggers}
    pending = {route: asyncio.ensure_future(anext(run)) for route, run in runs.items()}
    try:
        async with asyncio.timeout(TIMEOUT):
            await asyncio.gather(*(pending[r] for r in expected))
            # a trigger still looking its connection up subscribes a moment later
            while sum(len(p.subscribers) for p in shared_pollers()) < len(triggers):
                await asyncio.sleep(0.01)
        for _ in range(5):  # a delivery is one step: the others would have theirs by now
            await asyncio.sleep(0)
        found: dict[str | None, Any] = {
            route: f.result().payload if f.done() else None for route, f in pending.items()
        }
        found["pollers"] = [(p.reads, len(p.subscribers)) for p in shared_pollers()]
        return found
    finally:
        for future in pending.values():
            future.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                await future
        for run in runs.values():
            await run.aclose()


def test_one_poller_wakes_only_the_routes_with_messages_and_one_ingest_writes_them(
    noida_broker: BrokerProcess, kafka_conn: str, unique_name: str, tmp_path: Path
) -> None:
    from deltalake import DeltaTable

    create_kafka_topic(noida_broker.bootstrap, unique_name, 1)
    group = f"{unique_name}-g"
    tables = {k: f"delta://{tmp_path / k}" for k in ("orders", "payments")}
    routes = {"by": "field:kind", "tables": tables}
    home = f"delta://{tmp_path / 'other'}"
    triggers = watchers(kafka_conn, unique_name, routes, group)
    assert [t.place for t in triggers] == [tables["orders"], tables["payments"], HOME]

    # Orders and a message no route takes: their assets wake, the payments asset does not.
    publish(kafka_conn, unique_name, [{"kind": "orders", "n": 1}, {"kind": "gifts", "n": 2}])
    publish(kafka_conn, unique_name, [{"kind": "orders", "n": 3}])
    first = asyncio.run(sense(triggers, {"orders", None}))
    assert first["payments"] is None
    assert first["orders"] == first[None], "one batch, told to each of its routes"
    assert first["pollers"] == [(1, 3)], "one poller for the three triggers, one read"
    batch = BatchSpec.from_dict(first["orders"])
    assert batch.message_count == 3
    assert shared_pollers() == [], "the poller stops with its last trigger"
    config = {"connection.uri": noida_broker.bootstrap, "topic": unique_name, "group_id": group}
    assert plan_now("kafka", config)[0] == batch, "nothing committed at sensing"

    # One ingest of the batch (the run the asset events trigger) writes every route.
    path = write_dag(
        "routed_ingest",
        DAG_FILE_HEADER
        + INGEST_DAG.format(
            dag=TEST_DAG.format(dag_id="routed_ingest"),
            conn=kafka_conn,
            home=home,
            routes=routes,
            group=group,
        ),
    )
    run = run_dag(load_dag_file(path, "routed_ingest"), run_conf={"batch": first["orders"]})
    assert run.states == {"ingest": "success"}
    result = run.xcom("ingest")
    assert result["tables"] == {tables["orders"]: {"written": 2, "quarantined": 0, "held": 0}}
    kinds = DeltaTable(str(tmp_path / "orders")).to_pyarrow_table().column("kind").to_pylist()
    assert kinds == ["orders", "orders"]

    # Then a payment: the next batch starts after the committed one, for payments alone.
    publish(kafka_conn, unique_name, [{"kind": "payments", "n": 4}])
    assets = [
        Asset(str(t.route), watchers=[AssetWatcher(name=f"w{n}", trigger=t)])
        for n, t in enumerate(watchers(kafka_conn, unique_name, routes, group))
    ]
    second = first_events(assets)  # what the docs' page runs, too
    assert list(second) == ["payments"]
    (following,) = BatchSpec.from_dict(second["payments"]).ranges
    assert (following.start, following.end) == (3, 4)


def test_a_restarted_triggerer_keeps_the_batch_in_flight_and_emits_it_again_to_its_routes(
    noida_broker: BrokerProcess, kafka_conn: str, unique_name: str, tmp_path: Path
) -> None:
    """The poller's cursor lives in the assets' state stores: triggers started again (a
    triggerer restart) do not emit the batch in flight as a new one; once its lease ran out
    (nothing committed) it is emitted again, the same batch, to the same routes only."""
    create_kafka_topic(noida_broker.bootstrap, unique_name, 1)
    group, lease = f"{unique_name}-g", 2.0
    routes = {"by": "field:kind", "tables": {k: f"delta://{tmp_path / k}" for k in ROUTES_OF[:2]}}
    publish(kafka_conn, unique_name, [{"kind": "orders", "n": 1}, {"kind": "gifts", "n": 2}])
    stores = {route: MemoryStateStore() for route in ROUTES_OF}

    def started() -> list[Any]:
        triggers = watchers(kafka_conn, unique_name, routes, group, rerun_after=lease)
        for trigger in triggers:
            trigger.asset_state_store = stores[trigger.route]
        return triggers

    first = asyncio.run(sense(started(), {"orders", None}))
    (saved,) = stores["payments"].values.values()  # every watcher's store holds the cursor
    assert BatchCursor.from_json(saved).attempt == 0

    again = asyncio.run(sense(started(), {"orders", None}))
    assert again["orders"] == first["orders"] == again[None] and again["payments"] is None
    (saved,) = stores["orders"].values.values()
    assert BatchCursor.from_json(saved).attempt == 1, "the same batch, emitted again"
