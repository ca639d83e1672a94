"""Keep passwords out of kafka-python's logs.

At DEBUG kafka-python logs every request it sends, and a SASL/PLAIN authentication request
carries the password in clear (``SaslAuthenticateRequest(auth_bytes=b'user\\x00user\\x00pw')``
and the raw bytes sent). With ``options.log_level`` 4 that would put the password in the
application's logs. :func:`hide_secret` registers a password with :mod:`sluice.secrets`;
every ``kafka.*`` logger then carries its one log filter, which replaces known secrets (and
URI passwords) with ``***`` before any handler sees the record.
"""

from __future__ import annotations

import logging

from ..secrets import install_log_filter, remember

__all__ = ["hide_secret", "kafka_log_level"]

#: options.log_level (pip-services: 0 none, 1 error, 2 warn, 3 info, 4 debug) as logging levels.
_LOG_LEVELS = {
    0: logging.CRITICAL + 10,
    1: logging.ERROR,
    2: logging.WARNING,
    3: logging.INFO,
    4: logging.DEBUG,
}


def kafka_log_level(log_level: int) -> int:
    """The stdlib logging level for pip-services' ``options.log_level``."""
    return _LOG_LEVELS.get(log_level, logging.ERROR)


def hide_secret(secret: str | None) -> None:
    """Make every kafka-python logger write ``***`` instead of ``secret``."""
    remember(secret)
    install_log_filter("kafka")
