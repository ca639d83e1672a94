"""Charts and tables of the benchmarks, drawn from their JSON results (``bench/results/*.json``).

Each results file is one benchmark family: a title, when and on what machine it was measured,
and rows (the figure, the other side, the ratio, the goal, the command). The documentation
site's benchmarks page shows each family as one SVG chart, a table of its setup and one of its
results (``docs/hooks.py`` calls :func:`chart` and :func:`tables` when the site is built), so a
new results file is a new chart, never a hand-drawn one. ``python bench/charts.py OUT_DIR``
writes the SVGs.

A chart has one panel per question a reader asks ("is Sluice fast by default?"), stacked,
each a few horizontal bars with the sides named in words (the benchmarks' one-letter side
names stay in their own output), values rounded, and the goal drawn as a dashed line where
the benchmark has one. What each family's panels are is written below (:data:`PRESENTERS`);
a family without a presenter gets one panel per row that has a ``chart``.
"""

from __future__ import annotations

import io
import json
import math
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"

#: bench/ingest.py's sides, by the letter its --sides option takes.
INGEST_SIDES = {
    "a": "a bare read loop (kafka-python, reads only)",
    "b": "Sluice, driver mode, kafka-python",
    "c": "Sluice, executor mode, kafka-python",
    "d": "hand-written Airflow task (Kafka hook, json, pyarrow)",
    "e": "Sluice, driver mode, confluent-kafka",
    "f": "Sluice, executor mode, confluent-kafka",
    "g": "Sluice, driver mode, confluent-kafka, no fsync",
    "h": "at-least-once, built from Sluice's pieces",
    "i": "Sluice, no options (what a fresh install does)",
    "j": "a Spark user's job (Kafka source, from_json)",
    "k": "Sluice, options.reader 'spark'",
}


@dataclass(frozen=True)
class Bar:
    name: str
    value: float
    sluice: bool = True  # drawn in Sluice's colour, else in the other side's


@dataclass(frozen=True)
class Goal:
    value: float
    label: str


@dataclass
class Panel:
    """One question: horizontal bars (or, with ``series``, lines over x), a goal line."""

    question: str
    unit: str
    bars: list[Bar] = field(default_factory=list)
    goals: list[Goal] = field(default_factory=list)
    log: bool = False
    series: dict[str, list[float]] = field(default_factory=dict)  # name -> y per x (1, 2, ...)
    xlabel: str = ""


def families(folder: Path = RESULTS) -> list[dict[str, Any]]:
    """Every results file of ``folder``, in name order."""
    return [json.loads(path.read_text()) for path in sorted(folder.glob("*.json"))]


# -- reading the rows ------------------------------------------------------------------------


def _row(family: dict[str, Any], prefix: str) -> dict[str, Any]:
    for row in family["rows"]:
        if row["what"].startswith(prefix):
            return row
    raise KeyError(f"{family['family']}: no row starts with {prefix!r}")


def _numbers(text: str) -> list[float]:
    """The numbers of ``text`` in order (thousands separators allowed)."""
    return [float(n.replace(",", "")) for n in re.findall(r"\d[\d,]*(?:\.\d+)?", text)]


def _after(text: str, label: str) -> float:
    """The number right after ``label`` in ``text`` ("p99 25.5 s" -> 25.5)."""
    match = re.search(re.escape(label) + r"\s*:?\s*\+?(\d[\d,]*(?:\.\d+)?)", text)
    if match is None:
        raise KeyError(f"no {label!r} in {text!r}")
    return float(match.group(1).replace(",", ""))


def _ratio_goal(goal: str) -> float | None:
    match = re.search(r"[<>]=?\s*(\d+(?:\.\d+)?)", goal)
    return float(match.group(1)) if match else None


