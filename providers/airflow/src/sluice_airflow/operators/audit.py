"""AuditOperator: fails the DAG run when the sink disagrees with the broker.

Runs :func:`sluice.audit.audit` (what ``sluice audit SINK --source URI`` runs) on the sink:
per Kafka partition, offsets the group committed that are in no batch (*missing*) and
offsets written more than once (*doubled*); per MQTT session, message ids written more than
once. The task fails, without retries, naming each problem; its XCom is the audit's JSON
(``sluice audit --json``'s layout). The audit reads the sink's whole history: run it after an
ingest now and then (a daily DAG, or after each ingest of a small table), not as a sensor.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator, Context
from airflow.sdk.exceptions import AirflowFailException

from sluice.connection_fields import check_no_secrets
from sluice.secrets import redacted_errors

from ..hooks.queue import QueueHook

__all__ = ["AuditOperator"]


class AuditOperator(BaseOperator):
    """Audit ``sink`` against the broker of ``conn_id``; fail when anything is missing or
    doubled.

    :param sink: the sink (templated): a dataset directory or ``iceberg://CATALOG/NS.TABLE``.
    :param conn_id: the ``sluice_kafka`` connection of the broker the sink's Kafka batches came
        from (its committed offsets are compared); an MQTT sink's audit needs no broker.
    :param topic: audit only this topic's streams (templated; default: every stream).
    :param group_id: with ``topic``, only this group's (or MQTT session's) stream.
    :param config: config keys on top of the connection's (never credentials).
    :param metrics: send ``sluice.audit.missing/doubled.<topic>.<group>`` gauges
        (:mod:`sluice_airflow.metrics`).
    :return: the audit report (``AuditReport.to_dict()``) of the streams audited.
    """

    template_fields: Sequence[str] = ("sink", "topic")
    ui_color = "#d5f5e3"

    def __init__(
        self,
        *,
        sink: str,
        conn_id: str = QueueHook.default_conn_name,
        topic: str | None = None,
        group_id: str | None = None,
        config: dict[str, Any] | None = None,
        metrics: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        check_no_secrets(config, f"AuditOperator({self.task_id})")
        if group_id is not None and topic is None:
            raise ValueError(f"AuditOperator({self.task_id}): group_id needs a topic.")
        self.sink = sink
        self.conn_id = conn_id
        self.topic = topic
        self.group_id = group_id
        self.config = dict(config or {})
        self.metrics = metrics

    def execute(self, context: Context) -> dict[str, Any]:
        from sluice.audit import AuditReport, audit

        hook = QueueHook(self.conn_id)
        source = hook.config(**self.config)
        with redacted_errors(source):
            report = audit(self.sink, source if hook.kind == "kafka" else None)
        streams = [
            s
            for s in report.streams
            if (self.topic is None or s.topic == self.topic)
            and (self.group_id is None or s.group == self.group_id)
        ]
        if not streams:
            wanted = f" of topic '{self.topic}'" if self.topic else ""
            raise AirflowFailException(
                f"The sink {self.sink} holds no published batch{wanted}: nothing to audit. "
                "Check the sink (and topic) given to the AuditOperator."
            )
        audited = AuditReport(report.sink, streams)
        for stream in streams:
            self.log.info("%s", "\n".join(AuditReport(report.sink, [stream]).lines()))
            if self.metrics:
                from ..metrics import send_gauges

                missing = sum(p.missing_count for p in stream.partitions)
                doubled = stream.doubled + sum(p.doubled for p in stream.partitions)
                where = (stream.kind, stream.topic, stream.group)
                send_gauges("audit", *where, missing=missing, doubled=doubled)
        problems = audited.problems()
        if problems:
            raise AirflowFailException(
                f"The sink {self.sink} disagrees with the broker: " + "; ".join(problems) + ". "
                "'sluice audit SINK --source kafka://HOST:PORT' shows every partition. Missing "
                "offsets still on the broker are ingested again once the group is reset to the "
                "first of them (an ingest skips what the sink holds); a doubled batch must be "
                "removed from the sink by hand."
            )
        return audited.to_dict()
