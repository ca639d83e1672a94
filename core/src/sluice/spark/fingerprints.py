"""A message's fingerprint: how an ingest recognises a topic that was deleted and recreated.

When a batch is published, the stream state keeps, per partition, the offset and fingerprint
of the last message written. Before the next ingest reads, it fetches the message at that
offset again: a different fingerprint there (or no such offset any more) means the topic
is not the one the group's offsets belong to, even when the new log has grown past the old
position. Brokers with topic ids (KIP-516) are checked by id as well.

The writing tasks compute fingerprints of the rows they write, and Spark pickles this
module's functions by value into them, so executors need no Sluice to run them: keep this
module free of imports beyond the standard library.
"""

from __future__ import annotations

import hashlib

__all__ = ["message_fingerprint"]


def message_fingerprint(key: bytes | None, value: bytes | None, timestamp_ms: int | None) -> str:
    """A short digest of a message's key, value and timestamp (None: absent)."""
    digest = hashlib.blake2b(digest_size=12)
    for part in (key, value):
        digest.update(b"-" if part is None else b"%d:" % len(part) + part)
    digest.update(b"-" if timestamp_ms is None or timestamp_ms < 0 else b"%d" % timestamp_ms)
    return digest.hexdigest()
