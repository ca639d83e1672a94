"""Streams' lag and freshness in the Prometheus text exposition format, served over HTTP.

Hand-written (the format is a few lines of text; no dependency): :func:`exposition` renders
:class:`~sluice.metrics.StreamLag` measurements, :func:`serve` answers ``GET /metrics`` with
whatever its ``collect`` callable renders at that moment. ``sluice watch --prometheus PORT``
serves these families, each labelled ``kind``, ``topic`` and ``group`` (a Kafka group, an MQTT
session's client id):

- ``sluice_up``: 1 when the last measurement of the stream succeeded, else 0;
- ``sluice_lag_messages`` (also labelled ``partition``) and ``sluice_stream_lag_messages``:
  messages waiting for the group (Kafka);
- ``sluice_oldest_waiting_message_age_seconds``: how long the oldest waiting message has
  waited (Kafka; 0 when nothing waits);
- ``sluice_last_batch_timestamp_seconds`` (also labelled ``sink``): when the stream's newest
  batch was published, as Unix time (``time() - sluice_last_batch_timestamp_seconds`` is
  its age in PromQL).

A value that cannot be known (MQTT lag) is left out rather than reported as 0.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .metrics import StreamLag

__all__ = ["CONTENT_TYPE", "FAMILIES", "MetricsServer", "exposition", "serve"]

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

#: name: help text, in the order they are written.
FAMILIES = {
    "sluice_up": "Whether the last measurement of the stream succeeded (1) or failed (0).",
    "sluice_lag_messages": "Messages waiting for the group in the partition (end offset minus "
    "committed offset).",
    "sluice_stream_lag_messages": "Messages waiting for the group in all partitions.",
    "sluice_oldest_waiting_message_age_seconds": "Seconds the oldest waiting message (the "
    "record at the committed offset) has waited; 0 when none waits.",
    "sluice_last_batch_timestamp_seconds": "When the stream's newest batch was published to "
    "the sink, as Unix time.",
}


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(**labels: object) -> str:
    inner = ",".join(f'{name}="{_escape(str(value))}"' for name, value in labels.items())
    return "{" + inner + "}"


def _number(value: float) -> str:
    return repr(float(value)) if isinstance(value, float) else str(value)


def exposition(streams: Iterable[StreamLag]) -> str:
    """The measurements as Prometheus text: a HELP and TYPE line per family, then its
    samples (a family without samples is still declared)."""
    samples: dict[str, list[str]] = {name: [] for name in FAMILIES}
    for s in streams:
        stream = {"kind": s.kind, "topic": s.topic, "group": s.group or ""}
        samples["sluice_up"].append(f"sluice_up{_labels(**stream)} {0 if s.error else 1}")
        for p in s.partitions or ():
            samples["sluice_lag_messages"].append(
                f"sluice_lag_messages{_labels(**stream, partition=p.partition)} {p.lag}"
            )
        if s.lag is not None:
            samples["sluice_stream_lag_messages"].append(
                f"sluice_stream_lag_messages{_labels(**stream)} {s.lag}"
            )
            age = s.oldest_age or 0.0
            samples["sluice_oldest_waiting_message_age_seconds"].append(
                f"sluice_oldest_waiting_message_age_seconds{_labels(**stream)} {_number(age)}"
            )
        if s.last_batch_at is not None:
            samples["sluice_last_batch_timestamp_seconds"].append(
                f"sluice_last_batch_timestamp_seconds{_labels(**stream, sink=s.sink or '')} "
                f"{_number(float(s.last_batch_at))}"
            )
    lines: list[str] = []
    for name, help_text in FAMILIES.items():
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge", *samples[name]]
    return "\n".join(lines) + "\n"


class MetricsServer(ThreadingHTTPServer):
    """A server answering ``GET /metrics`` with ``collect()``; see :func:`serve`."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], collect: Callable[[], str]) -> None:
        super().__init__(address, _Handler)
        self.collect = collect
        self._lock = threading.Lock()  # one measurement at a time

    def render(self) -> str:
        with self._lock:
            return self.collect()

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}/metrics"


class _Handler(BaseHTTPRequestHandler):
    server: MetricsServer

    def do_GET(self) -> None:
        if self.path.split("?")[0] not in ("/metrics", "/"):
            self.send_error(404, "Not found: the metrics are at /metrics")
            return
        try:
            body = self.server.render().encode()
        except Exception as exc:  # the collector says itself what failed (no secrets)
            log.warning("Collecting the metrics failed: %s", exc)
            self.send_error(500, "Collecting the metrics failed; see the server's log")
            return
        self.send_response(200)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        log.debug("%s " + format, self.address_string(), *args)


def serve(host: str, port: int, collect: Callable[[], str]) -> MetricsServer:
    """A :class:`MetricsServer` bound to ``host``:``port`` (0: any free port; the bound one
    is in ``server_address``), not yet serving: call ``serve_forever()``."""
    return MetricsServer((host, port), collect)