def _letters(family: dict[str, Any]) -> dict[str, float]:
    """bench/ingest.py's sides by letter, from the charted rows ("(i) ..." -> its value), at
    200,000 messages where the run had that size, else at its first."""
    found: dict[str, float] = {}
    for row in family["rows"]:
        chart = row.get("chart")
        if not chart or chart["unit"] != "msg/s":
            continue
        values = chart["values"].get("200,000") or next(iter(chart["values"].values()))
        for name, value in zip(chart["sides"], values, strict=True):
            match = re.match(r"\((\w)\)", name)
            if match:
                found[match.group(1)] = value
    return found


def _by_size(family: dict[str, Any], prefix: str) -> dict[str, float] | None:
    """The first side over the second of the row starting with ``prefix``, at each size its
    chart has; None without such a row."""
    try:
        chart = _row(family, prefix)["chart"]
    except KeyError:
        return None
    return {size: pair[0] / pair[1] for size, pair in chart["values"].items()}


# -- each family's questions -----------------------------------------------------------------


def _ingest(family: dict[str, Any]) -> list[Panel]:
    v = _letters(family)
    n = INGEST_SIDES
    panels = []
    if "d" in v and "i" in v:
        panels.append(
            Panel(
                "Fast by default? Sluice with no options against the hand-written Airflow task",
                "messages per second",
                [Bar(n["i"], v["i"]), Bar(n["d"], v["d"], False)],
                [Goal(v["d"], "goal: at least the hand-written task")],
            )
        )
    if all(side in v for side in "bcefd"):
        panels.append(
            Panel(
                "Which reading mode and client?",
                "messages per second",
                [Bar(n[s], v[s]) for s in "bcef"] + [Bar(n["d"], v["d"], False)],
                [Goal(v["d"], "the hand-written task")],
            )
        )
    # each goal of speed round four at every size the run had: one bar per size, the goal line
    for prefix, question, unit, goal, label in (
        (
            "no options / hand-written Spark job",
            "Sluice with no options against a Spark user's own job, at every size",
            "times the Spark job's messages per second (more is better)",
            1.0,
            "goal: at least the Spark job",
        ),
        (
            "reader spark / hand-written Spark job",
            "Sluice on Spark's own Kafka source against the same job, at every size",
            "times the Spark job's messages per second (more is better)",
            0.95,
            "goal: 0.95x the Spark job",
        ),
        (
            "exactly-once / at-least-once",
            "What does exactly-once cost? Against an at-least-once ingest of the same pieces",
            "times the at-least-once ingest's time (less is better)",
            1.05,
            "goal: at most 1.05x its time",
        ),
        (
            "bytes on disk per message, i/j",
            "Bytes on disk per message: Sluice's default table against the Spark job's",
            "times the Spark job's bytes per message (less is better)",
            1.1,
            "goal: at most 1.1x",
        ),
    ):
        ratios = _by_size(family, prefix)
        if not ratios:
            continue
        if prefix.startswith("exactly-once"):  # its chart holds throughputs: e over h
            ratios = {size: 1 / ratio for size, ratio in ratios.items()}
        bars = [Bar(f"{size} messages", ratio) for size, ratio in ratios.items()]
        panels.append(Panel(question, unit, bars, [Goal(goal, label)]))
    return panels


