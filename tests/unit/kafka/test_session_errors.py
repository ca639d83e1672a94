"""Why a Kafka session failed: the mend of kafka-python's dropped last bytes, and the advice."""

from __future__ import annotations

import socket
import ssl
from types import SimpleNamespace

import pytest
from kafka.errors import KafkaConnectionError, SaslAuthenticationFailedError
from kafka.net.transport import KafkaSSLTransport, KafkaTCPTransport

from sluice.kafka.session_errors import session_advice


@pytest.mark.parametrize("transport", [KafkaTCPTransport, KafkaSSLTransport])
def test_bytes_that_arrive_with_the_end_of_the_stream_are_read_before_it(
    transport: type[KafkaTCPTransport],
) -> None:
    """kafka-python 3.0.12 returned them together with the error and its reader dropped them:
    Apache Kafka's answer to a refused login is such a last message."""
    ours, broker = socket.socketpair()
    with ours:
        broker.sendall(b"the broker's last answer")
        broker.close()
        ours.setblocking(False)
        reader = SimpleNamespace(_sock=ours)

        assert transport._sock_recv(reader) == (b"the broker's last answer", None)
        data, error = transport._sock_recv(reader)
        assert data == b"" and isinstance(error, KafkaConnectionError)


def test_a_refused_login_is_advised_by_mechanism_and_user_whatever_came_after_it() -> None:
    kwargs = {"sasl_mechanism": "SCRAM-SHA-256", "sasl_plain_username": "alice"}
    refused = SaslAuthenticationFailedError("Authentication failed: Invalid username or password")
    advice = session_advice(kwargs, [refused, TimeoutError("the attempt ran out of time")])
    assert advice is not None
    assert advice.startswith("The broker refused the SASL SCRAM-SHA-256 login of user 'alice'")
    assert "Invalid username or password" in advice and "credential.password" in advice
    assert session_advice(kwargs, [TimeoutError("nothing else")]) is None


def _handshake_failure(reason: BaseException) -> KafkaConnectionError:
    """A handshake failure as kafka-python logs it: its error, with OpenSSL's as context."""
    try:
        try:
            raise reason
        except BaseException as exc:
            raise KafkaConnectionError(f"Handshake failed: {exc}") from None
    except KafkaConnectionError as wrapped:
        wrapped.__context__ = reason
        return wrapped


def test_a_handshake_a_plaintext_listener_ended_names_the_setting_that_switched_tls_on() -> None:
    kwargs = {"security_protocol": "SSL", "bootstrap_servers": ["h:9092"]}
    eof = ssl.SSLEOFError(8, "[SSL: UNEXPECTED_EOF_WHILE_READING] EOF occurred")
    advice = session_advice(kwargs, [_handshake_failure(eof)], ("options.ssl_cafile",))
    assert advice is not None and advice.startswith(
        "TLS was turned on by options.ssl_cafile, and the broker at h:9092 answered in plaintext"
    )
    chosen = session_advice(kwargs, [_handshake_failure(ConnectionResetError(104, "reset"))])
    assert chosen is not None and "TLS was turned on" not in chosen
    assert "the broker at h:9092 answered in plaintext" in chosen
    # not TLS, or not a handshake: nothing to say about plaintext
    plain = {**kwargs, "security_protocol": "PLAINTEXT"}
    assert session_advice(plain, [_handshake_failure(eof)], ("options.ssl_cafile",)) is None
    assert session_advice(kwargs, [KafkaConnectionError("Connection reset by peer")]) is None


@pytest.mark.parametrize(
    ("uri", "settings", "switched"),
    [
        ("kafka://h:9092/t", {"options.ssl_cafile": "ca.pem"}, ("options.ssl_cafile",)),
        ("h:9092", {"options.ssl_certfile": "c.pem", "options.ssl_keyfile": "k.pem"}, None),
        ("kafka+ssl://h:9092/t", {"options.ssl_cafile": "ca.pem"}, ()),
        ("h:9092", {"connection.protocol": "ssl", "options.ssl_cafile": "ca.pem"}, ()),
    ],
)
def test_which_tls_files_switched_tls_on(
    uri: str, settings: dict[str, str], switched: tuple[str, ...] | None
) -> None:
    from sluice.kafka.config import tls_switched_on_by

    expected = tuple(settings) if switched is None else switched
    assert tls_switched_on_by({"connection.uri": uri, **settings}) == expected
