"""The visibility poller (:mod:`sluice.testing.visibility`) tells both kinds of disagreement
apart, only when a state shows one (not when a commit lands between a poll's reads), and
times each episode from the poll that first saw it to the first that no longer did."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from sluice.testing.visibility import VisibilityPoller


def scripted(*reads: set[str]) -> Callable[[], set[str]]:
    """A reader returning ``reads`` in turn (the table is read twice a poll)."""
    found: Iterator[set[str]] = iter(reads)
    return lambda: next(found)


def test_each_kind_is_seen_and_cleared_in_order() -> None:
    rows = scripted(set(), set(), {"a"}, {"a"}, {"a"}, {"a"}, {"a"}, {"a"})
    quarantine = scripted(set(), set(), {"a"}, {"a", "b"})
    poller = VisibilityPoller(rows, quarantine)

    poller.poll()  # nothing yet
    poller.mark("between")
    poller.poll()  # a's rows, not its quarantine
    poller.mark("after")
    poller.poll()  # both
    poller.poll()  # b's quarantine without its rows
    report = poller.stop()

    (lagging,) = report.of_kind("rows without quarantine")
    assert (lagging.batch_id, lagging.label, lagging.polls) == ("a", "between", 1)
    assert lagging.cleared is not None and lagging.gone_within is not None
    (reverse,) = report.of_kind("quarantine without rows")
    assert (reverse.batch_id, reverse.label, reverse.cleared) == ("b", "after", None)
    assert report.polls == 4 and not report.errors


def test_a_commit_between_a_polls_reads_is_no_disagreement() -> None:
    """One commit of both tables lands after the poll read the table once: the quarantine
    has the batch, the second read of the table too."""
    poller = VisibilityPoller(scripted(set(), {"a"}), scripted({"a"}))
    poller.poll()
    assert poller.stop().episodes == []


def test_a_failed_read_is_counted_not_hidden() -> None:
    def broken() -> set[str]:
        raise OSError("the catalog is down")

    poller = VisibilityPoller(broken, scripted(set()))
    poller.poll()
    report = poller.stop()
    assert report.errors == ["OSError: the catalog is down"] and report.polls == 0
