"""The quarantine limit of an ingest: a batch that quarantines too much is not published.

A schema or value format that does not fit the data sends every message to quarantine; the
batch would be published and committed, and the data be nowhere but in the quarantine. So
:func:`check_quarantine` fails the batch (nothing published, nothing committed, nothing
dead-lettered) when more of it is quarantined than ``max_quarantined`` allows, naming the
first reasons.

``max_quarantined`` is a ratio (a float from 0 to 1: the share of the messages read in this
run) or a count (an int: that many messages), or None (no limit). The default,
:data:`DEFAULT_MAX_QUARANTINED` = 0.5, fails a batch of which more than half is quarantined:
far above what devices that send the odd bad reading produce (the samples here: 0.5 %), far
below the 100 % of a schema that matches nothing. A count of 0 fails on the first bad
record, as Kafka Connect's ``errors.tolerance=none``.
"""

from __future__ import annotations

from collections.abc import Iterable

from .errors import QuarantineLimitError
from .queues.config import ConfigError

__all__ = ["DEFAULT_MAX_QUARANTINED", "check_limit", "check_quarantine", "describe_limit"]

#: More than half of a batch quarantined fails it (see the module docstring).
DEFAULT_MAX_QUARANTINED: float = 0.5
#: How many distinct reasons the error names.
SHOWN_REASONS = 3


def check_limit(max_quarantined: float | int | None) -> None:
    """ConfigError unless ``max_quarantined`` is None, a ratio from 0 to 1 or a count >= 0."""
    if max_quarantined is None:
        return
    if isinstance(max_quarantined, bool) or not isinstance(max_quarantined, int | float):
        raise ConfigError(
            f"max_quarantined must be a ratio (0.5), a count (100) or None, not {max_quarantined!r}"
        )
    if isinstance(max_quarantined, float) and not 0 <= max_quarantined <= 1:
        raise ConfigError(
            f"max_quarantined {max_quarantined} is a ratio and must be from 0 to 1; give a "
            "count as an int (e.g. 100), or None for no limit"
        )
    if max_quarantined < 0:
        raise ConfigError(f"max_quarantined must not be negative, not {max_quarantined}")


def describe_limit(max_quarantined: float | int | None) -> str:
    if max_quarantined is None:
        return "no limit"
    if isinstance(max_quarantined, float):
        return f"more than {max_quarantined:.0%} of the batch"
    return f"more than {max_quarantined} message(s)"


def parse_limit(text: str) -> float | int | None:
    """``max_quarantined`` from a command line: ``none``/``off``, ``0.5``, ``50%`` or ``100``."""
    value = text.strip().lower()
    if value in ("none", "off", "no", ""):
        return None
    try:
        limit: float | int = (
            float(value[:-1]) / 100
            if value.endswith("%")
            else float(value)
            if "." in value
            else int(value)
        )
    except ValueError:
        raise ConfigError(
            f"--max-quarantined takes a ratio (0.5 or 50%), a count (100) or none, not {text!r}"
        ) from None
    check_limit(limit)
    return limit


def check_quarantine(
    batch_id: str,
    max_quarantined: float | int | None,
    read: int,
    quarantined: int,
    reasons: Iterable[str | None],
) -> None:
    """:class:`~sluice.errors.QuarantineLimitError` when ``quarantined`` of ``read`` messages
    are over ``max_quarantined``; ``reasons``: those of the quarantined records."""
    if max_quarantined is None or quarantined == 0:
        return
    if isinstance(max_quarantined, float):
        over = quarantined > max_quarantined * read
    else:
        over = quarantined > max_quarantined
    if not over:
        return
    shown = list(dict.fromkeys(r for r in reasons if r))[:SHOWN_REASONS]
    why = "; ".join(f"'{r}'" for r in shown) or "no reason recorded"
    share = f" ({quarantined / read:.0%})" if read else ""
    raise QuarantineLimitError(
        f"Batch {batch_id}: {quarantined} of {read} messages{share} went to quarantine, over "
        f"max_quarantined ({describe_limit(max_quarantined)}). First reasons: {why}. Nothing "
        "was published or committed. Fix the schema or value format for this data, or raise "
        "max_quarantined (None turns the check off; on the command line "
        "--max-quarantined none) and ingest again."
    )
