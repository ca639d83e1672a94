"""Charts of the benchmarks, drawn from their JSON results (``bench/results/*.json``).

Each results file is one benchmark family: a title, when and on what machine it was measured,
and rows (the figure, the other side, the ratio, the goal, the command); a row with a
``chart`` (sides, unit, and per case the two sides' values) becomes one panel of the family's
chart. The documentation site's build draws them (``docs/hooks.py``), so a new results file
is a new chart, never a hand-drawn one. ``python bench/charts.py OUT_DIR`` writes the PNGs.
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def families(folder: Path = RESULTS) -> list[dict[str, Any]]:
    """Every results file of ``folder``, in name order."""
    return [json.loads(path.read_text()) for path in sorted(folder.glob("*.json"))]


def chart(family: dict[str, Any]) -> bytes:
    """The family's chart as PNG bytes: one panel of grouped bars per charted row."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [row for row in family["rows"] if "chart" in row]
    if not rows:
        raise ValueError(f"{family['family']}: no row has a chart")
    fig, axes = plt.subplots(1, len(rows), figsize=(4.2 * len(rows), 3.4), squeeze=False)
    for ax, row in zip(axes[0], rows, strict=True):
        data = row["chart"]
        cases = list(data["values"])
        width = 0.38
        for side, name in enumerate(data["sides"]):
            xs = [i + (side - 0.5) * width for i in range(len(cases))]
            values = [data["values"][case][side] for case in cases]
            bars = ax.bar(xs, values, width, label=name)
            ax.bar_label(
                bars, labels=[f"{v:,.0f}" if v >= 100 else f"{v:g}" for v in values], fontsize=7
            )
        ax.set_xticks(range(len(cases)), cases)
        ax.set_ylabel(data["unit"])
        ax.set_title(_wrap(row["what"], 48), fontsize=8)
        ax.legend(fontsize=7)
    fig.suptitle(f"{family['title']} ({family['measured']}, {family['machine']})", fontsize=9)
    fig.tight_layout()
    out = io.BytesIO()
    fig.savefig(out, format="png", dpi=110)
    plt.close(fig)
    return out.getvalue()


def _wrap(text: str, width: int) -> str:
    words, lines, line = text.split(), [], ""
    for word in words:
        if line and len(line) + len(word) + 1 > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    return "\n".join([*lines, line][:3])


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else Path("charts")
    out.mkdir(parents=True, exist_ok=True)
    for family in families():
        (out / f"{family['family']}.png").write_bytes(chart(family))
        print(out / f"{family['family']}.png")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
