"""Lag over time, for the chart: the Kafka consumer groups' lag as the broker tells it
(:class:`sluice.metrics.KafkaLagProbe`, sampled on a thread), and the MQTT session's, which an
MQTT broker does not tell (:data:`sluice.metrics.MQTT_UNKNOWN`): there the demo counts what
it published and what the runs read."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Mapping
from typing import Any

#: Seconds between two samples of the Kafka groups' lag.
INTERVAL_S = 1.0


class LagSampler:
    """Samples the lag of each Kafka group in ``groups`` (label -> group id) every
    :data:`INTERVAL_S`, from :meth:`start` until :meth:`stop`; points are (seconds since
    ``started``, messages)."""

    def __init__(self, bootstrap: str, topic: str, groups: Mapping[str, str], started: float):
        self.bootstrap, self.topic, self.groups = bootstrap, topic, dict(groups)
        self.started = started
        self.series: dict[str, list[tuple[float, int]]] = {label: [] for label in groups}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="demo-lag", daemon=True)

    def start(self) -> LagSampler:
        self._thread.start()
        return self

    def _run(self) -> None:
        from sluice.metrics import KafkaLagProbe

        probes: dict[str, Any] = {}
        try:
            for label, group in self.groups.items():
                config = {"connection.uri": self.bootstrap, "topic": self.topic, "group_id": group}
                probes[label] = KafkaLagProbe(config, oldest=False)
            while True:
                stopping = self._stop.is_set()
                for label, probe in probes.items():
                    with contextlib.suppress(Exception):  # a missed sample is only a gap
                        lag = probe.measure().lag
                        if lag is not None:
                            self.series[label].append((self.now(), lag))
                if stopping:
                    return
                self._stop.wait(INTERVAL_S)
        finally:
            for probe in probes.values():
                with contextlib.suppress(Exception):
                    probe.close()

    def now(self) -> float:
        return time.perf_counter() - self.started

    def stop(self) -> None:
        """Take one last sample of each group (nothing waits by then), then stop."""
        self._stop.set()
        self._thread.join(timeout=30)


class CountedLag:
    """MQTT's lag as the demo counts it: messages published to the session, minus those the
    runs read."""

    def __init__(self, clock: LagSampler) -> None:
        self.clock = clock
        self.waiting = 0
        self.points: list[tuple[float, int]] = [(clock.now(), 0)]

    def published(self, count: int) -> None:
        self._step(count)

    def read(self, count: int) -> None:
        self._step(-count)

    def _step(self, change: int) -> None:
        now = self.clock.now()
        self.points.append((now, self.waiting))
        self.waiting = max(0, self.waiting + change)
        self.points.append((now, self.waiting))
