"""What commands print: tables and results on stdout, progress bars and notes on stderr."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress

__all__ = ["err", "out", "preview", "progress", "table"]


def out() -> Console:
    from rich.console import Console

    return Console(highlight=False, markup=False, soft_wrap=True)


def err() -> Console:
    from rich.console import Console

    return Console(stderr=True, highlight=False, markup=False, soft_wrap=True)


def table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """Print a table on stdout; numbers are right-aligned."""
    from rich.table import Table
    from rich.text import Text

    rows = [list(row) for row in rows]
    grid = Table(title=title, title_justify="left")
    for index, name in enumerate(columns):
        cells = [row[index] for row in rows]
        numeric = any(isinstance(c, int) for c in cells) and all(
            c is None or isinstance(c, int) for c in cells
        )
        natural = max([len(name)] + [len(str(c)) for c in cells])
        grid.add_column(
            name,
            justify="right" if numeric else "left",
            no_wrap=True,
            overflow="ellipsis",
            min_width=min(natural, 24),
        )
    for row in rows:
        grid.add_row(*(Text("-" if cell is None else str(cell)) for cell in row))
    out().print(grid)


def progress() -> Progress:
    """A progress bar on stderr: description, bar, count, rate and time left (only on a
    terminal: in a log a bar is noise)."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeRemainingColumn,
    )

    console = err()
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TaskProgressColumn(),
        TimeRemainingColumn(),
        console=console,
        disable=not console.is_terminal,
    )


def preview(data: bytes | str | None, width: int = 60) -> str:
    """A payload or key as one short line of text."""
    if data is None:
        return "-"
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    text = text.replace("\r", "\\r").replace("\n", "\\n")
    return text if len(text) <= width else text[: width - 1] + "…"
