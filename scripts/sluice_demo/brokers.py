"""The demo's embedded brokers (as ``sluice brokers up`` starts them) and publishing."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .settings import DemoError


class Brokers:
    """The embedded brokers, started and stopped with ``sluice brokers up|down`` in a state
    directory of the demo's own (so brokers a user started with ``sluice brokers up`` are
    neither reused nor stopped)."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.entries: list[dict[str, Any]] = []

    def _state(self) -> list[dict[str, Any]]:
        path = self.home / "brokers.json"
        if not path.exists():
            return []
        brokers: list[dict[str, Any]] = json.loads(path.read_text()).get("brokers", [])
        return brokers

    def up(self) -> list[str]:
        """Start them; returns the leftovers of an earlier, killed demo it stopped first."""
        os.environ["SLUICE_HOME"] = str(self.home)
        from sluice.cli import brokers

        leftovers = self._stop()
        try:
            brokers.up()
        finally:
            self.entries = self._state()
        return leftovers

    def up_s3(self) -> str:
        """Start the S3 server (``sluice brokers up --s3``: SeaweedFS with the bucket
        ``lake``) beside the others; returns its endpoint. Its usage hint, which names the
        playground's secret key, is not printed."""
        from sluice.cli import brokers

        os.environ["SLUICE_HOME"] = str(self.home)
        try:
            brokers.start([("seaweedfs", None)])
        finally:
            self.entries = self._state()
        return self.url("http")

    def url(self, kind: str) -> str:
        for entry in self.entries:
            if entry["scheme"].startswith(kind):
                return f"{entry['scheme']}://{entry['host']}:{entry['port']}"
        raise DemoError(f"no {kind} broker was started (see {self.home})")

    def log_tails(self, lines: int = 30) -> str:
        parts = []
        for entry in self.entries:
            try:
                text = Path(entry["log"]).read_text(errors="replace").splitlines()[-lines:]
            except OSError:
                continue
            parts.append(f"--- {entry['name']} log ({entry['log']}) ---\n" + "\n".join(text))
        return "\n".join(parts)

    def down(self) -> list[str]:
        """Stop them by pid (``sluice brokers down --purge``); returns what it stopped."""
        self.entries = []
        return self._stop()

    def _stop(self) -> list[str]:
        if not (self.home / "brokers.json").exists():
            return []
        os.environ["SLUICE_HOME"] = str(self.home)
        from sluice.cli import brokers

        running = [e for e in self._state() if brokers.running(brokers.Entry(**e))]
        brokers.down(purge=True)
        return [f"{e['name']} (pid {e['pid']})" for e in running]


def publish(url: str, topic: str, count: int, malformed: int, key_field: str | None) -> str:
    """``sluice publish URL/TOPIC --sample iot --count N --malformed M``, in this process."""
    from sluice.cli.publish import Sample
    from sluice.cli.publish import publish as publish_command

    uri = f"{url}/{topic}" + ("?qos=1" if url.startswith("mqtt") else "")
    publish_command(
        uri,
        file=None,
        stdin=False,
        sample=Sample.iot,
        count=count,
        malformed=malformed,
        seed=None,
        rate=None,
        key_field=key_field,
    )
    command = f"sluice publish {uri} --sample iot --count {count} --malformed {malformed}"
    return command + (f" --key-field {key_field}" if key_field else "")
