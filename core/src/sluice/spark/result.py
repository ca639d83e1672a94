"""IngestResult: what one ingest did, as counts and ranges (never payloads)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..batch import OffsetRange

__all__ = ["IngestResult"]


@dataclass
class IngestResult:
    """The summary of one :func:`sluice.spark.ingest` call.

    ``read`` messages were read from the broker; ``written`` of them went to the dataset and
    ``quarantined`` to the quarantine dataset, so ``read == written + quarantined +
    duplicates``. ``skipped`` messages of the spec were not read because an earlier run (or
    another batch) had already written or committed them.
    """

    batch_id: str
    kind: str
    topic: str
    sink: str
    mode: str
    ranges: list[OffsetRange] = field(default_factory=list)
    read: int = 0
    written: int = 0
    quarantined: int = 0
    duplicates: int = 0
    skipped: int = 0
    bytes: int = 0
    seconds: float = 0.0
    committed: bool = False
    output: str | None = None
    quarantine_output: str | None = None

    @property
    def messages_per_second(self) -> float:
        return self.read / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable: for XCom, Dagster metadata and logs."""
        data = asdict(self)
        data["ranges"] = [asdict(r) for r in self.ranges]
        data["seconds"] = round(self.seconds, 3)
        return data
