"""Pieces of ingest that need no broker and no Spark."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sluice.batch import OffsetRange
from sluice.spark.reading import prefetch, split_ranges


def test_split_ranges_cuts_each_range_into_tasks_of_at_most_size() -> None:
    assert split_ranges([OffsetRange(0, 0, 5), OffsetRange(1, 10, 12)], 2) == [
        OffsetRange(0, 0, 2),
        OffsetRange(0, 2, 4),
        OffsetRange(0, 4, 5),
        OffsetRange(1, 10, 12),
    ]


def test_prefetch_yields_everything_in_order_and_passes_errors_on() -> None:
    assert list(prefetch(iter(range(50)))) == list(range(50))

    def failing() -> Iterator[int]:
        yield 1
        raise TimeoutError("broker gone")

    with pytest.raises(TimeoutError, match="broker gone"):
        list(prefetch(failing()))