def _cold_task(family: dict[str, Any]) -> list[Panel]:
    sluice = _row(family, "sluice:")
    sizes = list(sluice["chart"]["values"])
    hand = [pair[1] for pair in sluice["chart"]["values"].values()]
    sides = [("Sluice, no options", _numbers(sluice["sluice"])[: len(sizes)], True)]
    for prefix, name in (
        ("spark-job", "a Spark user's job (Kafka source)"),
        ("sluice-spark", "Sluice, options.reader 'spark'"),
    ):
        try:
            sides.append((name, _numbers(_row(family, prefix)["sluice"])[: len(sizes)], True))
        except KeyError:
            continue
    sides.append(("hand-written Airflow task", hand, False))
    goals = {
        1: [Goal(hand[1] * 1.5, "goal: at most 1.5x the hand-written task")],
        2: [Goal(hand[2], "goal: faster than the hand-written task")],
    }
    questions = {
        0: "How long does a fresh task take for {size} messages?",
        1: "Within 1.5x the hand-written task at {size} messages?",
        2: "Faster than the hand-written task at {size} messages?",
    }
    panels = []
    for index, size in enumerate(sizes):
        bars = [
            Bar(name, values[index], mine) for name, values, mine in sides if index < len(values)
        ]
        panels.append(
            Panel(
                questions.get(index, questions[0]).format(size=size),
                "seconds from start to exit (less is better)",
                bars,
                goals.get(index, []),
            )
        )
    for side, name in (
        ("sluice", "Sluice with no options"),
        ("sluice-spark", "Sluice, reader spark"),
    ):
        ratios = _by_size(family, f"{side}: a fresh process start to exit against a Spark")
        if ratios:
            panels.append(
                Panel(
                    f"{name} as a cold task against a Spark user's job in a fresh process",
                    "times the Spark job's time from start to exit (less is better)",
                    [Bar(f"{size} messages", ratio) for size, ratio in ratios.items()],
                    [Goal(1.0, "goal: at most the Spark job's time")],
                )
            )
    return panels


def _freshness(family: dict[str, Any]) -> list[Panel]:
    rows = [r for r in family["rows"] if "p50" in r["sluice"]]

    def name(row: dict[str, Any]) -> str:
        return re.sub(r"^\w\.\s*", "", row["what"]).split(" (")[0]

    p50 = [Bar(name(r), _after(r["sluice"], "p50")) for r in rows]
    p99 = [Bar(name(r), _after(r["sluice"], "p99")) for r in rows]
    goal = rows[0]["goal"] if rows else ""
    goals50 = (
        [Goal(_after(goal, "p50 <"), "goal for Airflow: p50 under this")] if "p50 <" in goal else []
    )
    goals99 = (
        [Goal(_after(goal, "p99 <"), "goal for Airflow: p99 under this")] if "p99 <" in goal else []
    )
    return [
        Panel("Produce to visible in the table: the median message (p50)", "seconds", p50, goals50),
        Panel("Produce to visible: the slowest 1% (p99)", "seconds", p99, goals99),
    ]


def _trigger_fleet(family: dict[str, Any]) -> list[Panel]:
    fleet = _row(family, "500 idle")
    ours, theirs = fleet["sluice"], fleet["other"]
    our_name, their_name = ours.split(":")[0], theirs.split(":")[0]
    first = _row(family, "produce -> first")
    return [
        Panel(
            "What do 500 idle watchers cost the triggerer? CPU",
            "CPU seconds per second (less is better)",
            [Bar(our_name, _numbers(ours)[0]), Bar(their_name, _numbers(theirs)[0], False)],
            [Goal(_numbers(theirs)[0], "goal: at most the provider's CPU")],
        ),
        Panel(
            "What do 500 idle watchers cost the triggerer? Threads",
            "threads (less is better)",
            [Bar(our_name, _after(ours, ",")), Bar(their_name, _after(theirs, ","), False)],
            [Goal(_after(theirs, ","), "goal: at most the provider's threads")],
        ),
        Panel(
            "Produce to asset event in that triggerer",
            "milliseconds, log scale (less is better)",
            [
                Bar(f"{our_name}, p50", _after(first["sluice"], "p50")),
                Bar(f"{our_name}, p99", _after(first["sluice"], "p99")),
                Bar(f"{their_name}, p50", _after(first["other"], "p50"), False),
                Bar(f"{their_name}, p99", _after(first["other"], "p99"), False),
            ],
            [Goal(_after(first["goal"], "p50 <"), "goal: p50 under this")]
            if "p50 <" in first["goal"]
            else [],
            log=True,
        ),
    ]


def _formats(family: dict[str, Any]) -> list[Panel]:
    [row] = [r for r in family["rows"] if "chart" in r]
    values = row["chart"]["values"]
    json_speed = next(iter(values.values()))[1]
    bars = [Bar(f"{fmt} (Schema Registry framing)", pair[0]) for fmt, pair in values.items()]
    return [
        Panel(
            "Does a binary format cost more than JSON? Messages ingested per second",
            "messages per second",
            [*bars, Bar("JSON", json_speed, False)],
            [Goal(json_speed, "goal for Avro: JSON's speed")],
        )
    ]


