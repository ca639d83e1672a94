"""Sluice in common-messaging: ``MessageQueueTrigger(scheme="sluice", conn_id=..., topic=...)``.

The schemes ``sluice``, ``sluice+kafka`` and ``sluice+mqtt`` all run
:class:`~sluice_airflow.triggers.queue.QueueMessageTrigger` (which also defines the accepted
keyword arguments); the broker is the one of the connection (``sluice_kafka`` or
``sluice_mqtt``). Plain ``kafka`` stays with the Apache Kafka provider.
"""

from __future__ import annotations

from airflow.providers.common.messaging.providers.base_provider import BaseMessageQueueProvider
from airflow.triggers.base import BaseEventTrigger

from ..triggers.queue import QueueMessageTrigger

__all__ = ["SCHEMES", "SluiceMessageQueueProvider"]

SCHEMES = frozenset({"sluice", "sluice+kafka", "sluice+mqtt"})


class SluiceMessageQueueProvider(BaseMessageQueueProvider):
    """Dispatches the ``sluice`` schemes to :class:`QueueMessageTrigger`."""

    scheme = "sluice"

    def scheme_matches(self, scheme: str) -> bool:
        return scheme.lower() in SCHEMES

    def trigger_class(self) -> type[BaseEventTrigger]:
        return QueueMessageTrigger
