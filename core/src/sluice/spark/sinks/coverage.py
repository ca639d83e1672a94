"""Coverage: which offsets of each partition a sink holds, as merged ``[start, end)`` intervals.

A stream that is ingested in order is one interval per partition, however many batches it
took, so the state a sink keeps stays small (invariant I5).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ...batch import OffsetRange

__all__ = ["Coverage", "Interval"]

Interval = tuple[int, int]


def _merge(intervals: Iterable[Interval]) -> list[Interval]:
    merged: list[Interval] = []
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


@dataclass
class Coverage:
    """Per partition, the merged intervals of offsets held."""

    intervals: dict[int, list[Interval]] = field(default_factory=dict)

    @classmethod
    def of(cls, ranges: Iterable[OffsetRange]) -> Coverage:
        coverage = cls()
        coverage.add_ranges(ranges)
        return coverage

    @classmethod
    def of_offsets(cls, partition: int, offsets: Iterable[int]) -> Coverage:
        """The coverage of single ``offsets`` (sorted or not, repeated or not)."""
        intervals: list[Interval] = []
        for offset in sorted(set(offsets)):
            if intervals and intervals[-1][1] == offset:
                intervals[-1] = (intervals[-1][0], offset + 1)
            else:
                intervals.append((offset, offset + 1))
        return cls({partition: intervals} if intervals else {})

    def add(self, partition: int, start: int, end: int) -> None:
        self.intervals[partition] = _merge([*self.intervals.get(partition, []), (start, end)])

    def add_ranges(self, ranges: Iterable[OffsetRange]) -> None:
        for r in ranges:
            self.add(r.partition, r.start, r.end)

    def union(self, other: Coverage) -> Coverage:
        result = Coverage({p: list(i) for p, i in self.intervals.items()})
        for partition, intervals in other.intervals.items():
            for start, end in intervals:
                result.add(partition, start, end)
        return result

    def missing(self, partition: int, start: int, end: int) -> list[OffsetRange]:
        """The parts of ``[start, end)`` of ``partition`` that are not covered."""
        gaps: list[OffsetRange] = []
        position = start
        for lo, hi in self.intervals.get(partition, []):
            if hi <= position:
                continue
            if lo >= end:
                break
            if lo > position:
                gaps.append(OffsetRange(partition, position, lo))
            position = max(position, hi)
        if position < end:
            gaps.append(OffsetRange(partition, position, end))
        return gaps

    def overlaps(self, ranges: Iterable[OffsetRange]) -> list[OffsetRange]:
        """The parts of ``ranges`` that are covered."""
        found = []
        for r in ranges:
            for lo, hi in self.intervals.get(r.partition, []):
                if lo < r.end and hi > r.start:
                    found.append(OffsetRange(r.partition, max(lo, r.start), min(hi, r.end)))
        return found

    def first(self, partition: int) -> int | None:
        intervals = self.intervals.get(partition)
        return intervals[0][0] if intervals else None

    def last(self, partition: int) -> int | None:
        intervals = self.intervals.get(partition)
        return intervals[-1][1] if intervals else None

    def contiguous_end(self, partition: int, start: int) -> int:
        """How far the coverage runs without a gap from ``start`` (``start`` if not at all)."""
        position = start
        for lo, hi in self.intervals.get(partition, []):
            if lo > position:
                break
            position = max(position, hi)
        return position

    def forget(self, partition: int) -> None:
        self.intervals.pop(partition, None)

    def to_json(self) -> dict[str, list[list[int]]]:
        return {str(p): [[s, e] for s, e in i] for p, i in sorted(self.intervals.items()) if i}

    @classmethod
    def from_json(cls, data: Mapping[str, Iterable[Iterable[int]]] | None) -> Coverage:
        coverage = cls()
        for partition, intervals in (data or {}).items():
            for start, end in intervals:
                coverage.add(int(partition), int(start), int(end))
        return coverage