def _object_storage(family: dict[str, Any]) -> list[Panel]:
    timed = _row(family, "Iceberg table on the loopback S3")
    [[s3, local]] = timed["chart"]["values"].values()
    goal = _ratio_goal(timed["goal"]) or 1.3
    panels = [
        Panel(
            "Does a warehouse on S3 cost more than local disk? 200,000 messages",
            "seconds (less is better)",
            [
                Bar("Iceberg, warehouse on S3", s3),
                Bar("Iceberg, warehouse on local disk", local, False),
            ],
            [Goal(local * goal, f"goal: at most {goal:g}x local disk")],
        )
    ]
    try:
        requests = _row(family, "S3 requests per")
    except KeyError:
        return panels
    panels.append(
        Panel(
            "Do the S3 requests per batch grow with the table's history?",
            "S3 requests per batch",
            series={
                "Iceberg": _numbers(requests["sluice"].split(":", 1)[1]),
                "Parquet dataset on S3": _numbers(requests["other"].split(":", 1)[1]),
            },
            xlabel="batch number (1,000 messages each)",
        )
    )
    return panels


def _scale(family: dict[str, Any]) -> list[Panel]:
    chunk: list[Bar] = []
    memory: list[Bar] = []
    for row in family["rows"]:
        count, size = _numbers(row["what"].split(":", 1)[1])[:2]
        label = f"{int(count):,} messages of {_size(size)}"
        chunk.append(Bar(label, _numbers(row["ratio"])[0]))
        memory.append(Bar(f"{_size(size)} messages: the batch", count * size / 2**20, False))
        memory.append(
            Bar(f"{_size(size)} messages: the driver's growth", _after(row["sluice"], "driver +"))
        )
    return [
        Panel(
            "Does each chunk a driver reads stay within its bound (chunk_bytes)?",
            "largest chunk / its bound",
            chunk,
            [Goal(1.0, "the bound")],
        ),
        Panel("Does memory follow the chunk, not the batch?", "MiB", memory),
    ]


def _sinks(family: dict[str, Any]) -> list[Panel]:
    [row] = [r for r in family["rows"] if "chart" in r]
    values = row["chart"]["values"]
    parquet = next(iter(values.values()))[1]
    goal = _ratio_goal(row["goal"]) or 1.2
    return [
        Panel(
            "Do Delta and Iceberg write as fast as a Parquet dataset? 200,000 messages",
            "seconds (less is better)",
            [*(Bar(f"{sink} table", pair[0]) for sink, pair in values.items()),
             Bar("Parquet dataset", parquet, False)],
            [Goal(parquet * goal, f"goal: at most {goal:g}x Parquet")],
        )
    ]  # fmt: skip


def _table_health(family: dict[str, Any]) -> list[Panel]:
    before: list[Bar] = []
    after: list[Bar] = []
    goal = 1.5
    for row in family["rows"]:
        sink = row["what"].split(":")[0]
        small, one = _numbers(row["sluice"])[0], _numbers(row["other"])[0]
        ratios = _numbers(row["ratio"])  # compacted, then after expiry
        name = {"parquet-day": "parquet, by day", "iceberg-day": "iceberg, by day"}.get(sink, sink)
        before.append(Bar(name, small / one))
        after.append(Bar(name, ratios[-1]))
        goal = _ratio_goal(row["goal"]) or goal
    return [
        Panel(
            "After 1,000 small batches: a one-day query against the same rows in one batch",
            "times as long, log scale (less is better)",
            before,
            log=True,
        ),
        Panel(
            "After sluice compact and sluice expire",
            "times as long as one batch (less is better)",
            after,
            [Goal(goal, f"goal: at most {goal:g}x")],
        ),
    ]


