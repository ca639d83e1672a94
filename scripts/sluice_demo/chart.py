"""The chart ``ingested.png``: messages per batch, by source."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from .summary import SourceRuns


def draw_chart(all_runs: list[SourceRuns], path: Path) -> None:
    """Rows per device for each source, and per batch what was written and quarantined."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pyarrow.dataset as ds

    per_device: dict[str, Counter[str]] = {}
    for runs in all_runs:
        table = ds.dataset(runs.sink, format="parquet", partitioning="hive").to_table(
            columns=["device"]
        )
        per_device[runs.source] = Counter(str(d) for d in table.column("device").to_pylist())
    devices = sorted(set().union(*per_device.values()))

    fig, (left, right) = plt.subplots(
        1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [2.2, 1]}
    )
    width = 0.8 / max(1, len(all_runs))
    for index, runs in enumerate(all_runs):
        xs = [d + index * width - 0.4 + width / 2 for d in range(len(devices))]
        left.bar(
            xs,
            [per_device[runs.source][d] for d in devices],
            width,
            label=f"{runs.source} ({runs.orchestrator})",
        )
    left.set_xticks(range(len(devices)))
    left.set_xticklabels([d.replace("sensor-", "") for d in devices])
    left.set_xlabel("device (sensor-…)")
    left.set_ylabel("rows ingested")
    left.set_title("Readings ingested per device")
    left.set_ylim(0, left.get_ylim()[1] * 1.15)
    left.legend(fontsize=8, loc="upper center", ncol=len(all_runs), frameon=False)

    labels, written, quarantined = [], [], []
    for runs in all_runs:
        for number, result in enumerate(runs.results, start=1):
            labels.append(f"{runs.source}\nbatch {number}")
            written.append(int(result["written"]))
            quarantined.append(int(result["quarantined"]))
    ys = range(len(labels))
    right.barh([y - 0.2 for y in ys], written, 0.4, label="written", color="tab:green")
    right.barh([y + 0.2 for y in ys], quarantined, 0.4, label="quarantined", color="tab:red")
    for y, (w, q) in enumerate(zip(written, quarantined, strict=True)):
        right.text(w, y - 0.2, f" {w}", va="center", fontsize=7)
        right.text(max(q, 1), y + 0.2, f" {q}", va="center", fontsize=7)
    right.set_xscale("log")
    right.set_xlim(left=1, right=max(written) * 4)
    right.set_yticks(list(ys))
    right.set_yticklabels(labels, fontsize=8)
    right.invert_yaxis()
    right.set_xlabel("messages (log scale)")
    right.set_title("Per batch")
    right.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
