"""Sluice's Iceberg transaction (``sluice.spark.sinks.transactions``), on a real SQLite catalog:
its table metadata is computed once per change, and still follows every change."""

from __future__ import annotations

import pyarrow as pa

from sluice.spark.sinks.transactions import transaction

from .conftest import Lake


def test_the_metadata_is_computed_once_per_change_and_follows_each_change(
    sqlite_lake: Lake,
) -> None:
    catalog = sqlite_lake.catalog
    catalog.create_namespace(sqlite_lake.namespace)
    table = catalog.create_table(
        f"{sqlite_lake.namespace}.numbers", schema=pa.schema([("n", pa.int64())])
    )
    for start in range(0, 30, 10):  # a few snapshots, as a table Sluice writes has
        table.append(pa.table({"n": pa.array(range(start, start + 10), pa.int64())}))

    changes = transaction(table)
    first = changes.table_metadata
    assert changes.table_metadata is first, "read twice, computed once"
    assert first == table.metadata

    changes.set_properties({"sluice.test": "1"})
    changed = changes.table_metadata
    assert changed is not first and changed.properties["sluice.test"] == "1"
    assert changes.table_metadata is changed

    changes.append(pa.table({"n": pa.array([30, 31], pa.int64())}))
    appended = changes.table_metadata
    assert len(appended.snapshots) == len(first.snapshots) + 1
    changes.commit_transaction()

    reloaded = catalog.load_table(f"{sqlite_lake.namespace}.numbers")
    assert reloaded.properties["sluice.test"] == "1"
    assert sorted(reloaded.scan().to_arrow()["n"].to_pylist()) == list(range(32))
    after = transaction(table)  # the committed table's object follows the commit
    assert after.table_metadata.current_snapshot_id == reloaded.metadata.current_snapshot_id
