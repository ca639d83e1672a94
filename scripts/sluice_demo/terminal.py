"""The terminal: one line per step with a spinner; everything else goes to the log."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from rich.console import Console, ConsoleOptions, RenderResult
from rich.live import Live
from rich.spinner import Spinner


class Steps:
    """Each step of the demo as a line: ``✓ what it did (seconds)``, then its notes. While a
    step runs, a terminal shows a spinner with the time so far; off a terminal (CI, a pipe)
    a line says when it starts."""

    def __init__(self, console: Console, live: bool = True) -> None:
        self.console = console
        self.live = live and console.is_terminal
        self.current = "starting"
        self._notes: list[str] | None = None  # a terminal's notes, shown after the step

    def say(self, text: str) -> None:
        if self._notes is not None:
            self._notes.append(text)
        else:
            self.console.print(f"    {text}", highlight=False, soft_wrap=True)

    @contextlib.contextmanager
    def step(self, text: str) -> Iterator[None]:
        self.current = text
        started = time.perf_counter()
        live = None
        if self.live:
            self._notes = []
            live = Live(
                _Running(text, started),
                console=self.console,
                transient=True,
                refresh_per_second=8,
                redirect_stdout=False,  # stdout is the log file: keep it there
                redirect_stderr=False,
            )
            live.start()
        else:
            self.console.print(f"[bold]…[/] {text}", highlight=False)
        done = False
        try:
            yield
            done = True
        finally:
            if live is not None:
                live.stop()
            mark = "[green]✓[/]" if done else "[red]✗[/]"
            seconds = time.perf_counter() - started
            self.console.print(f"{mark} {text} ({seconds:.1f} s)", highlight=False)
            notes, self._notes = self._notes or [], None
            for note in notes:
                self.say(note)


class _Running:
    """A spinner, the step and how long it has run (redrawn by :class:`rich.live.Live`)."""

    def __init__(self, text: str, started: float) -> None:
        self.text, self.started = text, started
        self.spinner = Spinner("dots")

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        self.spinner.text = f"{self.text} ({time.perf_counter() - self.started:.0f} s)"
        yield self.spinner


def logs_to(path: Path | None) -> tuple[TextIO, TextIO]:
    """Send file descriptors 1 and 2 to ``path`` for the rest of the process (Airflow's,
    Dagster's and Spark's JVM's output all go there, child processes and exit handlers
    included) and return streams on the original stdout and stderr for the demo's own
    output. ``None``: leave everything where it is."""
    if path is None:
        return sys.stdout, sys.stderr
    sys.stdout.flush()
    sys.stderr.flush()
    out = open(os.dup(1), "w", buffering=1, encoding="utf-8")  # noqa: SIM115
    err = open(os.dup(2), "w", buffering=1, encoding="utf-8")  # noqa: SIM115
    with path.open("ab") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
    return out, err


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    line = text.splitlines()[0] if text else ""
    return line or type(exc).__name__
