"""What each queue declares it can do (the contract suite asks these before each case)."""

from __future__ import annotations

import pytest

from sluice.kafka import KafkaMessageQueue
from sluice.mqtt import MqttMessageQueue
from sluice.queues import MemoryMessageQueue
from sluice.queues.capabilities import MessagingCapabilities


def test_full_names_only_the_exceptions() -> None:
    capabilities = MessagingCapabilities.full(can_renew_lock=False, can_persist=False)
    flags = capabilities.as_dict()
    assert {name for name, value in flags.items() if not value} == {
        "can_renew_lock",
        "can_persist",
    }
    with pytest.raises(TypeError, match="can_fly"):
        MessagingCapabilities.full(can_fly=False)


def test_each_queue_declares_what_it_cannot_do() -> None:
    def cannot(queue: object) -> set[str]:
        flags = queue.get_capabilities().as_dict()  # type: ignore[attr-defined]
        return {name for name, value in flags.items() if not value}

    assert cannot(MemoryMessageQueue()) == set()
    assert cannot(KafkaMessageQueue()) == {"can_renew_lock"}
    assert cannot(MqttMessageQueue()) == {"can_message_count", "can_renew_lock", "can_persist"}
