"""ingest(): one BatchSpec becomes rows of a Parquet dataset, exactly once (see DESIGN.md)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ..batch import BatchSpec
from .result import IngestResult

__all__ = ["IngestEvent", "ingest"]

Stage = Literal["reading", "read", "written", "committed"]


@dataclass(frozen=True)
class IngestEvent:
    """Progress of an ingest: ``stage`` and how many messages were read of ``total``."""

    stage: Stage
    read: int
    total: int | None


def ingest(
    spark: Any,
    spec: BatchSpec | Mapping[str, Any] | str,
    sink: str | os.PathLike[str],
    *,
    source: str | Mapping[str, Any],
    schema: Any = None,
    value_format: Literal["json", "raw"] = "json",
    mode: Literal["auto", "driver", "executors"] = "auto",
    quarantine: str | os.PathLike[str] | None = None,
    dead_letter: bool = False,
    chunk_size: int = 100_000,
    max_value_bytes: int = 1_000_000,
    progress: Callable[[IngestEvent], None] | None = None,
) -> IngestResult:
    """Read exactly the messages of ``spec``, write them to ``sink``, then commit or ack."""
    raise NotImplementedError("being written")
