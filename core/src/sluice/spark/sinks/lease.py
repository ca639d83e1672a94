"""One run per stream on an object store (invariant I7): a lease object taken and renewed
with conditional writes, where a local file system has ``flock``.

The lease is a small JSON object (``run``, host, pid, process start, ``since``,
``expires``). ``run`` is the run's own token (a random id): a conditional write whose
answer was lost (the PUT landed, the client's retry then fails its own condition) is
recognised by it, at the lease's
creation, at a renewal and at the release, and never taken for another run's. A run
creates it with ``If-None-Match: *``, or replaces it with ``If-Match`` on the ETag it read
when the holder released it, let it expire, or is a dead process of this machine (same host
and boot, its pid gone or reused: what ``flock`` gives for free, and what makes a rerun after
a crash start at once), or is a run of this very process that has ended (its release failed:
the store was down at that moment; found by the nemesis' ``s3-restart``). A thread renews it
every :data:`TTL` / 4 s with ``If-Match``; a renewal that fails marks the lease lost, and the
run gives up at its commit. The lease only keeps a second run from starting: the commit itself
is fenced by a conditional write (:mod:`.parquet_s3`), so a run paused past its lease (a
stopped VM) cannot publish over another.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .base import ConcurrentIngestError, StreamKey
from .objects import PreconditionFailed

__all__ = ["TTL", "Lease", "hold", "live"]

log = logging.getLogger(__name__)

#: Seconds a lease lasts without renewal.
TTL = 60.0


def _boot_id() -> str:
    with contextlib.suppress(OSError):
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    return ""


def _started(pid: int) -> str:
    """The start time of process ``pid`` (clock ticks since boot), '' if unknown or gone."""
    with contextlib.suppress(OSError, IndexError):
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    return ""


def _me() -> dict[str, Any]:
    return {
        "host": socket.gethostname(),
        "boot": _boot_id(),
        "pid": os.getpid(),
        "started": _started(os.getpid()),
    }


#: The runs of this process that hold a lease now (a lease of this process naming another run
#: is one whose release failed: that run has ended).
_ACTIVE: set[str] = set()
_ACTIVE_LOCK = threading.Lock()


def _ended_here(holder: dict[str, Any]) -> bool:
    """The holder is a run of this process that has ended."""
    me = _me()
    mine = all(holder.get(k) == me[k] for k in ("host", "boot", "pid", "started"))
    with _ACTIVE_LOCK:
        return bool(me["boot"]) and mine and holder.get("run") not in _ACTIVE


def _dead_here(holder: dict[str, Any]) -> bool:
    """The holder is a process of this machine that no longer runs."""
    me = _me()
    if not me["boot"] or holder.get("host") != me["host"] or holder.get("boot") != me["boot"]:
        return False
    started = _started(int(holder.get("pid", 0)))
    return started == "" or started != holder.get("started")


@dataclass
class Lease:
    objects: Any  # an .objects.Objects, or a .cloud.CloudObjects
    key: str
    stream: StreamKey
    run: str = field(default_factory=lambda: uuid.uuid4().hex)
    etag: str | None = None
    lost: bool = False
    since: float = field(default_factory=time.time)  # when it was taken (expiry keeps younger)
    #: the run it took the stream from had ended (released, or dead): its leftovers are dead
    clean: bool = True
    _stop: threading.Event = field(default_factory=threading.Event)

    def _body(self, released: bool = False) -> dict[str, Any]:
        return {
            "run": self.run,
            **_me(),
            "since": self.since,
            "expires": time.time() + TTL,
            "released": released,
        }

    def acquire(self) -> None:
        for _ in range(3):
            held, etag = self.objects.get_json(self.key)
            try:
                if held is None:
                    self.etag = self.objects.put_json(self.key, self._body(), if_none_match=True)
                    return
                expired = float(held.get("expires", 0)) < time.time()
                ended = _dead_here(held) or _ended_here(held)
                if held.get("released") or expired or ended:
                    self.clean = bool(held.get("released")) or ended
                    self.etag = self.objects.put_json(self.key, self._body(), if_match=etag)
                    return
            except PreconditionFailed:
                if self._adopt_own():  # our write landed; its answer was lost
                    return
                continue  # another run took it between our read and our write: look again
            raise self._refused(held)
        raise self._refused(self.objects.get_json(self.key)[0] or {})

    def _adopt_own(self) -> bool:
        """Whether the lease in the store is this run's (its token), taking its ETag if so: a
        conditional write that failed its condition may be the retry of one of ours that
        landed while its answer was lost."""
        held, etag = self.objects.get_json(self.key)
        if held is None or held.get("run") != self.run:
            return False
        self.etag = etag
        return True

    def _refused(self, held: dict[str, Any]) -> ConcurrentIngestError:
        stream = self.stream
        who = f"pid {held.get('pid')} on {held.get('host')}" if held else "another process"
        return ConcurrentIngestError(
            f"Another ingest of {stream.kind} topic '{stream.topic}' "
            f"({'group' if stream.kind == 'kafka' else 'session'} '{stream.group}') is running "
            f"on this sink ({who}, lease {self.objects.uri(self.key)}). Nothing was "
            "done; run the batch again once it has finished (its commit may have ingested "
            f"these messages). A lease of a process that died elsewhere expires {TTL:.0f} s "
            "after its last renewal."
        )

    def _renew(self) -> None:
        while not self._stop.wait(TTL / 4):
            try:
                self.etag = self.objects.put_json(self.key, self._body(), if_match=self.etag)
            except PreconditionFailed:
                try:
                    if self._adopt_own():  # the renewal landed, its answer was lost
                        continue
                except Exception as exc:  # cannot tell now: the next beat asks again
                    log.warning("Could not read the lease %s back: %s", self.key, exc)
                    continue
                self.lost = True
                log.error(
                    "The lease %s was taken by another run; this run will not publish.", self.key
                )
                return
            except Exception as exc:  # the store is down for now: try again at the next beat
                log.warning("Could not renew the lease %s: %s", self.key, exc)

    def release(self) -> None:
        self._stop.set()
        if self.lost or self.etag is None:
            return
        with contextlib.suppress(Exception):
            try:
                self.objects.put_json(self.key, self._body(released=True), if_match=self.etag)
            except PreconditionFailed:
                # a renewal's answer was lost, or this very write's: release what is ours
                held, etag = self.objects.get_json(self.key)
                if held and held.get("run") == self.run and not held.get("released"):
                    self.objects.put_json(self.key, self._body(released=True), if_match=etag)


@contextlib.contextmanager
def hold(objects: Any, key: str, stream: StreamKey) -> Iterator[Lease]:
    """Hold the lease at ``key`` for the block (see the module docstring)."""
    lease = Lease(objects, key, stream)
    with _ACTIVE_LOCK:
        _ACTIVE.add(lease.run)
    try:
        lease.acquire()
        beat = threading.Thread(target=lease._renew, name=f"lease {key}", daemon=True)
        beat.start()
        try:
            yield lease
        finally:
            lease.release()
            beat.join(5)
    finally:
        with _ACTIVE_LOCK:
            _ACTIVE.discard(lease.run)


def live(held: dict[str, Any]) -> bool:
    """Whether the lease ``held`` (as read from the store) may belong to a run still running:
    not released, not expired, and not of a process of this machine that has ended."""
    return not (
        held.get("released")
        or float(held.get("expires", 0)) < time.time()
        or _dead_here(held)
        or _ended_here(held)
    )
