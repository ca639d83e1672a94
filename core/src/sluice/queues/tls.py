"""TLS and credentials on the wire: the one rule every transport (Kafka, MQTT) applies.

1. TLS settings either switch TLS on or fail. A CA file, a client certificate or its key
   (``options.ssl_cafile``, ``options.ssl_certfile``, ``options.ssl_keyfile``) on a connection
   that names no TLS switches TLS on; with a ``connection.protocol`` that explicitly names a
   plaintext protocol they are a :class:`ConfigError`. They are never ignored.
2. Credentials never travel over plaintext unless the configuration opts in:
   ``options.allow_plaintext_credentials`` true (``?allow_plaintext_credentials=true`` in a
   URI), the same key for every transport. Without it, a password that would be sent as it is
   over a connection without TLS is a :class:`ConfigError` naming the key and the ways out.

Each transport decides what its settings mean (its protocols, its schemes, whether its
authentication sends the password at all: Kafka's SCRAM does not) and asks this module.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .config import ConfigError, ConfigKey

__all__ = [
    "ALLOW_PLAINTEXT_CREDENTIALS",
    "KEYS",
    "TLS_FILE_KEYS",
    "check_credentials",
    "tls_switched_on",
]

#: The one opt-in key for credentials over plaintext, spelled the same for every transport.
ALLOW_PLAINTEXT_CREDENTIALS = "options.allow_plaintext_credentials"

#: The settings that only mean something with TLS, and so switch it on.
TLS_FILE_KEYS = ("options.ssl_cafile", "options.ssl_certfile", "options.ssl_keyfile")

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
