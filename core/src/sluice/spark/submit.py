"""The spark-submit entry point: ingest one batch given as JSON.

    SCRIPT=$(python -c 'import sluice.spark as s; print(s.submit_script_path())')
    spark-submit --master 'local[4]' "$SCRIPT" \
        --spec @batch.json --sink /data/orders --source env:SLUICE_SOURCE --schema 'id INT'
    python -m sluice.spark --spec '{"kind": "kafka", ...}' --sink /data/orders --source kafka://h:9092

``--spec`` and ``--source`` take the value itself, ``@file`` or ``env:VARIABLE`` (keep a source
with a password out of the command line: put its URI or JSON config in a variable or a file;
a password given on the command line itself is used, with a warning). The IngestResult is
printed as one JSON line on stdout. The source's passwords never reach the output: errors and
logs go through :mod:`sluice.secrets`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sluice.formats import KEY_FORMATS, VALUE_FORMATS
from sluice.secrets import install_log_filter, redacted_errors, remember_config, secrets_in_text


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
        try:
            config: dict[str, Any] = json.loads(value)
        except json.JSONDecodeError as exc:
            raise SystemExit(f"error: --source is not valid JSON ({exc})") from None
        remember_config(config)
        return config
    remember_config({"connection.uri": value})
    if value == text and secrets_in_text(value):
        print(
            "sluice: warning: --source holds a password on the command line, where other users "
            "of this machine can read it: give the source as @file or env:VARIABLE.",
            file=sys.stderr,
            flush=True,
        )
    return value


def _registry(text: str | None) -> str | dict[str, Any] | None:
    """--registry: a URL or a JSON mapping (url, username, password...), given as itself,
    @file or env:VAR; its password is registered as a secret."""
    if text is None:
        return None
    value = _value(text, "--registry").strip()
    if value.startswith("{"):
        config: dict[str, Any] = json.loads(value)
        remember_config(config)
        return config
    remember_config({"url": value})
    return value


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m sluice.spark", description="Ingest one Sluice batch into Parquet."
    )
    p.add_argument("--spec", required=True, help="BatchSpec JSON, @file or env:VAR")
    p.add_argument(
        "--sink",
        required=True,
        help="dataset directory, an Iceberg table iceberg://CATALOG/NAMESPACE.TABLE, or a "
        "Delta table delta://PATH",
    )
    p.add_argument(
        "--source", required=True, help="queue URI or JSON config, itself, @file or env:VAR"
    )
    p.add_argument("--schema", help="Spark DDL of the JSON payload, e.g. 'id INT, name STRING'")
    p.add_argument(
        "--format",
        dest="value_format",
        choices=(*VALUE_FORMATS, "raw"),
        default="json",
        help="payload format (raw: deprecated, bytes)",
    )
    p.add_argument("--key-format", choices=KEY_FORMATS, default="bytes")
    p.add_argument("--value-schema", help="writer schema of unframed values (a file or JSON)")
    p.add_argument("--key-schema", help="writer schema of unframed keys")
    p.add_argument(
        "--registry",
        help="Schema Registry URL, itself, @file or env:VAR (keeps a password private)",
    )
    p.add_argument("--on-incompatible", choices=("quarantine", "fail"), default="quarantine")
    p.add_argument("--mode", choices=("auto", "driver", "executors"), default="auto")
    p.add_argument(
        "--fail-on-broker-drops",
        action="store_true",
        help="MQTT: fail when the broker's count of dropped messages rose",
    )
    p.add_argument(
        "--accept-data-loss",
        action="store_true",
        help="skip messages gone from the broker (retention) and record the loss, not fail",
    )
    p.add_argument("--dead-letter", action="store_true", help="also republish bad records")
    p.add_argument(
        "--max-quarantined",
        default="0.5",
        help="fail the batch when more than this is quarantined: a ratio (0.5, 50%%), a count "
        "(100) or none (default 0.5)",
    )
    p.add_argument(
        "--partition-by",
        help="partition spec of the table, e.g. 'day(timestamp),bucket(16,device)'",
    )
    p.add_argument(
        "--write-mode",
        choices=("append", "upsert"),
        default="append",
        help="upsert: a Debezium topic kept as a current-state Iceberg or Delta table",
    )
    p.add_argument("--key-columns", help="upsert: the rows' key columns, e.g. 'id,tenant'")
    p.add_argument(
        "--on-truncate",
        choices=("quarantine", "apply"),
        default="quarantine",
        help="upsert: a truncate set aside, or applied (every older row deleted)",
    )
    p.add_argument(
        "--keep-message",
        help="keep the message beside its fields: all, none, or columns (key,value,topic,"
        "headers,message_id); default: the table's own choice",
    )
    p.add_argument(
        "--routes",
        help="each message to a table of its own: the routes as JSON or @file "
        "(sluice.routes; the sink takes the messages no route takes)",
    )
    p.add_argument("--chunk-size", type=int, default=100_000)
    p.add_argument("--max-value-bytes", type=int, default=1_000_000)
    p.add_argument("--master", help="Spark master (default: spark-submit's, else local[*])")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    source = _source(args.source)
    for name in ("sluice", "kafka"):
        install_log_filter(name)
    with redacted_errors():
        result = _ingest(args, source)
    print(json.dumps(result.to_dict()), flush=True)
    return 0


def _say(line: str) -> None:
    print(f"sluice: {line}", file=sys.stderr, flush=True)


def _ingest(args: argparse.Namespace, source: str | dict[str, Any]) -> Any:
    from sluice.batch import BatchSpec
    from sluice.quarantine import parse_limit
    from sluice.spark.ingest import ingest
    from sluice.spark.layout import keep_of_text
    from sluice.spark.progress import ProgressLog, sigterm_interrupts
    from sluice.spark.session import spark_session

    spec = BatchSpec.from_json(_value(args.spec, "--spec"))
    limit = parse_limit(args.max_quarantined)
    key_columns = _key_columns(args.key_columns)
    log = ProgressLog(_say, spec.batch_id)
    _say("starting Spark")
    try:
        with sigterm_interrupts():
            spark = spark_session(args.master, app_name="sluice-ingest")
            return ingest(
                spark,
                spec,
                args.sink,
                source=source,
                schema=args.schema,
                value_format=args.value_format,
                key_format=args.key_format,
                value_schema=args.value_schema,
                key_schema=args.key_schema,
                schema_registry=_registry(args.registry),
                on_incompatible=args.on_incompatible,
                mode=args.mode,
                fail_on_data_loss=not args.accept_data_loss,
                fail_on_broker_drops=args.fail_on_broker_drops,
                dead_letter=args.dead_letter,
                chunk_size=args.chunk_size,
                max_value_bytes=args.max_value_bytes,
                progress=log,
                max_quarantined=limit,
                partition_by=args.partition_by,
                write_mode=args.write_mode,
                key_columns=key_columns,
                on_truncate=args.on_truncate,
                keep_message=keep_of_text(args.keep_message),
                routes=args.routes,
            )
    except KeyboardInterrupt:
        _say(log.state())
        raise SystemExit(130) from None


def _key_columns(text: str | None) -> list[str] | None:
    """``--key-columns``: absent is None (the message keys' fields); given, the columns it
    names, by the rule of every surface (an empty one is a ConfigError, before Spark starts)."""
    from sluice.spark.sinks.upsert import check_key_columns

    columns = text.split(",") if text is not None else None
    check_key_columns(columns)
    return columns


if __name__ == "__main__":
    sys.exit(main())
