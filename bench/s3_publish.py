"""Publishing a batch on S3: the objects of one upload each (now) against the staged files
copied one by one (before), in one run, on the loopback S3 server (SeaweedFS).

    uv run python bench/s3_publish.py [--rows 400000] [--files 1,3,8] [--rounds 5]

A batch of --rows readings is staged as 1, 3 or 8 Parquet files (what one writing task, or
one per Kafka partition, writes). Each side then makes it visible in ``batch_id=<id>/``:

- copy (the layout before): a CopyObject per staged file, after the commit;
- upload (now): the uploads assembled before the commit (one staged file: UploadPartCopy by
  the server; several: merged by this process into one Parquet file, streamed in 8 MiB
  parts), completed after it.

Prints, per file count, the median time from staged to visible of each side, the ratio
upload / copy, the time after the commit (the part a crash can interrupt), and how long a
plain reader could see part of the batch (copy: from the first file's copy to the last one's;
upload: nothing, one object). Rounds alternate the sides.
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


def say(text: str) -> None:
    print(f"[s3_publish] {text}", flush=True)


def batch(rows: int) -> object:
    import pyarrow as pa

    return pa.table(
        {
            "device": pa.array([f"device-{i % 500}" for i in range(rows)]),
            "temperature": pa.array([20 + (i % 1000) / 100 for i in range(rows)]),
            "partition": pa.array([i % 3 for i in range(rows)], pa.int32()),
            "offset": pa.array(range(rows), pa.int64()),
            "timestamp": pa.array([1_770_000_000_000_000 + i for i in range(rows)]).cast(
                pa.timestamp("us", "UTC")
            ),
            "value": pa.array(
                [
                    b'{"device": "device-%d", "temperature": %d.5}' % (i % 500, i % 40)
                    for i in range(rows)
                ]
            ),
        }
    )


def stage(objects: object, table: object, files: int, prefix: str) -> list[str]:
    import pyarrow.parquet as pq

    keys = []
    step = -(-table.num_rows // files)  # type: ignore[attr-defined]
    for number in range(files):
        buffer = io.BytesIO()
        pq.write_table(table.slice(number * step, step), buffer)  # type: ignore[attr-defined]
        key = f"{prefix}/data/part-{uuid.uuid4().hex}.parquet"
        objects.put_bytes(key, buffer.getvalue())  # type: ignore[attr-defined]
        keys.append(key)
    return keys


def copy_side(objects: object, staged: list[str], batch_dir: str) -> tuple[float, float, float]:
    """(staged to visible, after the commit, partial window): the layout before."""
    started = time.perf_counter()  # the commit: nothing before it
    first = last = started
    for number, key in enumerate(staged):
        objects.copy(key, f"{batch_dir}/{key.rsplit('/', 1)[1]}")  # type: ignore[attr-defined]
        if number == 0:
            first = time.perf_counter()
        last = time.perf_counter()
    total = last - started
    return total, total, last - first


def upload_side(
    objects: object, filesystem: object, staged: list[str], batch_dir: str
) -> tuple[float, float, float]:
    from sluice.spark.sinks.uploads import assemble, complete

    started = time.perf_counter()
    pending = assemble(
        objects, filesystem, "data", "part-x.parquet", f"{batch_dir}/part-x.parquet", staged
    )  # type: ignore[arg-type]
    committed = time.perf_counter()
    complete(objects, filesystem, pending)  # type: ignore[arg-type]
    done = time.perf_counter()
    return done - started, done - committed, 0.0


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--files", default="1,3,8")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    import pyarrow.parquet as pq

    from sluice.s3server import start_seaweedfs
    from sluice.spark.sinks.objects import Objects
    from sluice.spark.sinks.s3 import S3Settings

    work = Path(tempfile.mkdtemp(prefix="sluice-bench-publish-"))
    say("starting the S3 server (SeaweedFS, loopback)")
    server = start_seaweedfs(workdir=work / "seaweedfs")
    try:
        server.create_bucket("lake")
        settings = S3Settings.resolve(server.catalog_properties(), "the benchmark's server")
        objects, filesystem = Objects(settings, "lake"), settings.filesystem()
        table = batch(args.rows)
        buffer = io.BytesIO()
        pq.write_table(table, buffer)
        say(
            f"a batch of {args.rows:,} rows: {len(buffer.getvalue()) / 1024**2:.1f} MiB as one file"
        )
        for files in [int(f) for f in args.files.split(",")]:
            times: dict[str, list[tuple[float, float, float]]] = {"copy": [], "upload": []}
            for round_ in range(args.rounds + 1):  # the first round warms up, untimed
                for side in ("copy", "upload") if round_ % 2 else ("upload", "copy"):
                    run = uuid.uuid4().hex[:12]
                    staged = stage(objects, table, files, f"bench/_sluice/staging/{run}")
                    batch_dir = f"bench/batch_id={run}"
                    measured = (
                        copy_side(objects, staged, batch_dir)
                        if side == "copy"
                        else upload_side(objects, filesystem, staged, batch_dir)
                    )
                    if round_:
                        times[side].append(measured)
            copy = [statistics.median(t[i] for t in times["copy"]) for i in range(3)]
            upload = [statistics.median(t[i] for t in times["upload"]) for i in range(3)]
            say(
                f"{files} staged file(s): staged to visible: copy {copy[0] * 1000:.0f} ms, "
                f"upload {upload[0] * 1000:.0f} ms, ratio upload / copy {upload[0] / copy[0]:.2f}"
            )
            say(
                f"{files} staged file(s): after the commit: copy {copy[1] * 1000:.0f} ms, "
                f"upload {upload[1] * 1000:.0f} ms, ratio {upload[1] / copy[1]:.2f}; a reader "
                f"can see part of the batch for: copy {copy[2] * 1000:.0f} ms, upload 0 ms"
            )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
