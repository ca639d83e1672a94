"""``sluice audit SINK --source URI``: is every message in the sink once? (see sluice.audit)"""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from . import output
from .errors import CliError
from .ingest import registry_value

__all__ = ["audit"]


class EnvelopeFormat(StrEnum):
    json = "json"
    avro = "avro"


class EnvelopeKeyFormat(StrEnum):
    bytes = "bytes"
    avro = "avro"


def audit(
    sink: Annotated[
        str,
        typer.Argument(
            help="The sink to check: a directory, iceberg://CATALOG/NAMESPACE.TABLE or "
            "delta://PATH.",
            show_default=False,
        ),
    ],
    source: Annotated[
        str | None,
        typer.Option(
            help="The Kafka cluster of the sink's batches (kafka://HOST:PORT); not needed for "
            "MQTT batches."
        ),
    ] = None,
    value_format: Annotated[
        EnvelopeFormat,
        typer.Option(
            "--format",
            help="A current-state table's Debezium envelopes: json, or avro (with --registry).",
        ),
    ] = EnvelopeFormat.json,
    key_format: Annotated[
        EnvelopeKeyFormat,
        typer.Option(help="A current-state table's message keys: bytes (JSON), or avro."),
    ] = EnvelopeKeyFormat.bytes,
    registry: Annotated[
        str | None,
        typer.Option(
            help="Schema Registry URL of Avro envelopes; a URL with a password as "
            "env:VARIABLE or @file keeps it off the command line.",
        ),
    ] = None,
    routes: Annotated[
        str | None,
        typer.Option(
            help="The routes of a routed ingest (JSON, or @FILE): SINK is its own sink, and "
            "each route table is checked against the broker's messages its routes send there."
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Compare a sink with the broker: per partition, offsets written, quarantined, doubled,
    missing (committed over but in no batch) and lost. Exits 1 when any are missing or
    doubled. With --routes: per route table, messages expected, written, quarantined,
    doubled, missing, and wrong (in a table their route does not name)."""
    from sluice.spark.sinks import is_delta, is_iceberg

    on_s3 = sink.lower().startswith(("s3://", "s3a://"))
    if not is_iceberg(sink) and not is_delta(sink) and not on_s3 and not Path(sink).is_dir():
        raise CliError(f"'{sink}' is not a directory: give the sink of an ingest.", usage=True)
    if routes is not None:
        _audit_routes(sink, source, routes, as_json)
        return
    from sluice.audit import audit as run_audit

    with output.progress() as bar:
        task = bar.add_task(f"auditing {sink}", total=None)
        report = run_audit(
            sink,
            source,
            progress=lambda done, total: bar.update(task, completed=done, total=total),
            value_format=value_format.value,
            key_format=key_format.value,
            schema_registry=registry_value(registry),
        )
    if not report.streams:
        raise CliError(f"'{sink}' holds no published batch: nothing to audit.")
    _print_report(report, as_json)


def _audit_routes(sink: str, source: str | None, routes: str, as_json: bool) -> None:
    from sluice.queues.config import ConfigError
    from sluice.route_audit import audit_routes
    from sluice.routes import Routes

    try:
        parsed = Routes.parse(routes)
    except ConfigError as exc:
        raise CliError(f"--routes: {exc}", usage=True) from None
    with output.progress() as bar:
        task = bar.add_task(f"auditing the routes of {sink}", total=None)
        report = audit_routes(
            sink,
            source,
            parsed,
            progress=lambda done, total: bar.update(task, completed=done, total=total),
        )
    if not report.batches:
        raise CliError(f"'{sink}' holds no published batch: nothing to audit.")
    _print_report(report, as_json)


def _print_report(report: Any, as_json: bool) -> None:
    """An audit report (plain or routed) as JSON or as its lines; exit 1 unless it is ok."""
    if as_json:
        output.out().print(json.dumps(report.to_dict(), indent=2, default=str))
    else:
        for line in report.lines():
            output.out().print(line)
    if not report.ok:
        raise typer.Exit(1)
