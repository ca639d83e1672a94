"""A Schema Registry client: the documented subset of the Confluent REST API that Sluice uses
(schemas by id, subjects' versions, registering a schema, compatibility), over HTTP(S).

Credentials follow :mod:`sluice.secrets`: a password in the URL's user info
(``https://user:pw@registry:8081``) or given as ``password`` is registered as a secret, never
shown (errors and logs show the URL as ``https://user:***@registry:8081``), and sent only as
an HTTP Basic ``Authorization`` header. Schemas are cached per id and subject version in the
process (they never change once registered), so decoding asks once per schema, never per
message.

Errors: :class:`RegistryUnavailableError` (a ``ConnectionError``) when the registry cannot be
reached or answers 5xx: an ingest fails then, before anything is committed;
:class:`SchemaNotFoundError` when the registry itself says the schema id, subject or version
does not exist: a 404 whose JSON body carries a Confluent error code ``404xx``
(``{"error_code": 40403, "message": ...}`` for a schema id; only that one makes a record's
schema id unknown, and such a record is quarantined); :class:`RegistryError` for every other
answer, with the URL (its password redacted) and the status: other refusals (401/403, an
incompatible schema on register...) with the registry's message, and a 404 or 200 that is not
the registry's own (a proxy's HTML page, a wrong path in the URL), which must fail an ingest
rather than quarantine every record as "unknown schema id".
"""

from __future__ import annotations

import base64
import json
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

from ..secrets import REDACTED, redact_text, remember

__all__ = [
    "SCHEMA_NOT_FOUND",
    "RegisteredSchema",
    "RegistryError",
    "RegistrySettings",
    "RegistryUnavailableError",
    "SchemaNotFoundError",
    "SchemaRegistry",
]

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
_SCHEMA_TYPES = ("AVRO", "PROTOBUF", "JSON")


class RegistryUnavailableError(ConnectionError):
    """The schema registry could not be reached, or failed (5xx)."""


class RegistryError(RuntimeError):
    """The schema registry refused a request (other than 'not found')."""


class SchemaNotFoundError(LookupError):
    """The registry has no such schema id, subject or version: it said so with a Confluent
    error code (``error_code``: 40401 subject, 40402 version, 40403 schema id, ...)."""

    def __init__(self, message: str, error_code: int | None = None) -> None:
        super().__init__(message)
        self.error_code = error_code


#: Confluent's error code for "no schema with this id" (the body of its 404).
SCHEMA_NOT_FOUND = 40403


