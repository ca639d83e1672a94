"""Work started in the background while the demo does something else."""

from __future__ import annotations

import threading
from typing import Any

from .settings import DemoError


class InBackground:
    """Runs ``function`` on a daemon thread (so Ctrl-C never waits for it)."""

    def __init__(self, function: Any) -> None:
        self._value: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(function,), daemon=True)
        self._thread.start()

    def _run(self, function: Any) -> None:
        try:
            self._value = function()
        except BaseException as exc:
            self._error = exc

    def result(self, timeout: float) -> Any:
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise DemoError(f"still not done after {timeout:.0f} s")
        if self._error is not None:
            raise self._error
        return self._value
