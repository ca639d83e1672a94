"""QueueMessageSensor: waits until messages wait on a Kafka or MQTT topic; returns the batch.

Its XCom value is the :class:`~sluice.batch.BatchSpec` as a dict (which messages, not their
payloads), for :class:`~sluice_airflow.operators.spark.SparkIngestOperator`. Sensing commits
and acknowledges nothing. Each run plans its batch from the group's committed offsets (the one
sensing model of :mod:`sluice.sensing`), so after a failed ingest the next run's batch starts
where the group's commits stopped and takes the failed run's messages again; keep one run of
a DAG at a time (``max_active_runs=1``), or two runs plan the same messages.

Deferrable by default (the wait runs in the triggerer, as
:class:`~sluice_airflow.triggers.queue.QueueMessageTrigger`); ``deferrable=False`` pokes, in
``poke`` or ``reschedule`` mode. ``timeout`` and ``soft_fail`` work as for any sensor, and a
deferred sensor's trigger times out at ``timeout`` too.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator, Context, PokeReturnValue

from sluice.batch import BatchSpec
from sluice.connection_fields import check_no_secrets
from sluice.kafka.watch import DEFAULT_INTERVAL
from sluice.sensing import plan_now, waiting_status

from ..hooks.queue import QueueHook
from ..triggers.queue import QueueMessageTrigger, describe_batch

__all__ = ["QueueMessageSensor"]

#: Seconds a poke waits for an MQTT session's queued messages to arrive after connecting.
MQTT_POKE_WAIT = 2.0


class QueueMessageSensor(BaseSensorOperator):
    """Wait for at least ``min_messages`` messages on ``topic``; return their BatchSpec dict.

    :param conn_id: a ``sluice_kafka`` or ``sluice_mqtt`` connection.
    :param topic: the Kafka topic or MQTT topic filter (templated).
    :param min_messages: how many messages must wait.
    :param max_messages: the most messages the batch holds (None: all that wait).
    :param config: config keys on top of the connection's (templated; never credentials).
    :param deferrable: wait in the triggerer (default) instead of poking; a batch that already
        waits is returned by one poke, without deferring.
    :param trigger_poll_interval: seconds between the trigger's checks while deferred.
    """

    template_fields: Sequence[str] = ("topic", "config")
    ui_color = "#d6eaf8"

    def __init__(
        self,
        *,
        conn_id: str = QueueHook.default_conn_name,
        topic: str,
        min_messages: int = 1,
        max_messages: int | None = None,
        config: dict[str, Any] | None = None,
        deferrable: bool = True,
        trigger_poll_interval: float = DEFAULT_INTERVAL,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        check_no_secrets(config, f"QueueMessageSensor({self.task_id})")
        self.conn_id = conn_id
        self.topic = topic
        self.min_messages = min_messages
        self.max_messages = max_messages
        self.config = dict(config or {})
        self.deferrable = deferrable
        self.trigger_poll_interval = trigger_poll_interval

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        # A batch that already waits is returned at once. Deferring would cost a trigger round
        # trip, and a trigger that fires right after the deferral hits an Airflow race
        # (apache/airflow#72716): the stale executor event of the deferring attempt fails the
        # resumed one.
        ready = self.poke(context)
        if ready.is_done:
            return ready.xcom_value
        self.defer(
            trigger=QueueMessageTrigger(
                conn_id=self.conn_id,
                topic=self.topic,
                min_messages=self.min_messages,
                max_messages=self.max_messages,
                poll_interval=self.trigger_poll_interval,
                config=self.config,
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout),
        )

    def poke(self, context: Context) -> PokeReturnValue:
        hook = QueueHook(self.conn_id)
        kind = hook.kind
        wait = min(MQTT_POKE_WAIT, self.poke_interval) if kind == "mqtt" else 0.0
        spec, count = plan_now(
            kind,
            hook.config(self.topic, **self.config),
            self.min_messages,
            self.max_messages,
            wait,
        )
        if spec is None:
            self.log.info("%s", waiting_status(count, self.min_messages, self.topic))
            return PokeReturnValue(is_done=False)
        self.log.info("Waiting: %s", describe_batch(spec))
        return PokeReturnValue(is_done=True, xcom_value=spec.to_dict())

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        """The trigger's event is the BatchSpec dict; checked, then returned (XCom)."""
        spec = BatchSpec.from_dict(event)
        self.log.info("Waiting: %s", describe_batch(spec))
        return spec.to_dict()
