"""CompactOperator and ExpireOperator: keeping a sink fast from a DAG.

They run :func:`sluice.maintenance.compact` and :func:`sluice.maintenance.expire` (what
``sluice compact`` and ``sluice expire`` run) with the same options. Both are safe beside
running ingests; a compaction that an ingest overtook commits again, one that another
compaction overtook gives up (the task fails and is retried, nothing was changed). Their
XCom is the result (``CompactionResult.to_dict()`` / ``ExpiryResult.to_dict()``). A daily
DAG::

    with DAG("readings_maintenance", schedule="@daily", ...):
        CompactOperator(task_id="compact", sink="/lake/readings", target_file_size="128MB")
        >> ExpireOperator(task_id="expire", sink="/lake/readings", older_than="7d")
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator, Context
from airflow.sdk.exceptions import AirflowException, AirflowFailException

__all__ = ["CompactOperator", "ExpireOperator"]


class CompactOperator(BaseOperator):
    """Rewrite the small files of ``sink`` into files of ``target_file_size`` in one commit.

    :param sink: the sink (templated): a Parquet dataset directory or
        ``iceberg://CATALOG/NAMESPACE.TABLE``.
    :param target_file_size: ``128MB``, ``512KB``... or bytes.
    :param min_files: rewrite a group of small files only if it has at least this many.
    :return: the compaction's result as a dict.
    """

    template_fields: Sequence[str] = ("sink",)
    ui_color = "#fdebd0"

    def __init__(
        self,
        *,
        sink: str,
        target_file_size: str | int = "128MB",
        min_files: int = 5,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        from sluice.maintenance import parse_size

        parse_size(target_file_size)  # a wrong size fails the DAG's import, not its run
        self.sink = sink
        self.target_file_size = target_file_size
        self.min_files = min_files

    def execute(self, context: Context) -> dict[str, Any]:
        from sluice.maintenance import compact
        from sluice.queues.config import ConfigError

        try:
            result = compact(self.sink, self.target_file_size, self.min_files, self.log.info)
        except ConfigError as exc:
            raise AirflowFailException(str(exc)) from None
        for line in result.lines():
            self.log.info("%s", line)
        if result.gave_up:
            raise AirflowException(f"The compaction of {self.sink} gave up: {result.gave_up}")
        return result.to_dict()


class ExpireOperator(BaseOperator):
    """Remove what ``sink`` no longer needs: Iceberg snapshots older than ``older_than``, the
    files only they held and orphan files of crashed runs; Parquet directories a compaction
    replaced and the staging of crashed runs.

    :param sink: the sink (templated).
    :param older_than: ``7d``, ``12h``... or seconds.
    :param min_age: Iceberg: files no snapshot references wait this long (a live run's).
    :param dry_run: only say (log and XCom) what would be removed.
    :return: the expiry's result as a dict.
    """

    template_fields: Sequence[str] = ("sink",)
    ui_color = "#fdebd0"

    def __init__(
        self,
        *,
        sink: str,
        older_than: str | float = "7d",
        min_age: str | float = "1h",
        dry_run: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        from sluice.maintenance import parse_age

        parse_age(older_than)
        parse_age(min_age)
        self.sink = sink
        self.older_than = older_than
        self.min_age = min_age
        self.report_only = dry_run  # BaseOperator.dry_run is a method

    def execute(self, context: Context) -> dict[str, Any]:
        from sluice.maintenance import expire
        from sluice.queues.config import ConfigError

        try:
            say = self.log.info
            result = expire(self.sink, self.older_than, self.report_only, self.min_age, say)
        except ConfigError as exc:
            raise AirflowFailException(str(exc)) from None
        for line in result.lines():
            self.log.info("%s", line)
        return result.to_dict()