def _routes(family: dict[str, Any]) -> list[Panel]:
    ingest: list[Bar] = []
    for row in family["rows"]:
        if "routes," not in row["what"] or "chart" not in row:
            continue
        [(case, (routed, jobs))] = row["chart"]["values"].items()
        count = case.split()[0]
        ingest += [Bar(f"one routed ingest, {case}", routed),
                   Bar(f"{count} Spark jobs, each reading the topic", jobs, False)]  # fmt: skip
    panels = [
        Panel(
            "One read for N tables: one routed ingest against N jobs that each read the "
            "whole topic and keep one kind",
            "seconds, log scale (less is better)",
            ingest,
            log=True,
        )
    ]
    rows = {
        key: next((r for r in family["rows"] if key in r["what"]), None)
        for key in ("assets on one topic, idle", "routed assets against", "the right asset")
    }
    idle, alone, latency = rows.values()
    if idle is None or alone is None or latency is None:
        return panels
    assets = idle["what"].split()[0]
    [[routed, separate]] = idle["chart"]["values"].values()
    [[_, one]] = alone["chart"]["values"].values()
    names = [name.split(" (")[0] for name in idle["chart"]["sides"]]
    panels.append(
        Panel(
            f"What do {assets} assets on one topic cost in the triggerer, idle?",
            "CPU seconds per second (less is better)",
            [
                Bar(names[0], routed),
                Bar("1 RoutedMessageTrigger alone", one),
                Bar(names[1], separate, False),
            ],
            [Goal(one, "one poller alone")],
        )
    )
    values = latency["chart"]["values"]
    panels.append(
        Panel(
            "Publish to the right asset's event",
            "milliseconds (less is better)",
            [
                Bar(f"{name}, {q}", pair[index], index == 0)
                for index, name in enumerate(names)
                for q, pair in values.items()
            ],
        )
    )
    return panels


def _iceberg_connect(family: dict[str, Any]) -> list[Panel]:
    throughput = _row(family, "throughput")["chart"]["values"]
    panels = [
        Panel(
            "Into one Iceberg table: Sluice's throughput against Iceberg's Kafka Connect sink",
            "times the sink's messages per second (more is better)",
            [Bar(f"{size} messages", pair[0] / pair[1]) for size, pair in throughput.items()],
            [Goal(1.0, "goal: at least the sink's")],
        )
    ]
    fresh = _row(family, "freshness")["chart"]["values"]
    panels.append(
        Panel(
            "Produce to visible at the same commit interval: Sluice against the sink, p50",
            "times the sink's p50 (less is better)",
            [Bar(f"commits {case}", pair[0] / pair[1]) for case, pair in fresh.items()],
            [Goal(1.0, "goal: no worse than the sink")],
        )
    )
    return panels


def _streaming_task(family: dict[str, Any]) -> list[Panel]:
    bars = []
    for row in family["rows"]:
        kind = row["what"].split(":")[0]
        for size, pair in row["chart"]["values"].items():
            bars.append(Bar(f"{kind}, {size} messages", pair[0] / pair[1]))
    return [
        Panel(
            "A scheduled batch, a fresh process each side: Sluice against Structured Streaming "
            "(availableNow)",
            "times the streaming job's time (less is better)",
            bars,
            [Goal(1.0, "goal: at most the streaming job's time")],
        )
    ]


def _size(size: float) -> str:
    return f"{size / 2**20:g} MiB" if size >= 2**20 else f"{size / 2**10:g} KiB"


#: Each family's questions (see the module docstring).
PRESENTERS: dict[str, Callable[[dict[str, Any]], list[Panel]]] = {
    "ingest": _ingest,
    "cold_task": _cold_task,
    "freshness": _freshness,
    "trigger_fleet": _trigger_fleet,
    "formats": _formats,
    "object_storage": _object_storage,
    "scale": _scale,
    "sinks": _sinks,
    "table_health": _table_health,
    "routes": _routes,
    "iceberg_connect": _iceberg_connect,
    "streaming_task": _streaming_task,
    "cdc_metadata": lambda family: _generic(family),  # a panel per sink: commit sizes by batch
}


