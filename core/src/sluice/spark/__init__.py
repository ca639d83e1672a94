"""PySpark ingestion of an exact batch: ``ingest(spark, spec, sink, source=...)``."""

from .ingest import IngestEvent, ingest
from .result import IngestResult
from .session import spark_session

__all__ = ["IngestEvent", "IngestResult", "ingest", "spark_session"]
