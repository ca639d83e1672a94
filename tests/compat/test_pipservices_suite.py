"""pip-services3-kafka's own queue tests, unmodified, pass against Sluice's KafkaMessageQueue.

The suite (``pip_services3_kafka_3_1_11/``, copied from its sdist; see the README there)
configures ``options.num_partitions`` 2 and ``options.write_partition`` 1 and relies on
``open()`` creating its topic with two partitions, as pip-services' queue does: before
Sluice's queue did that, four of its five tests failed with "Unrecognized partition 1". It
runs in a pytest of its own, in a copy of the folder where ``pip_services3_kafka`` is a
stand-in whose ``KafkaMessageQueue`` is Sluice's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from sluice.testing.plugin import Broker
from tests.integration.cli.conftest import read_topic

SUITE = Path(__file__).with_name("pip_services3_kafka_3_1_11")
STAND_IN = {
    "pip_services3_kafka/__init__.py": "",
    "pip_services3_kafka/queues/__init__.py": (
        "from sluice.pipservices import KafkaMessageQueue\n\n__all__ = ['KafkaMessageQueue']\n"
    ),
    "pip_services3_kafka/queues/KafkaMessageQueue.py": (
        "from sluice.pipservices import KafkaMessageQueue\n\n__all__ = ['KafkaMessageQueue']\n"
    ),
    # the sdist's test/ has no __init__.py: without one, the standard library's test package
    # shadows it (`from test.queues.MessageQueueFixture import ...`)
    "test/__init__.py": "",
}


def test_pip_services3_kafkas_own_queue_tests_pass_against_sluice(
    noida_broker: Broker, unique_name: str, tmp_path: Path
) -> None:
    root = tmp_path / "suite"
    shutil.copytree(SUITE, root)
    for name, text in STAND_IN.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    env = {
        **os.environ,
        "KAFKA_SERVICE_HOST": noida_broker.host,
        "KAFKA_SERVICE_PORT": str(noida_broker.port),
        "KAFKA_TOPIC": unique_name,  # a topic that does not exist yet: open() creates it
    }
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
         "-W", "ignore::UserWarning", "--rootdir", str(root), "test/queues"],
        cwd=root, env=env, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "5 passed" in done.stdout, done.stdout[-2000:]
    partitions = {r.partition for r in read_topic(noida_broker.bootstrap, unique_name)}
    assert partitions == {1}  # created with two partitions, written to the second
