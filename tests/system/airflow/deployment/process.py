"""One Airflow component as a process of its own: started in a process group, its output in a
log file, stopped by its pid and process group (which holds the scheduler's executor workers
and the triggerer's trigger runner)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

import psutil

__all__ = ["ComponentProcess", "DeploymentError", "readable", "tail"]


class DeploymentError(RuntimeError):
    """A component did not start or stay up; the message carries the tail of its log."""


def tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def readable(line: str) -> str:
    """A task log line (JSON) as one line of text, an exception with its last frames."""
    try:
        entry = json.loads(line)
    except ValueError:
        return line
    text = f"{entry.get('level', '')}: {entry.get('event', '')}"
    for error in entry.get("error_detail") or []:
        frames = [f"{f['filename']}:{f['lineno']} {f['name']}" for f in error["frames"][-6:]]
        text += f"\n  {error['exc_type']}: {error['exc_value']}\n    " + "\n    ".join(frames)
    return text


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


@dataclass
class ComponentProcess:
    """One Airflow component (or ``airflow db migrate``): argv, environment, log file, pid."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    starts: int = 0
    _proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> ComponentProcess:
        if self.running:
            raise DeploymentError(f"{self.name} is already running (pid {self.pid})")
        self.starts += 1
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== start #{self.starts}: {' '.join(self.argv)}\n".encode())
            log.flush()
            self._proc = subprocess.Popen(
                self.argv,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # a process group of its own, stopped with it
            )
        return self

    def wait(self, timeout: float) -> int:
        """Wait for a one-off command (``db migrate``) to finish; its exit code."""
        if self._proc is None:
            raise DeploymentError(f"{self.name} was not started")
        try:
            return self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise DeploymentError(f"airflow {self.name} took over {timeout:.0f} s") from None

    def processes(self) -> list[psutil.Process]:
        """The component's process and all its descendants."""
        if not self.running or self.pid is None:
            return []
        try:
            leader = psutil.Process(self.pid)
            return [leader, *leader.children(recursive=True)]
        except psutil.Error:
            return []

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> None:
        """Signal the component's process group; SIGKILL what is left after ``timeout`` s."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            family = psutil.Process(proc.pid).children(recursive=True)
        except psutil.Error:
            family = []
        _signal_group(proc.pid, sig)  # start_new_session made the pid the group id
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            _signal_group(proc.pid, signal.SIGKILL)
            proc.wait(timeout)
        # Descendants that left the group, or outlived the leader.
        _gone, alive = psutil.wait_procs(family, timeout=timeout)
        for child in alive:
            with contextlib.suppress(psutil.Error):
                child.kill()

    def kill(self) -> None:
        """SIGKILL the component and everything in its process group, as a crash would."""
        self.stop(signal.SIGKILL)

    def logtail(self, lines: int = 40) -> str:
        return tail(self.log_path, lines)

    def check_alive(self) -> None:
        if self._proc is not None and self._proc.poll() is not None:
            raise DeploymentError(
                f"airflow {self.name} exited with code {self._proc.returncode}. "
                f"Its log ({self.log_path}):\n{self.logtail()}"
            )
