"""Seed 002's example, run verbatim (only the imports are Sluice's).

The example hard-codes ``localhost:1883``, where the machine's own mosquitto listens (not ours
to use). Rather than edit the text, it runs in a private network namespace (``unshare --net``)
in which localhost:1883 is a mosquitto of the test's own. Without the privilege to make a
namespace the test skips; tests/integration/seeds runs the same text with only the port changed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ..seeds.conftest import example, seed_example

RUNNER = Path(__file__).with_name("seed_runner.py")


def can_make_a_network_namespace() -> bool:
    try:
        probe = subprocess.run(["unshare", "--net", "true"], capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


def test_seed_002_example_verbatim(tmp_path: Path) -> None:
    if not can_make_a_network_namespace():
        pytest.skip("needs `unshare --net` (root or CAP_SYS_ADMIN) to give the example a port 1883")
    text = seed_example("002") or example("seed002_mqtt")
    assert '"connection.host", "localhost"' in text and '"connection.port", 1883' in text
    code = tmp_path / "seed002.py"
    code.write_text(text)

    run = subprocess.run(
        ["unshare", "--net", sys.executable, str(RUNNER), str(code)],
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["broker_port"] == 1883
    assert result["message"] == {"type": "mymessage", "text": "ABC"}
