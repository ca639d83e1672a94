"""Table health: many small batches, before and after ``sluice compact`` (and ``sluice
expire``), against the same rows written once as one batch; for each sink, in one run.

    uv run python bench/table_health.py [--batches 1000] [--rows 200] [--days 10] [--repeat 5]
        [--sinks parquet,iceberg,delta,parquet-day,iceberg-day]

Writes --batches batches of --rows rows (readings of 8 devices, timestamps spread evenly over
--days days, in order) into each sink: a Parquet dataset, an Iceberg table (SQLite catalog,
local warehouse), a Delta table (delta-rs), and the Parquet dataset and Iceberg table
partitioned by ``day(timestamp)`` (``-day``); and the same rows as ONE batch into a second
one of each. The batches go straight through each sink's publish path
(``sluice.testing.batches``: staged as one Parquet file per batch and partition value,
recorded and published as an ingest does), not through Spark and a broker: 1,000 Spark
ingests would time Spark, not the table.

For each, it prints the data file count, the snapshot count (Iceberg: snapshots; Parquet: the
batch directories; Delta: the log's version), and the best of --repeat timings of a one-day
filter query (``timestamp`` in one day, and for a partitioned dataset its day directory;
count and average of ``temperature``): pyarrow.dataset over the Parquet dataset's directory
(discovery included: it lists ``_sluice`` too), and ``sluice.read_dataset`` (the batch
directories' files only); a pyiceberg scan of the table (loading it included); pyarrow over
``DeltaTable(path).to_pyarrow_dataset()`` (loading the log included).
Then ``compact`` (target 128MB, min 5 files), the same figures; ``expire --older-than 0s``,
the same again. Goal: after compaction, the query within 1.5x of the one-batch layout.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def rows(first: int, count: int, total: int, days: int) -> pa.Table:
    span = days * 86400 / total
    offsets = list(range(first, first + count))
    return pa.table(
        {
            "device": [f"sensor-{o % 8}" for o in offsets],
            "temperature": [20.0 + (o % 100) / 10 for o in offsets],
            "key": [f"k{o}".encode() for o in offsets],
            "value": [b"x" * 120 for _ in offsets],
            "topic": ["readings"] * count,
            "partition": pa.array([0] * count, pa.int32()),
            "offset": pa.array(offsets, pa.int64()),
            "timestamp": pa.array(
                [START + dt.timedelta(seconds=o * span) for o in offsets],
                pa.timestamp("us", tz="UTC"),
            ),
        }
    )


BY_DAY = "day(timestamp)"


def publish(
    location: str, batches: int, per_batch: int, days: int, partition_by: str | None
) -> float:
    from sluice.batch import BatchSpec, OffsetRange
    from sluice.spark.sinks import open_sink
    from sluice.testing.batches import publish_rows

    sink = open_sink(location, partition_by)
    total = batches * per_batch
    started = time.perf_counter()
    for n in range(batches):
        first = n * per_batch
        spec = BatchSpec(
            "kafka",
            "readings",
            group_id="bench",
            ranges=(OffsetRange(0, first, first + per_batch),),
        )
        publish_rows(sink, spec, rows(first, per_batch, total, days))
        if batches > 1 and (n + 1) % max(1, batches // 10) == 0:
            say(f"  {location}: {n + 1}/{batches} batches")
    return time.perf_counter() - started


def best(query: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    times, answer = [], query()  # warm: imports and caches are not the layout's cost
    for _ in range(repeat):
        started = time.perf_counter()
        answer = query()
        times.append(time.perf_counter() - started)
    return min(times), answer


def day_bounds(day: int) -> tuple[dt.datetime, dt.datetime]:
    return START + dt.timedelta(days=day), START + dt.timedelta(days=day + 1)


def one_day(dataset: Any, day: int, partitioned: bool) -> tuple[int, float]:
    """Count and mean temperature of the readings of ``day`` in a pyarrow dataset (a
    partitioned Parquet dataset's day directory named too, so that its other days' files are
    never opened)."""
    import pyarrow.compute as pc

    low, high = day_bounds(day)
    field = pc.field("timestamp")
    where = (field >= pa.scalar(low)) & (field < pa.scalar(high))
    if partitioned:
        where &= pc.field("timestamp_day") == low.date().isoformat()
    table = dataset.to_table(columns=["temperature"], filter=where)
    return table.num_rows, float(pc.mean(table.column("temperature")).as_py() or 0)


def parquet_figures(root: Path, day: int, repeat: int, partitioned: bool) -> dict[str, Any]:
    import pyarrow.dataset as ds

    from sluice.datasets import read_dataset
    from sluice.spark.sinks.parquet import good_files

    def query() -> tuple[int, float]:
        return one_day(ds.dataset(root, format="parquet", partitioning="hive"), day, partitioned)

    seconds, answer = best(query, repeat)
    sluice_seconds, sluice_answer = best(
        lambda: one_day(read_dataset(root), day, partitioned), repeat
    )
    assert sluice_answer == answer, (sluice_answer, answer)
    files = [len(good_files(d)) for d in root.glob("batch_id=*")]
    return {
        "sluice_query": sluice_seconds,
        "files": sum(files),
        "snapshots": f"{sum(1 for f in files if f)} dirs",
        "query": seconds,
        "answer": answer,
    }


def delta_figures(root: Path, day: int, repeat: int) -> dict[str, Any]:
    from deltalake import DeltaTable

    seconds, answer = best(
        lambda: one_day(DeltaTable(str(root)).to_pyarrow_dataset(), day, False), repeat
    )
    table = DeltaTable(str(root))
    logs = len(list((root / "_delta_log").glob("*.json")))
    return {
        "files": len(table.file_uris()),
        "snapshots": f"v{table.version()}, {logs} logs",
        "query": seconds,
        "answer": answer,
    }


def iceberg_figures(catalog: Any, name: str, day: int, repeat: int) -> dict[str, Any]:
    import pyarrow.compute as pc
    from pyiceberg.expressions import And, GreaterThanOrEqual, LessThan

    low, high = day_bounds(day)

    def query() -> tuple[int, float]:
        table = catalog.load_table(name)
        row_filter = And(
            GreaterThanOrEqual("timestamp", low.isoformat()),
            LessThan("timestamp", high.isoformat()),
        )
        result = table.scan(row_filter=row_filter, selected_fields=("temperature",)).to_arrow()
        return result.num_rows, float(pc.mean(result.column("temperature")).as_py() or 0)

    seconds, answer = best(query, repeat)
    table = catalog.load_table(name)
    return {
        "files": len(list(table.scan().plan_files())),
        "snapshots": len(table.snapshots()),
        "query": seconds,
        "answer": answer,
    }


SINKS = ("parquet", "iceberg", "delta", "parquet-day", "iceberg-day")


def location(kind: str, work: Path, layout: str) -> str:
    """Where ``kind``'s ``layout`` (``small``: many batches; ``once``: one) is written."""
    if kind.startswith("parquet"):
        return str(work / f"{kind}-{layout}")
    if kind == "delta":
        return f"delta://{work / f'delta-{layout}'}"
    table = f"iceberg://health/b.{kind.replace('-', '_')}_{layout}"
    return f"{table}?partition_by={BY_DAY}" if kind.endswith("-day") else table


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--batches", type=int, default=1000)
    parser.add_argument("--rows", type=int, default=200, help="rows per batch")
    parser.add_argument("--days", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--sinks",
        default=",".join(SINKS),
        help=f"which sinks, comma-separated (default all: {','.join(SINKS)})",
    )
    parser.add_argument(
        "--json", metavar="PATH", help="also write the results (bench/results/table_health.json)"
    )
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    day = args.days // 2

    from sluice.maintenance import compact, expire

    work = Path(tempfile.mkdtemp(prefix="sluice-bench-health-"))
    prefix = "PYICEBERG_CATALOG__HEALTH__"
    os.environ[prefix + "TYPE"] = "sql"
    os.environ[prefix + "URI"] = f"sqlite:///{work / 'catalog.db'}"
    os.environ[prefix + "WAREHOUSE"] = (work / "warehouse").as_uri()
    from pyiceberg.catalog import load_catalog

    catalog = load_catalog("health")
    total = args.batches * args.rows
    say(
        f"{args.batches} batches of {args.rows} rows ({total} rows over {args.days} days) in {work}"
    )

    header = f"{'sink':12} {'layout':24} {'files':>6} {'snapshots':>16} {'1-day query':>12}  ratio"
    for kind in args.sinks.split(","):
        if kind not in SINKS:
            parser.error(f"--sinks: unknown sink {kind!r}; choose from {', '.join(SINKS)}")
        results: list[tuple[str, str, dict[str, Any]]] = []
        small, once = (location(kind, work, layout) for layout in ("small", "once"))
        partition_by = BY_DAY if kind.endswith("-day") else None
        say(f"{kind}: publishing {args.batches} small batches")
        seconds = publish(small, args.batches, args.rows, args.days, partition_by)
        say(f"{kind}: {args.batches} batches in {seconds:.1f} s; the same rows as one batch")
        publish(once, 1, total, args.days, partition_by)

        def figures(location: str, kind: str = kind) -> dict[str, Any]:
            if kind.startswith("parquet"):
                return parquet_figures(Path(location), day, args.repeat, kind.endswith("-day"))
            if kind == "delta":
                return delta_figures(Path(location.removeprefix("delta://")), day, args.repeat)
            name = location.rpartition("/")[2].partition("?")[0]
            return iceberg_figures(catalog, name, day, args.repeat)

        results.append((kind, "one batch", figures(once)))
        results.append((kind, f"{args.batches} batches", figures(small)))
        started = time.perf_counter()
        compacted = compact(small, "128MB", 5, progress=say)
        took = time.perf_counter() - started
        results.append((kind, f"compacted ({took:.1f} s)", figures(small)))
        started = time.perf_counter()
        expire(small, 0, progress=say)
        took = time.perf_counter() - started
        results.append((kind, f"+ expired ({took:.1f} s)", figures(small)))
        # a partitioned table is compacted per partition value: with few batches a day, none
        assert compacted.files_after <= compacted.files_before

        show(header, results, args.batches)
        rows.append(json_row(kind, results, args))
    if args.json:
        from benchjson import write

        title = "Table health: a one-day query after many small batches, before and after compact"
        write(args.json, "table_health", title, rows)