@dataclass(frozen=True)
class RegistrySettings:
    """Where the registry is and how to log in. ``url`` holds no user info."""

    url: str
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    timeout_s: float = 10.0
    ssl_cafile: str | None = None
    value_subject: str | None = None  # default: <topic>-value (TopicNameStrategy)
    key_subject: str | None = None  # default: <topic>-key

    def __post_init__(self) -> None:
        remember(self.password)

    @classmethod
    def of(cls, value: RegistrySettings | str | Mapping[str, Any]) -> RegistrySettings:
        """Settings from a URL (user info becomes the login) or a mapping with ``url`` and
        optionally ``username``, ``password``, ``timeout_s``, ``ssl_cafile``,
        ``value_subject``, ``key_subject``."""
        if isinstance(value, RegistrySettings):
            return value
        options: dict[str, Any] = {"url": value} if isinstance(value, str) else dict(value)
        unknown = set(options) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(
                f"schema_registry has unknown key(s) {', '.join(sorted(unknown))}; known: "
                f"{', '.join(cls.__dataclass_fields__)}"
            )
        url = str(options.pop("url", "") or "")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            shown = _redacted(url)
            raise ValueError(
                f"schema_registry URL {shown!r} is not an http:// or https:// URL; write it like "
                "https://registry.example.com:8081 (user info, if any: https://user:pw@host:8081)"
            )
        if parts.username is not None:
            remember(parts.password)
            options.setdefault("username", _unquote(parts.username))
            if parts.password is not None:
                options.setdefault("password", _unquote(parts.password))
            netloc = parts.hostname + (f":{parts.port}" if parts.port else "")
            url = urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))
        return cls(url=url.rstrip("/"), **options)

    @property
    def shown(self) -> str:
        """The URL for messages: the user name, never the password."""
        if self.username is None:
            return self.url
        parts = urlsplit(self.url)
        user = quote(self.username, safe="")
        netloc = f"{user}:{REDACTED}@{parts.netloc}" if self.password else f"{user}@{parts.netloc}"
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))

    def to_dict(self) -> dict[str, Any]:
        """The settings as a mapping (the password included: pass it on privately only)."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__ if getattr(self, k)}


def _unquote(text: str) -> str:
    from urllib.parse import unquote

    return unquote(text)


def _redacted(url: str) -> str:
    from ..secrets import redact_uri

    return redact_uri(url)


@dataclass(frozen=True)
class RegisteredSchema:
    """One schema as the registry holds it. ``schema`` is the schema's text; for Protobuf,
    asked with ``format=serialized``, the base64 of its FileDescriptorProto."""

    id: int
    schema_type: str  # AVRO, PROTOBUF or JSON
    schema: str
    references: tuple[tuple[str, str, int], ...] = ()  # (name, subject, version)
    subject: str | None = None
    version: int | None = None


# Process-wide: (registry url, path) -> answer of an immutable lookup.
_CACHE: dict[tuple[str, str], Any] = {}
_CACHE_LOCK = threading.Lock()


class SchemaRegistry:
    """A client of one registry (see the module docstring)."""

    def __init__(self, settings: RegistrySettings | str | Mapping[str, Any]) -> None:
        self.settings = RegistrySettings.of(settings)
        self.requests = 0  # HTTP requests made (tests check the caching with it)

    # ---- HTTP ------------------------------------------------------------------------------

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        settings = self.settings
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"{settings.url}{path}", data=data, method=method)
        request.add_header("Accept", f"{CONTENT_TYPE}, application/json")
        if data is not None:
            request.add_header("Content-Type", CONTENT_TYPE)
        if settings.username is not None:
            token = f"{settings.username}:{settings.password or ''}".encode()
            request.add_header("Authorization", "Basic " + base64.b64encode(token).decode())
        context = None
        if settings.url.startswith("https"):
            context = ssl.create_default_context(cafile=settings.ssl_cafile)
        self.requests += 1
        try:
            with urllib.request.urlopen(request, timeout=settings.timeout_s, context=context) as r:
                body = r.read()
                try:
                    return json.loads(body or b"null")
                except ValueError:
                    raise self._not_registry(method, path, r.status, r.headers) from None
        except urllib.error.HTTPError as exc:
            self._refused(exc, method, path)
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            reason = getattr(exc, "reason", exc)
            raise RegistryUnavailableError(
                f"The schema registry at {settings.shown} cannot be reached ({reason}): check "
                "that it runs and that the URL is right. Nothing was committed; run again once "
                "it answers."
            ) from None

    def _refused(self, exc: urllib.error.HTTPError, method: str, path: str) -> None:
        try:
            detail = json.loads(exc.read() or b"{}")
        except ValueError:
            detail = {}
        message = detail.get("message") if isinstance(detail, dict) else None
        code = detail.get("error_code") if isinstance(detail, dict) else None
        where = f"{self.settings.shown}{path}"
        if exc.code >= 500:
            raise RegistryUnavailableError(
                f"The schema registry at {self.settings.shown} failed ({exc.code}: "
                f"{message or exc.reason}) on {method} {path}. Nothing was committed; run again "
                "once it answers."
            ) from None
        if exc.code == 404:
            if isinstance(code, int) and 40400 < code < 40500:  # Confluent's "not found" codes
                raise SchemaNotFoundError(message or f"not found: {where} ({code})", code)
            raise self._not_registry(method, path, 404, exc.headers) from None
        if exc.code in (401, 403):
            raise RegistryError(
                f"The schema registry at {self.settings.shown} refused the login ({exc.code}): "
                "check the user name and password of schema_registry."
            ) from None
        raise RegistryError(
            f"The schema registry refused {method} {where} ({exc.code}"
            + (f", error code {code}" if code else "")
            + f"): {message or exc.reason}"
        ) from None

    def _not_registry(self, method: str, path: str, status: int, headers: Any) -> RegistryError:
        """The error for an answer that is not the registry's own (no Confluent error code)."""
        kind = (headers.get("Content-Type") if headers is not None else None) or "no content type"
        return RegistryError(
            redact_text(
                f"The schema registry URL {self.settings.shown} gave an answer that is not a "
                f"schema registry's: {method} {self.settings.shown}{path} answered {status} "
                f"({kind}) without a registry error code. Check the URL (its path: the "
                "registry's API is at its root, e.g. https://registry:8081) and any proxy in "
                "front of it. Nothing was committed; run again once it is fixed."
            )
        )

    def _cached(self, path: str) -> Any:
        key = (self.settings.url, path)
        with _CACHE_LOCK:
            if key in _CACHE:
                return _CACHE[key]
        answer = self._call("GET", path)
        with _CACHE_LOCK:
            _CACHE[key] = answer
        return answer

    # ---- lookups ---------------------------------------------------------------------------

    def schema(self, schema_id: int, serialized: bool = False) -> RegisteredSchema:
        """The schema with ``schema_id`` (``serialized``: Protobuf as a base64 descriptor)."""
        path = f"/schemas/ids/{int(schema_id)}" + ("?format=serialized" if serialized else "")
        try:
            answer = self._cached(path)
        except SchemaNotFoundError as exc:
            if exc.error_code != SCHEMA_NOT_FOUND:
                raise RegistryError(
                    f"The schema registry at {self.settings.shown} answered GET {path} with 404 "
                    f"and error code {exc.error_code} ({exc}), not {SCHEMA_NOT_FOUND} (no such "
                    "schema id): check the registry URL. Nothing was committed."
                ) from None
            raise SchemaNotFoundError(
                f"unknown schema id {schema_id}: the schema registry at {self.settings.shown} "
                "has no schema with this id",
                SCHEMA_NOT_FOUND,
            ) from None
        return _registered(answer, schema_id)

    def versions(self, subject: str) -> list[int]:
        """The versions of ``subject`` (asked afresh: new ones come); [] when it has none."""
        try:
            answer = self._call("GET", f"/subjects/{quote(subject, safe='')}/versions")
        except SchemaNotFoundError:
            return []
        return [int(v) for v in answer]

    def version(self, subject: str, version: int, serialized: bool = False) -> RegisteredSchema:
        path = f"/subjects/{quote(subject, safe='')}/versions/{int(version)}"
        answer = self._cached(path + ("?format=serialized" if serialized else ""))
        return _registered(answer, int(answer["id"]))

    def register(
        self,
        subject: str,
        schema: str,
        schema_type: str = "AVRO",
        references: tuple[tuple[str, str, int], ...] = (),
    ) -> int:
        """Register ``schema`` under ``subject`` (the registry gives the same id for a schema
        it holds already); its id. An incompatible schema is a :class:`RegistryError`."""
        body: dict[str, Any] = {"schema": schema}
        if schema_type != "AVRO":
            body["schemaType"] = schema_type
        if references:
            body["references"] = [{"name": n, "subject": s, "version": v} for n, s, v in references]
        answer = self._call("POST", f"/subjects/{quote(subject, safe='')}/versions", body)
        return int(answer["id"])

    def compatibility(self, subject: str) -> str | None:
        """The subject's compatibility level, else the registry's (``BACKWARD``...)."""
        for path in (f"/config/{quote(subject, safe='')}", "/config"):
            try:
                answer = self._call("GET", path)
            except SchemaNotFoundError:
                continue
            level = answer.get("compatibilityLevel") or answer.get("compatibility")
            return str(level) if level else None
        return None


def _registered(answer: Mapping[str, Any], schema_id: int) -> RegisteredSchema:
    schema_type = str(answer.get("schemaType") or "AVRO")
    if schema_type not in _SCHEMA_TYPES:
        raise RegistryError(f"schema id {schema_id} has an unknown schemaType {schema_type!r}")
    references = tuple(
        (str(r["name"]), str(r["subject"]), int(r["version"]))
        for r in answer.get("references") or ()
    )
    return RegisteredSchema(
        id=schema_id,
        schema_type=schema_type,
        schema=str(answer["schema"]),
        references=references,
        subject=answer.get("subject"),
        version=answer.get("version"),
    )
