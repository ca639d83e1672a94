"""Google Cloud Storage and Azure Blob Storage for the Delta sink (``delta://gs://...``,
``delta://az://...``, ``delta://abfss://...``): where they are, how to sign for them, and the
object operations the sink does on its own files there, with create-if-absent and
replace-if-unchanged.

One library does the conditional writes on both: ``obstore``, the Python binding of Rust's
``object_store`` (the crate delta-rs commits its log with). A create is ``PutMode::Create``
(GCS ``x-goog-if-generation-match: 0``, Azure ``If-None-Match: *``); a replacement is
``PutMode::Update`` on the version this store read (GCS: the object's generation; Azure: its
ETag, ``If-Match``). :class:`CloudObjects` has the interface of the S3 sink's
:class:`~.objects.Objects`, so the table store and the lease (:mod:`.tablestore`,
:mod:`.lease`) read the same on every store. The Parquet files Spark's tasks write go through
pyarrow's own ``GcsFileSystem`` and ``AzureFileSystem``.

Settings come from the standard environment variables:

- GCS: ``GOOGLE_APPLICATION_CREDENTIALS`` (a service account's JSON key file; without it the
  machine's own credentials, e.g. a GCE metadata server), ``GOOGLE_CLOUD_PROJECT``;
  ``STORAGE_EMULATOR_HOST`` (``http://host:port``) points every client at an emulator, without
  credentials, as Google's own client libraries do.
- Azure: ``AZURE_STORAGE_CONNECTION_STRING`` (``AccountName=...;AccountKey=...``, optionally
  ``BlobEndpoint=...``), or ``AZURE_STORAGE_ACCOUNT_NAME`` and ``AZURE_STORAGE_ACCOUNT_KEY``;
  ``AZURE_STORAGE_ENDPOINT`` (``http://host:port/ACCOUNT`` for Azurite). An ``abfss://``
  location's ``CONTAINER@ACCOUNT.dfs.core.windows.net`` names the account.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from ...queues.config import ConfigError
from ...secrets import redact_text
from .objects import PreconditionFailed
from .s3 import StoreError

__all__ = ["CloudObjects", "CloudSettings", "azure_settings", "gcs_settings"]

#: What each scheme is called in messages.
STORE_NAMES = {"gs": "Google Cloud Storage", "az": "Azure Blob Storage"}


@dataclass(frozen=True)
class CloudSettings:
    """Where a GCS or Azure store is and how to sign for it (see the module docstring)."""

    scheme: str  # "gs" or "az"
    #: obstore's (object_store's) configuration, without the bucket
    config: dict[str, Any] = field(repr=False)
    #: where the endpoint came from (for messages): a variable's name, or "the default"
    endpoint: str | None = None
    endpoint_source: str = "the default"
    project: str | None = None
    account: str | None = None
    key: str | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return STORE_NAMES[self.scheme]

    def describe(self) -> str:
        return self.endpoint or ("storage.googleapis.com" if self.scheme == "gs" else "Azure")

    def store(self, bucket: str, attempts: int | None = None) -> Any:
        """An obstore store of ``bucket`` (a GCS bucket, an Azure container)."""
        from obstore.store import AzureStore, GCSStore

        client: Any = {"allow_http": True} if (self.endpoint or "").startswith("http://") else {}
        retry: Any = {"max_retries": attempts - 1} if attempts else None
        config: Any = self.config
        if self.scheme == "gs":
            return GCSStore(bucket, config=config, client_options=client, retry_config=retry)
        return AzureStore(bucket, config=config, client_options=client, retry_config=retry)

    def storage_options(self) -> dict[str, str]:
        """delta-rs's options (object_store's keys, as strings)."""
        options = {
            (k if k.startswith(("google_", "azure_")) else f"{_PREFIX[self.scheme]}{k}"): str(v)
            for k, v in self.config.items()
        }
        if (self.endpoint or "").startswith("http://"):
            options["allow_http"] = "true"
        return options

    def filesystem(self) -> Any:
        """The pyarrow file system Spark's tasks write the table's Parquet files with."""
        from pyarrow import fs

        if self.scheme == "gs":
            if self.endpoint:
                parts = urlsplit(self.endpoint)
                return fs.GcsFileSystem(
                    anonymous=True,
                    scheme=parts.scheme or "http",
                    endpoint_override=parts.netloc or self.endpoint,
                    project_id=self.project or "sluice",
                )
            return fs.GcsFileSystem(project_id=self.project)
        options: dict[str, Any] = {"account_name": self.account}
        if self.key:
            options["account_key"] = self.key
        if self.endpoint:
            parts = urlsplit(self.endpoint)
            options.update(
                blob_storage_authority=parts.netloc,
                dfs_storage_authority=parts.netloc,
                blob_storage_scheme=parts.scheme or "https",
                dfs_storage_scheme=parts.scheme or "https",
            )
        return fs.AzureFileSystem(**options)


_PREFIX = {"gs": "google_", "az": "azure_storage_"}


def gcs_settings(environ: dict[str, str] | None = None) -> CloudSettings:
    """GCS's settings from the environment (see the module docstring)."""
    env = os.environ if environ is None else environ
    project = env.get("GOOGLE_CLOUD_PROJECT") or env.get("GCLOUD_PROJECT") or None
    emulator = env.get("STORAGE_EMULATOR_HOST", "").strip().rstrip("/")
    if emulator:
        if "://" not in emulator:
            emulator = f"http://{emulator}"
        # object_store's way to an emulator: a service account key that names it and asks for
        # no OAuth (what Google's clients do when STORAGE_EMULATOR_HOST is set)
        key = {
            "gcs_base_url": emulator,
            "disable_oauth": True,
            "client_email": "",
            "private_key": "",
            "private_key_id": "",
        }
        return CloudSettings(
            "gs",
            {"service_account_key": json.dumps(key)},
            emulator,
            "STORAGE_EMULATOR_HOST",
            project,
        )
    config: dict[str, Any] = {}
    credentials = env.get("GOOGLE_APPLICATION_CREDENTIALS")
    if credentials:
        if not os.path.isfile(credentials):
            raise ConfigError(
                f"GOOGLE_APPLICATION_CREDENTIALS names {credentials}, which is not a file: give "
                "the path of a service account's JSON key, or unset it to use the machine's "
                "own credentials."
            )
        config["service_account"] = credentials
    return CloudSettings("gs", config, None, "the default", project)


