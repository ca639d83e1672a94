"""The Kafka broker a benchmark runs on: ``--broker kafka|noida|tansu``.

Apache Kafka (one KRaft node, started from the jars :mod:`sluice.jars` caches) is the
default: the broker users run, so the figures the README and the documentation site publish
come from it, and each names it. noida-db and Tansu start in a tenth of a second and stay a
choice for quick runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from sluice.brokers import KAFKA_VERSION, BrokerProcess, start_kafka, start_noida, start_tansu

BROKERS: dict[str, str] = {
    "kafka": f"Apache Kafka {KAFKA_VERSION} (one KRaft node)",
    "noida": "noida-db",
    "tansu": "Tansu",
}


def add_broker_option(parser: argparse.ArgumentParser) -> None:
    """Add ``--broker`` (default ``kafka``) to a benchmark's options."""
    parser.add_argument(
        "--broker",
        choices=sorted(BROKERS),
        default="kafka",
        help="the Kafka broker to start (default: Apache Kafka, the reference)",
    )


def start_broker(name: str, workdir: str | Path | None = None) -> BrokerProcess:
    """Start the broker ``--broker`` named, on a free loopback port."""
    if name == "kafka":
        return start_kafka(workdir=workdir, progress=lambda line: print(line, flush=True))
    if name == "tansu":
        return start_tansu(workdir=workdir)
    return start_noida(workdir=workdir)


def broker_label(name: str) -> str:
    """The broker's name as the results print it ("Apache Kafka 4.4.0 (one KRaft node)")."""
    return BROKERS[name]
