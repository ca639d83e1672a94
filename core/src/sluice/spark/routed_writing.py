"""Writing a routed batch: one Spark job writes every table's rows, each to its own sink.

The job is :func:`sluice.spark.writing.write_outcomes`' with a route: its rows carry a route
number (:mod:`.routing`), and each task, its rows sorted by route, hands each route's run
of rows to that route's writer: the same task writer an ingest of one sink uses
(:func:`sluice.spark.writing._task_writer`), with the route's columns, staging directories,
file system and partition spec. So every table gets one file per task that has rows of it
(not one per task and table), the files go through the same attempt directories and moves
(a failed task attempt's files are never published), and each route's report of offsets
and fingerprints is what an ingest of that table alone would reconcile (invariant I6).

A task holds one route's writer open at a time: sorted, its rows come route after route.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from . import durable, fingerprints, layout
from .failpoints import is_armed
from .writing import (
    _RESULT_DDL,
    ATTEMPTS_DIR,
    WriteCounts,
    WriteTargets,
    _lost_marker,
    _task_writer,
    arrow_settings,
    batch_rows,
    merge_reports,
    move_into_place,
    remove_attempts,
    session_conf,
)

__all__ = ["RouteOutput", "write_routed"]


@dataclass(frozen=True)
class RouteOutput:
    """Where one route's rows go: its columns (good and quarantined rows) and targets."""

    good: list[str]
    bad: list[str]
    targets: WriteTargets


def write_routed(
    frame: Any,
    route_column: str,
    outputs: Mapping[int, RouteOutput],
    largest_message: int | None = None,
) -> dict[int, WriteCounts]:
    """Write the rows of ``frame`` to the outputs of their route (``route_column``, every
    value a key of ``outputs``), good rows (``reason`` null) and quarantined ones, in one job;
    what each route's writers wrote."""
    attempts, dirs, writers, constants = {}, {}, {}, {}
    lost = _lost_marker() if is_armed("task.lost") else None
    for route, output in outputs.items():
        targets = output.targets
        names = [name for name, _ in targets.constants]
        dirs[route] = {"good": targets.data.rstrip("/"), "bad": targets.quarantine.rstrip("/")}
        attempts[route] = {kind: f"{path}/{ATTEMPTS_DIR}" for kind, path in dirs[route].items()}
        writers[route] = _task_writer(
            [*output.good, *names],
            [*output.bad, *names],
            attempts[route],
            fingerprints.message_fingerprint,
            lost,
            durable.ENABLED,
            targets.filesystem,
            targets.partitioning,
            layout.arrow_writer_options,
        )
        constants[route] = tuple(targets.constants)
    task = _routed_task(writers, constants, route_column)
    try:
        with session_conf(frame.sparkSession, arrow_settings(batch_rows(largest_message))):
            written = (
                frame.sortWithinPartitions(route_column)
                .mapInArrow(task, f"{_RESULT_DDL}, route INT")
                .collect()
            )
        found: dict[int, dict[str, Any]] = {
            route: {"good": 0, "bad": 0, "value_bytes": 0, "reports": [], "files": []}
            for route in outputs
        }
        for row in written:
            into = found[row["route"]]
            into["value_bytes"] += row["value_bytes"]
            if row["output"] is None:
                into["reports"].append(json.loads(row["offsets"] or "{}"))
                continue
            into["files"].append((row["output"], row["file"]))
            into[row["output"]] += row["rows"]
        for route, into in found.items():
            filesystem = outputs[route].targets.filesystem
            move_into_place(into["files"], attempts[route], dirs[route], filesystem)
    finally:
        if lost is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(lost)
        for route, output in outputs.items():
            remove_attempts(attempts[route], output.targets.filesystem)
    return {
        route: WriteCounts(
            into["good"], into["bad"], into["value_bytes"], merge_reports(into["reports"])
        )
        for route, into in found.items()
    }


def _routed_task(
    writers: Mapping[int, Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]],
    constants: Mapping[int, tuple[tuple[str, str], ...]],
    route_column: str,
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The function every task runs (no Sluice import: cloudpickle ships it by value, and the
    writers with it): each run of rows of one route goes to that route's writer, with the
    route's constant columns added; each writer's report rows get the route."""

    def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa
        import pyarrow.compute as pc

        def runs() -> Iterator[tuple[int, pa.RecordBatch]]:
            """(route, rows) of each run of rows with the same route, in order."""
            for batch in batches:
                if not batch.num_rows:
                    continue
                routes = batch.column(route_column)
                cuts = []
                if batch.num_rows > 1:
                    changed = pc.not_equal(routes.slice(1), routes.slice(0, batch.num_rows - 1))
                    cuts = [int(i) + 1 for i in pc.indices_nonzero(changed).to_pylist()]
                starts = [0, *cuts]
                ends = [*cuts, batch.num_rows]
                for start, end in zip(starts, ends, strict=True):
                    yield int(routes[start].as_py()), batch.slice(start, end - start)

        pieces = runs()
        current = next(pieces, None)
        while current is not None:
            route = current[0]
            if route not in writers:
                raise RuntimeError(f"a row of route {route}, which has no output")

            def of_route(route: int) -> Iterator[pa.RecordBatch]:
                nonlocal current
                while current is not None and current[0] == route:
                    rows = current[1]
                    for name, value in constants[route]:
                        rows = rows.append_column(
                            name, pa.array([value] * rows.num_rows, pa.string())
                        )
                    yield rows
                    current = next(pieces, None)

            for report in writers[route](of_route(route)):
                yield report.append_column("route", pa.array([route] * report.num_rows, pa.int32()))

    return task
