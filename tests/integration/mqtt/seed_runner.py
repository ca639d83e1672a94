"""Run seed 002's example text, as written, inside a private network namespace.

Usage: ``python seed_runner.py EXAMPLE_FILE``, under ``unshare --net``. The example connects to
localhost:1883; in the namespace that is a mosquitto this script starts, not the machine's.
Prints the received message as JSON.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from pip_services3_commons.config import ConfigParams

from sluice.mqtt import MqttMessageQueue
from sluice.queues import MessageEnvelope
from sluice.testing import start_mosquitto


def main(example: Path) -> None:
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    broker = start_mosquitto(port=1883)
    namespace: dict[str, Any] = {
        "MqttMessageQueue": MqttMessageQueue,
        "MessageEnvelope": MessageEnvelope,
        "ConfigParams": ConfigParams,
    }
    try:
        exec(compile(example.read_text(), "seed-002-example", "exec"), namespace)
        message = namespace["message"]
        namespace["queue"].close(None)
    finally:
        broker.close()
    result = None
    if message is not None:
        result = {"type": message.message_type, "text": message.get_message_as_string()}
    print(json.dumps({"broker_port": broker.port, "message": result}))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
