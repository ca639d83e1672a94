"""Capture real Debezium messages into ``tests/data/debezium/<converter>.jsonl``.

Starts Apache Kafka, PostgreSQL (``wal_level=logical``) and a Kafka Connect worker with
Debezium's PostgreSQL connector (:mod:`sluice.testing.debezium_postgres`), one connector per
converter of ``CONVERTERS`` on the same database, runs a short seeded workload
(:mod:`sluice.testing.cdc_workload`) and writes every message of every topic the connectors
wrote, one JSON object a line: ``topic``, ``partition``, ``offset``, ``key`` and ``value``
(the record's bytes as UTF-8 text, JSON for both converters; null for a null key or a
tombstone), ``headers`` and ``cases`` (what the message shows, for finding examples).

Run from the repository's root: ``uv run python tests/data/debezium/capture.py``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from sluice.brokers import start_kafka
from sluice.testing.cdc_workload import Workload
from sluice.testing.debezium_postgres import (
    CONVERTERS,
    DEBEZIUM_POSTGRES,
    Capture,
    start_capture,
    start_capture_postgres,
    topic_records,
)
from sluice.testing.kafka_connect import start_connect

HERE = Path(__file__).parent
PLACEHOLDER = "__debezium_unavailable_value"


def _payload(document: Any) -> Any:
    if isinstance(document, dict) and set(document) == {"schema", "payload"}:
        return document["payload"]
    return document


def cases(topic: str, key: bytes | None, value: bytes | None) -> list[str]:
    """What a message shows: its kind, and the workload's cases in it."""
    if topic.startswith("__debezium-heartbeat"):
        return ["heartbeat"]
    if topic.endswith(".transaction"):
        status = _payload(json.loads(value or b"{}")).get("status", "?")
        return [f"transaction-{status.lower()}"]
    if value is None:
        return ["tombstone"]
    found = []
    envelope = _payload(json.loads(value))
    op = envelope.get("op")
    found.append({"r": "snapshot", "c": "insert", "u": "update", "d": "delete"}.get(op, op))
    if op == "t":
        found = ["truncate"] + (["no-key"] if key is None else [])
    after = envelope.get("after") or {}
    if PLACEHOLDER in json.dumps(after):
        found.append("toast-placeholder")
    if "note" in after:
        found.append("added-column")
    if any(v is None for v in after.values()):
        found.append("nulls")
    if envelope.get("transaction"):
        found.append("in-transaction")
    return found


def dump(capture: Capture, topics: list[str], out: Path) -> int:
    lines = []
    for topic in topics:
        for record in topic_records(capture.bootstrap, topic):
            key, value = record.key, record.value
            lines.append(
                {
                    "topic": topic,
                    "partition": record.partition,
                    "offset": record.offset,
                    "key": None if key is None else key.decode(),
                    "value": None if value is None else value.decode(),
                    "headers": {k: v.decode(errors="replace") for k, v in record.headers},
                    "cases": cases(topic, key, value),
                }
            )
    out.write_text("".join(json.dumps(line, sort_keys=True) + "\n" for line in lines))
    return len(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=44)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=HERE)
    args = parser.parse_args()
    kafka = start_kafka()
    postgres = start_capture_postgres()
    worker = None
    try:
        postgres.create_database("shop")
        workload = Workload(args.seed, args.rounds)
        workload.create(postgres.dsn("shop"), customers=3, documents=2, orders=2)
        worker = start_connect(kafka.bootstrap, [DEBEZIUM_POSTGRES])
        captures = [
            start_capture(
                kafka.bootstrap,
                postgres,
                "shop",
                workload,
                converter,
                prefix=f"cap{name.replace('-', '')}",
                worker=worker,
            )
            for name, converter in CONVERTERS.items()
        ]
        for _ in range(args.rounds):
            workload.run_round(postgres.dsn("shop"))
        for capture in captures:
            capture.fence()
        for capture in captures:
            topics = [capture.topic(t) for t in ("customers", "documents", "orders")]
            topics += [capture.transaction_topic, capture.heartbeat_topic]
            out = args.out / f"{capture.converter.name}.jsonl"
            print(f"{out}: {dump(capture, topics, out)} messages")
    finally:
        if worker is not None:
            worker.close()
        postgres.close()
        kafka.close()


if __name__ == "__main__":
    main()
