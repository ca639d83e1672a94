"""The ``sluice`` command: embedded brokers, publish, peek, lag, ingest, audit, watch, compact,
expire, dead-letter replay.

Each command group lives in its own module and imports the queue, Kafka, MQTT and Spark
libraries only when it runs, so ``sluice --help`` stays fast.
"""

from __future__ import annotations

import logging
from typing import Annotated

import typer

from . import audit, brokers, dlq, ingest, inspect, maintenance, publish, watch
from .errors import SluiceGroup, set_debug

__all__ = ["app", "main"]

TRUE = {"1", "true", "yes", "on"}

app = typer.Typer(
    cls=SluiceGroup,
    name="sluice",
    help="Sluice: message brokers (Kafka, MQTT) to batch pipelines, from the command line.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


@app.callback()
def _options(
    debug: Annotated[
        bool,
        typer.Option(
            "--debug", envvar="SLUICE_DEBUG", help="Show tracebacks and library logs on errors."
        ),
    ] = False,
) -> None:
    set_debug(debug)


app.add_typer(brokers.app, name="brokers")
app.command("publish")(publish.publish)
app.command("peek")(inspect.peek)
app.command("lag")(inspect.lag)
app.command("ingest")(ingest.ingest)
app.command("audit")(audit.audit)
app.command("watch")(watch.watch)
app.command("compact")(maintenance.compact)
app.command("expire")(maintenance.expire)
app.add_typer(dlq.app, name="dlq")


def main() -> None:
    """The console script."""
    import os
    import sys

    debug = "--debug" in sys.argv[1:] or os.environ.get("SLUICE_DEBUG", "").lower() in TRUE
    # Library logs and warnings would interleave with progress bars: errors are reported once,
    # as one line, by the command. With --debug everything is shown.
    if debug:
        logging.basicConfig(
            level=logging.DEBUG, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
    else:
        logging.getLogger().addHandler(logging.NullHandler())
        import warnings

        # Warnings of the libraries under Sluice (Spark, kafka-python, paho, pip-services) say
        # nothing to its user; Sluice's own (an unknown config key) is an error in the
        # commands (queues.strict_config). Python's -W / PYTHONWARNINGS still win.
        if not sys.warnoptions:
            warnings.simplefilter("ignore")
    app()
