"""Pieces of ingest that need no broker and no Spark."""

from __future__ import annotations

from sluice.batch import OffsetRange
from sluice.spark.reading import split_ranges


def test_split_ranges_cuts_each_range_into_tasks_of_at_most_size() -> None:
    assert split_ranges([OffsetRange(0, 0, 5), OffsetRange(1, 10, 12)], 2) == [
        OffsetRange(0, 0, 2),
        OffsetRange(0, 2, 4),
        OffsetRange(0, 4, 5),
        OffsetRange(1, 10, 12),
    ]
