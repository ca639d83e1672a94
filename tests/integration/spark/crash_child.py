"""Run one ingest in a process of its own and stop at a stage until the test kills it.

    python crash_child.py SPEC_JSON SINK SOURCE STAGE MARKER

On reaching STAGE it creates MARKER and waits; the test then SIGKILLs it.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from sluice.spark import IngestEvent, ingest, spark_session


def main() -> None:
    spec, sink, source, stage, marker = sys.argv[1:6]

    def stop_at(event: IngestEvent) -> None:
        if event.stage == stage:
            Path(marker).touch()
            time.sleep(600)  # killed here

    spark = spark_session("local[1]", "sluice-crash", {"spark.ui.enabled": "false"})
    ingest(
        spark,
        spec,
        sink,
        source=source,
        schema="device STRING, temperature DOUBLE",
        progress=stop_at,
    )


if __name__ == "__main__":
    main()
