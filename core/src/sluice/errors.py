"""Errors that more than one part of Sluice raises, and that a user is meant to act on."""

from __future__ import annotations

__all__ = [
    "DataLossError",
    "QuarantineLimitError",
    "StreamStateError",
    "TopicNotFoundError",
    "exception_detail",
    "exception_line",
]


class DataLossError(RuntimeError):
    """Messages a batch asked for are gone from the broker (retention, a recreated topic, a
    broker that dropped them), and the ingest was not told to accept that."""


class TopicNotFoundError(LookupError):
    """The Kafka topic a sensor, a plan or an ingest names does not exist on the broker."""

    def __init__(self, topic: str, servers: str) -> None:
        super().__init__(
            f"Topic '{topic}' does not exist at {servers}; check its name (sluice peek "
            f"kafka://{servers.split(',')[0]}/{topic} says the same), or create it first "
            "(publishing to it creates it where the broker auto-creates topics)."
        )
        self.topic, self.servers = topic, servers


class QuarantineLimitError(RuntimeError):
    """More of a batch went to quarantine than ``max_quarantined`` allows: usually a schema or
    value format that does not fit the data. Nothing was published or committed."""


class StreamStateError(RuntimeError):
    """A sink's state file of a stream is missing or unreadable, and what the sink keeps of
    each batch is not enough to rebuild it; the message names the file and how to repair it."""


def exception_detail(exc: BaseException) -> str:
    """The message of ``exc`` without its class name in front (kafka-python's errors put it
    there themselves: ``KafkaTimeoutError: ...``), so that a line names the exception once."""
    text = str(exc).strip()
    for cls in type(exc).__mro__:
        if text.startswith(f"{cls.__name__}: "):
            return text[len(cls.__name__) + 2 :]
    return text


def exception_line(exc: BaseException) -> str:
    """``Name: message`` of ``exc``, naming it once."""
    detail = exception_detail(exc)
    return f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__
