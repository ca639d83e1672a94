"""Keeping a sink fast: ``sluice compact`` and ``sluice expire``, carrying the stream state
forward.

- :func:`compact` rewrites a sink's small files into files of about ``target_file_size`` in
  one commit: an Iceberg snapshot that replaces the data files (:mod:`.iceberg`), or a merged
  Parquet batch directory that replaces several, published by one rename with the records of
  the batches it holds (:mod:`.parquet`). It runs beside ingests under optimistic
  concurrency: an ingest that commits meanwhile makes it commit again (Iceberg) or is simply
  not part of it (Parquet); a compaction that finds its files replaced by another gives up
  and deletes only what it wrote.
- :func:`expire` removes what nothing needs any more: Iceberg snapshots older than the cutoff
  and the files only they held, and orphan files (of crashed runs); Parquet directories a
  compaction replaced, and the staging of crashed runs (on S3 also the uploads they never
  completed, :mod:`.parquet_s3`). Stream state and batch records are
  where it cannot reach (Iceberg: table properties and record files beside the table;
  Parquet: ``_sluice/streams`` and ``_sluice/compacted``), and a file a live run may still
  write is never removed (the per-stream run lock, and a minimum age).
- Delta tables: delta-rs's compaction and checkpoint, and its vacuum (:mod:`.delta`).

Both say what they do through ``progress(message)``; errors a user can cause are
:class:`~sluice.queues.config.ConfigError` naming the fix.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from ..queues.config import ConfigError

__all__ = [
    "DEFAULT_MIN_AGE",
    "DEFAULT_MIN_FILES",
    "DEFAULT_TARGET_FILE_SIZE",
    "CompactionResult",
    "ExpiryResult",
    "compact",
    "expire",
    "parse_age",
    "parse_size",
]

#: ``--target-file-size``: files are merged into files of about this size.
DEFAULT_TARGET_FILE_SIZE = 128 * 1024 * 1024
#: ``--min-files``: a group of small files is rewritten only if it has at least this many.
DEFAULT_MIN_FILES = 5
#: A file no commit references is an orphan only once it is this old (a live run may be
#: writing it: Iceberg runs hold no lock).
DEFAULT_MIN_AGE = 3600.0

Progress = Callable[[str], None]

_SIZE_UNITS = {"": 1, "b": 1, "kb": 1024, "k": 1024, "mb": 1024**2, "m": 1024**2}
_SIZE_UNITS.update({"gb": 1024**3, "g": 1024**3, "kib": 1024, "mib": 1024**2, "gib": 1024**3})
_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_size(text: str | int) -> int:
    """``128MB``, ``512k``, ``1GiB`` or a number of bytes."""
    if isinstance(text, int):
        size = text
    else:
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
        unit = match.group(2).lower() if match else ""
        if match is None or unit not in _SIZE_UNITS:
            raise ConfigError(
                f"target file size {text!r} is not a size: write it as 128MB, 512KB, 1GB or "
                "a number of bytes."
            )
        size = int(float(match.group(1)) * _SIZE_UNITS[unit])
    if size <= 0:
        raise ConfigError(f"target file size {text!r} must be more than 0 bytes, e.g. 128MB.")
    return size


def parse_age(text: str | float) -> float:
    """``7d``, ``12h``, ``30m``, ``45s``, ``2w`` or a number of seconds; returns seconds."""
    if isinstance(text, (int, float)):
        seconds = float(text)
    else:
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", text.lower())
        if match is None:
            raise ConfigError(
                f"age {text!r} is not a duration: write it as 7d, 12h, 30m, 45s or 2w."
            )
        seconds = float(match.group(1)) * _AGE_UNITS[match.group(2) or "s"]
    if seconds < 0:
        raise ConfigError(f"age {text!r} must not be negative.")
    return seconds


@dataclass
class CompactionResult:
    """What a compaction did (``sluice compact`` prints it; the operators return it)."""

    sink: str
    files_before: int = 0  # data files of the sink (or table) before
    files_after: int = 0
    files_rewritten: int = 0
    files_written: int = 0
    batches: int = 0  # Parquet: batches moved into merged directories
    attempts: int = 0  # commits tried
    retries: int = 0  # commits tried again because an ingest committed meanwhile
    gave_up: str | None = None  # why it gave up (a conflict it cannot resolve)
    tables: dict[str, dict[str, int]] = field(default_factory=dict)  # Iceberg: per table

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def lines(self) -> list[str]:
        out = [
            f"{self.sink}: {self.files_rewritten} small file(s) rewritten into "
            f"{self.files_written}; data files {self.files_before} -> {self.files_after}"
        ]
        if self.retries:
            out.append(f"committed again {self.retries} time(s): ingests committed meanwhile")
        if self.gave_up:
            out.append(f"gave up: {self.gave_up}")
        return out


@dataclass
class ExpiryResult:
    """What an expiry removed (or, with ``dry_run``, would remove)."""

    sink: str
    dry_run: bool = False
    snapshots_expired: int = 0
    files_deleted: int = 0  # files of expired snapshots and superseded directories
    orphans_deleted: int = 0  # files of crashed runs
    bytes_deleted: int = 0
    kept_young: int = 0  # unreferenced files kept because they are younger than the minimum age
    paths: list[str] = field(default_factory=list)  # what was (would be) removed

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def lines(self) -> list[str]:
        verb = "would remove" if self.dry_run else "removed"
        snapshots = (
            f"{self.snapshots_expired} snapshot(s), " if self.sink.startswith("iceberg:") else ""
        )
        out = [
            f"{self.sink}: {verb} {snapshots}{self.files_deleted} superseded file(s) and "
            f"{self.orphans_deleted} file(s) of crashed runs ({self.bytes_deleted / 1024**2:.1f} "
            "MiB)"
        ]
        if self.kept_young:
            out.append(
                f"kept {self.kept_young} unreferenced file(s) younger than the minimum age: a "
                "live run may still be writing them"
            )
        if self.dry_run:
            out += [f"  {p}" for p in self.paths[:50]]
            if len(self.paths) > 50:
                out.append(f"  ... and {len(self.paths) - 50} more")
        return out


def _quiet(message: str) -> None:
    pass


def compact(
    sink: str | os.PathLike[str],
    target_file_size: int | str = DEFAULT_TARGET_FILE_SIZE,
    min_files: int = DEFAULT_MIN_FILES,
    progress: Progress | None = None,
) -> CompactionResult:
    """Rewrite the small files of ``sink`` (a Parquet directory or ``iceberg://...``) into
    files of about ``target_file_size`` bytes, in one commit per group of at least
    ``min_files`` files (see the module docstring)."""
    from ..spark.sinks import open_sink
    from ..spark.sinks.parquet import ParquetSink

    size = parse_size(target_file_size)
    if min_files < 2:
        raise ConfigError(f"--min-files {min_files}: a compaction merges at least 2 files.")
    opened = open_sink(sink)
    say = progress or _quiet
    if isinstance(opened, ParquetSink):
        from .parquet import compact_parquet

        return compact_parquet(opened, size, min_files, say)
    from ..spark.sinks.iceberg import IcebergSink

    if isinstance(opened, IcebergSink):
        from .iceberg import compact_iceberg

        return compact_iceberg(opened, size, min_files, say)
    from ..spark.sinks.delta import DeltaSink

    if isinstance(opened, DeltaSink):
        from .delta import compact_delta

        return compact_delta(opened, size, min_files, say)
    raise ConfigError(_unsupported(sink))


def expire(
    sink: str | os.PathLike[str],
    older_than: float | str = 7 * 86400,
    dry_run: bool = False,
    min_age: float | str = DEFAULT_MIN_AGE,
    progress: Progress | None = None,
    now: float | None = None,
) -> ExpiryResult:
    """Remove what ``sink`` no longer needs that is older than ``older_than`` (seconds, or
    ``7d``); files no commit references also wait for ``min_age`` (see the module docstring).
    ``dry_run``: say what would be removed, remove nothing. ``now``: the time ages are taken
    from (seconds since the epoch; tests pass a later one to have days pass)."""
    from ..spark.sinks import open_sink
    from ..spark.sinks.parquet import ParquetSink

    age, floor = parse_age(older_than), parse_age(min_age)
    at = time.time() if now is None else now
    opened = open_sink(sink)
    say = progress or _quiet
    if isinstance(opened, ParquetSink):
        from .parquet import expire_parquet

        return expire_parquet(opened, age, dry_run, say, at)
    from ..spark.sinks.parquet_s3 import S3ParquetSink

    if isinstance(opened, S3ParquetSink):
        from .parquet_s3 import expire_parquet_s3

        return expire_parquet_s3(opened, age, dry_run, say, at)
    from ..spark.sinks.iceberg import IcebergSink

    if isinstance(opened, IcebergSink):
        from .iceberg import expire_iceberg

        return expire_iceberg(opened, age, max(age, floor), dry_run, say, at)
    from ..spark.sinks.delta import DeltaSink

    if isinstance(opened, DeltaSink):
        from .delta import expire_delta

        return expire_delta(opened, age, floor, dry_run, say, at)
    raise ConfigError(_unsupported(sink))


def _unsupported(sink: str | os.PathLike[str]) -> str:
    if str(sink).lower().startswith(("s3://", "s3a://")):
        return (
            f"{sink}: a Parquet dataset on S3 is not compacted: each batch is one file per "
            "partition directory already, and several batches' files merged into one could "
            "not replace them at once for plain readers (S3 has no rename). Ingest into an "
            "Iceberg table on S3 to have its files compacted; sluice expire works on it."
        )
    return (
        f"{sink}: compaction and expiry work on Parquet datasets (expiry only, on S3), "
        "Iceberg and Delta tables."
    )