def _generic(family: dict[str, Any]) -> list[Panel]:
    """One panel per charted row: its sides (without a leading "(x) ") for each case."""
    rows = [row for row in family["rows"] if "chart" in row]
    if not rows:
        raise ValueError(f"{family['family']}: no row has a chart")
    panels = []
    for row in rows:
        data = row["chart"]
        names = [re.sub(r"^\(\w\)\s*", "", side) for side in data["sides"]]
        bars = [
            Bar(f"{name}, {case}" if len(data["values"]) > 1 else name, value, index == 0)
            for case, values in data["values"].items()
            for index, (name, value) in enumerate(zip(names, values, strict=True))
        ]
        panels.append(Panel(row["what"], data["unit"], bars))
    return panels


def panels(family: dict[str, Any]) -> list[Panel]:
    """The family's questions: its presenter's, or one per charted row."""
    presenter = PRESENTERS.get(family["family"])
    if presenter is not None:
        try:
            return presenter(family)
        except (KeyError, ValueError, IndexError):  # the results changed shape
            pass
    return _generic(family)


# -- drawing ---------------------------------------------------------------------------------

SLUICE_COLOUR, OTHER_COLOUR, GOAL_COLOUR = "#3f51b5", "#9e9e9e", "#d84315"
WIDTH_INCHES = 7.6  # about 730 CSS pixels: the content column at 1280 px, drawn 1:1


def rounded(value: float) -> str:
    """A value as a reader reads it: three significant figures, thousands separated."""
    if value == 0:
        return "0"
    digits = max(0, 2 - math.floor(math.log10(abs(value))))
    text = f"{round(value, digits):,.{digits}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def _wrap(text: str, width: int) -> str:
    words, lines, line = text.split(), [], ""
    for word in words:
        if line and len(line) + len(word) + 1 > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    return "\n".join([*lines, line])


