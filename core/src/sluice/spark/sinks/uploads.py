"""Objects that appear at once on S3: what the Parquet sink on S3 (:mod:`.parquet_s3`)
publishes a batch as.

S3 makes a multipart upload's object visible (to GET, HEAD and LIST) only when
CompleteMultipartUpload succeeds, and then whole. So a run assembles each object of its batch
(one per partition directory of its good rows, one for its quarantined rows) as an upload
*before* its commit, and the publish step after the commit is the completion:

- one staged file: its bytes are copied by the server into the upload (UploadPartCopy, in
  parts of at most :data:`COPY_PART` bytes), nothing passes through this process;
- several (the writing tasks each wrote one): their row groups are written by this process
  into one Parquet file, streamed into the upload in parts of :data:`PART_SIZE` bytes (S3
  wants every part but the last to hold at least 5 MiB, so Parquet files cannot be
  concatenated by the server).

An upload that is never completed is invisible; it is aborted by the run that made it
(refused), by the next run of its batch, or by ``sluice expire``. A completion is retried by
whoever finishes the batch: if the server no longer knows the upload (completed already, or
aborted by a lifecycle rule), the object at its key says which; if it is absent, the object
is built again from the staged files, which are deleted only once every object is there.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from .. import layout
from .objects import Objects
from .s3 import StoreError

__all__ = ["COPY_PART", "PART_SIZE", "Pending", "assemble", "complete"]

#: Bytes of each part this process uploads while it merges several files into one object.
PART_SIZE = 8 * 1024**2
#: Bytes of each part the server copies from a single staged file (S3 allows 5 MiB to 5 GiB).
COPY_PART = 1024**3


@dataclass(frozen=True)
class Pending:
    """An object of a batch, assembled as a multipart upload and not yet completed."""

    kind: str  # "data" or "quarantine"
    name: str  # its name under the batch's directory of its kind ("ts_day=.../part-R.parquet")
    key: str
    upload: str
    parts: tuple[tuple[int, str], ...]  # (part number, ETag)
    sources: tuple[str, ...]  # the staged files it holds (keys)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "key": self.key,
            "upload": self.upload,
            "parts": [list(p) for p in self.parts],
            "sources": list(self.sources),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Pending:
        return cls(
            str(data["kind"]),
            str(data["name"]),
            str(data["key"]),
            str(data["upload"]),
            tuple((int(n), str(etag)) for n, etag in data["parts"]),
            tuple(str(s) for s in data["sources"]),
        )


def assemble(
    objects: Objects, filesystem: Any, kind: str, name: str, key: str, sources: list[str]
) -> Pending:
    """An upload of ``key`` holding the rows of the staged files ``sources`` (see the module
    docstring), not completed; aborted if assembling it fails."""
    upload = objects.create_upload(key)
    try:
        if len(sources) == 1:
            parts = _copy(objects, key, upload, sources[0])
        else:
            parts = _merge(objects, filesystem, key, upload, sources)
    except BaseException:
        objects.abort_upload(key, upload)
        raise
    return Pending(kind, name, key, upload, tuple(parts), tuple(sources))


def _copy(objects: Objects, key: str, upload: str, source: str) -> list[tuple[int, str]]:
    found = objects.head(source)
    if found is None:
        raise StoreError(f"The staged file s3://{objects.bucket}/{source} is gone.")
    size = int(found["ContentLength"])
    parts = []
    for number, first in enumerate(range(0, size, COPY_PART), 1):
        last = min(first + COPY_PART, size) - 1
        parts.append((number, objects.copy_part(key, upload, number, source, first, last)))
    return parts


class _Parts(io.RawIOBase):
    """A writable file whose bytes become the parts of an upload."""

    def __init__(self, objects: Objects, key: str, upload: str) -> None:
        self.objects, self.key, self.upload = objects, key, upload
        self.buffer = bytearray()
        self.written = 0
        self.parts: list[tuple[int, str]] = []

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self.buffer += data
        self.written += len(data)
        while len(self.buffer) >= PART_SIZE:
            self._send(bytes(self.buffer[:PART_SIZE]))
            del self.buffer[:PART_SIZE]
        return len(data)

    def tell(self) -> int:
        return self.written

    def _send(self, body: bytes) -> None:
        number = len(self.parts) + 1
        self.parts.append((number, self.objects.upload_part(self.key, self.upload, number, body)))

    def finish(self) -> list[tuple[int, str]]:
        """Upload what is left as the last part; the parts."""
        if self.buffer or not self.parts:
            self._send(bytes(self.buffer))
            self.buffer.clear()
        return self.parts


def _merge(
    objects: Objects, filesystem: Any, key: str, upload: str, sources: list[str]
) -> list[tuple[int, str]]:
    """The row groups of ``sources``, in order, written as one Parquet file into the upload
    (one row group in memory at a time)."""
    files = [
        pq.ParquetFile(filesystem.open_input_file(f"{objects.bucket}/{s}"), pre_buffer=True)
        for s in sources
    ]
    schema = pa.unify_schemas([f.schema_arrow for f in files])
    sink = _Parts(objects, key, upload)
    with pq.ParquetWriter(sink, schema, **layout.arrow_writer_options(schema)) as writer:
        for found in files:
            for group in range(found.num_row_groups):
                table = found.read_row_group(group)
                writer.write_table(table if table.schema == schema else table.cast(schema))
    return sink.finish()


def complete(objects: Objects, filesystem: Any, pending: Pending) -> None:
    """Make ``pending``'s object appear at its key, whoever asks and however often (see the
    module docstring)."""
    if objects.complete_upload(pending.key, pending.upload, list(pending.parts)):
        return
    if objects.exists(pending.key):  # completed before (a server that says so)
        return
    missing = [s for s in pending.sources if not objects.exists(s)]
    if missing:
        raise StoreError(
            f"The object s3://{objects.bucket}/{pending.key} of a committed batch is neither "
            f"there nor in progress (upload {pending.upload} was aborted), and the staged "
            f"files it is built from are gone too ({', '.join(missing)}): restore them, or "
            "ingest the batch into another sink."
        )
    again = assemble(
        objects, filesystem, pending.kind, pending.name, pending.key, list(pending.sources)
    )
    if not objects.complete_upload(again.key, again.upload, list(again.parts)):
        raise StoreError(
            f"S3 lost the upload {again.upload} of s3://{objects.bucket}/{again.key} between "
            "its parts and its completion: finish the batch again (sluice audit does)."
        )
