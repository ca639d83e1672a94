"""Where a table sink keeps its own files (stream states, batch records, run locks, staged
runs): a local (or mounted) directory, or an object store. The Delta sink's commit protocol
(:mod:`.delta`) reads the same on both; only these operations differ.

Paths are :class:`~pathlib.PurePath` objects: a local store's are absolute
:class:`~pathlib.Path` objects, an object store's are ``/BUCKET/KEY``, whose URI is
``s3://BUCKET/KEY`` (``gs://``, ``az://``: :meth:`TableStore.uri`).

- :class:`LocalStore`: a JSON file is replaced atomically and durably (a temporary file,
  ``fsync``, ``rename``, the directory synced: invariant I9); the one run of a stream holds
  ``flock`` on its lock file (I7).
- :class:`ObjectStore` (:class:`S3Store`; :class:`CloudStore` on GCS and Azure, through
  :mod:`.cloud`): every JSON object is written with a conditional write (S3's
  ``If-None-Match: *``, or ``If-Match`` on the ETag this store last saw of it; GCS and Azure
  their own, on a generation or an ETag), so two runs
  can never overwrite each other's file unseen: a write whose condition fails, and whose
  object does not hold what this run wrote (a retry after a lost answer), raises
  :class:`~.base.ConcurrentIngestError`. The one run of a stream holds a lease
  (:mod:`.lease`). An acknowledged write is durable: the sync methods do nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path, PurePath, PurePosixPath
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..durable import sync_directory, sync_file
from .base import ConcurrentIngestError, StreamKey, stream_lock
from .objects import Objects, PreconditionFailed
from .s3 import S3Settings

if TYPE_CHECKING:
    from .cloud import CloudSettings

__all__ = ["CloudStore", "FileInfo", "LocalStore", "ObjectStore", "S3Store", "TableStore"]


class FileInfo:
    """A file's size (bytes) and modification time (seconds since the epoch)."""

    __slots__ = ("modified", "size")

    def __init__(self, size: int, modified: float) -> None:
        self.size = size
        self.modified = modified


class TableStore:
    """The operations a table sink does on its own files (see the module docstring)."""

    #: delta-rs's ``storage_options`` (None: a local path needs none)
    storage_options: dict[str, str] | None = None
    #: the pyarrow file system Spark's tasks write with (None: the one a URI names)
    filesystem: Any = None
    local = True

    def uri(self, path: PurePath) -> str:
        return str(path)

    def path(self, uri: str) -> PurePath:
        """The path of a URI delta-rs names (``file://...``, ``s3://...``)."""
        return Path(uri.removeprefix("file://"))

    # ---- JSON documents ------------------------------------------------------------------

    def read_json(self, path: PurePath) -> Any:
        """The document at ``path``, None when there is none; ValueError when it is not
        JSON."""
        raise NotImplementedError

    def write_json(self, path: PurePath, data: Any) -> None:
        """Write ``data`` at ``path``, replacing what is there."""
        raise NotImplementedError

    def read_bytes(self, path: PurePath) -> bytes | None:
        """The file's bytes, None when there is none."""
        raise NotImplementedError

    def create_json(self, path: PurePath, data: Any) -> bool:
        """Write ``data`` at ``path`` unless a document is there (False then)."""
        raise NotImplementedError

    # ---- files ---------------------------------------------------------------------------

    def exists(self, path: PurePath) -> bool:
        raise NotImplementedError

    def is_dir(self, path: PurePath) -> bool:
        """Whether anything is under the directory ``path``."""
        raise NotImplementedError

    def files(self, directory: PurePath, suffix: str = "") -> list[PurePath]:
        """The files right in ``directory`` whose names end with ``suffix``, sorted."""
        raise NotImplementedError

    def tree(self, directory: PurePath) -> list[PurePath]:
        """Every file under ``directory``, sorted."""
        raise NotImplementedError

    def subdirectories(self, directory: PurePath) -> list[PurePath]:
        raise NotImplementedError

    def info(self, path: PurePath) -> FileInfo:
        raise NotImplementedError

    def delete(self, path: PurePath) -> None:
        """Delete the file at ``path`` (none there: nothing to do)."""
        raise NotImplementedError

    def delete_tree(self, directory: PurePath) -> None:
        raise NotImplementedError

    def move(self, source: PurePath, target: PurePath) -> None:
        raise NotImplementedError

    def makedirs(self, directory: PurePath) -> None:
        """Make ``directory`` (an object store has none to make)."""

    # ---- Parquet -------------------------------------------------------------------------

    def parquet_metadata(self, path: PurePath) -> Any:
        raise NotImplementedError

    def read_parquet(self, path: PurePath, columns: list[str] | None = None) -> pa.Table:
        raise NotImplementedError

    def write_parquet(self, rows: pa.Table, path: PurePath) -> None:
        raise NotImplementedError

    # ---- durability and runs -------------------------------------------------------------

    def sync_parents(self, directory: PurePath | None, levels: int) -> None:
        """Sync ``directory`` and its ``levels - 1`` parents (new entries, I9)."""

    def sync_files(self, paths: list[PurePath]) -> None:
        """Sync files another library wrote (I9)."""

    def sync_directory(self, directory: PurePath) -> None:
        """Sync a directory's entries (I9)."""

    def sync_all(self) -> None:
        """Sync whatever another library wrote and did not sync (I9)."""

    def exclusive(self, lock: PurePath, stream: StreamKey, where: str) -> Any:
        """A context manager: the one run of ``stream`` (I7) while it is held. ``lock``: the
        lock file's path without its suffix."""
        raise NotImplementedError

    def lease_lost(self, stream: StreamKey) -> bool:
        """Whether the run of ``stream`` lost its hold (another run may be running)."""
        return False

    def held_since(self, runs: PurePath, now: float) -> list[float]:
        """When each run lock under ``runs`` held now was taken."""
        raise NotImplementedError


