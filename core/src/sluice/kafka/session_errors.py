"""Why a Kafka client could not start a session, in words that say what to fix.

kafka-python retries a refused bootstrap connection until its timeout and then reports only
"Unable to bootstrap": a wrong password, an untrusted broker certificate, a TLS client talking
to a plaintext listener and a broker that is not running all read the same.
:func:`recorded_failures` keeps the reasons kafka-python logs for each failed connection
meanwhile, and :func:`session_advice` turns the last one into a sentence naming the
mechanism, the user or the TLS keys to check (never the password).

It also mends a kafka-python 3.0.12 defect (:func:`_deliver_data_before_eof`): a read that
returns a broker's last bytes together with the end of the stream dropped those bytes. Apache
Kafka answers a refused SASL login with the reason and then closes the connection, so the
client saw only "socket disconnected" where the broker had said "Invalid username or
password".
"""

from __future__ import annotations

import contextlib
import logging
import ssl
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from kafka.errors import KafkaTimeoutError, SaslAuthenticationFailedError
from kafka.net import transport

from ..queues import tls

__all__ = ["explained_bootstrap", "recorded_failures", "session_advice"]

#: OpenSSL's reasons for a TLS alert about the client's certificate (none sent, or refused).
_CLIENT_CERTIFICATE_ALERTS = ("ALERT_BAD_CERTIFICATE", "ALERT_CERTIFICATE_REQUIRED")


_Receive = Callable[[Any], tuple[bytes, BaseException | None]]


def _deliver_data_before_eof(receive: _Receive) -> _Receive:
    """``_sock_recv`` that returns the bytes read before the end of the stream first, and the
    end (the error) at the next read: the socket stays readable after its end, so the next
    read comes at once."""

    def _sock_recv(self: Any) -> tuple[bytes, BaseException | None]:
        ended = self.__dict__.pop("_sluice_ended", None)
        if ended is not None:
            return b"", ended
        data, error = receive(self)
        if data and error is not None:
            self._sluice_ended = error
            return data, None
        return data, error

    return _sock_recv


for _transport in (transport.KafkaTCPTransport, transport.KafkaSSLTransport):
    if "_sock_recv" in vars(_transport):
        _transport._sock_recv = _deliver_data_before_eof(vars(_transport)["_sock_recv"])


class _Failures(logging.Handler):
    """The exceptions that kafka-python's connection errors carry, in order."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.errors: list[BaseException] = []

    def emit(self, record: logging.LogRecord) -> None:
        args = record.args if isinstance(record.args, tuple) else ()
        self.errors += [arg for arg in args if isinstance(arg, BaseException)]


@contextlib.contextmanager
def recorded_failures() -> Iterator[list[BaseException]]:
    """The errors of kafka-python's failed connections while the block runs (its ``kafka.net``
    loggers report them at ERROR, which ``options.log_level`` 1 and above let through)."""
    handler = _Failures()
    logger = logging.getLogger("kafka.net")
    logger.addHandler(handler)
    try:
        yield handler.errors
    finally:
        logger.removeHandler(handler)


def session_advice(
    kwargs: Mapping[str, Any], errors: list[BaseException], tls_switched_by: Sequence[str] = ()
) -> str | None:
    """What the latest of ``errors`` (of a client built with ``kwargs``, kafka-python's
    arguments as :func:`sluice.kafka.config.client_config` makes them) that is a refused
    login, an untrusted broker certificate, a refused client certificate or a TLS handshake
    answered in plaintext means, and which keys to check; None when there is none (the last
    attempt may end in a plain timeout). ``tls_switched_by``: the TLS files that switched TLS
    on (:func:`sluice.kafka.config.tls_switched_on_by`), named in the plaintext answer."""
    mechanism, user = kwargs.get("sasl_mechanism"), kwargs.get("sasl_plain_username")
    on_tls = str(kwargs.get("security_protocol", "")).endswith("SSL")
    for error in reversed(errors):
        chain = list(tls.error_chain(error))
        if any(isinstance(e, SaslAuthenticationFailedError) for e in chain):
            return (
                f"The broker refused the SASL {mechanism} login of user '{user}' ({error}). "
                "Check credential.username, credential.password and credential.mechanism."
            )
        if any(isinstance(e, ssl.SSLCertVerificationError) for e in chain):
            return (
                f"TLS: the broker's certificate did not verify ({error}). Check "
                "options.ssl_cafile (the CA that signed the broker's certificate) and "
                "options.ssl_check_hostname."
            )
        reasons = [
            str(getattr(e, "reason", None) or "") for e in chain if isinstance(e, ssl.SSLError)
        ]
        if any(r.endswith(_CLIENT_CERTIFICATE_ALERTS) for r in reasons):
            return (
                f"TLS: the broker refused the connection for want of a client certificate it "
                f"trusts ({error}). Set options.ssl_certfile and options.ssl_keyfile to a "
                "certificate signed by a CA the broker trusts."
            )
        if on_tls and _in_handshake(chain) and tls.answered_in_plaintext(error):
            servers = kwargs.get("bootstrap_servers") or []
            address = ",".join([servers] if isinstance(servers, str) else servers)
            return tls.plaintext_answer(address, tls_switched_by, error)
    return None


def _in_handshake(chain: list[BaseException]) -> bool:
    """Whether the errors of ``chain`` come from a TLS handshake (kafka-python says
    "Handshake failed", or OpenSSL raised)."""
    return any(isinstance(e, ssl.SSLError) or "Handshake failed" in str(e) for e in chain)


@contextlib.contextmanager
def explained_bootstrap(kwargs: Mapping[str, Any], what: str) -> Iterator[None]:
    """Build a kafka-python client of ``kwargs`` in the block (one bootstrap, no retry loop of
    its own): a bootstrap timeout whose failures :func:`session_advice` explains becomes a
    ``ConnectionError`` that says why, ``what`` naming the client ("Reading topic 'orders'")."""
    with recorded_failures() as failures:
        try:
            yield
        except KafkaTimeoutError as exc:
            advice = session_advice(kwargs, failures)
            if advice is None:
                raise
            raise ConnectionError(f"{what}: cannot connect to Kafka ({exc}). {advice}") from None
