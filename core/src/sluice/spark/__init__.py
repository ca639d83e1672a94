"""PySpark ingestion of an exact batch: ``ingest(spark, spec, sink, source=...)``."""

from pathlib import Path

from .ingest import IngestEvent, ingest
from .result import IngestResult
from .session import spark_session

__all__ = ["IngestEvent", "IngestResult", "ingest", "spark_session", "submit_script_path"]


def submit_script_path() -> str:
    """The file to give spark-submit (see :mod:`sluice.spark.submit`)."""
    return str(Path(__file__).with_name("submit.py"))
