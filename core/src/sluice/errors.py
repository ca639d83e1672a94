"""Errors that more than one part of Sluice raises, and that a user is meant to act on."""

from __future__ import annotations

__all__ = ["DataLossError"]


class DataLossError(RuntimeError):
    """Messages a batch asked for are gone from the broker (retention, a recreated topic, a
    broker that dropped them), and the ingest was not told to accept that."""
