"""A Delta batch on S3 against one on local disk, through the same publish path, in one run.

    uv run python bench/delta_s3.py [--batches 20] [--rows 1000] [--rounds 2]

Starts the S3 server (SeaweedFS, loopback) behind the counting proxy (sluice.testing.s3proxy)
and publishes --batches MQTT batches of --rows rows each through the Delta sink's own publish
path (sluice.testing.batches.publish_rows: the rows staged as one Parquet file as a Spark task
writes them, the stream's lock or lease, recover, the state, the Delta commit, the quarantine
commit, the record) into (l) delta:///<tmp>/t on local disk and (s) delta://s3://lake/t,
alternating --rounds times on fresh tables. Prints the median time of a batch on each, the
ratio S3 / local, and the S3 requests of one batch (counted at the proxy) at the first and at
the last batch: they must not grow with the table's history. Spark is not involved: what is
measured is the commit protocol (the sink's own files and delta-rs's commits), not the
writing of the rows.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

OPERATIONS = ("PUT", "GET", "HEAD", "LIST", "DELETE", "POST")


def say(message: str) -> None:
    print(f"[delta_s3] {message}", file=sys.stderr, flush=True)


def show(counts: Counter[str]) -> str:
    return ", ".join(f"{op} {counts[op]}" for op in OPERATIONS if counts[op]) or "none"


def batches(
    location: str, count: int, rows: int, proxy: object | None
) -> tuple[list[float], list[Counter[str]]]:
    """Seconds and (on S3) the requests of each of ``count`` batches published at ``location``."""
    import pyarrow as pa

    from sluice.batch import BatchSpec
    from sluice.spark.sinks import open_sink
    from sluice.testing.batches import publish_rows

    sink = open_sink(location)
    times, requests = [], []
    for n in range(count):
        spec = BatchSpec("mqtt", "bench/#", client_id="bench", max_messages=rows, sequence=n)
        good = pa.table(
            {
                "temperature": [float(i) for i in range(rows)],
                "partition": pa.array([0] * rows, pa.int32()),
                "offset": pa.array([-1] * rows, pa.int64()),
                "message_id": [f"m{n}-{i}" for i in range(rows)],
            }
        )
        bad = pa.table(
            {
                "value": [b"not json"],
                "partition": pa.array([0], pa.int32()),
                "offset": pa.array([-1], pa.int64()),
                "message_id": [f"bad{n}"],
                "reason": ["invalid JSON"],
            }
        )
        if proxy is not None:
            proxy.reset_counts()  # type: ignore[attr-defined]
        start = time.perf_counter()
        publish_rows(sink, spec, good, bad)
        times.append(time.perf_counter() - start)
        if proxy is not None:
            requests.append(Counter(proxy.reset_counts()))  # type: ignore[attr-defined]
    return times, requests


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    from sluice.s3server import start_seaweedfs
    from sluice.testing.s3proxy import S3Proxy

    work = Path(tempfile.mkdtemp(prefix="sluice-bench-delta-s3-"))
    say("starting the S3 server (SeaweedFS) behind the counting proxy")
    server = start_seaweedfs(workdir=work / "seaweedfs")
    proxy = S3Proxy(f"{server.host}:{server.port}").start()
    server.create_bucket("lake")
    os.environ.update({**server.environment(), "AWS_ENDPOINT_URL": proxy.endpoint})
    os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
    local: list[float] = []
    s3: list[float] = []
    requests: list[Counter[str]] = []
    try:
        say("warming up (not timed): one batch into each")
        batches(f"delta://{work / 'warm'}", 1, 10, None)
        batches("delta://s3://lake/warm", 1, 10, None)
        for number in range(args.rounds):
            say(f"round {number + 1}: {args.batches} batches of {args.rows} rows, local then S3")
            local += batches(f"delta://{work / f'local-{number}'}", args.batches, args.rows, None)[
                0
            ]
            seconds, counted = batches(
                f"delta://s3://lake/t-{number}", args.batches, args.rows, proxy
            )
            s3 += seconds
            requests = counted
    finally:
        proxy.close()
        server.close()

    on_local, on_s3 = statistics.median(local), statistics.median(s3)
    print(f"(l) a batch on local disk: median {on_local * 1000:.0f} ms ({len(local)} batches)")
    print(
        f"(s) a batch on S3 (SeaweedFS, loopback, through the proxy): median {on_s3 * 1000:.0f} ms"
    )
    print(f"ratio S3 / local: {on_s3 / on_local:.2f}x")
    print(f"S3 requests of the first batch: {show(requests[0])}")
    print(f"S3 requests of batch {len(requests)}: {show(requests[-1])}")


if __name__ == "__main__":
    main()
