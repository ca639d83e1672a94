"""Running the ``sluice`` command in-process, and checking its one-line errors."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import time
from collections.abc import Mapping, Sequence

from typer.testing import CliRunner, Result

from sluice.cli import app


def run(*args: str, input: str | None = None, env: Mapping[str, str] | None = None) -> Result:
    """``sluice ARGS`` through typer's CliRunner, with a wide terminal for the tables."""
    result = CliRunner().invoke(app, list(args), input=input, env={"COLUMNS": "200", **(env or {})})
    # Every run ends in SystemExit (SluiceGroup exits itself): anything else escaped.
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exc_info
    return result


def assert_ok(result: Result) -> str:
    assert result.exit_code == 0, f"exit {result.exit_code}: {result.output}"
    assert "Traceback" not in result.output
    return result.stdout


def assert_error(result: Result, code: int, *fragments: str) -> str:
    """The run failed with ``code`` and printed one line on stderr holding ``fragments``."""
    assert result.exit_code == code, f"exit {result.exit_code} (wanted {code}): {result.output}"
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, f"wanted one line on stderr, got:\n{result.stderr}"
    assert lines[0].startswith("Error: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], f"{fragment!r} not in {lines[0]!r}"
    assert "Traceback" not in result.output
    return lines[0]


def table_rows(text: str) -> list[list[str]]:
    """The body rows of the rich tables in ``text``, as lists of stripped cells."""
    return [
        [cell.strip() for cell in line.strip().strip("│").split("│")]
        for line in text.splitlines()
        if line.startswith("│")
    ]


def on_terminal(
    argv: Sequence[str], env: Mapping[str, str] | None = None, timeout: float = 60.0
) -> tuple[int, str]:
    """Run ``argv`` on a pseudo-terminal (where the commands draw their spinners) until it
    exits; its exit code and everything it drew."""
    primary, secondary = pty.openpty()
    try:
        child = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=secondary,
            stderr=secondary,
            env={**os.environ, "TERM": "xterm", "COLUMNS": "120", **(env or {})},
        )
        os.close(secondary)
        screen = b""
        deadline = time.monotonic() + timeout
        while child.poll() is None and time.monotonic() < deadline:
            ready, _, _ = select.select([primary], [], [], 0.2)
            if ready:
                try:
                    screen += os.read(primary, 4096)
                except OSError:  # the child closed the terminal
                    break
        code = child.wait(30)
    finally:
        os.close(primary)
    return code, screen.decode(errors="replace")
