"""Waiting on a condition with a timeout, instead of sleeping and hoping."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["wait_until"]

T = TypeVar("T")


def wait_until(
    condition: Callable[[], T],
    timeout: float = 10.0,
    interval: float = 0.05,
    message: str = "condition",
) -> T:
    """Call ``condition`` until it returns something truthy, and return that.

    Raises ``TimeoutError`` naming ``message`` (and the last value seen) after ``timeout`` s.
    """
    deadline = time.monotonic() + timeout
    last: T = condition()
    while not last:
        if time.monotonic() >= deadline:
            raise TimeoutError(
                f"timed out after {timeout:.1f} s waiting for {message} (last: {last!r})"
            )
        time.sleep(interval)
        last = condition()
    return last
