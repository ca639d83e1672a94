"""Errors a user can cause, as one line on stderr: what is wrong and how to fix it.

Commands raise :class:`CliError` (or let a library error through); :class:`SluiceGroup`
turns any exception into ``Error: <one line>`` with exit code 2 for usage errors (the command
line is wrong: an option, a URI, a config key, a file) and 1 for runtime errors (a broker that
cannot be reached, bad data, a missing extra). ``--debug`` adds the traceback. Passwords of
URIs seen on the command line never appear: every line printed here goes through
:func:`sluice.secrets.redact_text`.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Sequence
from typing import Any

import typer
from typer.core import TyperGroup

from sluice.errors import exception_detail
from sluice.secrets import redact_text, remember_text

__all__ = [
    "RUNTIME",
    "USAGE",
    "CliError",
    "SluiceGroup",
    "describe",
    "is_debug",
    "report",
    "set_debug",
]

USAGE = 2
RUNTIME = 1


class CliError(Exception):
    """An error the user can fix; ``str(error)`` is the one line shown."""

    def __init__(self, message: str, *, usage: bool = False) -> None:
        super().__init__(message)
        self.exit_code = USAGE if usage else RUNTIME


class _State:
    debug = False


def set_debug(debug: bool) -> None:
    _State.debug = debug


def is_debug() -> bool:
    return _State.debug


#: Errors whose message says what happened and what to do: shown as they are.
_SELF_EXPLAINING = (
    "DataLossError",
    "ConcurrentIngestError",
    "QuarantineLimitError",
    "StreamStateError",
    "TopicNotFoundError",
    "PythonWorkersError",
    # a schema registry that refused a request, or an answer that is no registry's
    "RegistryError",
    "SchemaNotFoundError",
    "IncompatibleSchemaError",
)

#: How the queues name the address to fix; a CLI user typed a URI, not config keys.
_CONFIG_KEYS_HINT = "connection.host and connection.port (or connection.uri)"


def _one_line(text: str) -> str:
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    if not lines:
        return ""
    return lines[0] + (" ('sluice --debug ...' shows the rest)" if len(lines) > 1 else "")


def _detail(exc: BaseException) -> str:
    return _one_line(exception_detail(exc))


def describe(exc: BaseException) -> tuple[str, int]:
    """The one line and the exit code for ``exc``."""
    if isinstance(exc, CliError):
        return _one_line(str(exc)), exc.exit_code
    if _is_click_error(exc):
        return _describe_click(exc)
    if isinstance(exc, typer.Abort):
        return "Aborted.", RUNTIME
    name = type(exc).__name__
    module = type(exc).__module__
    if name == "ConfigError":
        return _one_line(str(exc)), USAGE
    if name in _SELF_EXPLAINING:  # they say what to do
        return _one_line(str(exc)), RUNTIME
    if name == "UnknownConfigKeyWarning":
        text = _one_line(str(exc)).replace(" is ignored.", ".")
        return (
            f"{text} Fix or remove it (a URI's query parameters are config keys: see the "
            "configuration reference: docs/reference/configuration.md).",
            USAGE,
        )
    if isinstance(exc, ImportError):
        return _one_line(str(exc)), RUNTIME
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return _one_line(str(exc)).replace(
            _CONFIG_KEYS_HINT, "the host and port in the URI"
        ), RUNTIME
    if module.startswith("kafka"):
        return (
            f"Kafka said {name}: {_detail(exc).rstrip('.') or 'no detail'}. Check that the broker "
            "is running and the URI names it (sluice brokers status).",
            RUNTIME,
        )
    if isinstance(exc, ValueError):  # the library's ValueErrors say what to fix
        return _one_line(str(exc)), RUNTIME
    if isinstance(exc, FileNotFoundError):
        return f"File not found: {exc.filename}.", USAGE
    if isinstance(exc, OSError):
        return _one_line(f"{exc.strerror or exc}: {exc.filename or ''}"), RUNTIME
    detail = _detail(exc)
    return (
        f"Unexpected {name}{': ' + detail if detail else ''} ('sluice --debug ...' shows the "
        "traceback; please report it).",
        RUNTIME,
    )


def _is_click_error(exc: BaseException) -> bool:
    # typer vendors click in recent versions and uses click itself in older ones: duck-type.
    return hasattr(exc, "format_message") and isinstance(getattr(exc, "exit_code", None), int)


def _describe_click(exc: Any) -> tuple[str, int]:
    message = _one_line(exc.format_message())
    ctx = getattr(exc, "ctx", None)
    code = int(exc.exit_code)
    if code == USAGE and ctx is not None:
        ended = message if message.endswith(("?", "!", ".")) else f"{message}."
        message = f"{ended} See '{ctx.command_path} --help'."
    return message, code


class SluiceGroup(TyperGroup):
    """The root command: runs the command and turns any error into one line on stderr."""

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        _State.debug = False
        argv = list(sys.argv[1:] if args is None else args)
        for arg in argv:  # the passwords of URIs on the command line, wherever they show up
            remember_text(arg)
        if not standalone_mode:
            return super().main(argv, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            result = super().main(argv, prog_name, complete_var, standalone_mode=False, **extra)
        except Exception as exc:
            if type(exc).__name__ == "NoArgsIsHelpError":
                exc.show()  # type: ignore[attr-defined]  # the help text, as click shows it
                sys.exit(USAGE)
            sys.exit(report(exc))
        sys.exit(result if isinstance(result, int) else 0)


def report(exc: BaseException) -> int:
    """Print ``exc`` as one line (and the traceback with --debug); return the exit code."""
    message, code = describe(exc)
    if _State.debug:
        trace = "".join(traceback.format_exception(exc))
        sys.stderr.write(redact_text(trace))
    sys.stderr.write(f"Error: {redact_text(message)}\n")
    sys.stderr.flush()
    return code
