"""The SparkSession an ingest runs on: local by default, any master or Spark Connect by URL.

On a cluster, the executors run Python too (executor-mode reading imports ``sluice`` there).
If the cluster's Python has no Sluice, :func:`ship_sluice` (or ``spark_session(...,
ship_sluice=True)``) sends it: :func:`sluice_pyfiles` zips Sluice and the pure-Python
packages it needs, and the zip goes to the executors as a Python file (``SparkContext.addPyFile``,
or an artifact over Spark Connect). For ``spark-submit``, pass the zip as ``--py-files``::

    ZIP=$(python -c 'from sluice.spark.session import sluice_pyfiles; print(sluice_pyfiles())')
    spark-submit --py-files "$ZIP" ...
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import threading
import zipfile
from collections.abc import Iterator, Mapping
from concurrent.futures import Future
from importlib.metadata import Distribution, PackageNotFoundError, distribution
from pathlib import Path
from typing import Any

from . import class_archive
from .gateway import disable_nagle

__all__ = [
    "DEFAULT_MASTER",
    "MASTER_ENV",
    "PROVIDED",
    "SHIP_ENV",
    "SHORT_JVM_MESSAGES",
    "SHORT_JVM_OPTIONS",
    "SessionStarting",
    "ShipError",
    "ship_sluice",
    "sluice_pyfiles",
    "spark_session",
    "start_session",
]

MASTER_ENV = "SLUICE_SPARK_MASTER"
#: Set to 1 to ship Sluice to the executors of every session (see :func:`ship_sluice`).
SHIP_ENV = "SLUICE_SPARK_SHIP"
DEFAULT_MASTER = "local[*]"

#: Settings every Sluice session gets unless the caller overrides them: Arrow on, no UI.
_DEFAULT_CONF = {
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.showConsoleProgress": "false",
    # no web UI: its Jetty server costs start-up time, and a batch job has no one looking
    # (conf={"spark.ui.enabled": "true"} brings it back)
    "spark.ui.enabled": "false",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
}

#: What the cluster's Python must have itself: PySpark's Python workers need them (Spark adds
#: PySpark and py4j; pyarrow, pandas and numpy have compiled code, which no zip can carry).
PROVIDED = frozenset({"pyspark", "py4j", "pyarrow", "pandas", "numpy"})
#: Compiled and optional on the executors: never shipped (without it, the executors' range
#: reader is kafka-python, see options.reader ``auto``).
_NOT_SHIPPED = frozenset({"confluent-kafka"})
#: The part of sluice-core the executors need: reading Kafka ranges.
_EXECUTOR_EXTRAS = ("kafka",)
#: A JVM started for one batch of fewer messages than this compiles with C1 only
#: (:data:`SHORT_JVM_OPTIONS`): a short task does not live long enough for C2's faster code to
#: repay its compiling, which on 2 cores competes with the task itself. A cold task (a fresh
#: process, ``bench/cold_task.py``) took 12.4 s instead of 15.0 s at 20,000 messages and
#: 16.3 s instead of 19.1 s at 200,000; at 2,000,000 it took 43.3 s instead of 36.5 s.
SHORT_JVM_MESSAGES = 1_000_000
SHORT_JVM_OPTIONS = "-XX:TieredStopAtLevel=1"
_CONNECT_HINT = "Spark Connect needs its client libraries: pip install 'sluice-core[connect]'."


def _with_kafka_source(
    settings: dict[str, str], asked: bool | None, batch_messages: int | None
) -> dict[str, str]:
    """``settings`` with Spark's Kafka source's jars where ``asked``, or where not asked
    either way (None) for a batch that ``mode="auto"`` reads with the source and the jars are
    in the cache."""
    from .connector import AUTO_SPARK_SOURCE_MESSAGES, cached_kafka_source_jars, kafka_source_conf

    if asked:
        return kafka_source_conf(settings)
    if asked is None and (batch_messages or 0) >= AUTO_SPARK_SOURCE_MESSAGES:
        found = cached_kafka_source_jars()
        if found is not None:
            return kafka_source_conf(settings, found)
    return settings


class ShipError(RuntimeError):
    """Sluice could not be packed for the executors; the message says why."""


def spark_session(
    master: str | None = None,
    app_name: str = "sluice",
    conf: Mapping[str, str] | None = None,
    *,
    ship_sluice: bool | None = None,
    kafka_source: bool | None = None,
    batch_messages: int | None = None,
) -> Any:
    """Get or create a SparkSession.

    ``master`` is a Spark master URL (``local[*]``, ``spark://host:7077``, ``yarn``,
    ``k8s://...``) or a Spark Connect URL (``sc://host:15002``); by default the
    ``SLUICE_SPARK_MASTER`` environment variable, else ``local[*]``. An already active session
    is reused (a SparkSession is one per process); asking for another master while one is
    active is an error. ``ship_sluice`` sends Sluice to the executors (see :func:`ship_sluice`)
    for clusters whose Python does not have it; by default when ``SLUICE_SPARK_SHIP=1``.
    ``kafka_source`` puts Spark's own Kafka source on the session's class path (its jars are
    resolved once, :mod:`.connector`), for ``options.reader`` ``spark``; a Spark Connect
    server needs them at its own start instead. ``batch_messages``: the size of the one batch
    the session is started for (an Airflow task, a Dagster run, ``sluice ingest``); below
    :data:`SHORT_JVM_MESSAGES` a JVM started here compiles with C1 only, and from
    :data:`~.connector.AUTO_SPARK_SOURCE_MESSAGES` on it gets the Kafka source when
    ``kafka_source`` is left at None and its jars are in the cache already (``auto`` reads
    such a batch with it; no download is started for it). Setting
    ``spark.driver.defaultJavaOptions`` yourself turns Sluice's Java options off (this one and
    the class archive's), and a ``-XX:TieredStopAtLevel`` of your own in
    ``spark.driver.extraJavaOptions`` wins over it.
    """
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    master = master or os.environ.get(MASTER_ENV)
    _check_active(master)
    if master is not None or "PYSPARK_GATEWAY_PORT" not in os.environ:
        # (under spark-submit, with no master given, spark-submit's --master stands)
        master = master or DEFAULT_MASTER
        if master.startswith("local"):
            # Local Python workers run this interpreter (its environment has sluice), and a
            # local Spark listens on loopback only, not on whatever the host name resolves to.
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
            builder = builder.config("spark.driver.host", "127.0.0.1").config(
                "spark.driver.bindAddress", "127.0.0.1"
            )
        builder = builder.remote(master) if master.startswith("sc://") else builder.master(master)
    settings = {**_DEFAULT_CONF, **(conf or {})}
    if not (master or "").startswith("sc://"):
        settings = _with_kafka_source(settings, kafka_source, batch_messages)
    archive = None
    if _starts_a_jvm(master) and not class_archive.owns_java_options(settings):
        archive = class_archive.prepare(settings)
        options = [archive.java_options] if archive is not None else []
        if batch_messages is not None and batch_messages < SHORT_JVM_MESSAGES:
            options.append(SHORT_JVM_OPTIONS)
        if options:
            settings[class_archive.JAVA_OPTIONS_KEY] = " ".join(options)
    for key, value in settings.items():
        builder = builder.config(key, value)
    try:
        session = builder.getOrCreate()
    except ImportError as exc:
        if master is not None and master.startswith("sc://"):
            raise ImportError(f"{_CONNECT_HINT} ({exc})") from exc
        raise
    disable_nagle(session)
    if archive is not None:
        archive.finish_at_exit()
    if ship_sluice is None:
        ship_sluice = os.environ.get(SHIP_ENV, "").lower() in ("1", "true", "yes")
    if ship_sluice:
        _ship(session)
    return session


class SessionStarting:
    """A SparkSession being started on a thread of its own by :func:`spark_session`, so that
    what needs no Spark runs meanwhile: :func:`sluice.spark.ingest` takes one in place of a
    session and plans the batch and reads it on the driver while the JVM starts, then waits
    for the session (:meth:`result`) when it first needs Spark. From :func:`start_session`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._future: Future[Any] = Future()
        thread = threading.Thread(
            target=self._start, args=args, kwargs=kwargs, name="sluice-spark-start", daemon=True
        )
        thread.start()

    def _start(self, *args: Any, **kwargs: Any) -> None:
        try:
            self._future.set_result(spark_session(*args, **kwargs))
        except BaseException as exc:  # said by result(), in the caller's thread
            self._future.set_exception(exc)

    def result(self) -> Any:
        """The session, once started (an error starting it is raised here)."""
        return self._future.result()


def start_session(
    master: str | None = None,
    app_name: str = "sluice",
    conf: Mapping[str, str] | None = None,
    *,
    batch_messages: int | None = None,
) -> Any:
    """:func:`spark_session`'s session when one is active in this process (or on Spark Connect
    or under ``spark-submit``, where no JVM starts here); else a :class:`SessionStarting` that
    starts it on a thread of its own. For a process that ingests one batch (an Airflow task):
    the JVM's start (about 3 s) then overlaps the batch's planning and reading."""
    if not _starts_a_jvm(master or os.environ.get(MASTER_ENV) or DEFAULT_MASTER):
        return spark_session(master, app_name, conf, batch_messages=batch_messages)
    return SessionStarting(master, app_name, conf, batch_messages=batch_messages)


def _starts_a_jvm(master: str | None) -> bool:
    """Whether getOrCreate will launch a JVM here: not Spark Connect, not under spark-submit,
    and no JVM yet (a stopped SparkContext leaves its JVM, which the next one reuses)."""
    if master is None or master.startswith("sc://") or "PYSPARK_GATEWAY_PORT" in os.environ:
        return False
    from pyspark import SparkContext

    return SparkContext._gateway is None


def _check_active(master: str | None) -> None:
    """Fail clearly where Spark would silently hand back a session on another master."""
    if master is None or master.startswith("sc://"):
        return
    from pyspark import SparkContext

    context = SparkContext._active_spark_context
    if context is None:
        return
    active = str(context.master)
    if active != master and not (active.startswith("local") and master.startswith("local")):
        raise RuntimeError(
            f"A SparkSession on {active} is already active in this process and Spark allows "
            f"one per process, so it cannot also run on {master}. Stop it first "
            "(spark.stop()), or run the ingest in a process of its own (e.g. "
            "SparkIngestOperator(submit=True))."
        )


def ship_sluice(spark: Any, directory: str | os.PathLike[str] | None = None) -> Path:
    """Send Sluice to the executors of ``spark`` (classic or Spark Connect); return the zip.

    For clusters whose Python has pyarrow and pandas (what PySpark's Python workers need)
    but not Sluice. The zip (:func:`sluice_pyfiles`) is added as a Python file: the executors
    put it on their ``sys.path``. Ship before the first ingest of the session.
    """
    path = sluice_pyfiles(directory)
    _ship(spark, path)
    return path


#: (session, zip) pairs shipped already: a session reused by later calls is not sent it twice.
_shipped: set[tuple[int, Path]] = set()


def _ship(spark: Any, path: Path | None = None) -> None:
    path = path or sluice_pyfiles()
    if (id(spark), path) in _shipped:
        return
    _shipped.add((id(spark), path))
    if is_connect(spark):
        spark.addArtifacts(str(path), pyfile=True)
    else:
        spark.sparkContext.addPyFile(str(path))


def is_connect(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect client session (no JVM or SparkContext here)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def sluice_pyfiles(directory: str | os.PathLike[str] | None = None) -> Path:
    """A zip of Sluice and the pure-Python packages its executors import, for
    ``spark.submit.pyFiles`` / ``--py-files``: ``sluice-core[kafka]`` and its requirements, less
    :data:`PROVIDED`. Compiled modules cannot be imported from a zip and are left out; the
    ones in that tree are optional (kafka-python's crc32c and PyYAML's C loader have
    pure-Python fallbacks). The zip is built once per content in ``directory`` (default: a
    ``sluice-pyfiles`` directory under the system's temporary directory) and reused.
    """
    files = dict(_package_files())
    digest = hashlib.sha256()
    for arcname, source in sorted(files.items()):
        stat = source.stat()
        digest.update(f"{arcname}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    folder = Path(directory or Path(tempfile.gettempdir()) / "sluice-pyfiles")
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"sluice-{digest.hexdigest()[:16]}.zip"
    if target.exists():
        return target
    partial = target.with_suffix(f".{os.getpid()}.part")
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        for arcname, source in sorted(files.items()):
            archive.write(source, arcname)
    os.replace(partial, target)
    return target


def _requirements(root: str, extras: tuple[str, ...]) -> Iterator[Distribution]:
    """``root`` and every distribution it requires (with ``extras``), less :data:`PROVIDED`."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    seen: set[str] = set()
    todo: list[tuple[str, tuple[str, ...]]] = [(root, extras)]
    while todo:
        name, wanted = todo.pop()
        key = canonicalize_name(name)
        if key in seen or key in PROVIDED or key in _NOT_SHIPPED:
            continue
        seen.add(key)
        try:
            found = distribution(name)
        except PackageNotFoundError:
            raise ShipError(
                f"{name} is required by Sluice but not installed here, so it cannot be shipped "
                "to the executors; install it (pip install 'sluice-core[kafka,spark]')."
            ) from None
        yield found
        for text in found.requires or []:
            requirement = Requirement(text)
            marker = requirement.marker
            environments = [{"extra": extra} for extra in wanted] or [{"extra": ""}]
            if marker is None or any(marker.evaluate(env) for env in environments):
                todo.append((requirement.name, tuple(requirement.extras)))


def _package_files() -> Iterator[tuple[str, Path]]:
    """(name in the zip, file) of every Python file of the distributions to ship."""
    for dist in _requirements("sluice-core", _EXECUTOR_EXTRAS):
        for entry in dist.files or []:
            parts = entry.parts
            if (
                ".." in parts
                or parts[0].endswith((".dist-info", ".egg-info"))
                or "__pycache__" in parts
            ):
                continue
            source = Path(str(dist.locate_file(entry)))
            if entry.suffix == ".pth":  # an editable install: the lines name source directories
                yield from _editable_files(source)
            elif entry.suffix not in (".so", ".pyd", ".pyc") and source.is_file():
                yield "/".join(parts), source


def _editable_files(pth: Path) -> Iterator[tuple[str, Path]]:
    for line in pth.read_text().splitlines():
        root = Path(line.strip())
        if line.startswith(("#", "import")) or not line.strip() or not root.is_dir():
            continue
        for source in root.rglob("*"):
            relative = source.relative_to(root)
            if (
                source.is_file()
                and "__pycache__" not in relative.parts
                and source.suffix not in (".so", ".pyd", ".pyc")
            ):
                yield relative.as_posix(), source