def _connection_string(text: str) -> dict[str, str]:
    found = {}
    for part in text.split(";"):
        name, sep, value = part.partition("=")
        if sep:
            found[name.strip().lower()] = value.strip()
    return found


#: Azurite's well-known development account (UseDevelopmentStorage=true)
_DEV_ACCOUNT = "devstoreaccount1"
_DEV_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)


def azure_settings(
    account: str | None = None, environ: dict[str, str] | None = None
) -> CloudSettings:
    """Azure's settings from the environment (see the module docstring); ``account``: the one
    an ``abfss://`` location names."""
    env = os.environ if environ is None else environ
    parsed = _connection_string(env.get("AZURE_STORAGE_CONNECTION_STRING", ""))
    endpoint, source = None, "the default"
    if parsed.get("usedevelopmentstorage", "").lower() == "true":
        parsed.update(
            accountname=_DEV_ACCOUNT,
            accountkey=_DEV_KEY,
            blobendpoint=f"http://127.0.0.1:10000/{_DEV_ACCOUNT}",
        )
    name = account or parsed.get("accountname") or env.get("AZURE_STORAGE_ACCOUNT_NAME")
    key = parsed.get("accountkey") or env.get("AZURE_STORAGE_ACCOUNT_KEY") or None
    if env.get("AZURE_STORAGE_ENDPOINT"):
        endpoint, source = env["AZURE_STORAGE_ENDPOINT"].rstrip("/"), "AZURE_STORAGE_ENDPOINT"
    elif parsed.get("blobendpoint"):
        endpoint = parsed["blobendpoint"].rstrip("/")
        source = "AZURE_STORAGE_CONNECTION_STRING"
    if not name:
        raise ConfigError(
            "No Azure storage account is named: set AZURE_STORAGE_ACCOUNT_NAME (and "
            "AZURE_STORAGE_ACCOUNT_KEY), or AZURE_STORAGE_CONNECTION_STRING, or name it in the "
            "location (abfss://CONTAINER@ACCOUNT.dfs.core.windows.net/PATH)."
        )
    config: dict[str, Any] = {"account_name": name}
    if key:
        config["account_key"] = key
    if endpoint:
        config["endpoint"] = endpoint
    return CloudSettings("az", config, endpoint, source, None, name, key)


