"""Ctrl-C and SIGTERM: the first stops the demo cleanly, wherever it is."""

from __future__ import annotations

import signal
import socket
import sys
import threading
from types import FrameType

from .settings import Interrupted


def was_interrupted(exc: BaseException) -> bool:
    """Ctrl-C or SIGTERM: also when a Dagster run caught it (Dagster handles the signals
    itself while a run executes, and raises its own error)."""
    if isinstance(exc, KeyboardInterrupt):
        return True
    dagster = sys.modules.get("dagster")
    return dagster is not None and isinstance(exc, dagster.DagsterExecutionInterruptedError)


class Interrupts:
    """Ctrl-C and SIGTERM end the demo, whoever's signal handler is installed when they come.

    Airflow's task runner and Dagster's run executor install their own handlers for a while
    (Dagster drops a signal that comes at the wrong moment), and Python drops an exception
    raised while it runs a garbage-collection callback (py4j frees its Java objects in those).
    So a thread learns of every signal through Python's wakeup fd, which does not depend on
    the handler, and raises :class:`Interrupted` in the main thread every second until the
    demo has handled it."""

    def __init__(self) -> None:
        self.received = ""  # the first signal's name
        self._noted = threading.Event()
        self._pending = threading.Event()
        self._handled = threading.Event()
        self._sockets: tuple[socket.socket, socket.socket] | None = None  # kept open

    def install(self) -> None:
        signal.signal(signal.SIGINT, self._handler)
        signal.signal(signal.SIGTERM, self._handler)
        reader, writer = socket.socketpair()
        writer.setblocking(False)
        signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        self._sockets = reader, writer
        threading.Thread(target=self._watch, args=(reader,), daemon=True).start()
        threading.Thread(target=self._repeat, daemon=True).start()

    def _note(self, signum: int) -> None:
        if not self.received:
            self.received = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
            self._noted.set()
            self._pending.set()

    def _handler(self, signum: int, _frame: FrameType | None) -> None:
        self._note(signum)
        raise Interrupted(self.received)

    def _watch(self, reader: socket.socket) -> None:
        while not self._handled.is_set():
            for signum in reader.recv(64):
                if signum in (signal.SIGINT, signal.SIGTERM):
                    self._note(signum)

    def _repeat(self) -> None:
        self._pending.wait()
        while not self._handled.wait(1.0):
            main = threading.main_thread().ident
            if main is not None:  # a real signal: it also wakes a blocking call
                signal.pthread_kill(main, signal.SIGINT)

    def name(self, timeout: float = 1.0) -> str:
        """The first signal's name. One that another handler turned into an exception (Dagster's,
        while its sensor ticks) is noted by the watching thread a moment after the exception
        reaches the demo: wait for it that long."""
        self._noted.wait(timeout)
        return self.received

    def done(self) -> None:
        """The demo is stopping: from now on signals are ignored (the brokers must stop)."""
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        self._handled.set()
        self._pending.set()