class LocalStore(TableStore):
    """Files on a local (or mounted) file system."""

    # ---- JSON documents ------------------------------------------------------------------

    def read_json(self, path: PurePath) -> Any:
        try:
            return json.loads(Path(path).read_text())
        except FileNotFoundError:
            return None

    def write_json(self, path: PurePath, data: Any) -> None:
        """Replace ``path`` atomically and durably (a new directory's entry too)."""
        target = Path(path)
        if not target.parent.is_dir():
            target.parent.mkdir(parents=True, exist_ok=True)
            sync_directory(target.parent.parent)
        temporary = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.tmp")
        temporary.write_text(json.dumps(data, sort_keys=True))
        sync_file(temporary)
        os.replace(temporary, target)
        sync_directory(target.parent)

    def read_bytes(self, path: PurePath) -> bytes | None:
        try:
            return Path(path).read_bytes()
        except FileNotFoundError:
            return None

    def create_json(self, path: PurePath, data: Any) -> bool:
        if Path(path).exists():
            return False
        self.write_json(path, data)
        return True

    # ---- files ---------------------------------------------------------------------------

    def exists(self, path: PurePath) -> bool:
        return Path(path).exists()

    def is_dir(self, path: PurePath) -> bool:
        return Path(path).is_dir()

    def files(self, directory: PurePath, suffix: str = "") -> list[PurePath]:
        found = Path(directory)
        if not found.is_dir():
            return []
        return sorted(p for p in found.glob(f"*{suffix}") if p.is_file())

    def tree(self, directory: PurePath) -> list[PurePath]:
        found = Path(directory)
        return sorted(p for p in found.rglob("*") if p.is_file()) if found.is_dir() else []

    def subdirectories(self, directory: PurePath) -> list[PurePath]:
        found = Path(directory)
        return sorted(p for p in found.iterdir() if p.is_dir()) if found.is_dir() else []

    def info(self, path: PurePath) -> FileInfo:
        stat = Path(path).stat()
        return FileInfo(stat.st_size, stat.st_mtime)

    def delete(self, path: PurePath) -> None:
        with contextlib.suppress(FileNotFoundError):
            Path(path).unlink()

    def delete_tree(self, directory: PurePath) -> None:
        shutil.rmtree(Path(directory), ignore_errors=True)

    def move(self, source: PurePath, target: PurePath) -> None:
        os.replace(source, target)

    def makedirs(self, directory: PurePath) -> None:
        Path(directory).mkdir(parents=True, exist_ok=True)

    # ---- Parquet -------------------------------------------------------------------------

    def parquet_metadata(self, path: PurePath) -> Any:
        return pq.read_metadata(Path(path))

    def read_parquet(self, path: PurePath, columns: list[str] | None = None) -> pa.Table:
        return pq.read_table(Path(path), columns=columns)

    def write_parquet(self, rows: pa.Table, path: PurePath) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(rows, Path(path))
        sync_file(Path(path))

    # ---- durability and runs -------------------------------------------------------------

    def sync_parents(self, directory: PurePath | None, levels: int) -> None:
        for _ in range(levels):
            if directory is None:
                return
            if Path(directory).exists():
                sync_directory(Path(directory))
            directory = directory.parent

    def sync_files(self, paths: list[PurePath]) -> None:
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                sync_file(Path(path))

    def sync_directory(self, directory: PurePath) -> None:
        sync_directory(Path(directory))

    def sync_all(self) -> None:
        os.sync()

    def exclusive(self, lock: PurePath, stream: StreamKey, where: str) -> Any:
        return stream_lock(Path(f"{lock}.lock"), stream, where)

    def held_since(self, runs: PurePath, now: float) -> list[float]:
        from ...maintenance.parquet import _held_since

        return list(_held_since(Path(runs)).values())


