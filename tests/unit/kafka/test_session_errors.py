"""Why a Kafka session failed: the mend of kafka-python's dropped last bytes, and the advice."""

from __future__ import annotations

import socket
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