def chart(family: dict[str, Any]) -> bytes:
    """The family's chart as SVG bytes: its panels stacked, one per question, each with its
    question above it across the whole width and its goal said under its axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    found = panels(family)
    plt.rcParams.update({"font.size": 10, "svg.hashsalt": "sluice", "svg.fonttype": "path"})
    title_h, axis_h, gap = 0.45, 0.55, 0.3  # inches: the question, the axis' labels, between
    plot_hs = [0.42 * max(len(p.bars), 4 if p.series else 2) + 0.15 for p in found]
    heights = [
        title_h + h + axis_h + 0.22 * len(p.goals) for p, h in zip(found, plot_hs, strict=True)
    ]
    total = sum(heights) + gap * (len(found) - 1)
    fig = plt.figure(figsize=(WIDTH_INCHES, total))
    top = total
    for panel, plot_h, height in zip(found, plot_hs, heights, strict=True):
        bottom = top - title_h - plot_h
        ax = fig.add_axes((0.37, bottom / total, 0.53, plot_h / total))
        fig.text(0.012, (top - 0.12) / total, _wrap(panel.question, 78), fontsize=11,
                 fontweight="bold", va="top", ha="left")  # fmt: skip
        _draw(ax, panel, legend_at=-0.56 / plot_h)
        top -= height + gap
    out = io.BytesIO()
    fig.savefig(out, format="svg", metadata={"Date": None}, facecolor="white")
    plt.close(fig)
    return out.getvalue()


def _axis_numbers(axis: Any, log: bool) -> None:
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

    axis.set_major_formatter(FuncFormatter(lambda value, _: rounded(value)))
    if log:
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 3.0)))
        axis.set_minor_formatter(NullFormatter())
    else:
        axis.set_major_locator(MaxNLocator(nbins=5))


def _draw(ax: Any, panel: Panel, legend_at: float) -> None:
    from matplotlib.lines import Line2D

    ax.spines[["top", "right"]].set_visible(False)
    if panel.series:
        for name, ys in panel.series.items():
            xs = list(range(1, len(ys) + 1))
            ax.plot(xs, ys, marker="o", label=name)
            ax.annotate(rounded(ys[-1]), (xs[-1], ys[-1]), textcoords="offset points",
                        xytext=(6, -3), fontsize=9)  # fmt: skip
        ax.set_xlabel(panel.xlabel, fontsize=9)
        ax.set_ylabel(panel.unit, fontsize=9)
        ax.set_ylim(bottom=0, top=max(max(ys) for ys in panel.series.values()) * 1.25)
        _axis_numbers(ax.yaxis, False)
        ax.legend(fontsize=9, frameon=False, loc="lower right")
        return
    names = [_wrap(bar.name, 36) for bar in panel.bars]
    values = [bar.value for bar in panel.bars]
    colours = [SLUICE_COLOUR if bar.sluice else OTHER_COLOUR for bar in panel.bars]
    ys = list(range(len(values)))[::-1]
    if panel.log:
        ax.set_xscale("log")
    bars = ax.barh(ys, values, color=colours, height=0.62)
    ax.set_yticks(ys, names, fontsize=9)
    ax.bar_label(bars, labels=[rounded(v) for v in values], padding=4, fontsize=9)
    ax.set_xlabel(panel.unit, fontsize=9)
    top = max([*values, *(goal.value for goal in panel.goals)])
    if panel.log:
        low = 10 ** math.floor(math.log10(min([*values, *(g.value for g in panel.goals)])))
        ax.set_xlim(left=low, right=top * 4.0)
    else:
        ax.set_xlim(left=0, right=top * 1.22)
    _axis_numbers(ax.xaxis, panel.log)
    handles = []
    for goal in panel.goals:
        ax.axvline(goal.value, color=GOAL_COLOUR, linestyle="--", linewidth=1.5)
        handles.append(
            Line2D([], [], color=GOAL_COLOUR, linestyle="--", linewidth=1.5,
                   label=f"{goal.label} ({rounded(goal.value)})")
        )  # fmt: skip
    if handles:  # under the axis' label, where it overlaps nothing
        ax.legend(handles=handles, fontsize=9, frameon=False, loc="upper left",
                  bbox_to_anchor=(-0.02, legend_at), borderaxespad=0, handlelength=2.2)  # fmt: skip


# -- the tables ------------------------------------------------------------------------------


def reproduce(family: dict[str, Any]) -> str:
    """The command that measured the family, without where it wrote its JSON."""
    command = family["provenance"].removeprefix("written by ").strip()
    return re.sub(r"\s--json\s+\S+", "", command)


def named(text: str, family: dict[str, Any]) -> str:
    """``text`` with bench/ingest.py's side letters replaced by their names."""
    if family["family"] != "ingest":
        return text
    text = re.sub(r"\s*\(\w/\w\)", "", text)
    return re.sub(r"\b([a-k]): ", lambda m: f"{INGEST_SIDES[m.group(1)]}: ", text)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def tables(family: dict[str, Any]) -> str:
    """The family's setup and results as Markdown tables."""
    setup = [
        ("measured", f"{family['measured']}, {family['machine']}, {family['load']}"),
        *([("broker", family["broker"])] if family.get("broker") else []),
        ("reproduce", f"`{reproduce(family)}`"),
    ]
    lines = ["| setup | |", "|---|---|"]
    lines += [f"| {key} | {_cell(value)} |" for key, value in setup]
    lines += ["", "| what | Sluice | the other side | ratio | goal |", "|---|---|---|---|---|"]
    for row in family["rows"]:
        cells = [row["what"], row["sluice"], row["other"], row["ratio"], row["goal"]]
        lines.append("| " + " | ".join(_cell(named(c, family)) or "-" for c in cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else Path("charts")
    out.mkdir(parents=True, exist_ok=True)
    for family in families():
        (out / f"{family['family']}.svg").write_bytes(chart(family))
        print(out / f"{family['family']}.svg")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
