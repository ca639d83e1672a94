"""Sluice: message brokers to batch data pipelines."""

from typing import Any


def read_dataset(sink: Any, quarantine: bool = False) -> Any:
    """The committed rows of a Parquet dataset Sluice wrote (:mod:`sluice.datasets`)."""
    from .datasets import read_dataset as read

    return read(sink, quarantine)


__all__ = ["read_dataset"]