class ObjectStore(TableStore):
    """Objects in a bucket of an object store (see the module docstring): the operations are
    those of ``objects`` (an :class:`~.objects.Objects` on S3, a
    :class:`~.cloud.CloudObjects` on GCS and Azure); ``scheme``: the URIs' (``s3``, ``gs``,
    ``az``)."""

    local = False
    scheme = "s3"

    def __init__(self, bucket: str, objects: Any) -> None:
        self.bucket = bucket
        self.objects = objects
        self._tags: dict[str, str] = {}  # key -> the version this store last read or wrote
        self._leases: dict[StreamKey, Any] = {}
        self._filesystem: Any = None

    settings: Any  # the store's resolved settings: S3Settings or CloudSettings

    @property
    def filesystem(self) -> Any:
        """pyarrow's file system of the store, made from its settings the first time."""
        if self._filesystem is None:
            self._filesystem = self.settings.filesystem()
        return self._filesystem

    def check(self, probe: PurePath, location: str, consequence: str, instead: str) -> None:
        """The bucket is there, the credentials may list, write and delete at ``probe``, and
        the store honours conditional writes; else a :class:`ConfigError` naming what to fix."""
        self.objects.check(self.key(probe), location, consequence, instead)

    def uri(self, path: PurePath) -> str:
        return f"{self.scheme}:/{path}"

    def path(self, uri: str) -> PurePath:
        return PurePosixPath("/", *uri.split("://", 1)[-1].split("/"))

    def key(self, path: PurePath) -> str:
        parts = path.parts
        if len(parts) < 2 or parts[1] != self.bucket:
            raise ValueError(f"{path} is not in the bucket {self.bucket}")
        return "/".join(parts[2:])

    def _path(self, key: str) -> PurePath:
        return PurePosixPath("/", self.bucket, key)

    def _prefix(self, directory: PurePath) -> str:
        key = self.key(directory)
        return f"{key}/" if key else ""

    # ---- JSON documents ------------------------------------------------------------------

    def read_json(self, path: PurePath) -> Any:
        key = self.key(path)
        try:
            data, tag = self.objects.get_json(key)
        except json.JSONDecodeError as exc:
            raise ValueError(str(exc)) from None
        except UnicodeDecodeError as exc:
            raise ValueError(str(exc)) from None
        if tag is not None:
            self._tags[key] = tag
        else:
            self._tags.pop(key, None)
        return data

    def read_bytes(self, path: PurePath) -> bytes | None:
        found: bytes | None = self.objects.get_bytes(self.key(path))
        return found

    def write_json(self, path: PurePath, data: Any) -> None:
        """Replace the object this store last saw at ``path`` (read, or written), or whatever
        is there when it saw none: ``If-Match`` on its ETag, ``If-None-Match: *`` when there
        is none. Another writer's object in between: :class:`ConcurrentIngestError`."""
        key = self.key(path)
        head = None if key in self._tags else self.objects.head(key)
        tag = self._tags.get(key) or (str(head["ETag"]) if head else None)
        self._put(key, data, tag)

    def create_json(self, path: PurePath, data: Any) -> bool:
        key = self.key(path)
        try:
            self._tags[key] = self.objects.put_json(key, data, if_none_match=True)
        except PreconditionFailed:
            _, tag = self.objects.get_json(key)
            if tag is not None:
                self._tags[key] = tag
            return False
        return True

    def _put(self, key: str, data: Any, tag: str | None) -> None:
        try:
            if tag is None:
                self._tags[key] = self.objects.put_json(key, data, if_none_match=True)
            else:
                self._tags[key] = self.objects.put_json(key, data, if_match=tag)
        except PreconditionFailed:
            found, now = self.objects.get_json(key)
            if found == json.loads(json.dumps(data)) and now is not None:
                self._tags[key] = now  # ours: the retry of a write whose answer was lost
                return
            raise ConcurrentIngestError(
                f"Another run wrote {self.objects.uri(key)} while this one was writing it: "
                "another ingest of the same stream is running on this sink. Nothing of this "
                "run was published; run the batch again once the other has finished."
            ) from None

    # ---- files ---------------------------------------------------------------------------

    def exists(self, path: PurePath) -> bool:
        return bool(self.objects.exists(self.key(path)))

    def is_dir(self, path: PurePath) -> bool:
        return bool(self.objects.any(self._prefix(path)))

    def files(self, directory: PurePath, suffix: str = "") -> list[PurePath]:
        prefix = self._prefix(directory)
        return sorted(
            self._path(k)
            for k in self.objects.keys(prefix)
            if k[len(prefix) :] and "/" not in k[len(prefix) :] and k.endswith(suffix)
        )

    def tree(self, directory: PurePath) -> list[PurePath]:
        keys = self.objects.keys(self._prefix(directory))
        return sorted(self._path(k) for k in keys if not k.endswith("/"))  # no folder markers

    def subdirectories(self, directory: PurePath) -> list[PurePath]:
        found = self.objects.children(self._prefix(directory))
        return sorted(self._path(p.rstrip("/")) for p in found)

    def info(self, path: PurePath) -> FileInfo:
        answer = self.objects.head(self.key(path))
        if answer is None:
            raise FileNotFoundError(self.uri(path))
        return FileInfo(int(answer["ContentLength"]), answer["LastModified"].timestamp())

    def delete(self, path: PurePath) -> None:
        key = self.key(path)
        self.objects.delete(key)
        self._tags.pop(key, None)

    def delete_tree(self, directory: PurePath) -> None:
        self.objects.delete_prefix(self._prefix(directory))

    def move(self, source: PurePath, target: PurePath) -> None:
        self.objects.copy(self.key(source), self.key(target))
        self.delete(source)

    # ---- Parquet -------------------------------------------------------------------------

    def parquet_metadata(self, path: PurePath) -> Any:
        with self.filesystem.open_input_file(str(path).lstrip("/")) as handle:
            return pq.read_metadata(handle)

    def read_parquet(self, path: PurePath, columns: list[str] | None = None) -> pa.Table:
        return pq.read_table(str(path).lstrip("/"), columns=columns, filesystem=self.filesystem)

    def write_parquet(self, rows: pa.Table, path: PurePath) -> None:
        pq.write_table(rows, str(path).lstrip("/"), filesystem=self.filesystem)

    # ---- runs ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def _hold(self, lock: PurePath, stream: StreamKey) -> Iterator[None]:
        from .lease import hold

        with hold(self.objects, f"{self.key(lock)}.json", stream) as lease:
            self._leases[stream] = lease
            try:
                yield
            finally:
                self._leases.pop(stream, None)

    def exclusive(self, lock: PurePath, stream: StreamKey, where: str) -> Any:
        held: AbstractContextManager[None] = self._hold(lock, stream)
        return held

    def lease_lost(self, stream: StreamKey) -> bool:
        lease = self._leases.get(stream)
        return lease is not None and lease.lost

    def held_since(self, runs: PurePath, now: float) -> list[float]:
        from .lease import live

        found = []
        for path in self.files(runs, ".json"):
            with contextlib.suppress(ValueError):
                lease = self.read_json(path) or {}
                if lease and live(lease):  # (expiry against the store's clock, not now)
                    found.append(float(lease.get("since") or now))
        return found


