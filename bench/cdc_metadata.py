"""How large a current-state table's metadata grows under a delete-heavy change stream, on
Iceberg and on Delta, in one run.

    uv run python bench/cdc_metadata.py [--batches 100] [--keys-per-batch 1000] [--json PATH]

Each batch inserts --keys-per-batch new keys and deletes the keys the batch before inserted
(each delete with its tombstone): every batch leaves as many delete markers behind as it
inserts rows, so after N batches the stream holds N x --keys-per-batch markers, the worst case
for them (keys deleted for good). The changes go to Apache Kafka (one KRaft node, started
here, 3 partitions); each batch is ingested with write_mode="upsert" into an Iceberg table
(SQL catalog on SQLite, local warehouse) and a Delta table. After some batches it prints:

- Iceberg: the newest snapshot's summary (what every commit adds to the table's metadata
  file), the metadata file (every snapshot's summary until `sluice expire` drops old ones),
  and the stream state file (its offsets and its delete markers);
- Delta: the newest commit's log entry, the log directory, and the stream state file;
- the markers the state holds, and what they would weigh in each commit had the commit carried
  the batch's markers (as Sluice's commits did before: about 300 KB a commit at bench/cdc.py's
  delete rate).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from cdc import queue_of
from ingest import PARTITIONS, say

REPORTED = {1, 10, 25, 50, 75, 100}


def produce(bootstrap: str, topic: str, batch: int, keys: int) -> int:
    """Batch ``batch``'s changes: ``keys`` inserts, and deletes of the batch before's keys."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20)
    lsn = 1_000_000 * (batch + 1)
    sent = 0
    for key in range(batch * keys, (batch + 1) * keys):
        row = {"id": key, "name": f"customer {key}", "tier": "gold"}
        envelope = {"op": "c", "before": None, "after": row, "source": {"lsn": lsn}}
        producer.send(topic, json.dumps(envelope).encode(), key=json.dumps({"id": key}).encode())
        lsn, sent = lsn + 8, sent + 1
    for key in range((batch - 1) * keys, batch * keys) if batch else ():
        before = {"id": key, "name": f"customer {key}", "tier": "gold"}
        envelope = {"op": "d", "before": before, "after": None, "source": {"lsn": lsn}}
        encoded = json.dumps({"id": key}).encode()
        producer.send(topic, json.dumps(envelope).encode(), key=encoded)
        producer.send(topic, None, key=encoded)  # the tombstone
        lsn, sent = lsn + 8, sent + 2
    producer.flush()
    producer.close()
    return sent


def iceberg_sizes(name: str) -> dict[str, Any]:
    from pyiceberg.catalog import load_catalog

    table = load_catalog("bench").load_table(name)
    snapshot = table.current_snapshot()
    summary = snapshot.summary.model_dump() if snapshot and snapshot.summary else {}
    metadata = _size(table.metadata_location)
    state = next(
        (v for k, v in table.properties.items() if k.startswith("sluice.stream-file.")), None
    )
    inline = next((v for k, v in table.properties.items() if k.startswith("sluice.stream.")), None)
    return {
        "summary_bytes": len(json.dumps(summary)),
        "metadata_file_bytes": metadata,
        "snapshots": len(table.snapshots()),
        "state_bytes": _size(state) if state else len(inline or ""),
    }


def delta_sizes(path: Path) -> dict[str, Any]:
    log = path / "_delta_log"
    commits = sorted(log.glob("*.json"))
    states = sorted((path / "_sluice" / "streams").glob("*/*.json"), key=os.path.getmtime)
    return {
        "commit_bytes": commits[-1].stat().st_size,
        "log_bytes": sum(p.stat().st_size for p in log.iterdir() if p.is_file()),
        "state_bytes": states[-1].stat().st_size if states else 0,
    }


def _size(location: str) -> int:
    return Path(location.removeprefix("file://")).stat().st_size


