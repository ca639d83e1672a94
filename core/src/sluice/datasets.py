"""Reading a Parquet dataset the way Sluice wrote it: the committed batches, each entirely.

``read_dataset(sink)`` is a ``pyarrow.dataset.Dataset`` of the good rows (``quarantine=True``:
the quarantined ones) of the batches a sink has committed, with ``batch_id`` as a column. On
local disk a batch appears by one rename, so that is every ``batch_id=*/`` directory; on S3
(:mod:`sluice.spark.sinks.parquet_s3`) it is the files each batch's manifest lists, after
finishing any committed batch a crash left unfinished (its objects completed).

The reader contract of a local dataset: a plain reader that lists ``batch_id=*/`` (pyarrow's
hive discovery, Spark, DuckDB) sees every committed batch once, except while a ``sluice
compact`` commits: between its merged directory's rename into place and the move of the
directories it replaces, such a listing sees those batches twice (no single rename can swap
several directories). ``read_dataset`` lists under the sink's lock, which that switch holds, so
it never does. A listing is of one moment: a compaction that commits after it moves the listed
files aside (``_sluice/superseded/``), so read a dataset soon after listing it, and list again
after a ``FileNotFoundError``.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["read_dataset"]


def read_dataset(sink: str | os.PathLike[str], quarantine: bool = False) -> Any:
    """The committed rows of the Parquet dataset ``sink`` (a directory or ``s3://BUCKET/PREFIX``)
    as a ``pyarrow.dataset.Dataset``: ``read_dataset(sink).to_table()``, or hand it to DuckDB
    (``duckdb.sql("select * from dataset")``) or Polars."""
    import pyarrow.dataset as ds

    from .spark.sinks import open_sink
    from .spark.sinks.parquet import ParquetSink
    from .spark.sinks.parquet_s3 import S3ParquetSink

    opened = open_sink(sink)
    if isinstance(opened, S3ParquetSink):
        opened.recover()
        files, filesystem, base = (
            opened.published_files(quarantine),
            opened.filesystem(),
            f"{opened.bucket}/{opened.prefix}".rstrip("/"),
        )
    elif isinstance(opened, ParquetSink):
        files = [str(p) for p in opened.committed_files(quarantine)]
        filesystem, base = None, str(opened.root)
    else:
        raise TypeError(f"{sink} is not a Parquet dataset (read an Iceberg table with pyiceberg)")
    partitioning = ds.partitioning(flavor="hive")
    return ds.dataset(
        files,
        filesystem=filesystem,
        format="parquet",
        partitioning=partitioning,
        partition_base_dir=base,
    )
