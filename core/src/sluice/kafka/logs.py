"""Keep passwords out of kafka-python's logs.

At DEBUG kafka-python logs every request it sends, and a SASL/PLAIN authentication request
carries the password in clear (``SaslAuthenticateRequest(auth_bytes=b'user\\x00user\\x00pw')``
and the raw bytes sent). With ``options.log_level`` 4 that would put the password in the
application's logs. :func:`hide_secret` registers a password; every ``kafka.*`` logger then
replaces it with ``***`` before any handler sees the record.
"""

from __future__ import annotations

import logging
import threading

__all__ = ["hide_secret", "kafka_log_level"]

REDACTED = "***"

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


class _SecretFilter(logging.Filter):
    def __init__(self) -> None:
        super().__init__()
        self._forms: set[str] = set()
        self._lock = threading.Lock()

    def add(self, secret: str) -> None:
        # As text, and as it appears inside the repr of the bytes that were sent.
        forms = {secret, repr(secret.encode("utf-8"))[2:-1]}
        with self._lock:
            self._forms |= {form for form in forms if form}

    def filter(self, record: logging.LogRecord) -> bool:
        if not self._forms:
            return True
        text = record.getMessage()
        redacted = text
        for form in sorted(self._forms, key=len, reverse=True):
            redacted = redacted.replace(form, REDACTED)
        if redacted != text:
            record.msg, record.args = redacted, ()
        return True


_FILTER = _SecretFilter()


def hide_secret(secret: str | None) -> None:
    """Make every kafka-python logger write ``***`` instead of ``secret``."""
    if not secret:
        return
    _FILTER.add(secret)
    # A logger's filters see only the records logged on that logger, so each one gets it.
    for name, logger in list(logging.Logger.manager.loggerDict.items()):
        if (name == "kafka" or name.startswith("kafka.")) and isinstance(logger, logging.Logger):
            logger.addFilter(_FILTER)  # adds nothing if it is there already
