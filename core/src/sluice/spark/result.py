"""IngestResult: what one ingest did, as counts and ranges (never payloads)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..batch import OffsetRange

__all__ = ["IngestResult"]


@dataclass
class IngestResult:
    """The summary of one :func:`sluice.spark.ingest` call.

    ``read`` messages were read from the broker; ``written`` of them went to the sink and
    ``quarantined`` to its quarantine, so ``read == written + quarantined + duplicates``.
    ``skipped`` messages of the spec were not read because the sink already held them (MQTT:
    were left to the session's next batch, this one being published already). ``gaps`` are
    ranges before the spec's start taken with it (an earlier batch of the group had not been
    ingested), ``lost`` the messages given up with ``fail_on_data_loss=False``, ``commits``
    the offsets committed per partition, ``dead_lettered`` the records sent to the dead-letter
    topic, and ``dropped`` how many messages the MQTT broker reported dropping meanwhile.
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
    commits: dict[int, int] = field(default_factory=dict)
    gaps: list[OffsetRange] = field(default_factory=list)
    lost: list[dict[str, Any]] = field(default_factory=list)
    dead_lettered: int = 0
    dropped: int | None = None
    output: str | None = None
    quarantine_output: str | None = None
    # write_mode="upsert": changes (the batch's last per key), tombstones, and of the changes
    # upserted, deleted (rows the table held) and stale (older than the table's row)
    changes: dict[str, int] = field(default_factory=dict)
    # a routed batch (routes=...): per route table, rows written, quarantined, and held (the
    # table had them already: a rerun after a crash between two tables' commits)
    tables: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def messages_per_second(self) -> float:
        return self.read / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable: for XCom, Dagster metadata and logs."""
        data = asdict(self)
        data["ranges"] = [asdict(r) for r in self.ranges]
        data["gaps"] = [asdict(r) for r in self.gaps]
        data["commits"] = {str(p): o for p, o in self.commits.items()}
        data["seconds"] = round(self.seconds, 3)
        return data
