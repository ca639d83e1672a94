"""The few object operations the S3 Parquet sink needs, with S3's conditional writes, on a
botocore client (:mod:`.s3`): JSON objects read with their ETag, created only if absent
(``If-None-Match: *``) or replaced only if unchanged (``If-Match``), copies, listings and
deletions. A request that fails with a 500, 503 or a dropped connection is retried by the
client (:data:`.s3.ATTEMPTS`); what still fails is a :class:`~.s3.StoreError` naming the key.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from ...queues.config import ConfigError
from ...secrets import redact_text
from .s3 import S3Settings, StoreError, s3_error

__all__ = ["Objects", "PreconditionFailed"]


class PreconditionFailed(Exception):
    """A conditional write lost: the object exists (``If-None-Match``) or changed
    (``If-Match``)."""


def _status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
        return int(status) if status else None
    return None


def _code(exc: BaseException) -> str:
    response = getattr(exc, "response", None)
    return str(((response or {}).get("Error") or {}).get("Code", "")) if response else ""


class Objects:
    """Objects of one bucket."""

    def __init__(self, settings: S3Settings, bucket: str) -> None:
        self.settings = settings
        self.bucket = bucket
        self._client: Any = None

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = self.settings.client()
        return self._client

    def uri(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    def any(self, prefix: str) -> bool:
        """Whether any object is under ``prefix``."""
        try:
            answer = self.client.list_objects_v2(Bucket=self.bucket, Prefix=prefix, MaxKeys=1)
        except Exception as exc:
            raise self._fail(exc, "LIST", prefix) from None
        return bool(answer.get("Contents"))

    def _fail(self, exc: BaseException, doing: str, key: str) -> StoreError:
        return StoreError(
            f"S3 {doing} of s3://{self.bucket}/{key} at {self.settings.describe()} failed "
            f"after {self._attempts()} attempts: {type(exc).__name__}: {redact_text(str(exc))}"
        )

    def _attempts(self) -> int:
        from .s3 import ATTEMPTS

        return ATTEMPTS

    def check(self, probe: str, location: str, consequence: str, instead: str) -> None:
        """The bucket exists, the credentials may list, write and delete at ``probe`` (a key
        of the sink at ``location``), and the server honours ``If-None-Match: *``; else a
        :class:`ConfigError` that says so: without it, ``consequence``; use a server that has
        them, or ``instead``."""
        client = self.settings.client(attempts=2)
        folder = probe.rpartition("/")[0]
        try:
            client.list_objects_v2(Bucket=self.bucket, Prefix=f"{folder}/", MaxKeys=1)
            client.put_object(Bucket=self.bucket, Key=probe, Body=b"", IfNoneMatch="*")
        except Exception as exc:
            raise s3_error(exc, self.settings, location, "open the sink") from None
        try:
            client.put_object(Bucket=self.bucket, Key=probe, Body=b"", IfNoneMatch="*")
        except Exception as exc:
            if _status(exc) not in (412, 409):
                raise s3_error(exc, self.settings, location, "write to") from None
        else:
            raise ConfigError(
                f"The S3 server {self.settings.describe()} ignores conditional writes "
                f"(If-None-Match: * let an existing object be replaced), so {consequence} at "
                f"{location}. Use a server that supports them (AWS S3, MinIO, SeaweedFS, "
                f"Cloudflare R2...) {instead}."
            )
        finally:
            try:
                client.delete_object(Bucket=self.bucket, Key=probe)
            except Exception as exc:
                raise s3_error(exc, self.settings, location, "delete in") from None

    def get_json(self, key: str) -> tuple[Any, str | None]:
        """(the JSON object at ``key``, its ETag), or (None, None) when there is none."""
        try:
            answer = self.client.get_object(Bucket=self.bucket, Key=key)
            data = json.loads(answer["Body"].read())
        except Exception as exc:
            if _status(exc) == 404 or _code(exc) in ("NoSuchKey", "404"):
                return None, None
            raise self._fail(exc, "GET", key) from None
        return data, str(answer.get("ETag"))

    def get_bytes(self, key: str) -> bytes | None:
        """The object at ``key``, None when there is none."""
        try:
            return bytes(self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read())
        except Exception as exc:
            if _status(exc) == 404 or _code(exc) in ("NoSuchKey", "404"):
                return None
            raise self._fail(exc, "GET", key) from None

    def put_json(
        self, key: str, data: Any, *, if_none_match: bool = False, if_match: str | None = None
    ) -> str:
        """Write ``data`` at ``key``; its new ETag. Raises :class:`PreconditionFailed` when
        the condition does not hold."""
        return self.put_bytes(
            key, json.dumps(data, sort_keys=True).encode(), if_none_match, if_match
        )

    def put_bytes(
        self, key: str, body: bytes, if_none_match: bool = False, if_match: str | None = None
    ) -> str:
        options: dict[str, Any] = {"Bucket": self.bucket, "Key": key, "Body": body}
        if if_none_match:
            options["IfNoneMatch"] = "*"
        if if_match is not None:
            options["IfMatch"] = if_match
        try:
            return str(self.client.put_object(**options).get("ETag"))
        except Exception as exc:
            # 412: the condition failed; 409 ConditionalRequestConflict: a concurrent
            # conditional write to the same key won (AWS)
            if _status(exc) in (412, 409) and (if_none_match or if_match is not None):
                raise PreconditionFailed(key) from None
            raise self._fail(exc, "PUT", key) from None

    def head(self, key: str) -> dict[str, Any] | None:
        """The object's metadata (``ETag``, ``ContentLength``, ``LastModified``), None when
        there is none."""
        try:
            return dict(self.client.head_object(Bucket=self.bucket, Key=key))
        except Exception as exc:
            if _status(exc) == 404:
                return None
            raise self._fail(exc, "HEAD", key) from None

    def exists(self, key: str) -> bool:
        return self.head(key) is not None

    def copy(self, source: str, target: str) -> None:
        try:
            self.client.copy_object(
                Bucket=self.bucket, Key=target, CopySource={"Bucket": self.bucket, "Key": source}
            )
        except Exception as exc:
            raise self._fail(exc, f"COPY from {source}", target) from None

    def delete(self, key: str, if_match: str | None = None) -> None:
        options: dict[str, Any] = {"Bucket": self.bucket, "Key": key}
        if if_match is not None:
            options["IfMatch"] = if_match
        try:
            self.client.delete_object(**options)
        except Exception as exc:
            if _status(exc) in (412, 409) and if_match is not None:
                raise PreconditionFailed(key) from None
            if _status(exc) != 404:
                raise self._fail(exc, "DELETE", key) from None

    def keys(self, prefix: str) -> Iterator[str]:
        """Every key under ``prefix`` (for a run's own staging, and the audit)."""
        for page in self._pages(prefix, delimiter=None):
            for item in page.get("Contents", []) or []:
                yield str(item["Key"])

    def children(self, prefix: str) -> list[str]:
        """The "directories" right under ``prefix`` (which ends with ``/``), as prefixes."""
        found: list[str] = []
        for page in self._pages(prefix, delimiter="/"):
            found += [str(p["Prefix"]) for p in page.get("CommonPrefixes", []) or []]
        return found

    def _pages(self, prefix: str, delimiter: str | None) -> Iterator[dict[str, Any]]:
        options: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix}
        if delimiter:
            options["Delimiter"] = delimiter
        while True:
            try:
                page = self.client.list_objects_v2(**options)
            except Exception as exc:
                raise self._fail(exc, "LIST", prefix) from None
            yield page
            if not page.get("IsTruncated"):
                return
            options["ContinuationToken"] = page["NextContinuationToken"]

    def delete_prefix(self, prefix: str) -> None:
        keys = list(self.keys(prefix))
        for start in range(0, len(keys), 1000):
            chunk = [{"Key": k} for k in keys[start : start + 1000]]
            try:
                self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": chunk})
            except Exception as exc:
                raise self._fail(exc, "DELETE", prefix) from None

    # ---- multipart uploads: objects that appear at once --------------------------------------
    # An upload's object is invisible (to GET, HEAD and LIST) until CompleteMultipartUpload
    # succeeds, and then appears whole (:mod:`.uploads`).

    def create_upload(self, key: str) -> str:
        """A new multipart upload of ``key``; its upload id."""
        try:
            return str(self.client.create_multipart_upload(Bucket=self.bucket, Key=key)["UploadId"])
        except Exception as exc:
            raise self._fail(exc, "CreateMultipartUpload", key) from None

    def upload_part(self, key: str, upload: str, number: int, body: bytes) -> str:
        """Part ``number`` of ``upload`` from ``body``; its ETag."""
        try:
            answer = self.client.upload_part(
                Bucket=self.bucket, Key=key, UploadId=upload, PartNumber=number, Body=body
            )
        except Exception as exc:
            raise self._fail(exc, f"UploadPart {number}", key) from None
        return str(answer["ETag"])

    def copy_part(
        self, key: str, upload: str, number: int, source: str, first: int, last: int
    ) -> str:
        """Part ``number`` of ``upload`` copied by the server from bytes ``first``..``last``
        (inclusive) of the object ``source`` (UploadPartCopy); its ETag."""
        try:
            answer = self.client.upload_part_copy(
                Bucket=self.bucket,
                Key=key,
                UploadId=upload,
                PartNumber=number,
                CopySource={"Bucket": self.bucket, "Key": source},
                CopySourceRange=f"bytes={first}-{last}",
            )
        except Exception as exc:
            raise self._fail(exc, f"UploadPartCopy {number} from {source}", key) from None
        return str(answer["CopyPartResult"]["ETag"])

    def complete_upload(self, key: str, upload: str, parts: list[tuple[int, str]]) -> bool:
        """Complete ``upload``: its object appears at ``key``, whole. False when the server
        knows no such upload (completed already, or aborted): the caller looks at ``key``."""
        body = {"Parts": [{"PartNumber": n, "ETag": etag} for n, etag in parts]}
        try:
            self.client.complete_multipart_upload(
                Bucket=self.bucket, Key=key, UploadId=upload, MultipartUpload=body
            )
        except Exception as exc:
            if _code(exc) == "NoSuchUpload" or _status(exc) == 404:
                return False
            raise self._fail(exc, "CompleteMultipartUpload", key) from None
        return True

    def abort_upload(self, key: str, upload: str) -> None:
        """Abort ``upload`` (its parts are deleted; an unknown upload is no error)."""
        try:
            self.client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload)
        except Exception as exc:
            if _code(exc) != "NoSuchUpload" and _status(exc) != 404:
                raise self._fail(exc, "AbortMultipartUpload", key) from None

    def uploads(self, prefix: str) -> Iterator[tuple[str, str, float]]:
        """(key, upload id, initiated: seconds since the epoch) of every upload in progress
        under ``prefix``."""
        options: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix}
        while True:
            try:
                page = self.client.list_multipart_uploads(**options)
            except Exception as exc:
                raise self._fail(exc, "ListMultipartUploads", prefix) from None
            for item in page.get("Uploads", []) or []:
                yield str(item["Key"]), str(item["UploadId"]), item["Initiated"].timestamp()
            if not page.get("IsTruncated"):
                return
            options["KeyMarker"] = page.get("NextKeyMarker")
            options["UploadIdMarker"] = page.get("NextUploadIdMarker")

    def listing(self, prefix: str) -> Iterator[tuple[str, int, float]]:
        """(key, size, last modified: seconds since the epoch) of every object under
        ``prefix``."""
        for page in self._pages(prefix, delimiter=None):
            for item in page.get("Contents", []) or []:
                yield str(item["Key"]), int(item["Size"]), item["LastModified"].timestamp()