def json_row(
    kind: str, results: list[tuple[str, str, dict[str, Any]]], args: Any
) -> dict[str, Any]:
    """One sink's row of ``--json``: its query after small batches, compacted and expired,
    against the same rows written as one batch."""
    from benchjson import row

    once, small, compacted, expired = (f["query"] * 1000 for _, _, f in results)
    return row(
        f"{kind}: a one-day filter query after {args.batches:,} batches, before and after "
        "sluice compact (+ expire), against the same rows as one batch",
        f"{small:.1f} ms small, {compacted:.1f} ms compacted, {expired:.1f} ms expired",
        f"one batch: {once:.1f} ms",
        f"{compacted / once:.2f}x ({expired / once:.2f}x after expiry)",
        "<= 1.5x",
        f"bench/table_health.py --batches {args.batches} --sinks {kind}",
        {"unit": "ms", "sides": ["compacted", "one batch"], "values": {kind: [compacted, once]}},
    )


def show(header: str, results: list[tuple[str, str, dict[str, Any]]], batches: int) -> None:
    print(f"\n{header}", flush=True)
    baseline = results[0][2]["query"]
    for kind, layout, f in results:
        ratio = f["query"] / baseline
        print(
            f"{kind:12} {layout:24} {f['files']:>6} {f['snapshots']!s:>16} "
            f"{f['query'] * 1000:>9.1f} ms  {ratio:.2f}x  (rows, mean: {f['answer'][0]}, "
            f"{f['answer'][1]:.3f})",
            flush=True,
        )
    if "sluice_query" in results[0][2]:
        print("the same query through sluice.read_dataset (the batch directories' files only):")
        baseline = results[0][2]["sluice_query"]
        for kind, layout, f in results:
            ratio = f["sluice_query"] / baseline
            print(f"{kind:12} {layout:24} {f['sluice_query'] * 1000:>9.1f} ms  {ratio:.2f}x")
    answers = {f["answer"] for _, _, f in results}
    assert len(answers) == 1, f"every layout answers the same: {answers}"


if __name__ == "__main__":
    main()
