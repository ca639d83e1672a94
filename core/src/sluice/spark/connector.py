"""Spark's own Kafka source (``spark.read.format("kafka")``): its connector jars, from Maven
Central through the project's one resolver (:mod:`sluice.jars`), and the settings that put them
on a SparkSession.

The jars are pinned to :data:`CONNECTOR_VERSION`. Maven Central serves no
``spark-sql-kafka-0-10_2.13`` for Spark 4.3.0 (the Spark of Sluice's lock): on 2026-11-27 it
served 4.1.x and 4.2.0 as newest (and 4.2.0 previews), not 4.2.1 or 4.3.0. The 4.2.0 connector
runs on pyspark 4.3.0 (the tests read, classify and write with it there); with a Spark whose
own connector is served, set :data:`VERSION_ENV` to that version.

Only the jars Spark does not ship itself are put on the class path (the connector, its token
provider, kafka-clients and commons-pool2): pyspark's own Scala, Hadoop and Spark jars stay the
ones it was built with.

Where the jars go:

- a session this process starts (``local[*]``, ``spark://``): ``spark.jars``
  (:func:`kafka_source_conf`; :func:`sluice.spark.session.spark_session` with
  ``kafka_source=True``); the driver serves them to a standalone cluster's executors;
- a Spark Connect server: give it the same ``spark.jars`` at its start
  (``spark-submit --jars``, or ``start_connect_server(jars=kafka_source_jars())``);
- ``spark-submit``: ``--jars "$(python -m sluice.spark.connector)"``.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from .. import jars

__all__ = [
    "AUTO_SPARK_SOURCE_MESSAGES",
    "CONNECTOR_VERSION",
    "VERSION_ENV",
    "cached_kafka_source_jars",
    "connector_coordinates",
    "kafka_source_conf",
    "kafka_source_jars",
]

#: The newest ``spark-sql-kafka-0-10_2.13`` Maven Central serves (none for 4.3.0 yet).
CONNECTOR_VERSION = "4.2.0"
#: Another connector version to resolve (e.g. the one of the Spark a cluster runs).
VERSION_ENV = "SLUICE_SPARK_KAFKA_VERSION"

#: ``mode="auto"`` reads a batch of this many messages or more with Spark's own Kafka source
#: where the session has it (:meth:`sluice.spark.ingest._Job._spark_source_reads`), and
#: Python's writer writes it: warm, at 2,000,000 messages (bench/ingest.py) 7.6 s against
#: executor mode's 10.0 s (the source reads in the JVM, at a third of the confluent reader's
#: CPU time), where at 200,000 executor mode was ahead (1.3 s against 1.7 s). A session
#: started for such a batch gets the source when its jars are in the cache
#: (:func:`sluice.spark.session.spark_session`).
AUTO_SPARK_SOURCE_MESSAGES = 1_000_000

_lock = threading.Lock()
_resolved: dict[str, list[Path]] = {}


def connector_coordinates(version: str | None = None) -> list[str]:
    """The pinned Maven coordinate of Spark's Kafka source (Scala 2.13)."""
    version = version or os.environ.get(VERSION_ENV) or CONNECTOR_VERSION
    return [f"org.apache.spark:spark-sql-kafka-0-10_2.13:{version}"]


def kafka_source_jars(version: str | None = None) -> list[Path]:
    """The jars of Spark's Kafka source that pyspark lacks, resolved once (then read from the
    cache, no Java or network), the same list for every caller of this process."""
    coordinates = connector_coordinates(version)
    key = coordinates[0]
    with _lock:
        if key not in _resolved:
            try:
                found = jars.resolve(coordinates)
            except jars.JarError as exc:
                raise jars.JarError(
                    f"Spark's Kafka source ({key}) for options.reader 'spark' could not be "
                    f"resolved: {exc} Maven Central serves no connector for Spark 4.3.0; "
                    f"{CONNECTOR_VERSION} (the default) runs on it. Set {VERSION_ENV} for "
                    "another version, or read with options.reader 'auto'."
                ) from None
            _resolved[key] = _not_in_pyspark(found)
        return list(_resolved[key])


def cached_kafka_source_jars(version: str | None = None) -> list[Path] | None:
    """:func:`kafka_source_jars` where an earlier resolution left them in the cache (no Java,
    no network), else None."""
    coordinates = connector_coordinates(version)
    key = coordinates[0]
    with _lock:
        if key not in _resolved:
            found = jars.cached(coordinates)
            if found is None:
                return None
            _resolved[key] = _not_in_pyspark(found)
        return list(_resolved[key])


def _artifact(jar: Path) -> str:
    """A jar's artifact name without its version: ``kafka-clients-3.9.2.jar`` ->
    ``kafka-clients``."""
    name, _, version = jar.name.removesuffix(".jar").rpartition("-")
    return name if name and version[:1].isdigit() else jar.name


def _not_in_pyspark(found: Sequence[Path]) -> list[Path]:
    try:
        import pyspark
    except ImportError:
        return list(found)
    own = Path(str(pyspark.__file__)).parent / "jars"
    shipped = {_artifact(j) for j in own.glob("*.jar")}
    return [j for j in found if _artifact(j) not in shipped]


def kafka_source_conf(
    conf: Mapping[str, str] | None = None, found: Sequence[Path] | None = None
) -> dict[str, str]:
    """``conf`` with the Kafka source's jars (``found``, else :func:`kafka_source_jars`)
    added to its ``spark.jars`` (kept, if any)."""
    settings = dict(conf or {})
    paths = [str(j) for j in (found if found is not None else kafka_source_jars())]
    given = [p for p in settings.get("spark.jars", "").split(",") if p]
    settings["spark.jars"] = ",".join(dict.fromkeys([*given, *paths]))
    return settings


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m sluice.spark.connector``: the jars, comma-separated (for ``--jars``)."""
    del argv
    try:
        print(",".join(str(j) for j in kafka_source_jars()))
    except jars.JarError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
