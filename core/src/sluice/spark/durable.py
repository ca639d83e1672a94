"""Durability before commit (invariant I9): a sink's bytes are on stable storage before the
offsets that vouch for them are committed.

A SIGKILL loses nothing the kernel already holds, but a power loss or a kernel crash loses
the page cache: without ``fsync`` a committed offset, durable on another machine, could
outlive the rows it vouches for. So files and the directories whose entries changed (a
rename, a new file) are synced on local file systems. On object stores a write is durable
once it is acknowledged, and these are no-ops.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit

__all__ = ["ENABLED", "local_target", "sync_directory", "sync_file", "sync_tree"]

#: For benchmarks only (``bench/ingest.py`` measures what the syncs cost): False skips every
#: sync, the writing tasks' included, and so gives up invariant I9.
ENABLED = True


def local_target(location: str | os.PathLike[str]) -> Path | None:
    """The local path of ``location`` (a path or ``file://`` URI), None for other schemes."""
    text = os.fspath(location)
    scheme = urlsplit(text).scheme
    if scheme == "file":
        return Path(urlsplit(text).path)
    if scheme and len(scheme) > 1:  # one letter: a Windows drive
        return None
    return Path(text)


def _sync(path: Path, flags: int) -> None:
    if not ENABLED:
        return
    handle = os.open(path, flags)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def sync_file(location: str | os.PathLike[str]) -> None:
    """``fsync`` the file at ``location`` (local only)."""
    path = local_target(location)
    if path is not None:
        _sync(path, os.O_RDONLY)


def sync_directory(location: str | os.PathLike[str]) -> None:
    """``fsync`` the directory at ``location``, so that its entries (renames, new files)
    survive a power loss (local only; a missing directory is skipped)."""
    path = local_target(location)
    if path is not None and path.is_dir():
        _sync(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))


def sync_tree(location: str | os.PathLike[str]) -> None:
    """``fsync`` every file and directory under ``location`` (local only)."""
    path = local_target(location)
    if path is None or not path.exists():
        return
    for directory, _, files in os.walk(path):
        for name in files:
            _sync(Path(directory) / name, os.O_RDONLY)
        _sync(Path(directory), os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