def _first_line(exc: BaseException) -> str:
    """An obstore error's first line (the rest is a debug dump), redacted."""
    return redact_text((str(exc).splitlines() or [""])[0])


def _meta_tag(meta: Any) -> str:
    """An object's version as one opaque string: its ETag and (GCS) its generation."""
    return json.dumps([meta.get("e_tag"), meta.get("version")])


def _mode(tag: str) -> Any:
    """obstore's ``UpdateVersion`` of a version :func:`_meta_tag` made."""
    e_tag, version = json.loads(tag)
    return {k: v for k, v in (("e_tag", e_tag), ("version", version)) if v}


class CloudObjects:
    """Objects of one GCS bucket or Azure container, with the interface of the S3 sink's
    :class:`~.objects.Objects` (``ETag`` there: the opaque version :func:`_meta_tag` makes)."""

    def __init__(self, settings: CloudSettings, bucket: str) -> None:
        self.settings = settings
        self.bucket = bucket
        self._store: Any = None

    @property
    def store(self) -> Any:
        if self._store is None:
            self._store = self.settings.store(self.bucket)
        return self._store

    def uri(self, key: str) -> str:
        return f"{self.settings.scheme}://{self.bucket}/{key}"

    def _fail(self, exc: BaseException, doing: str, key: str) -> StoreError:
        return StoreError(
            f"{self.settings.name} {doing} of {self.uri(key)} at {self.settings.describe()} "
            f"failed: {type(exc).__name__}: {_first_line(exc)}"
        )

    def check(self, probe: str, location: str, consequence: str, instead: str) -> None:
        """The bucket (container) exists, the credentials may list, write and delete at
        ``probe``, and the store honours create-if-absent; else a :class:`ConfigError`."""
        import obstore
        from obstore.exceptions import AlreadyExistsError

        store = self.settings.store(self.bucket, attempts=2)
        try:
            next(iter(obstore.list(store, probe.rpartition("/")[0] + "/", chunk_size=1)), None)
            first = obstore.put(store, probe, b"", mode="create")
        except Exception as exc:
            raise self._config_error(exc, location) from None
        try:
            obstore.put(store, probe, b"", mode="create")
        except AlreadyExistsError:
            pass
        except Exception as exc:
            raise self._config_error(exc, location) from None
        else:
            raise ConfigError(
                f"The {self.settings.name} server {self.settings.describe()} (from "
                f"{self.settings.endpoint_source}) ignores conditional writes (a create-if-"
                f"absent replaced an existing object), so {consequence} at {location}. Use a "
                f"server that supports them {instead}."
            )
        try:
            second = obstore.put(store, probe, b"x", mode=_mode(_meta_tag(first)))
            obstore.put(store, probe, b"y", mode=_mode(_meta_tag(first)))
        except PreconditionFailed:
            pass
        except Exception as exc:
            if type(exc).__name__ != "PreconditionError":
                raise self._config_error(exc, location) from None
        else:
            raise ConfigError(
                f"The {self.settings.name} server {self.settings.describe()} (from "
                f"{self.settings.endpoint_source}) ignores conditional writes (a replace-if-"
                f"unchanged replaced a changed object: {second}), so {consequence} at "
                f"{location}. Use a server that supports them {instead}."
            )
        finally:
            try:
                obstore.delete(store, probe)
            except FileNotFoundError:
                pass
            except Exception as exc:
                raise self._config_error(exc, location) from None

    def _config_error(self, exc: BaseException, location: str) -> ConfigError:
        text = _first_line(exc)
        scheme = self.settings.scheme
        if scheme == "gs" and self.settings.endpoint_source == "STORAGE_EMULATOR_HOST":
            how = (
                "The emulator STORAGE_EMULATOR_HOST names must serve GCS's XML API (an object "
                "written by PUT /BUCKET/OBJECT, with x-goog-if-generation-match), which Rust's "
                "object_store (delta-rs's) writes with: fake-gcs-server does not (its issue "
                "#331). Unset STORAGE_EMULATOR_HOST to use Google Cloud Storage itself."
            )
        elif scheme == "gs":
            how = (
                "Check the bucket exists, and the credentials: GOOGLE_APPLICATION_CREDENTIALS (a "
                "service account's JSON key file) or the machine's own; STORAGE_EMULATOR_HOST "
                "for an emulator."
            )
        else:
            how = (
                "Check the container exists, and the credentials: AZURE_STORAGE_ACCOUNT_NAME and "
                "AZURE_STORAGE_ACCOUNT_KEY, or AZURE_STORAGE_CONNECTION_STRING; "
                "AZURE_STORAGE_ENDPOINT for Azurite."
            )
        return ConfigError(
            f"Cannot use {location} on {self.settings.name} at {self.settings.describe()} (from "
            f"{self.settings.endpoint_source}): {type(exc).__name__}: {text}. {how}"
        )

    def get_json(self, key: str) -> tuple[Any, str | None]:
        """(the JSON object at ``key``, its version), or (None, None) when there is none."""
        import obstore

        try:
            answer = obstore.get(self.store, key)
            body = bytes(answer.bytes())
        except FileNotFoundError:
            return None, None
        except Exception as exc:
            raise self._fail(exc, "GET", key) from None
        return json.loads(body), _meta_tag(answer.meta)

    def get_bytes(self, key: str) -> bytes | None:
        import obstore

        try:
            return bytes(obstore.get(self.store, key).bytes())
        except FileNotFoundError:
            return None
        except Exception as exc:
            raise self._fail(exc, "GET", key) from None

    def put_json(
        self, key: str, data: Any, *, if_none_match: bool = False, if_match: str | None = None
    ) -> str:
        return self.put_bytes(
            key, json.dumps(data, sort_keys=True).encode(), if_none_match, if_match
        )

    def put_bytes(
        self, key: str, body: bytes, if_none_match: bool = False, if_match: str | None = None
    ) -> str:
        import obstore
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        mode: Any = "overwrite"
        if if_none_match:
            mode = "create"
        elif if_match is not None:
            mode = _mode(if_match)
        try:
            answer = obstore.put(self.store, key, body, mode=mode)
        except (AlreadyExistsError, PreconditionError):
            raise PreconditionFailed(key) from None
        except FileNotFoundError:  # an update of an object that is gone
            if if_match is not None:
                raise PreconditionFailed(key) from None
            raise
        except Exception as exc:
            raise self._fail(exc, "PUT", key) from None
        return _meta_tag(answer)

    def head(self, key: str) -> dict[str, Any] | None:
        import obstore

        try:
            meta = obstore.head(self.store, key)
        except FileNotFoundError:
            return None
        except Exception as exc:
            raise self._fail(exc, "HEAD", key) from None
        return {
            "ETag": _meta_tag(meta),
            "ContentLength": meta["size"],
            "LastModified": meta["last_modified"],
        }

    def exists(self, key: str) -> bool:
        return self.head(key) is not None

    def any(self, prefix: str) -> bool:
        """Whether any object is under ``prefix``."""
        import obstore

        try:
            for chunk in obstore.list(self.store, prefix, chunk_size=1):
                return bool(chunk)
        except Exception as exc:
            raise self._fail(exc, "LIST", prefix) from None
        return False

    def copy(self, source: str, target: str) -> None:
        import obstore

        try:
            obstore.copy(self.store, source, target)
        except Exception as exc:
            raise self._fail(exc, f"COPY from {source}", target) from None

    def delete(self, key: str, if_match: str | None = None) -> None:
        import obstore

        if if_match is not None:  # object_store has no conditional delete: never unconditional
            raise NotImplementedError(f"a conditional delete of {self.uri(key)}")
        try:
            obstore.delete(self.store, key)
        except FileNotFoundError:
            pass
        except Exception as exc:
            raise self._fail(exc, "DELETE", key) from None

    def keys(self, prefix: str) -> Iterator[str]:
        import obstore

        try:
            for chunk in obstore.list(self.store, prefix or None):
                for meta in chunk:
                    yield str(meta["path"])
        except Exception as exc:
            raise self._fail(exc, "LIST", prefix) from None

    def children(self, prefix: str) -> list[str]:
        """The "directories" right under ``prefix`` (which ends with ``/``), as prefixes."""
        import obstore

        try:
            found = obstore.list_with_delimiter(self.store, prefix or None)
        except Exception as exc:
            raise self._fail(exc, "LIST", prefix) from None
        return [f"{p.rstrip('/')}/" for p in found["common_prefixes"]]

    def delete_prefix(self, prefix: str) -> None:
        import obstore

        keys = list(self.keys(prefix))
        for start in range(0, len(keys), 1000):
            try:
                obstore.delete(self.store, keys[start : start + 1000])
            except FileNotFoundError:
                pass
            except Exception as exc:
                raise self._fail(exc, "DELETE", prefix) from None
