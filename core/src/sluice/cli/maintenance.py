"""``sluice compact SINK`` and ``sluice expire SINK``: keeping a sink fast
(see sluice.maintenance)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from . import output
from .errors import CliError

__all__ = ["compact", "expire"]

_SINK_HELP = "The sink: a Parquet directory, or iceberg://CATALOG/NAMESPACE.TABLE."


def _check_sink(sink: str) -> None:
    from sluice.spark.sinks import is_delta, is_iceberg

    if sink.lower().startswith(("s3://", "s3a://")):
        raise CliError(
            f"'{sink}' is a Parquet dataset on S3: compaction and expiry are not supported there "
            "yet. Use an Iceberg table on S3 (iceberg://CATALOG/NAMESPACE.TABLE) to have its "
            "files compacted and expired.",
            usage=True,
        )
    if not is_iceberg(sink) and not is_delta(sink) and not Path(sink).is_dir():
        raise CliError(f"'{sink}' is not a directory: give the sink of an ingest.", usage=True)


def compact(
    sink: Annotated[str, typer.Argument(help=_SINK_HELP, show_default=False)],
    target_file_size: Annotated[
        str,
        typer.Option(help="Merge small files into files of about this size (128MB, 512KB, 1GB)."),
    ] = "128MB",
    min_files: Annotated[
        int,
        typer.Option(help="Rewrite a group of small files only if it has at least this many."),
    ] = 5,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Rewrite a sink's small files into files of the target size, in one commit (Iceberg: one
    snapshot; Parquet: one merged batch directory with the records of its batches). Safe while
    ingests run; the stream state, reruns and the audit work the same afterwards."""
    from sluice.maintenance import compact as run
    from sluice.queues.config import ConfigError

    _check_sink(sink)
    try:
        result = run(sink, target_file_size, min_files, progress=output.err().print)
    except ConfigError as exc:
        raise CliError(str(exc), usage=True) from None
    if as_json:
        output.out().print(json.dumps(result.to_dict(), indent=2))
    else:
        for line in result.lines():
            output.out().print(line)
    if result.gave_up:
        raise typer.Exit(1)


def expire(
    sink: Annotated[str, typer.Argument(help=_SINK_HELP, show_default=False)],
    older_than: Annotated[
        str,
        typer.Option(help="Remove what was superseded longer ago than this (7d, 12h, 30m)."),
    ] = "7d",
    min_age: Annotated[
        str,
        typer.Option(
            help="Iceberg: a file no snapshot references is removed only once it is this old "
            "(a live ingest's files are referenced only once it commits)."
        ),
    ] = "1h",
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Say what would be removed; remove nothing.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Remove what a sink no longer needs: Iceberg snapshots older than --older-than and the
    files only they held, and orphan files of crashed runs; Parquet directories a compaction
    replaced and the staging of crashed runs. Stream state and batch records are kept; files
    a live run may still write are never removed."""
    from sluice.maintenance import expire as run
    from sluice.queues.config import ConfigError

    _check_sink(sink)
    try:
        result = run(sink, older_than, dry_run, min_age, progress=output.err().print)
    except ConfigError as exc:
        raise CliError(str(exc), usage=True) from None
    if as_json:
        output.out().print(json.dumps(result.to_dict(), indent=2))
    else:
        for line in result.lines():
            output.out().print(line)
