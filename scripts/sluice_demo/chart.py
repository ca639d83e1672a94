"""The chart ``ingested.png``: what each batch wrote and quarantined, the lag over time, and
the Iceberg table's snapshots."""

from __future__ import annotations

from pathlib import Path

from .iceberg import Snapshot
from .summary import SourceRuns

Series = dict[str, list[tuple[float, int]]]


def import_matplotlib() -> None:
    """Import matplotlib's pyplot with the file-only backend (Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot


def draw_chart(
    all_runs: list[SourceRuns], lag: Series, snapshots: list[Snapshot], path: Path
) -> None:
    """Three panels: rows written and quarantined per batch (each source, and the Iceberg
    table), lag over the demo's time (``lag``: label -> (seconds, messages)), and the Iceberg
    snapshots (rows each added, and the table's total after it)."""
    import_matplotlib()
    import matplotlib.pyplot as plt

    fig, (batches, lags, icebergs) = plt.subplots(
        1, 3, figsize=(15, 4.6), gridspec_kw={"width_ratios": [1.2, 1.4, 1.2]}
    )

    labels, written, quarantined = [], [], []
    for runs in all_runs:
        for number, result in enumerate(runs.results, start=1):
            labels.append(f"{runs.source}\n#{number}")
            written.append(int(result["written"]))
            quarantined.append(int(result["quarantined"]))
    xs = range(len(labels))
    batches.bar([x - 0.2 for x in xs], written, 0.4, label="written", color="tab:green")
    batches.bar([x + 0.2 for x in xs], quarantined, 0.4, label="quarantined", color="tab:red")
    for x, (w, q) in enumerate(zip(written, quarantined, strict=True)):
        batches.text(x - 0.2, w, f"{w:,}", ha="center", va="bottom", fontsize=7)
        batches.text(x + 0.2, max(q, 1), f"{q}", ha="center", va="bottom", fontsize=7)
    batches.set_yscale("log")
    batches.set_ylim(bottom=0.8, top=max([*written, 1]) * 4)
    batches.set_xticks(list(xs))
    batches.set_xticklabels(labels, fontsize=8)
    batches.set_ylabel("rows (log scale)")
    batches.set_title("Per batch: rows written and quarantined")
    batches.legend(fontsize=8, loc="upper right")

    for label, points in lag.items():
        if points:
            times, values = zip(*points, strict=True)
            lags.step(times, values, where="post", label=label)
    lags.set_xlabel("seconds since the demo started")
    lags.set_ylabel("messages waiting")
    lags.set_title("Lag over time")
    lags.set_ylim(bottom=0)
    lags.legend(fontsize=7, loc="upper left")

    rows = [s for s in snapshots if not s.table.endswith("__quarantine")]
    bad = {s.batch_id: s for s in snapshots if s.table.endswith("__quarantine")}
    names = [f"{s.snapshot_id}"[:8] + f"…\nbatch {s.batch_id[:8]}…" for s in rows]
    xs = range(len(rows))
    icebergs.bar(xs, [s.added_records for s in rows], 0.5, label="rows added", color="tab:blue")
    icebergs.bar(
        xs,
        [bad[s.batch_id].added_records if s.batch_id in bad else 0 for s in rows],
        0.5,
        bottom=[s.added_records for s in rows],
        label="quarantined (readings__quarantine)",
        color="tab:red",
    )
    icebergs.plot(xs, [s.total_records for s in rows], "o-", color="black", label="table rows")
    for x, snapshot in enumerate(rows):
        icebergs.text(x, snapshot.total_records, f" {snapshot.total_records:,}", fontsize=7)
    icebergs.set_xticks(list(xs))
    icebergs.set_xticklabels(names, fontsize=7)
    icebergs.set_xlim(-0.6, max(len(rows), 2) - 0.4)
    icebergs.set_ylim(0, max([s.total_records for s in rows] + [1]) * 1.2)
    icebergs.set_ylabel("rows")
    icebergs.set_title("Iceberg demo.readings on S3: snapshots")
    icebergs.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
