from __future__ import annotations

import json

from pip_services3_messaging.queues import MessageEnvelope as PipEnvelope

from sluice.queues import MessageEnvelope


def test_bytes_payload_is_kept_as_is() -> None:
    envelope = MessageEnvelope(None, "raw", b"\x00\xff")
    assert envelope.message == b"\x00\xff"


def test_pip_services_envelope_still_fails_on_bytes() -> None:
    """Regression pin: the upstream defect Sluice's envelope exists to fix (DESIGN.md)."""
    try:
        PipEnvelope(None, "raw", b"\x00\xff")
    except TypeError:
        return
    raise AssertionError("pip-services' envelope now accepts bytes: Sluice's override can go")


def test_string_and_object_payloads() -> None:
    assert MessageEnvelope(None, "t", "héllo").message == "héllo".encode()
    assert MessageEnvelope(None, "t", {"a": [1]}).get_message_as() == {"a": [1]}
    assert MessageEnvelope(None, "t", None).message is None


def test_json_round_trip_keeps_bytes_and_ids() -> None:
    original = MessageEnvelope("c1", "t", b"\x01\x02")
    restored = MessageEnvelope.from_json(json.dumps(original.to_json()))
    assert restored is not None
    assert (
        restored.message_id,
        restored.correlation_id,
        restored.message_type,
        restored.message,
    ) == (original.message_id, "c1", "t", b"\x01\x02")


def test_json_round_trip_keeps_key_and_headers() -> None:
    original = MessageEnvelope(None, "t", "x", key=b"\x00k", headers={"h": b"\xff"})
    restored = MessageEnvelope.from_json(json.dumps(original.to_json()))
    assert restored is not None
    assert (restored.key, restored.headers) == (b"\x00k", [("h", b"\xff")])


def test_from_json_rejects_what_is_not_an_envelope() -> None:
    assert MessageEnvelope.from_json(b"not json") is None
    assert MessageEnvelope.from_json('{"value": 1}') is None
    assert MessageEnvelope.from_json(None) is None


def test_key_and_headers_are_normalised_to_bytes() -> None:
    envelope = MessageEnvelope(None, "t", "x", key="k", headers={"h": "v", "b": b"\x00"})
    assert envelope.key == b"k"
    assert envelope.headers == [("h", b"v"), ("b", b"\x00")]
    assert envelope.header("b") == b"\x00"
    assert envelope.header("missing") is None


def test_raw_json_that_carries_a_message_id_field_is_no_envelope() -> None:
    """The fault-model finding: any JSON object with a ``message_id`` was taken for an
    envelope with no payload, so a device's readings were lost as empty payloads."""
    reading = {"message_id": 3, "device": "d", "temperature": 21.5}
    assert MessageEnvelope.from_json(json.dumps(reading)) is None
    shaped = {"message_id": "3", "correlation_id": None, "message_type": None}
    assert MessageEnvelope.from_json(json.dumps(shaped)) is None, "sent_time, message missing"
    whole = MessageEnvelope("c", "t", b"x").to_json()
    for extra in ({"device": "d"}, {"message": 42}, {"sent_time": "not a time"}):
        assert MessageEnvelope.from_json(json.dumps({**whole, **extra})) is None, extra


def test_envelopes_of_sluice_and_of_pip_services_are_recognised_by_their_shape() -> None:
    pip = PipEnvelope("c", "t", "text")
    parsed = MessageEnvelope.from_json(json.dumps(pip.to_json()))
    assert parsed is not None and parsed.message == b"text" and parsed.message_id == pip.message_id
    ours = MessageEnvelope("c", "t", b"\x00bytes", key=b"k", headers={"h": b"v"})
    parsed = MessageEnvelope.from_json(json.dumps(ours.to_json()))
    assert parsed is not None and (parsed.message, parsed.key) == (b"\x00bytes", b"k")
    assert parsed.headers == [("h", b"v")]
