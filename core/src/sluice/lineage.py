"""Where a batch comes from and where it goes, named the OpenLineage way.

The one home of lineage naming (https://openlineage.io/docs/spec/naming); the Airflow
operators' OpenLineage events and the Dagster assets' metadata both take their names from
here, so the same topic and table have the same identity everywhere:

- a Kafka topic: namespace ``kafka://{host}:{port}`` of the first bootstrap server, name the
  topic (as the spec and Airflow's Kafka provider name it);
- an MQTT topic filter: namespace ``mqtt://{host}:{port}``, name the filter (the spec names no
  MQTT datasets; this follows its Kafka form);
- a Parquet sink: a local path is namespace ``file``, name the absolute path; an object store
  or distributed file system location is ``s3://{bucket}`` (``s3a``/``s3n`` too) with the
  object key, ``gs://{bucket}``, ``abfss://{container}@{service}``, ``hdfs://{host}:{port}``
  with the path;
- an Iceberg table: its location, named as a path (as OpenLineage's Spark integration names
  Iceberg tables, so lineage from Spark jobs that read the table joins up), with a *symlink*
  of type TABLE naming ``NAMESPACE.TABLE`` in the catalog (its URI for REST and Hive catalogs,
  else the warehouse) and the catalog itself (framework ``iceberg``, its type and name).

User info, passwords and query strings are never part of a name.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

__all__ = [
    "CatalogInfo",
    "DatasetName",
    "SinkDataset",
    "path_dataset",
    "sink_dataset",
    "source_dataset",
    "topic_asset_key",
    "written_schema",
]

#: Schemes of object stores, whose dataset names are object keys (no leading slash).
_OBJECT_STORES = {"s3": "s3", "s3a": "s3", "s3n": "s3", "gs": "gs", "gcs": "gs", "wasbs": "wasbs"}


@dataclass(frozen=True)
class DatasetName:
    """A dataset's OpenLineage identity."""

    namespace: str
    name: str

    @property
    def uri(self) -> str:
        """``namespace/name`` as one URI (``kafka://h:9092/orders``, ``file:///lake/orders``)."""
        if self.namespace == "file":
            return f"file://{self.name}"
        return f"{self.namespace}/{self.name.lstrip('/')}"


@dataclass(frozen=True)
class CatalogInfo:
    """The catalog of an Iceberg table (OpenLineage's catalog dataset facet)."""

    name: str
    type: str
    warehouse: str | None = None


@dataclass(frozen=True)
class SinkDataset:
    """A sink's identity: the dataset, and for Iceberg the table's name in its catalog."""

    dataset: DatasetName
    storage: str  # "parquet", "iceberg" or "delta"
    symlink: DatasetName | None = None
    catalog: CatalogInfo | None = None


def _host_port(server: str, default_port: int) -> str:
    server = server.strip().rpartition("@")[2]
    host, _, port = server.rpartition(":") if ":" in server else (server, "", "")
    return f"{host}:{port or default_port}" if host else f"{server}:{default_port}"


def source_dataset(kind: str, config: Mapping[str, Any], topic: str | None = None) -> DatasetName:
    """The topic (``topic``, else the config's) of a queue ``config`` of ``kind``."""
    name = topic if topic is not None else config.get("topic")
    if not name:
        raise ValueError(f"The {kind} config names no topic: give one to name its dataset.")
    if kind == "kafka":
        from .kafka.config import bootstrap_servers

        servers = bootstrap_servers(dict(config))
        return DatasetName(f"kafka://{_host_port(servers[0], 9092)}", str(name))
    if kind == "mqtt":
        from .mqtt.config import broker_address

        endpoint = broker_address(dict(config))
        return DatasetName(f"mqtt://{endpoint.host}:{endpoint.port}", str(name))
    raise ValueError(f"No dataset naming for {kind!r} queues (only kafka and mqtt).")


def path_dataset(location: str | os.PathLike[str]) -> DatasetName:
    """A file or directory location as a dataset: a local path (or ``file://``) is namespace
    ``file`` with the absolute path; an object store's is its bucket with the object key."""
    text = os.fspath(location)
    parts = urlsplit(text)
    scheme = parts.scheme.lower()
    if scheme in ("", "file") or len(scheme) == 1:  # one letter: a Windows drive
        path = parts.path if scheme == "file" else text
        return DatasetName("file", str(Path(path).absolute()))
    # Azure's authority is container@service; elsewhere an '@' ends the user info
    azure = scheme in ("abfss", "abfs", "wasbs")
    authority = parts.netloc if azure else parts.netloc.rpartition("@")[2]
    if scheme in _OBJECT_STORES:
        return DatasetName(f"{_OBJECT_STORES[scheme]}://{authority}", parts.path.lstrip("/"))
    return DatasetName(f"{scheme}://{authority}", parts.path or "/")


