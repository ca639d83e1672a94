"""Command-line options and the entry point."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
import traceback
from pathlib import Path

from rich.console import Console

from .brokers import Brokers
from .interrupts import Interrupts, was_interrupted
from .run import Options, clear_outputs, close_all, quiet_libraries, run_demo
from .settings import Closer
from .terminal import Steps, first_line, logs_to


def parse_args(argv: list[str] | None) -> Options:
    parser = argparse.ArgumentParser(
        description="Sluice end to end: Kafka and MQTT readings, Airflow and Dagster, Spark, "
        "Parquet."
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=Path("demo-output"),
        help="where the datasets, chart and log go (default: ./demo-output)",
    )
    parser.add_argument("--waves", type=int, default=2, help="publish-and-ingest rounds")
    parser.add_argument("--kafka-messages", type=int, default=4000, help="per wave")
    parser.add_argument("--mqtt-messages", type=int, default=1000, help="per wave")
    parser.add_argument("--malformed", type=int, default=6, help="malformed readings per wave")
    parser.add_argument(
        "--verbose", action="store_true", help="show the libraries' logs instead of a log file"
    )
    args = parser.parse_args(argv)
    if min(args.waves, args.kafka_messages, args.mqtt_messages) < 1:
        parser.error("--waves, --kafka-messages and --mqtt-messages must be at least 1")
    if not 0 <= args.malformed <= min(args.kafka_messages, args.mqtt_messages):
        parser.error("--malformed must be between 0 and the messages per wave")
    home = Path(os.environ.get("SLUICE_HOME") or Path.home() / ".sluice") / "demo"
    return Options(
        output=args.output.absolute(),
        home=home.absolute(),
        waves=args.waves,
        kafka_messages=args.kafka_messages,
        mqtt_messages=args.mqtt_messages,
        malformed=args.malformed,
        verbose=args.verbose,
    )


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    quiet_libraries()
    clear_outputs(options.output)
    log = options.output / "demo.log"
    interrupts = Interrupts()
    interrupts.install()
    width = shutil.get_terminal_size().columns if sys.stdout.isatty() else 100
    out, err = logs_to(None if options.verbose else log)
    console = Console(file=out, width=width, highlight=False)
    errors = Console(file=err, width=width, highlight=False)
    console.rule("[bold]Sluice demo[/]: Kafka + MQTT → Airflow + Dagster → Spark → Parquet")
    started = time.perf_counter()
    brokers = Brokers(options.home)
    closers: list[Closer] = []
    steps = Steps(console, live=not options.verbose)  # verbose: logs would break a spinner
    problems: list[str] = []
    status = 0
    try:
        try:
            run_demo(options, steps, brokers, closers)
        except BaseException as exc:
            interrupts.done()
            if interrupts.received or was_interrupted(exc):
                status = 130
                how = interrupts.name() or "a signal"
                problems.append(f"Interrupted ({how}) during: {steps.current}")
            else:
                status = 1
                problems.append(f"The demo failed during: {steps.current}: {first_line(exc)}")
                traceback.print_exc()  # into the log
                print(brokers.log_tails(), file=sys.stderr)
    finally:
        interrupts.done()  # stopping the brokers must not be interrupted by a second Ctrl-C
        try:
            stopped = brokers.down()
        except Exception as exc:
            traceback.print_exc()
            stopped, status = [], status or 1
            problems.append(
                f"could not stop the brokers ({first_line(exc)}): their pids are in "
                f"{options.home / 'brokers.json'}"
            )
        if stopped:
            console.print(f"Stopped {', '.join(stopped)}.", highlight=False)
        close_all(closers)
    if problems:
        hint = "" if options.verbose else f" Full log: {log}"
        errors.print(f"[red]{'; '.join(problems)}.[/]{hint}", highlight=False, soft_wrap=True)
    else:
        console.print(f"[green]Done[/] in {time.perf_counter() - started:.0f} s.")
    return status
