"""sluice.testing: real brokers on free ports for tests and demos, and a pytest plugin."""

from ..brokers import (
    BrokerError,
    BrokerProcess,
    free_port,
    start_mosquitto,
    start_noida,
    start_tansu,
)
from .certificates import Certificates, make_certificates
from .waiting import wait_until

__all__ = [
    "BrokerError",
    "BrokerProcess",
    "Certificates",
    "free_port",
    "make_certificates",
    "start_mosquitto",
    "start_noida",
    "start_tansu",
    "wait_until",
]
