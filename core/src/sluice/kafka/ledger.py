"""What a KafkaMessageQueue knows about each partition it reads, and when it may commit.

Kafka keeps one committed offset per partition and group, so a queue may commit offset ``n``
only when every message before ``n`` that it handed out is completed. The ledger tracks, per
partition, the offsets handed out and not completed, the highest completed one, and the last
offset committed.

It also tracks *tenure*: the time a partition is fetched by one consumer thread of the queue.
Every fetched message carries its tenure's token. A rebalance can move a partition to another
consumer; the new owner starts from the committed offset, so messages of the old tenure are
delivered again there, and completing or abandoning an old copy must do nothing.

kafka-python rebalances eagerly: a consumer's partitions are all revoked, then the new
assignment is given; partitions in both keep their fetch position. So a revocation only marks
partitions, and the assignment that follows ends the tenure of those not assigned again.

Not thread-safe: the queue calls it holding its condition's lock.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["Ledger"]


@dataclass
class _Tenure:
    token: int
    holder: object  # the consumer thread (Subscription) that fetches the partition
    pending: set[int] = field(default_factory=set)  # handed out, not completed
    done: int = 0  # highest completed offset + 1
    committed: int = -1  # last offset committed


class Ledger:
    """Per-partition bookkeeping of one queue (see the module docstring)."""

    def __init__(self) -> None:
        self._tenures: dict[int, _Tenure] = {}
        self._revoked: dict[object, set[int]] = {}
        self._tokens = itertools.count(1)

    # ---- tenure --------------------------------------------------------------------------

    def token_for(self, partition: int, holder: object) -> tuple[int, int | None]:
        """The token for a message of ``partition`` fetched by ``holder``, and the token of a
        tenure this ends (another holder had the partition), if any."""
        tenure = self._tenures.get(partition)
        if tenure is not None and tenure.holder is holder:
            return tenure.token, None
        self._tenures[partition] = _Tenure(next(self._tokens), holder)
        return self._tenures[partition].token, None if tenure is None else tenure.token

    def holds(self, partition: int, token: object) -> bool:
        """Whether the tenure ``token`` belongs to is still current."""
        tenure = self._tenures.get(partition)
        return tenure is not None and tenure.token == token

    def holder(self, partition: int, token: object) -> object | None:
        """The consumer thread of the current tenure, if ``token`` belongs to it."""
        tenure = self._tenures.get(partition)
        return tenure.holder if tenure is not None and tenure.token == token else None

    def revoked(self, holder: object, partitions: Iterable[int]) -> None:
        """``holder`` lost ``partitions`` for now; the next assignment says which come back."""
        self._revoked.setdefault(holder, set()).update(partitions)

    def assigned(self, holder: object, partitions: Iterable[int]) -> list[int]:
        """``holder``'s new assignment; ends (and returns the tokens of) the tenures it lost."""
        lost = self._revoked.pop(holder, set()) - set(partitions)
        return self.lost(holder, lost)

    def lost(self, holder: object, partitions: Iterable[int]) -> list[int]:
        """End ``holder``'s tenure of ``partitions``; returns the tokens ended."""
        ended = []
        for partition in partitions:
            tenure = self._tenures.get(partition)
            if tenure is not None and tenure.holder is holder:
                ended.append(self._tenures.pop(partition).token)
        return ended

    def clear(self) -> None:
        self._tenures.clear()
        self._revoked.clear()

    # ---- offsets -------------------------------------------------------------------------

    def received(self, partition: int, offset: int) -> None:
        self._tenures[partition].pending.add(offset)

    def completed(self, partition: int, offset: int) -> int | None:
        """Mark ``offset`` completed; the offset to commit now, if the commit can move."""
        tenure = self._tenures[partition]
        tenure.pending.discard(offset)
        tenure.done = max(tenure.done, offset + 1)
        safe = min(tenure.pending) if tenure.pending else tenure.done
        if safe <= tenure.committed:
            return None
        tenure.committed = safe
        return safe

    def pending(self, partition: int) -> set[int]:
        tenure = self._tenures.get(partition)
        return set(tenure.pending) if tenure is not None else set()

    def skipped_to(self, partition: int, offset: int, holder: object) -> None:
        """Everything before ``offset`` is committed (clear()): a fresh start there."""
        self.lost(holder, [partition])
        self.token_for(partition, holder)
        tenure = self._tenures[partition]
        tenure.done = tenure.committed = offset
