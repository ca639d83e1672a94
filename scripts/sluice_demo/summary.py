"""What the runs reported, checked against the datasets on disk, as a table and JSON."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.table import Table

from .settings import DemoError


@dataclass
class SourceRuns:
    """One source, the orchestrator that ingests it, and what each of its runs reported."""

    source: str
    orchestrator: str
    sink: Path
    results: list[dict[str, Any]] = field(default_factory=list)

    @property
    def batches(self) -> int:
        return len(self.results)

    def total(self, key: str) -> int:
        return sum(int(r[key]) for r in self.results)

    @property
    def messages_per_second(self) -> float:
        seconds = sum(float(r["seconds"]) for r in self.results)
        return self.total("read") / seconds if seconds > 0 else 0.0


def parquet_rows(path: Path) -> int:
    import pyarrow.dataset as ds

    if not path.exists():
        return 0
    return int(ds.dataset(path, format="parquet", partitioning="hive").count_rows())


def check_on_disk(runs: SourceRuns) -> tuple[int, int]:
    """Rows of the dataset and of its quarantine, which must be what the runs reported."""
    rows = parquet_rows(runs.sink)
    quarantined = sum(parquet_rows(d) for d in runs.sink.glob("batch_id=*/_quarantine"))
    if (rows, quarantined) != (runs.total("written"), runs.total("quarantined")):
        raise DemoError(
            f"{runs.sink} holds {rows} rows and {quarantined} quarantined, but the "
            f"{runs.orchestrator} runs reported {runs.total('written')} and "
            f"{runs.total('quarantined')}"
        )
    return rows, quarantined


def summary_table(all_runs: list[SourceRuns]) -> Table:
    table = Table(title="Ingested", title_justify="left")
    table.add_column("source")
    table.add_column("orchestrator")
    for name in ("batches", "rows written", "quarantined", "msg/s"):
        table.add_column(name, justify="right")
    for runs in all_runs:
        table.add_row(
            runs.source,
            runs.orchestrator,
            str(runs.batches),
            f"{runs.total('written'):,}",
            f"{runs.total('quarantined'):,}",
            f"{runs.messages_per_second:,.0f}",
        )
    return table


def describe(result: dict[str, Any]) -> str:
    return (
        f"batch {result['batch_id']}: {result['read']} read, {result['written']} written, "
        f"{result['quarantined']} quarantined in {float(result['seconds']):.1f} s"
    )


def write_summary(
    all_runs: list[SourceRuns], chart: Path, path: Path, seconds: float, **extra: Any
) -> None:
    """``summary.json``: each source's runs, the chart, the time, and ``extra`` sections."""
    summary = {
        "sources": [
            {
                "source": r.source,
                "orchestrator": r.orchestrator,
                "batches": r.batches,
                "rows_written": r.total("written"),
                "quarantined": r.total("quarantined"),
                "read": r.total("read"),
                "messages_per_second": round(r.messages_per_second, 1),
                "dataset": str(r.sink),
                "quarantine": str(r.sink / "batch_id=*" / "_quarantine"),
                "batch_ids": [res["batch_id"] for res in r.results],
            }
            for r in all_runs
        ],
        "chart": str(chart),
        "seconds": round(seconds, 1),
        **extra,
    }
    path.write_text(json.dumps(summary, indent=2) + "\n")
