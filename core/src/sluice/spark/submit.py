"""The spark-submit entry point: ingest one batch given as JSON.

    SCRIPT=$(python -c 'import sluice.spark as s; print(s.submit_script_path())')
    spark-submit --master 'local[4]' "$SCRIPT" \
        --spec @batch.json --sink /data/orders --source env:SLUICE_SOURCE --schema 'id INT'
    python -m sluice.spark --spec '{"kind": "kafka", ...}' --sink /data/orders --source kafka://h:9092

``--spec`` and ``--source`` take the value itself, ``@file`` or ``env:VARIABLE`` (keep a source
with a password out of the command line: put its URI or JSON config in a variable or a file).
The IngestResult is printed as one JSON line on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def _value(text: str, what: str) -> str:
    if text.startswith("@"):
        path = Path(text[1:])
        if not path.is_file():
            raise SystemExit(f"error: {what} file {path} does not exist")
        return path.read_text()
    if text.startswith("env:"):
        name = text[4:]
        if name not in os.environ:
            raise SystemExit(f"error: {what} variable {name} is not set")
        return os.environ[name]
    return text


def _source(text: str) -> str | dict[str, Any]:
    value = _value(text, "--source").strip()
    if value.startswith("{"):
        config: dict[str, Any] = json.loads(value)
        return config
    return value


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m sluice.spark", description="Ingest one Sluice batch into Parquet."
    )
    p.add_argument("--spec", required=True, help="BatchSpec JSON, @file or env:VAR")
    p.add_argument("--sink", required=True, help="dataset directory")
    p.add_argument(
        "--source", required=True, help="queue URI or JSON config, itself, @file or env:VAR"
    )
    p.add_argument("--schema", help="Spark DDL of the JSON payload, e.g. 'id INT, name STRING'")
    p.add_argument("--format", dest="value_format", choices=("json", "raw"), default="json")
    p.add_argument("--mode", choices=("auto", "driver", "executors"), default="auto")
    p.add_argument("--quarantine", help="quarantine directory (default <sink>/_quarantine)")
    p.add_argument("--dead-letter", action="store_true", help="also republish bad records")
    p.add_argument("--chunk-size", type=int, default=100_000)
    p.add_argument("--max-value-bytes", type=int, default=1_000_000)
    p.add_argument("--master", help="Spark master (default: spark-submit's, else local[*])")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from sluice.spark.ingest import ingest
    from sluice.spark.session import spark_session

    spark = spark_session(args.master, app_name="sluice-ingest")
    result = ingest(
        spark,
        _value(args.spec, "--spec"),
        args.sink,
        source=_source(args.source),
        schema=args.schema,
        value_format=args.value_format,
        mode=args.mode,
        quarantine=args.quarantine,
        dead_letter=args.dead_letter,
        chunk_size=args.chunk_size,
        max_value_bytes=args.max_value_bytes,
        progress=lambda e: print(
            f"sluice: {e.stage} {e.read} of {e.total}", file=sys.stderr, flush=True
        ),
    )
    print(json.dumps(result.to_dict()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