def family_rows(rows: list[dict[str, Any]], args: argparse.Namespace) -> list[dict[str, Any]]:
    """The results as bench/results rows (:mod:`benchjson`): the commit metadata per batch on
    each sink, against the same commit carrying its batch's markers; the stream state."""
    from benchjson import row

    command = (
        f"bench/cdc_metadata.py --batches {args.batches} --keys-per-batch {args.keys_per_batch}"
    )
    first, last = rows[0], rows[-1]
    out = []
    for sink, name, field in (
        ("iceberg", "Iceberg", "summary_bytes"),
        ("delta", "Delta", "commit_bytes"),
    ):
        own = [r[sink][field] for r in rows]
        carried = [r[sink][field] + r["markers_per_commit_before_bytes"] for r in rows]
        out.append(
            row(
                f"{name}: a commit's own metadata (bytes), batch 1 to {last['batch']}",
                f"{own[0]:,} -> {own[-1]:,} B ({last['markers']:,} markers held)",
                f"carrying the batch's markers: {carried[-1]:,} B",
                f"{own[-1] / own[0]:.2f}x from batch 1 to {last['batch']}",
                "flat whatever the markers",
                command,
                {
                    "unit": "bytes",
                    "sides": ["the commit's own metadata", "carrying its batch's markers"],
                    "values": {
                        f"batch {r['batch']}": [a, b]
                        for r, a, b in zip(rows, own, carried, strict=True)
                    },
                },
            )
        )
    per_marker = last["delta"]["state_bytes"] / max(1, last["markers"])
    out.append(
        row(
            f"the stream state holding the markers, after batch {last['batch']}",
            f"{last['delta']['state_bytes']:,} B for {last['markers']:,} markers "
            f"({per_marker:.1f} B each)",
            f"after batch 1: {first['delta']['state_bytes']:,} B",
            "-",
            "grows with the keys deleted for good, not the history",
            command,
        )
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--keys-per-batch", type=int, default=1_000)
    parser.add_argument("--json", type=Path, help="write the results as JSON here")
    args = parser.parse_args()

    from sluice.batch import plan_batch
    from sluice.brokers import create_kafka_topic, start_kafka
    from sluice.spark import ingest, spark_session
    from sluice.spark.sinks import open_sink
    from sluice.spark.sinks.base import StreamKey

    work = Path(tempfile.mkdtemp(prefix="sluice-bench-cdc-metadata-"))
    prefix = "PYICEBERG_CATALOG__BENCH__"
    os.environ[f"{prefix}TYPE"] = "sql"
    os.environ[f"{prefix}URI"] = f"sqlite:///{work / 'catalog.db'}"
    os.environ[f"{prefix}WAREHOUSE"] = (work / "warehouse").as_uri()
    say("starting Apache Kafka and Spark")
    broker = start_kafka()
    try:
        topic, source = "bench-deletes", f"kafka://{broker.bootstrap}"
        create_kafka_topic(broker.bootstrap, topic, PARTITIONS)
        spark = spark_session(
            "local[2]", "sluice-bench-cdc-metadata", {"spark.ui.enabled": "false"}
        )
        sinks = {"iceberg": "iceberg://bench/bench.current", "delta": f"delta://{work / 'delta'}"}
        queues = {side: queue_of(broker.bootstrap, topic, f"bench-{side}") for side in sinks}
        rows: list[dict[str, Any]] = []
        started = time.monotonic()
        header = (
            f"\n  {'batch':>5} {'markers':>8} | {'ice summary':>11} {'ice metadata':>12} "
            f"{'ice state':>10} | {'delta commit':>12} {'delta log':>10} {'delta state':>11} "
            f"| {'markers/commit before':>21}"
        )
        print(header)
        for number in range(args.batches):
            produce(broker.bootstrap, topic, number, args.keys_per_batch)
            for side, sink in sinks.items():
                spec = plan_batch(queues[side])
                assert spec is not None, "nothing waiting"
                ingest(spark, spec, sink, source=source, write_mode="upsert")
            if number + 1 not in REPORTED and number + 1 != args.batches:
                continue
            state = open_sink(sinks["delta"]).state(StreamKey("kafka", topic, "bench-delta"))
            markers = len(state.cdc_deleted)
            batch_markers = json.dumps(
                {json.dumps([k]): 100_000_000 + k for k in range(args.keys_per_batch)}
                if number
                else {}
            )
            row = {
                "batch": number + 1,
                "markers": markers,
                "iceberg": iceberg_sizes("bench.current"),
                "delta": delta_sizes(work / "delta"),
                "markers_per_commit_before_bytes": len(batch_markers),
            }
            rows.append(row)
            ice, delta = row["iceberg"], row["delta"]
            print(
                f"  {row['batch']:>5} {markers:>8,} | {ice['summary_bytes']:>11,} "
                f"{ice['metadata_file_bytes']:>12,} {ice['state_bytes']:>10,} | "
                f"{delta['commit_bytes']:>12,} {delta['log_bytes']:>10,} "
                f"{delta['state_bytes']:>11,} | {len(batch_markers):>21,}",
                flush=True,
            )
        first, last = rows[0], rows[-1]
        print(
            f"\n  {args.batches} batches in {time.monotonic() - started:.0f} s. The newest "
            f"commit's own metadata: Iceberg summary {first['iceberg']['summary_bytes']:,} -> "
            f"{last['iceberg']['summary_bytes']:,} bytes, Delta commit "
            f"{first['delta']['commit_bytes']:,} -> {last['delta']['commit_bytes']:,} bytes, "
            f"with {last['markers']:,} markers in the stream state "
            f"({last['delta']['state_bytes'] / max(1, last['markers']):.1f} bytes each there)."
        )
        if args.json:
            from benchjson import write

            title = "Change data capture: metadata under delete-heavy batches"
            write(args.json, "cdc_metadata", title, family_rows(rows, args), broker="Apache Kafka")
        spark.stop()
    finally:
        broker.stop()


if __name__ == "__main__":
    main()
