"""Payload formats: Avro and Protobuf ingest against JSON ingest of the same records, in one run.

    uv run python bench/formats.py [--messages 200000] [--repeats 3]

The same readings ({id, device, temperature, humidity, ts}) go to three topics of one
noida-db broker: JSON text (parsed by Spark's from_json with a DDL schema), Avro and Protobuf
in the Confluent wire format with their schemas in a schema registry (the stand-in of
sluice.testing, on 127.0.0.1). Each is ingested by sluice.spark.ingest in driver mode with the
confluent reader into Parquet (the Avro and Protobuf values decoded by fastavro and protobuf
in the Spark tasks, sluice.spark.formats). One untimed round per side first (JIT warm-up), then
--repeats timed rounds, interleaved, each a fresh consumer group; the median counts. Prints
messages/s per format and the ratios Avro/JSON and Protobuf/JSON (goal: Avro >= 1.0).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core" / "src"))

AVRO = {
    "type": "record",
    "name": "Reading",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "device", "type": "string"},
        {"name": "temperature", "type": "double"},
        {"name": "humidity", "type": "double"},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}
PROTO = """syntax = "proto3";
import "google/protobuf/timestamp.proto";
message Reading {
  string id = 1; string device = 2; double temperature = 3; double humidity = 4;
  google.protobuf.Timestamp ts = 5;
}
"""
DDL = "id STRING, device STRING, temperature DOUBLE, humidity DOUBLE, ts TIMESTAMP"


def readings(count: int) -> list[dict[str, Any]]:
    return [
        {
            "id": f"r{i}",
            "device": f"sensor-{i % 10:03d}",
            "temperature": round(20 + (i % 100) / 10, 1),
            "humidity": 40.0 + i % 20,
            "ts": f"2024-01-01T00:{(i // 60) % 60:02d}:{i % 60:02d}+00:00",
        }
        for i in range(count)
    ]


def publish(bootstrap: str, topic: str, values: list[bytes]) -> None:
    from confluent_kafka import Producer

    from sluice.testing.topics import create_kafka_topic

    create_kafka_topic(bootstrap, topic, 3)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i, value in enumerate(values):
        producer.produce(topic, value, partition=i % 3)
        if i % 10000 == 0:
            producer.poll(0)
    producer.flush(60)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--json", metavar="PATH", help="also write the results there (bench/results/formats.json)"
    )
    args = parser.parse_args()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from sluice.batch import plan_batch
    from sluice.brokers import start_noida
    from sluice.formats.encode import Encoder
    from sluice.kafka import KafkaMessageQueue
    from sluice.registry_server import start_schema_registry
    from sluice.spark import ingest, spark_session

    work = Path(tempfile.mkdtemp(prefix="sluice-bench-formats-"))
    broker = start_noida(workdir=work / "noida")
    registry = start_schema_registry()
    spark = spark_session("local[2]", "bench-formats", {"spark.ui.enabled": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    (work / "reading.proto").write_text(PROTO)
    docs = readings(args.messages)
    sides: dict[str, dict[str, Any]] = {
        "json": {"options": {"schema": DDL}},
        "avro": {"options": {"value_format": "avro", "schema_registry": registry.url}},
        "protobuf": {"options": {"value_format": "protobuf", "schema_registry": registry.url}},
    }
    try:
        for name, side in sides.items():
            topic = f"bench-{name}"
            if name == "json":
                values = [json.dumps(d).encode() for d in docs]
            else:
                schema = json.dumps(AVRO) if name == "avro" else str(work / "reading.proto")
                encoder = Encoder(name, topic, schema, registry.url)
                values = [encoder.encode(d) for d in docs]
            side["bytes"] = sum(map(len, values)) / len(values)
            publish(broker.bootstrap, topic, values)
            side["topic"], side["times"] = topic, []
        for round_ in range(args.repeats + 1):
            for name, side in sides.items():
                queue = KafkaMessageQueue(side["topic"])
                queue.configure(
                    {
                        "connection.uri": broker.bootstrap,
                        "topic": side["topic"],
                        "group_id": f"g{round_}",
                        "from_beginning": True,
                    }
                )
                queue.open(None)
                spec = plan_batch(queue)
                queue.close(None)
                assert spec is not None
                started = time.perf_counter()
                result = ingest(
                    spark,
                    spec,
                    work / f"sink-{name}-{round_}",
                    source=f"kafka://{broker.bootstrap}?reader=confluent",
                    mode="driver",
                    **side["options"],
                )
                seconds = time.perf_counter() - started
                assert result.written == args.messages, (name, result)
                if round_:
                    side["times"].append(seconds)
                else:
                    print(f"first round {name}: {args.messages / seconds:,.0f} msg/s", flush=True)
        rates = {n: args.messages / statistics.median(s["times"]) for n, s in sides.items()}
        for name, side in sides.items():
            print(f"{name:9s} {rates[name]:>10,.0f} msg/s  ({side['bytes']:.0f} bytes a message)")
        print(f"avro/json     {rates['avro'] / rates['json']:.2f}x")
        print(f"protobuf/json {rates['protobuf'] / rates['json']:.2f}x")
        if args.json:
            from benchjson import row, write

            avro, proto = rates["avro"] / rates["json"], rates["protobuf"] / rates["json"]
            write(args.json, "formats", "Payload formats: Avro and Protobuf against JSON", [
                row(
                    f"Avro and Protobuf (Schema Registry wire format) against JSON of the same "
                    f"readings, {args.messages:,} messages",
                    f"Avro {rates['avro']:,.0f} msg/s; Protobuf {rates['protobuf']:,.0f} msg/s",
                    f"JSON {rates['json']:,.0f} msg/s", f"{avro:.2f}x; {proto:.2f}x msg/s",
                    ">= 1.0x (Avro)", f"bench/formats.py --messages {args.messages}",
                    {"unit": "msg/s", "sides": ["format", "JSON"], "values": {
                        "Avro": [rates["avro"], rates["json"]],
                        "Protobuf": [rates["protobuf"], rates["json"]],
                    }},
                ),
            ])  # fmt: skip
        return 0
    finally:
        spark.stop()
        registry.stop()
        broker.close()


if __name__ == "__main__":
    sys.exit(main())
