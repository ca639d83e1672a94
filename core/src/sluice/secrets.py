"""The one place that keeps secrets out of logs, messages, metadata and errors.

Three rules, applied together by :func:`redact_text` and :func:`redact_config`:

1. **By key name.** A config value whose key names a secret (``credential.password``,
   ``credential.access_key``, any key containing ``password``, ``secret`` or ``token``) is
   shown as ``***``.
2. **Inside URIs.** The password in the user info of any URI, anywhere in a text or a config
   value (``kafka://user:***@h1:9092,h2:9092/topic``, ``mqtt://u:***@host:1883/x``, a URI
   inside an exception message), and secret query parameters
   (``?credential.password=***``). A schemeless ``user:pw@h1:9092,h2:9092`` is recognised in
   a config value whose key names a URI.
3. **Known values.** Secrets registered at runtime (:func:`remember`, :func:`remember_config`,
   :func:`remember_text`) are replaced wherever they appear, also percent-encoded, JSON-escaped
   or as the repr of their bytes (kafka-python logs the SASL request bytes). There is one
   registry per process. Values shorter than :data:`MIN_LENGTH` characters are not replaced in
   free text (that would mangle every message); rules 1 and 2 still hide them.

:data:`LOG_FILTER` is the one :class:`logging.Filter` applying them to log records;
:func:`install_log_filter` puts it on a logger and its descendants.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import traceback
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote, quote_plus, unquote

__all__ = [
    "LOG_FILTER",
    "MIN_LENGTH",
    "REDACTED",
    "SecretFilter",
    "install_log_filter",
    "is_secret_key",
    "redact_config",
    "redact_exception",
    "redact_text",
    "redact_uri",
    "redacted_errors",
    "remember",
    "remember_config",
    "remember_text",
    "secrets_in_config",
    "secrets_in_text",
]

REDACTED = "***"
#: Known secrets shorter than this are not searched for in free text.
MIN_LENGTH = 4

_SECRET_WORDS = ("password", "passwd", "secret", "token", "access_key")
_NUMBERED = re.compile(r"^(connection|credential)s\.\d+\.")

# scheme://user:password@ -- the password runs to the authority's last '@' (as urlsplit
# reads it), never across whitespace, quotes or the start of the path.
_URI_PASSWORD = re.compile(
    r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^\s/?#@:'\"<>]*:)(?P<password>[^\s/?#'\"<>]*)@"
)
_QUERY_SECRET = re.compile(
    r"(?P<head>[?&;][^=&\s#'\"]*(?:" + "|".join(_SECRET_WORDS) + r")[^=&\s#'\"]*=)"
    r"(?P<value>[^&\s#'\"<>]*)",
    re.IGNORECASE,
)


def is_secret_key(name: str, secret_names: Iterable[str] = ()) -> bool:
    """Whether the config key ``name`` holds a secret (by its name, or listed in
    ``secret_names``)."""
    canonical = _NUMBERED.sub(lambda m: m.group(1) + ".", name).lower()
    return canonical in set(secret_names) or any(word in canonical for word in _SECRET_WORDS)


def _is_uri_key(name: str) -> bool:
    last = name.lower().rsplit(".", 1)[-1]
    return last in ("uri", "url", "host", "hosts", "bootstrap", "bootstrap_servers")


# ---- the registry of known secrets ---------------------------------------------------------


class _Registry:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._forms: tuple[str, ...] = ()  # longest first

    def add(self, secret: str) -> None:
        forms = {
            secret,
            unquote(secret),
            quote(secret, safe=""),
            quote_plus(secret, safe=""),
            json.dumps(secret)[1:-1],
            repr(secret)[1:-1],
            repr(secret.encode("utf-8"))[2:-1],
        }
        new = {form for form in forms if len(form) >= MIN_LENGTH}
        with self._lock:
            if not new - set(self._forms):
                return
            self._forms = tuple(sorted(set(self._forms) | new, key=len, reverse=True))

    def replace(self, text: str) -> str:
        for form in self._forms:  # a snapshot: adding swaps the tuple
            if form in text:
                text = text.replace(form, REDACTED)
        return text


_REGISTRY = _Registry()


def remember(secret: Any) -> None:
    """Hide ``secret`` (a password, a token) from every text redacted from now on."""
    if secret is None or secret == "":
        return
    _REGISTRY.add(str(secret))


def secrets_in_text(text: str) -> set[str]:
    """The passwords of the URIs in ``text`` (user info and secret query parameters), as
    written and percent-decoded."""
    found: set[str] = set()
    for match in _URI_PASSWORD.finditer(text):
        password = match.group("password")
        found |= {password, unquote(password)}
        # An unencoded '@' (p@ss@host): some parsers (SQLAlchemy) end the password at the
        # first '@' and quote the rest as the host name in their errors; hide each piece.
        if "@" in password:
            found |= {piece for piece in password.split("@") if len(piece) >= MIN_LENGTH}
    for match in _QUERY_SECRET.finditer(text):
        found |= {match.group("value"), unquote(match.group("value").replace("+", " "))}
    return {secret for secret in found if secret}


def _schemeless_password(value: str) -> str | None:
    # user:pw@h1:9092,h2:9092 -- the form an Airflow host field or a bootstrap list can take.
    authority = value.partition("://")[2] if "://" in value else value.removeprefix("//")
    userinfo, at, _ = authority.split("/", 1)[0].rpartition("@")
    if not at or ":" not in userinfo:
        return None
    return userinfo.partition(":")[2] or None


def _items(config: Any) -> list[tuple[str, Any]]:
    if hasattr(config, "get_keys"):  # a pip-services ConfigParams
        return [(str(key), config.get(key)) for key in config.get_keys()]
    return [(str(key), value) for key, value in dict(config or {}).items()]


def secrets_in_config(config: Any, secret_names: Iterable[str] = ()) -> set[str]:
    """The secret values of ``config`` (a mapping or ConfigParams): those of secret keys and
    the passwords of URIs in any string value. A nested mapping's keys are read as
    ``outer.inner`` (``{"s3": {"secret-access-key": ...}}``)."""
    names = set(secret_names)
    found: set[str] = set()
    for key, value in _items(config):
        if value is None or value == "":
            continue
        if isinstance(value, Mapping):
            found |= secrets_in_config({f"{key}.{k}": v for k, v in value.items()}, names)
        elif is_secret_key(key, names):
            found.add(str(value))
        elif isinstance(value, str):
            found |= secrets_in_text(value)
            password = _schemeless_password(value) if _is_uri_key(key) else None
            if password:
                found |= {password, unquote(password)}
    return found


def remember_config(config: Any, secret_names: Iterable[str] = ()) -> None:
    """:func:`remember` every secret of ``config`` (see :func:`secrets_in_config`)."""
    for secret in secrets_in_config(config, secret_names):
        remember(secret)


def remember_text(text: str) -> None:
    """:func:`remember` the passwords of the URIs in ``text`` (e.g. a command line)."""
    for secret in secrets_in_text(text):
        remember(secret)


# ---- redaction -----------------------------------------------------------------------------


def redact_text(text: str, config: Any = None) -> str:
    """``text`` with URI passwords, secret query parameters and every known secret (those of
    ``config`` too, which are remembered) replaced by ``***``."""
    if config is not None:
        remember_config(config)
    text = str(text)
    text = _URI_PASSWORD.sub(lambda m: f"{m.group('head')}{REDACTED}@", text)
    text = _QUERY_SECRET.sub(lambda m: f"{m.group('head')}{REDACTED}", text)
    return _REGISTRY.replace(text)


def redact_uri(uri: str) -> str:
    """``uri`` without its password, with or without a scheme (``user:***@h1:9092,h2:9092``)."""
    password = _schemeless_password(uri)
    if password:
        if "://" in uri:
            scheme, sep, rest = uri.partition("://")
        else:
            scheme, sep, rest = "", "//" if uri.startswith("//") else "", uri.removeprefix("//")
        authority, slash, tail = rest.partition("/")
        userinfo, _, hosts = authority.rpartition("@")
        user = userinfo.partition(":")[0]
        uri = f"{scheme}{sep}{user}:{REDACTED}@{hosts}{slash}{tail}"
    return redact_text(uri)


def redact_config(config: Any, keys: Iterable[Any] = ()) -> dict[str, Any]:
    """A copy of ``config`` (a mapping or ConfigParams) that is safe to log: values of secret
    keys (by name, or ``ConfigKey``s of ``keys`` marked ``secret``) are ``***``, passwords
    inside URI values are masked, known secrets are masked in every string value."""
    names = {k.name for k in keys if getattr(k, "secret", False)}
    out: dict[str, Any] = {}
    for key, value in _items(config):
        if is_secret_key(key, names) and value not in (None, ""):
            out[key] = REDACTED
        elif isinstance(value, str):
            out[key] = redact_uri(value) if _is_uri_key(key) else redact_text(value)
        else:
            out[key] = value
    return out


def redact_exception(exc: BaseException) -> BaseException:
    """``exc`` itself when its message holds no secret, else an exception of the same type
    (or a RuntimeError naming the type) with the redacted message."""
    message = str(exc)
    clean = redact_text(message)
    if clean == message:
        return exc
    args = tuple(redact_text(a) if isinstance(a, str) else a for a in exc.args)
    try:
        replacement = type(exc)(*args)
    except Exception:  # a type that takes other arguments: fall back below
        replacement = None
    if replacement is not None and str(replacement) == clean:
        for name, value in vars(exc).items():  # e.g. an exit code; never a text with a secret
            if not isinstance(value, str) or redact_text(value) == value:
                setattr(replacement, name, value)
        return replacement
    from .errors import exception_line

    return RuntimeError(redact_text(exception_line(exc)))


@contextmanager
def redacted_errors(config: Any = None) -> Iterator[None]:
    """Re-raise an exception of the block with secrets (those of ``config`` too) removed from
    its message; when a secret shows anywhere in its traceback or chain of causes, the chain
    is dropped."""
    if config is not None:
        remember_config(config)
    try:
        yield
    except Exception as exc:
        shown = "".join(traceback.format_exception(exc))
        if redact_text(shown) == shown:
            raise
        raise redact_exception(exc) from None


# ---- logging -------------------------------------------------------------------------------


class SecretFilter(logging.Filter):
    """Rewrites a record's message (and its formatted traceback) through :func:`redact_text`."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            text = record.getMessage()
        except Exception:  # a malformed record: the handler reports it, as without us
            return True
        redacted = redact_text(text)
        if redacted != text:
            record.msg, record.args = redacted, ()
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact_text(record.exc_text)
        return True


LOG_FILTER = SecretFilter()


def install_log_filter(name: str) -> None:
    """Put :data:`LOG_FILTER` on the logger ``name`` and on every existing logger below it (a
    logger's filters see only the records logged on that logger itself)."""
    loggers = [logging.getLogger(name)]
    loggers += [
        logger
        for child, logger in list(logging.Logger.manager.loggerDict.items())
        if child.startswith(name + ".") and isinstance(logger, logging.Logger)
    ]
    for logger in loggers:
        logger.addFilter(LOG_FILTER)  # adds nothing if it is there already
