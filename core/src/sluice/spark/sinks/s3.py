"""Object storage on S3 and S3-compatible servers: where the endpoint, region and credentials
come from, the file systems and clients built from them, and the errors that say what to fix.

Settings come from pyiceberg catalog properties (``s3.endpoint``, ``s3.access-key-id``,
``s3.secret-access-key``, ``s3.session-token``, ``s3.region``, ``s3.force-virtual-addressing``)
when a catalog names them, else from the standard AWS chain as botocore reads it: the
environment (``AWS_ENDPOINT_URL_S3``, ``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ...), the
profile (``AWS_PROFILE``, ``~/.aws/config`` and ``credentials``, ``endpoint_url`` included),
and instance or container roles. Never from Sluice's own variables.

Spark's writing tasks get the driver's pyarrow ``S3FileSystem`` pickled into the task: the
endpoint, region, addressing and the keys the driver resolved (a catalog's, or the AWS
chain's), so an executor needs no configuration of its own, and no secret goes on a command
line, into Spark's configuration or a log. When the driver resolves no keys, the executors
use their own AWS chain (``spark.executorEnv.AWS_*``, which Spark redacts in its UI and logs,
a profile, an instance role).

Every secret is registered with :mod:`sluice.secrets` when it is read.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from ...queues.config import ConfigError
from ...secrets import install_log_filter, redact_text, remember

__all__ = [
    "S3Settings",
    "StoreError",
    "is_s3",
    "s3_error",
    "split_s3",
]

DEFAULT_REGION = "us-east-1"
#: Seconds to connect before an endpoint is taken as unreachable (a check fails fast).
CONNECT_TIMEOUT = 5.0
REQUEST_TIMEOUT = 60.0
#: Attempts of a request that fails with a 500, 503 or a dropped connection.
ATTEMPTS = 5
_AWS_HOST = ".amazonaws.com"


class StoreError(RuntimeError):
    """An object store request failed after its retries (the message says which and why)."""


def is_s3(location: object) -> bool:
    return isinstance(location, str) and urlsplit(location).scheme.lower() in ("s3", "s3a")


def split_s3(uri: str) -> tuple[str, str]:
    """(bucket, key prefix without slashes at its ends) of ``s3://bucket/prefix``."""
    parts = urlsplit(uri)
    if not is_s3(uri) or not parts.netloc:
        raise ConfigError(f"{uri!r} is not an s3://BUCKET/PREFIX location.")
    return parts.netloc, parts.path.strip("/")


