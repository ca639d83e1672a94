"""Broker-agnostic Sluice: envelope, capabilities, config, the queue base, memory queue, URIs."""

from .base import MessageQueue, MessageReceiver
from .capabilities import MessagingCapabilities
from .config import ConfigError, ConfigKey, UnknownConfigKeyWarning
from .envelope import MessageEnvelope
from .memory import MemoryMessageQueue
from .uri import queue_from_config, queue_from_uri, register_transport, transports, uri_to_config

__all__ = [
    "ConfigError",
    "ConfigKey",
    "MemoryMessageQueue",
    "MessageEnvelope",
    "MessageQueue",
    "MessageReceiver",
    "MessagingCapabilities",
    "UnknownConfigKeyWarning",
    "queue_from_config",
    "queue_from_uri",
    "register_transport",
    "transports",
    "uri_to_config",
]