class S3Store(ObjectStore):
    """Objects in an S3 bucket."""

    def __init__(self, bucket: str, settings: S3Settings | None = None) -> None:
        self.settings = settings or S3Settings.resolve()
        super().__init__(bucket, Objects(self.settings, bucket))

    @property
    def storage_options(self) -> dict[str, str]:  # type: ignore[override]
        """delta-rs's (object_store's) options for this store: the endpoint, region and keys
        the sink resolved (:class:`.s3.S3Settings`), and commits with ``If-None-Match: *``
        (``aws_conditional_put=etag``, set here so that no environment variable turns it
        off)."""
        settings = self.settings
        options = {"AWS_REGION": settings.region, "aws_conditional_put": "etag"}
        if settings.endpoint:
            endpoint = (
                settings.endpoint if "://" in settings.endpoint else f"https://{settings.endpoint}"
            )
            options["AWS_ENDPOINT_URL"] = endpoint
            options["AWS_ALLOW_HTTP"] = "true" if endpoint.startswith("http://") else "false"
        options["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = str(settings.virtual_addressing).lower()
        key, secret, token = settings._keys()
        if key and secret:
            options.update(AWS_ACCESS_KEY_ID=key, AWS_SECRET_ACCESS_KEY=secret)
            if token:
                options["AWS_SESSION_TOKEN"] = token
        return options


class CloudStore(ObjectStore):
    """Objects in a Google Cloud Storage bucket (``gs``) or an Azure Blob Storage container
    (``az``), through obstore (:mod:`.cloud`)."""

    def __init__(self, bucket: str, settings: CloudSettings) -> None:
        from .cloud import CloudObjects

        self.settings = settings
        self.scheme = settings.scheme
        super().__init__(bucket, CloudObjects(settings, bucket))

    @property
    def storage_options(self) -> dict[str, str]:  # type: ignore[override]
        """delta-rs's (object_store's) options: the same endpoint and credentials. delta-rs
        commits a log entry with object_store's create-if-absent, native on both stores."""
        return dict(self.settings.storage_options())