@dataclass(frozen=True)
class S3Settings:
    """Where an S3 store is and how to sign for it (see the module docstring)."""

    endpoint: str | None  # None: AWS itself
    region: str
    access_key: str | None = None
    secret_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    virtual_addressing: bool = False
    #: the keys came from catalog properties (shipped to the tasks), not the AWS chain
    explicit: bool = False
    #: where the endpoint came from, for errors ("s3.endpoint of catalog 'lake'", ...)
    endpoint_source: str = "AWS's default endpoint"

    # ---- resolving --------------------------------------------------------------------------

    @classmethod
    def resolve(cls, properties: Mapping[str, Any] | None = None, what: str = "") -> S3Settings:
        """From catalog ``properties`` (s3.*) first, then the AWS chain (``what`` names the
        catalog in errors)."""
        properties = dict(properties or {})
        install_log_filter("botocore")
        chain = _chain()
        endpoint, source = properties.get("s3.endpoint"), f"s3.endpoint of {what}"
        if not endpoint:
            endpoint, source = chain.endpoint, chain.endpoint_source
        region = properties.get("s3.region") or properties.get("client.region") or chain.region
        key = properties.get("s3.access-key-id") or properties.get("client.access-key-id")
        secret = properties.get("s3.secret-access-key") or properties.get(
            "client.secret-access-key"
        )
        token = properties.get("s3.session-token") or properties.get("client.session-token")
        for value in (secret, token):
            if value:
                remember(value)
        virtual = str(properties.get("s3.force-virtual-addressing", "false")).lower() == "true"
        return cls(
            endpoint=str(endpoint) if endpoint else None,
            region=str(region or DEFAULT_REGION),
            access_key=key,
            secret_key=secret,
            session_token=token,
            virtual_addressing=virtual,
            explicit=bool(key and secret),
            endpoint_source=source if endpoint else "AWS's default endpoint",
        )

    def catalog_properties(self) -> dict[str, str]:
        """The s3.* properties a pyiceberg FileIO needs and a catalog may lack: the endpoint
        (pyiceberg does not read ``AWS_ENDPOINT_URL``) and the region (without one pyiceberg
        asks AWS where the bucket is, which a custom endpoint cannot answer)."""
        found = {"s3.region": self.region}
        if self.endpoint:
            found["s3.endpoint"] = self.endpoint
        return found

    # ---- clients ----------------------------------------------------------------------------

    def filesystem(self) -> Any:
        """A pyarrow ``S3FileSystem`` with the keys resolved on this machine (the one pickled
        into Spark's writing tasks too)."""
        from pyarrow import fs

        options: dict[str, Any] = {
            "region": self.region,
            "connect_timeout": CONNECT_TIMEOUT,
            "request_timeout": REQUEST_TIMEOUT,
            "retry_strategy": fs.AwsStandardS3RetryStrategy(max_attempts=ATTEMPTS),
            "force_virtual_addressing": self.virtual_addressing,
        }
        if self.endpoint:
            parts = urlsplit(
                self.endpoint if "://" in self.endpoint else f"https://{self.endpoint}"
            )
            options["endpoint_override"] = parts.netloc
            options["scheme"] = parts.scheme
        key, secret, token = self._keys()
        if key and secret:
            options.update(access_key=key, secret_key=secret, session_token=token)
        return fs.S3FileSystem(**options)

    def _keys(self) -> tuple[str | None, str | None, str | None]:
        if self.explicit:
            return self.access_key, self.secret_key, self.session_token
        credentials = _chain().credentials()
        if credentials is None:
            return None, None, None
        return credentials.access_key, credentials.secret_key, credentials.token

    def client(self, connect_timeout: float = CONNECT_TIMEOUT, attempts: int = ATTEMPTS) -> Any:
        """A botocore S3 client (retries 500s, 503s and dropped connections ``attempts``
        times in all)."""
        from botocore.config import Config

        config = Config(
            connect_timeout=connect_timeout,
            read_timeout=REQUEST_TIMEOUT,
            retries={"mode": "standard", "total_max_attempts": attempts},
            s3={"addressing_style": "virtual" if self.virtual_addressing else "path"}
            if self.endpoint
            else {},
        )
        options: dict[str, Any] = {"region_name": self.region, "config": config}
        if self.endpoint:
            options["endpoint_url"] = (
                self.endpoint if "://" in self.endpoint else f"https://{self.endpoint}"
            )
        if self.explicit:
            options.update(
                aws_access_key_id=self.access_key,
                aws_secret_access_key=self.secret_key,
                aws_session_token=self.session_token,
            )
        return _chain().session.create_client("s3", **options)

    def describe(self) -> str:
        return self.endpoint or f"AWS S3 ({self.region})"


# ---- the AWS chain, read once per process and environment ------------------------------------


class _Chain:
    """What botocore's default chain says: region, endpoint, credentials."""

    def __init__(self) -> None:
        import botocore.session

        self.session = botocore.session.Session()
        self.region = self.session.get_config_variable("region")
        self.endpoint, self.endpoint_source = self._endpoint()
        self._credentials: Any = None
        self._lock = threading.Lock()

    def _endpoint(self) -> tuple[str | None, str]:
        for variable in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"):
            if os.environ.get(variable):
                return os.environ[variable], variable
        # a profile's endpoint_url (top level or in its s3 services section): botocore
        # resolves it when it creates a client
        try:
            client = self.session.create_client("s3", region_name=self.region or DEFAULT_REGION)
        except Exception:
            return None, "AWS's default endpoint"
        url = str(client.meta.endpoint_url)
        if _AWS_HOST in url:
            return None, "AWS's default endpoint"
        return url, f"endpoint_url of AWS profile '{self.session.profile or 'default'}'"

    def credentials(self) -> Any:
        with self._lock:
            if self._credentials is None:
                found = self.session.get_credentials()
                if found is None:
                    return None
                self._credentials = found.get_frozen_credentials()
                for value in (self._credentials.secret_key, self._credentials.token):
                    if value:
                        remember(value)
            return self._credentials


