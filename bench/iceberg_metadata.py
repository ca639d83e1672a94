"""What reading a pyiceberg transaction's table metadata costs as a table's snapshots grow,
pyiceberg's transaction beside Sluice's (:mod:`sluice.spark.sinks.transactions`), in one run.

    uv run python bench/iceberg_metadata.py [--snapshots 10,100,300] [--summary-bytes 2000]
        [--reads 34] [--rounds 5]

A table of a SQLite catalog in a temporary directory gets empty snapshots whose summaries hold
``--summary-bytes`` characters each (a Sluice batch's summary holds its record: 1 to 3 KB).
At each size, a transaction with one change (its properties, as a batch's commit sets the
stream's state) has its ``table_metadata`` read ``--reads`` times (one batch's publish read it
34 times, both tables' appends together), on each side, interleaved; the median of
``--rounds`` and the ratio are printed. pyiceberg 0.12 applies the updates to a deep copy of
the whole metadata at every read; Sluice's transaction once per change.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--snapshots", default="10,100,300")
    parser.add_argument("--summary-bytes", type=int, default=2000)
    parser.add_argument("--reads", type=int, default=34, help="reads per transaction")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog

    from sluice.spark.sinks.transactions import transaction

    with tempfile.TemporaryDirectory(prefix="sluice-bench-metadata-") as work:
        catalog = SqlCatalog("bench", uri=f"sqlite:///{work}/c.db", warehouse=f"file://{work}/w")
        catalog.create_namespace("bench")
        table = catalog.create_table("bench.t", schema=pa.schema([("n", pa.int64())]))
        summary = {"sluice.record": "x" * args.summary_bytes}
        made = 0
        print(f"{'snapshots':>10} {'pyiceberg':>12} {'Sluice':>10} {'ratio':>8}")
        for size in (int(s) for s in args.snapshots.split(",")):
            while made < size:
                making = table.transaction()
                with making.update_snapshot(snapshot_properties=summary).fast_append():
                    pass
                making.commit_transaction()
                made += 1
            times: dict[str, list[float]] = {"pyiceberg": [], "sluice": []}
            for _ in range(args.rounds):
                for side in times:
                    changes = table.transaction() if side == "pyiceberg" else transaction(table)
                    changes.set_properties({"sluice.bench": str(made)})
                    started = time.perf_counter()
                    for _ in range(args.reads):
                        assert changes.table_metadata.properties["sluice.bench"] == str(made)
                    times[side].append(time.perf_counter() - started)
            theirs, ours = (statistics.median(times[side]) * 1000 for side in times)
            print(f"{size:>10} {theirs:>9.1f} ms {ours:>7.1f} ms {theirs / ours:>7.1f}x")


if __name__ == "__main__":
    main()
