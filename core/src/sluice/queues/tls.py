"""TLS and credentials on the wire: the one rule every transport (Kafka, MQTT) applies.

1. TLS settings either switch TLS on or fail. A CA file, a client certificate or its key
   (``options.ssl_cafile``, ``options.ssl_certfile``, ``options.ssl_keyfile``) on a connection
   that names no TLS switches TLS on; with a ``connection.protocol`` that explicitly names a
   plaintext protocol they are a :class:`ConfigError`. They are never ignored.
2. Credentials never travel over plaintext unless the configuration opts in:
   ``options.allow_plaintext_credentials`` true (``?allow_plaintext_credentials=true`` in a
   URI), the same key for every transport. Without it, a password that would be sent as it is
   over a connection without TLS is a :class:`ConfigError` naming the key and the ways out.
3. A TLS handshake that meets a plaintext listener (the broker closes the connection on the
   ClientHello, or answers with bytes that are no TLS record) is said to be one
   (:func:`answered_in_plaintext`, :func:`plaintext_answer`), naming the TLS file that
   switched TLS on where one did (:func:`switched_on_by`), never as a broker that is not
   running.

Each transport decides what its settings mean (its protocols, its schemes, whether its
authentication sends the password at all: Kafka's SCRAM does not) and asks this module.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from .config import ConfigError, ConfigKey

__all__ = [
    "ALLOW_PLAINTEXT_CREDENTIALS",
    "KEYS",
    "TLS_FILE_KEYS",
    "answered_in_plaintext",
    "check_credentials",
    "error_chain",
    "plaintext_answer",
    "switched_on_by",
    "tls_switched_on",
]

#: The one opt-in key for credentials over plaintext, spelled the same for every transport.
ALLOW_PLAINTEXT_CREDENTIALS = "options.allow_plaintext_credentials"

#: The settings that only mean something with TLS, and so switch it on.
TLS_FILE_KEYS = ("options.ssl_cafile", "options.ssl_certfile", "options.ssl_keyfile")

#: OpenSSL's reasons for a handshake whose peer speaks no TLS: it closed the connection on the
#: ClientHello (Apache Kafka's and mosquitto's plaintext listeners do) or answered with bytes
#: that are no TLS record (a plaintext protocol's own answer).
_PLAINTEXT_PEER = (
    "UNEXPECTED_EOF_WHILE_READING",
    "WRONG_VERSION_NUMBER",
    "RECORD_LAYER_FAILURE",
    "PACKET_LENGTH_TOO_LONG",
    "HTTP_REQUEST",
)

#: The keys of the rule: every connection that takes credentials declares them.
KEYS: tuple[ConfigKey, ...] = (
    ConfigKey(
        ALLOW_PLAINTEXT_CREDENTIALS,
        bool,
        False,
        "Allow a password to be sent over a connection without TLS (a broker on a network you "
        "trust). Without it such a configuration is an error: use TLS instead.",
    ),
)


def tls_switched_on(
    config: Mapping[str, Any], component: str, *, tls: bool, plaintext_chosen: str | None
) -> bool:
    """Whether the connection uses TLS: ``tls`` (what its protocol or scheme says), or a TLS
    file of :data:`TLS_FILE_KEYS` switching it on.

    ``plaintext_chosen`` describes an explicit choice of plaintext (e.g. "config key
    'connection.protocol' is 'tcp'"), None when the protocol is only the transport's
    default; with it, a TLS file is a :class:`ConfigError` naming both.
    """
    given = [key for key in TLS_FILE_KEYS if config.get(key)]
    if tls or not given:
        return tls
    if plaintext_chosen:
        keys = ", ".join(f"'{key}'" for key in given)
        raise ConfigError(
            f"{component}: config key {keys} is set, but {plaintext_chosen}, which has no TLS: "
            "TLS settings are never ignored. Choose a TLS protocol for connection.protocol (or "
            "leave it out: a TLS setting then switches TLS on), or remove the TLS settings."
        )
    return True


def switched_on_by(config: Mapping[str, Any], *, tls: bool) -> tuple[str, ...]:
    """The keys of :data:`TLS_FILE_KEYS` that switched TLS on (:func:`tls_switched_on`):
    those given, when the protocol itself (``tls``: what the transport's protocol or scheme
    says) named no TLS; () when it did."""
    return () if tls else tuple(key for key in TLS_FILE_KEYS if config.get(key))


def error_chain(error: BaseException) -> Iterator[BaseException]:
    """``error``, its causes and contexts, and the exceptions among its arguments (client
    libraries wrap an ``ssl.SSLError`` in their own connection errors, either way)."""
    seen: set[int] = set()
    pending = [error]
    while pending:
        current = pending.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        pending += [a for a in current.args if isinstance(a, BaseException)]
        pending += [e for e in (current.__cause__, current.__context__) if e is not None]


def answered_in_plaintext(error: BaseException) -> bool:
    """Whether ``error``, the failure of a TLS handshake (ask about nothing else), says that
    the listener speaks no TLS (the module docstring, rule 3): it closed the connection on the
    ClientHello, cleanly or with a reset (mosquitto resets it), or answered with bytes that
    are no TLS record."""
    for found in error_chain(error):
        if isinstance(found, (ssl.SSLEOFError, ConnectionResetError)):
            return True
        if isinstance(found, ssl.SSLError) and getattr(found, "reason", None) in _PLAINTEXT_PEER:
            return True
    return False


def plaintext_answer(address: str, switched_by: Sequence[str], error: BaseException) -> str:
    """The sentence for a handshake that met a plaintext listener at ``address``:
    ``switched_by`` the TLS files that turned TLS on (:func:`switched_on_by`), ``error`` the
    handshake's failure."""
    if switched_by:
        keys = " and ".join(switched_by)
        return (
            f"TLS was turned on by {keys}, and the broker at {address} answered in plaintext "
            f"(the TLS handshake failed: {error}). Point connection.port (or connection.uri) at "
            f"the broker's TLS listener, or leave out {keys} to connect in plaintext."
        )
    return (
        f"The connection asks for TLS, and the broker at {address} answered in plaintext (the "
        f"TLS handshake failed: {error}). Point connection.port (or connection.uri) at the "
        "broker's TLS listener, or choose a plaintext protocol."
    )


def check_credentials(
    config: Mapping[str, Any],
    component: str,
    *,
    tls: bool,
    sends_password: bool,
    where: str,
    use_tls: str,
    also_allowed_by: str | None = None,
) -> None:
    """Raise :class:`ConfigError` when a password would go over plaintext without the
    configuration opting in (:data:`ALLOW_PLAINTEXT_CREDENTIALS`).

    ``sends_password``: the connection has credentials whose password its authentication
    sends as it is; ``where``: what makes the connection plaintext, for the message;
    ``use_tls``: how to switch TLS on for this transport; ``also_allowed_by``: a
    transport's own explicit spelling of the same choice, that already opted in (Kafka's
    ``connection.protocol`` sasl_plaintext), named in the message.
    """
    if tls or not sends_password or config.get(ALLOW_PLAINTEXT_CREDENTIALS):
        return
    also = f" ({also_allowed_by} says the same)" if also_allowed_by else ""
    raise ConfigError(
        f"{component}: credentials are configured but {where}: this would send the password "
        f"unencrypted. Use TLS: {use_tls}. Or, for a broker on a network you trust, opt in "
        f"with config key '{ALLOW_PLAINTEXT_CREDENTIALS}' true (in a queue URI: "
        f"?allow_plaintext_credentials=true){also}."
    )
