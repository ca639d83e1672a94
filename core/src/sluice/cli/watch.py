"""``sluice watch URI... --sink SINK --prometheus PORT``: streams' lag and freshness for any
orchestrator, as a table every few seconds or a Prometheus endpoint (see sluice.metrics and
sluice.prometheus)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

import typer

from . import output
from .errors import CliError
from .queues import QueueUri, parse

if TYPE_CHECKING:
    from sluice.metrics import KafkaLagProbe, StreamLag

__all__ = ["watch"]


@dataclass
class _Stream:
    """One watched stream: its URI, its sink, and a probe kept open between measurements."""

    target: QueueUri
    sink: str | None
    probe: KafkaLagProbe | None = None

    def measure(self) -> StreamLag:
        """The stream now; a failure is a measurement with ``error`` set (never raised)."""
        from sluice.metrics import KafkaLagProbe, StreamLag, measure, stream_of
        from sluice.secrets import redact_text

        config = self.target.settings()
        try:
            if self.target.kind == "kafka" and self.probe is None:
                self.probe = KafkaLagProbe(config)
            return measure(self.target.kind, config, self.sink, probe=self.probe)
        except Exception as exc:
            if self.probe is not None:  # a new connection next time
                self.probe.close()
                self.probe = None
            topic, group = stream_of(self.target.kind, config)
            error = redact_text(f"{type(exc).__name__}: {exc}").splitlines()[0]
            kind = self.target.kind
            return StreamLag(kind, topic, group, time.time(), sink=self.sink, error=error)

    def close(self) -> None:
        if self.probe is not None:
            self.probe.close()
            self.probe = None


def _streams(uris: list[str], sinks: list[str]) -> list[_Stream]:
    if sinks and len(sinks) not in (1, len(uris)):
        raise CliError(
            f"{len(uris)} URIs and {len(sinks)} --sink options: give one --sink for every URI "
            "(in the same order), or one for all of them.",
            usage=True,
        )
    streams = []
    for index, uri in enumerate(uris):
        target = parse(uri, command="watch")
        owner = "group_id" if target.kind == "kafka" else "client_id"
        if not target.given(owner):
            raise CliError(
                f"'sluice watch' measures a stream: add ?{owner}=NAME to {target.shown} (the "
                f"{'consumer group' if owner == 'group_id' else 'persistent session'} of the "
                "ingest).",
                usage=True,
            )
        target.queue()  # a wrong key or value fails here, naming it
        sink = sinks[0] if len(sinks) == 1 else sinks[index] if sinks else None
        streams.append(_Stream(target, sink))
    return streams


def watch(
    uris: Annotated[
        list[str],
        typer.Argument(
            help="Streams: kafka://HOST:PORT/TOPIC?group_id=G or "
            "mqtt://HOST:PORT/TOPIC?client_id=C",
            show_default=False,
        ),
    ],
    sink: Annotated[
        list[str] | None,
        typer.Option(
            "--sink",
            help="The sink the streams are ingested into, for the time of their last batch: "
            "one for all URIs, or one per URI in their order.",
        ),
    ] = None,
    prometheus: Annotated[
        int | None,
        typer.Option(
            help="Serve the metrics in Prometheus' text format at http://HOST:PORT/metrics "
            "(measured at each scrape) instead of printing them; 0 picks a free port."
        ),
    ] = None,
    host: Annotated[
        str, typer.Option(help="Address the Prometheus endpoint listens on.")
    ] = "127.0.0.1",
    interval: Annotated[
        float, typer.Option(min=0.5, help="Seconds between two printed measurements.")
    ] = 15.0,
    count: Annotated[
        int | None, typer.Option(min=1, help="Print this many measurements, then stop.")
    ] = None,
) -> None:
    """Lag, age of the oldest waiting message and last batch of each stream, every INTERVAL
    seconds or served to Prometheus. MQTT streams have no lag that a client can see: for them
    only the last batch is shown."""
    streams = _streams(uris, sink or [])
    try:
        if prometheus is not None:
            _serve(streams, host, prometheus)
        else:
            _print(streams, interval, count)
    finally:
        for stream in streams:
            stream.close()


def _serve(streams: list[_Stream], host: str, port: int) -> None:
    from sluice.prometheus import exposition, serve

    try:
        server = serve(host, port, lambda: exposition(s.measure() for s in streams))
    except OSError as exc:
        raise CliError(
            f"Cannot listen on {host}:{port} ({exc.strerror}): pick another --prometheus port "
            "(0 picks a free one)."
        ) from None
    output.out().print(
        f"Serving the metrics of {len(streams)} stream(s) at {server.url} (Ctrl-C stops)"
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def _print(streams: list[_Stream], interval: float, count: int | None) -> None:
    shown = 0
    while True:
        rows = []
        for s in streams:
            lag = s.measure()
            rows.append(
                (
                    f"{lag.kind}://{lag.topic}",
                    lag.group,
                    lag.lag if lag.lag is not None else "unknown",
                    _seconds(lag.oldest_age),
                    None if lag.last_batch_age is None else f"{_seconds(lag.last_batch_age)} ago",
                    lag.error or "",
                )
            )
        output.table(
            time.strftime("%H:%M:%S"),
            ["stream", "group", "lag", "oldest waiting", "last batch", "error"],
            rows,
        )
        shown += 1
        if count is not None and shown >= count:
            return
        time.sleep(interval)


def _seconds(value: float | None) -> str | None:
    return None if value is None else f"{value:.1f} s"