_chains: dict[tuple[str, ...], _Chain] = {}
_chains_lock = threading.Lock()
_CHAIN_VARIABLES = (
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_CONFIG_FILE",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
)


def _chain() -> _Chain:
    """The chain of the current environment (tests change it; a process usually does not)."""
    key = tuple(os.environ.get(v, "") for v in _CHAIN_VARIABLES)
    with _chains_lock:
        if key not in _chains:
            secret = os.environ.get("AWS_SECRET_ACCESS_KEY")
            if secret:
                remember(secret)
            _chains[key] = _Chain()
        return _chains[key]


# ---- errors -----------------------------------------------------------------------------------


def s3_error(exc: BaseException, settings: S3Settings, where: str, doing: str) -> ConfigError:
    """A :class:`ConfigError` that says what went wrong with ``where`` (``s3://bucket/...``)
    while ``doing`` something, and how to fix it; raise it ``from None``."""
    code, status = _code(exc)
    endpoint = f"{settings.describe()} (from {settings.endpoint_source})"
    bucket = urlsplit(where).netloc
    if type(exc).__name__ in ("EndpointConnectionError", "ConnectTimeoutError", "ConnectionError"):
        return ConfigError(
            f"Cannot reach the S3 endpoint {endpoint} to {doing} {where}: "
            f"{redact_text(str(exc))}. Check the endpoint: the catalog's s3.endpoint, or "
            "AWS_ENDPOINT_URL (AWS_ENDPOINT_URL_S3) or the profile's endpoint_url; "
            "http://host:port for a server without TLS."
        )
    if type(exc).__name__ in ("NoCredentialsError", "PartialCredentialsError"):
        return ConfigError(
            f"No AWS credentials were found to {doing} {where}: set AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY (or AWS_PROFILE, or the catalog's s3.access-key-id and "
            "s3.secret-access-key)."
        )
    if code in ("NoSuchBucket",) or (status == 404 and doing.startswith("open")):
        return ConfigError(
            f"The bucket '{bucket}' does not exist at {endpoint}: create it (e.g. aws s3 mb "
            f"s3://{bucket}"
            + (f" --endpoint-url {settings.endpoint}" if settings.endpoint else "")
            + ") or name another in the sink or warehouse."
        )
    if code in ("InvalidAccessKeyId", "InvalidToken", "ExpiredToken"):
        return ConfigError(
            f"Cannot {doing} {where}: the S3 server {endpoint} does not know the access key id "
            f"'{settings.access_key or _chain_key()}' ({code}): check AWS_ACCESS_KEY_ID, the "
            "profile, or the catalog's s3.access-key-id."
        )
    if code == "SignatureDoesNotMatch":
        return ConfigError(
            f"Cannot {doing} {where}: the S3 server {endpoint} refused the signature of access key "
            f"'{settings.access_key or _chain_key()}' (SignatureDoesNotMatch): the secret key "
            "is wrong; check AWS_SECRET_ACCESS_KEY, the profile, or the catalog's "
            "s3.secret-access-key."
        )
    if code in ("AccessDenied", "AllAccessDisabled") or status == 403:
        return ConfigError(
            f"Access denied to {doing} {where} at {endpoint} ({code or status}): the "
            "credentials need s3:ListBucket on the bucket and s3:GetObject, s3:PutObject and "
            "s3:DeleteObject under the prefix."
        )
    return ConfigError(
        f"Could not {doing} {where} at {endpoint}: {type(exc).__name__}: {redact_text(str(exc))}"
    )


def _code(exc: BaseException) -> tuple[str | None, int | None]:
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return None, None
    error = response.get("Error", {}) or {}
    status = (response.get("ResponseMetadata", {}) or {}).get("HTTPStatusCode")
    code = error.get("Code")
    return (str(code) if code else None), (int(status) if status else None)


def _chain_key() -> str:
    credentials = _chain().credentials()
    return str(credentials.access_key) if credentials is not None else "(none)"
