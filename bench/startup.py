"""Time to first row: a 10-message Kafka batch ingested by a new process, per kind of session.

Each measurement is a fresh Python process that plans nothing itself (the batch is planned
before the clock starts), then times ``spark_session(master)`` + ``ingest()`` until the batch
is committed: what a `sluice ingest` or an Airflow task pays. Sessions:

- ``cold-local``: ``local[*]``, a JVM started by the process (Sluice's defaults: no UI);
- ``cold-local-ui``: the same with Spark's UI on (Spark's default), the "before" of the
  start-up settings;
- ``connect``: a warm Spark Connect server started once beforehand (``sc://``);
- ``cluster``: a standalone master and one worker started once beforehand (``spark://``).

    .venv/bin/python bench/startup.py [--rounds 3] [--sessions cold-local,connect,cluster]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sluice.batch import plan_batch
from sluice.brokers import create_kafka_topic, start_noida
from sluice.queues import MessageEnvelope, queue_from_uri
from sluice.testing.spark_cluster import start_cluster, start_connect_server

CHILD = """
import json, sys, time
started = time.monotonic()
from sluice.spark import ingest, spark_session
spark = spark_session(sys.argv[1], conf=json.loads(sys.argv[2]))
session = time.monotonic() - started
result = ingest(spark, sys.argv[3], sys.argv[4], source=sys.argv[5], schema="n INT")
assert result.written == 10 and result.committed, result
print(json.dumps({"session": session, "total": time.monotonic() - started}))
"""


def measure(master: str, conf: dict[str, str], bootstrap: str, topic: str, sink: Path) -> dict:
    queue = queue_from_uri(f"kafka://{bootstrap}/{topic}?group_id=bench&from_beginning=true")
    queue.open(None)
    for n in range(10):
        queue.send(None, MessageEnvelope(None, "n", json.dumps({"n": n})))
    spec = plan_batch(queue)
    queue.close(None)
    assert spec is not None
    done = subprocess.run(
        [sys.executable, "-c", CHILD, master, json.dumps(conf), spec.to_json(), str(sink),
         f"kafka://{bootstrap}"],
        capture_output=True, text=True, check=True, timeout=600,
    )  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sessions", default="cold-local-ui,cold-local,connect,cluster")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sluice-startup-"))
    broker = start_noida()
    servers: list = []
    try:
        create_kafka_topic(broker.bootstrap, "startup", 1)
        for name in args.sessions.split(","):
            conf: dict[str, str] = {}
            if name == "cold-local":
                master = "local[*]"
            elif name == "cold-local-ui":
                master, conf = "local[*]", {"spark.ui.enabled": "true"}
            elif name == "connect":
                server = start_connect_server()
                servers.append(server)
                master = server.url
            else:
                cluster = start_cluster(workers=1)
                servers.append(cluster)
                master = cluster.url
            runs = [
                measure(master, conf, broker.bootstrap, "startup", work / name)
                for _ in range(args.rounds)
            ]
            total = statistics.median(r["total"] for r in runs)
            session = statistics.median(r["session"] for r in runs)
            print(f"{name:14} time to first row {total:5.1f} s (session {session:4.1f} s), "
                  f"median of {args.rounds}", flush=True)  # fmt: skip
    finally:
        for server in servers:
            server.close()
        broker.stop()


if __name__ == "__main__":
    started = time.monotonic()
    main()
    print(f"({time.monotonic() - started:.0f} s)")