def sink_dataset(sink: str | os.PathLike[str]) -> SinkDataset:
    """The identity of an ingest's ``sink``: a Parquet dataset's location, or an Iceberg
    table's (which opens its catalog)."""
    from .spark.sinks import is_delta, is_iceberg

    if is_iceberg(sink):
        return _iceberg_dataset(str(sink))
    if is_delta(sink):
        from .spark.sinks.delta import parse_delta_uri

        target = parse_delta_uri(sink)
        return SinkDataset(path_dataset(target.uri(target.table)), "delta")
    return SinkDataset(path_dataset(sink), "parquet")


def _iceberg_dataset(sink: str) -> SinkDataset:
    from .spark.sinks.catalogs import load_iceberg_catalog
    from .spark.sinks.iceberg import parse_iceberg_uri

    target = parse_iceberg_uri(sink)
    catalog = load_iceberg_catalog(target.catalog)
    properties = dict(catalog.properties)
    kind = str(properties.get("type") or type(catalog).__name__.removesuffix("Catalog").lower())
    warehouse = properties.get("warehouse")
    table = ".".join(target.table)
    location = _table_location(catalog, target.table, warehouse)
    uri = properties.get("uri")
    if kind in ("rest", "hive", "glue", "nessie") and uri:
        home = _without_user_info(str(uri))
    elif warehouse:
        home = path_dataset(str(warehouse)).uri.rstrip("/")
    else:
        home = f"iceberg://{target.catalog}"
    return SinkDataset(
        path_dataset(location),
        "iceberg",
        symlink=DatasetName(home, table),
        catalog=CatalogInfo(
            target.catalog, kind, _without_user_info(str(warehouse)) if warehouse else None
        ),
    )


def _table_location(catalog: Any, identifier: tuple[str, ...], warehouse: Any) -> str:
    """The table's location; before its first ingest, where the catalog will put it
    (pyiceberg's default: ``{warehouse}/{namespace}.db/{table}``)."""
    from pyiceberg.exceptions import NoSuchTableError

    try:
        return str(catalog.load_table(identifier).location())
    except NoSuchTableError:
        if not warehouse:
            raise ValueError(
                f"The Iceberg table {'.'.join(identifier)} does not exist yet and its catalog "
                "has no warehouse: its location cannot be named before the first ingest."
            ) from None
        namespace = ".".join(identifier[:-1])
        return f"{str(warehouse).rstrip('/')}/{namespace}.db/{identifier[-1]}"


def _without_user_info(uri: str) -> str:
    """``uri`` without its user info and query (a password never becomes a name)."""
    parts = urlsplit(uri)
    if not parts.scheme:
        return uri
    netloc = parts.netloc.rpartition("@")[2]
    return f"{parts.scheme}://{netloc}{parts.path}"


def topic_asset_key(kind: str, topic: str) -> list[str]:
    """The path of a topic's asset key in Dagster (``["kafka", "iot.readings"]``): the
    characters an asset key takes, an MQTT filter's ``/``, ``+`` and ``#`` replaced."""
    return [kind, re.sub(r"[^A-Za-z0-9_.\-]", "_", topic.replace("/", "."))]


def written_schema(sink: str | os.PathLike[str], output: str | None) -> list[tuple[str, str]]:
    """(name, type) of the columns an ingest wrote: the Iceberg table's, or those of a
    published Parquet batch's files at ``output`` (its quarantine left out) and the
    ``batch_id`` its directory gives the dataset. Empty when there is nothing to read."""
    from .spark.sinks import is_delta, is_iceberg

    if is_iceberg(sink):
        from .spark.sinks.catalogs import load_iceberg_catalog
        from .spark.sinks.iceberg import parse_iceberg_uri

        target = parse_iceberg_uri(str(sink))
        table = load_iceberg_catalog(target.catalog).load_table(target.table)
        return [(f.name, str(f.field_type)) for f in table.schema().fields]
    if is_delta(sink):
        from .spark.sinks.delta import DeltaSink

        opened = DeltaSink(sink)
        fields = opened.open_table(opened.root).schema().fields
        return [(f.name, str(f.type)) for f in fields]
    if not output or not Path(output).is_dir():
        return []
    import pyarrow.dataset as ds

    schema = ds.dataset(output, format="parquet").schema  # names starting with _ are skipped
    columns = [(f.name, str(f.type)) for f in schema]
    if "batch_id" not in schema.names:  # a hive partition: batch_id=<id>/
        columns.append(("batch_id", "string"))
    return columns
