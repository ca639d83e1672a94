"""Real Debezium, end to end, over many seeds: does each lake table equal its source table?

    uv run python bench/cdc_debezium.py [--seeds 5] [--first-seed 1] [--rounds 6]
        [--converters json,json-bare] [--no-faults] [--json PATH]

Starts Apache Kafka (one KRaft node), PostgreSQL (wal_level=logical) and a Kafka Connect
worker with Debezium's PostgreSQL connector, and a SparkSession (local[2]). For each seed
and converter: a database of its own, the seeded workload of sluice.testing.cdc_workload
(--rounds rounds: inserts, updates, deletes, multi-row transactions, TOASTed text left
unchanged, NUMERIC, timestamptz, NULLs, ADD COLUMN, TRUNCATE), captured by a connector of
its own and ingested after every round by Sluice (write_mode="upsert") into an Iceberg table
(SQL catalog on SQLite) and a Delta table per source table, while an ingest (at a failpoint),
Kafka Connect (SIGKILL) and PostgreSQL (immediate shutdown) are each killed once at rounds
the seed picks (sluice.testing.cdc_pipeline). Then each table is compared with SELECT * of
its source (every row, column and, with schemas, type) and audited.

Prints one line per run (messages on the tables' topics, batches committed, kills, messages
quarantined, mismatching findings, audit failures, seconds), the distinct mismatches over
all runs, and the totals. A correctness soak, not a timing: the seconds say what a run
costs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import traceback
import uuid
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from ingest import say


def _kind(line: str) -> str:
    """A finding without its counts and examples: what differs, not in which rows."""
    head, _, tail = line.partition(": ")
    for words, kind in (
        ("rows differ", "values differ"),
        ("does not have", "rows the source does not have"),
        ("missing from the lake", "rows missing from the lake"),
    ):
        if words in tail:
            return f"{head}: {kind}"
    return line


def _kills(run: dict[str, Any]) -> int:
    return sum(run.get(k, 0) for k in ("sluice_kills", "connect_kills", "postgres_restarts"))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--first-seed", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--converters", default="json,json-bare")
    parser.add_argument("--no-faults", action="store_true", help="kill nothing")
    parser.add_argument("--json", type=Path, help="write every run's figures as JSON here")
    args = parser.parse_args()

    from pyiceberg.catalog import load_catalog

    from sluice.brokers import start_kafka
    from sluice.spark import spark_session
    from sluice.testing.cdc_pipeline import feeds_for, run_pipeline
    from sluice.testing.cdc_workload import Workload
    from sluice.testing.debezium_postgres import (
        CONVERTERS,
        DEBEZIUM_POSTGRES,
        start_capture,
        start_capture_postgres,
    )
    from sluice.testing.kafka_connect import start_connect

    converters = [CONVERTERS[name] for name in args.converters.split(",")]
    work = Path(tempfile.mkdtemp(prefix="sluice-bench-debezium-"))
    prefix = "PYICEBERG_CATALOG__BENCH__"
    uri, warehouse = f"sqlite:///{work / 'catalog.db'}", (work / "warehouse").as_uri()
    os.environ.update({f"{prefix}TYPE": "sql", f"{prefix}URI": uri})
    os.environ[f"{prefix}WAREHOUSE"] = warehouse
    catalog = load_catalog("bench", type="sql", uri=uri, warehouse=warehouse)

    say("starting Apache Kafka, PostgreSQL, Kafka Connect and Spark")
    kafka = start_kafka()
    postgres = start_capture_postgres()
    worker = None
    runs: list[dict[str, Any]] = []
    try:
        worker = start_connect(kafka.bootstrap, [DEBEZIUM_POSTGRES])
        spark = spark_session("local[2]", "sluice-bench-debezium", {"spark.ui.enabled": "false"})
        print(
            f"\n  {'seed':>4} {'converter':<10} {'messages':>8} {'resent':>6} {'batches':>7} "
            f"{'kills s/c/p':>11} {'quar.':>5} {'mismatch':>8} {'audit':>5} {'seconds':>7}  ops"
        )
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            for converter in converters:
                database = f"shop_{uuid.uuid4().hex[:8]}"
                postgres.create_database(database)
                workload = Workload(seed, args.rounds)
                workload.create(postgres.dsn(database))
                capture = start_capture(
                    kafka.bootstrap, postgres, database, workload, converter, worker=worker
                )
                run: dict[str, Any] = {"seed": seed, "converter": converter.name}
                try:
                    namespace = f"{converter.name.replace('-', '_')}_{seed}"
                    feeds = feeds_for(capture, "bench", catalog, namespace, work / namespace)
                    figures = run_pipeline(
                        spark, capture, feeds, seed=seed, faults=not args.no_faults
                    )
                    run.update(asdict(figures))
                    kills = "/".join(
                        str(n)
                        for n in (
                            figures.sluice_kills,
                            figures.connect_kills,
                            figures.postgres_restarts,
                        )
                    )
                    print(
                        f"  {seed:>4} {converter.name:<10} {figures.messages:>8} "
                        f"{figures.resent:>6} {figures.batches:>7} {kills:>11} "
                        f"{figures.quarantined:>5} {len(figures.mismatches):>8} "
                        f"{len(figures.audit_failures):>5} {figures.seconds:>7.1f}  "
                        + " ".join(f"{op}:{n}" for op, n in sorted(figures.ops.items())),
                        flush=True,
                    )
                except Exception as exc:  # a run that breaks is a finding too
                    run["error"] = f"{type(exc).__name__}: {exc}"
                    print(f"  {seed:>4} {converter.name:<10} error: {run['error'][:200]}")
                    traceback.print_exc()
                finally:
                    capture.close(keep_worker=True)
                runs.append(run)
        spark.stop()
    finally:
        if worker is not None:
            worker.close()
        postgres.close()
        kafka.close()

    kinds: Counter[str] = Counter()
    for run in runs:
        kinds.update({_kind(line) for line in run.get("mismatches", [])})
    print("\n  mismatches (in how many runs):")
    for kind, count in sorted(kinds.items()):
        print(f"    {count:>3}  {kind}")
    ok = sum(
        1 for r in runs if not r.get("error") and not r["mismatches"] and not r["audit_failures"]
    )
    total = sum(r.get("seconds", 0.0) for r in runs)
    print(
        f"\n  {len(runs)} runs: {ok} equal to the source, "
        f"{sum(1 for r in runs if r.get('error'))} errors; "
        f"{sum(r.get('messages', 0) for r in runs):,} messages "
        f"({sum(r.get('resent', 0) for r in runs):,} sent again), "
        f"{sum(r.get('batches', 0) for r in runs)} batches, "
        f"{sum(_kills(r) for r in runs)} kills, "
        f"{total:.0f} s"
    )
    if args.json:
        args.json.write_text(json.dumps({"rounds": args.rounds, "runs": runs}, indent=2))


if __name__ == "__main__":
    main()
