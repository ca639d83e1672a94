"""Can the session's Python workers run an ingest? One tiny Spark job says, before reading.

Spark runs Python code of an ingest in worker processes started with ``PYSPARK_PYTHON`` (or
``spark.pyspark.python``; unset: ``python3`` from the PATH). A session that Sluice builds
(:func:`sluice.spark.spark_session`) points them at the driver's interpreter; a session of the
user's own may not, and the write then fails deep in a worker with ``No module named
'pyarrow'``. :func:`check_python_workers` runs one plain Python UDF (it needs nothing but
PySpark itself) that tries the imports, and raises :class:`PythonWorkersError` naming the
interpreter, what it lacks and how to fix it. It runs once per session (the answer is kept
on the session), and the worker it starts is reused by the ingest's own job. A batch read on
the executors runs no probe first (half a second of a cold task): its reading tasks are the
first Python to run there, before anything is read, and only when one fails for want of an
import does the probe run, to name everything the workers lack.

The check finds pandas without importing it (the slowest of the imports; Sluice's own tasks
do not import it).
"""

from __future__ import annotations

import logging
import os
import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = [
    "REQUIRED",
    "PythonWorkersError",
    "check_python_workers",
    "failed_on_imports",
    "python_workers_checked",
    "python_workers_ran",
    "python_workers_start",
]

log = logging.getLogger(__name__)

#: What an ingest imports in Spark's Python workers.
REQUIRED = ("pyarrow", "pandas", "sluice")
_CHECKED = "_sluice_python_workers_checked"
_FAILED = "_sluice_python_workers_failed"
_LACKING = re.compile(rf"No module named '(?:{'|'.join(REQUIRED)})\b")


class PythonWorkersError(RuntimeError):
    """Spark's Python workers cannot import what an ingest needs; the message says which
    interpreter they run and how to point them at one that can."""


def _probe(_: Any) -> str:
    """Runs in a Python worker: ``executable|name:error;...`` of the imports that fail."""
    import sys
    from importlib.util import find_spec

    failed = []
    for name in ("pyarrow", "pandas", "sluice"):
        try:
            if name == "pandas":  # found, not imported: Sluice's tasks do not import it,
                if find_spec(name) is None:  # and its import is the probe's slowest part
                    raise ModuleNotFoundError(f"No module named '{name}'")
            else:
                __import__(name)
        except Exception as exc:
            failed.append(f"{name}:{type(exc).__name__}: {exc}")
    return sys.executable + "|" + ";".join(failed)


# Pickled by value (as a function of __main__ is): the worker need not import this module,
# which is the point when Sluice is what it lacks.
_probe.__module__ = "__main__"


def check_python_workers(spark: Any) -> None:
    """:class:`PythonWorkersError` unless ``spark``'s Python workers can import pyarrow,
    pandas and Sluice (see the module docstring); checked once per session."""
    if python_workers_checked(spark):
        return
    from pyspark.sql import functions as F

    with warnings.catch_warnings():  # PySpark guesses a pandas UDF from the type hints
        warnings.simplefilter("ignore", UserWarning)
        probe = F.udf(_probe, "string", useArrow=False)  # a plain UDF needs no pyarrow
    try:
        row = spark.range(1, numPartitions=1).select(probe(F.col("id")).alias("found")).first()
    except Exception as exc:  # the worker failed before the probe could answer
        missing = re.search(r"No module named '([\w.]+)'", str(exc))
        if missing is None:
            raise
        name = missing.group(1).split(".")[0]
        failure = f"{name}:ModuleNotFoundError: No module named '{name}'"
        raise PythonWorkersError(_message(spark, "a Python", [failure])) from None
    executable, _, failures = str(row["found"]).partition("|")
    if failures:
        raise PythonWorkersError(_message(spark, executable, failures.split(";")))
    setattr(spark, _CHECKED, True)


def python_workers_checked(spark: Any) -> bool:
    """Whether ``spark``'s Python workers passed :func:`check_python_workers`: they have
    started and imported Sluice (Spark keeps them for the session's next jobs)."""
    return bool(getattr(spark, _CHECKED, False))


def python_workers_ran(spark: Any) -> None:
    """Note on ``spark`` that a job's Python tasks ran an ingest's own code: what
    :func:`check_python_workers` asks is answered, and it need not run."""
    setattr(spark, _CHECKED, True)


def failed_on_imports(failure: BaseException) -> bool:
    """Whether a job's ``failure`` is a Python worker that could not import what an ingest
    needs (:data:`REQUIRED`): :func:`check_python_workers` then says all that it lacks."""
    return _LACKING.search(str(failure)) is not None


@contextmanager
def lacking_named(spark: Any, probe: bool = True) -> Iterator[None]:
    """For a job whose own Python tasks are the first to run in ``spark``'s workers (no
    probe job before it): a failure for want of what they import (:func:`failed_on_imports`)
    runs the probe then (``probe``), which raises :class:`PythonWorkersError` naming all the
    workers lack; any other failure passes as it is."""
    try:
        yield
    except Exception as failed:
        if not (probe and failed_on_imports(failed)):
            raise
        try:
            check_python_workers(spark)
        except PythonWorkersError as lacking:
            raise lacking from None
        raise


def python_workers_start(spark: Any) -> bool:
    """Whether ``spark``'s Python workers run an ingest, started (and checked) now if they
    have not been. Where they cannot (:func:`check_python_workers` fails, or no worker
    starts at all: no Python on the executors), False, and the session is not asked again:
    for a caller that has a way without them."""
    if python_workers_checked(spark):
        return True
    if getattr(spark, _FAILED, False):
        return False
    try:
        check_python_workers(spark)
    except Exception as exc:
        log.info(
            "Spark's Python workers cannot run an ingest, so Spark's own writer writes: %s", exc
        )
        setattr(spark, _FAILED, True)
        return False
    return True


def _message(spark: Any, executable: str, failures: list[str]) -> str:
    missing = ", ".join(f.partition(":")[0] for f in failures)
    detail = "; ".join(failures)
    configured = _configured_python(spark)
    fix = (
        "Set PYSPARK_PYTHON (or spark.pyspark.python) to a Python that has Sluice's "
        "requirements, before the session starts: sluice.spark.spark_session() does it for a "
        "local session (it uses this interpreter), or activate the venv that has Sluice."
    )
    if missing == "sluice":
        fix = (
            "Install Sluice there, or ship it: spark_session(..., ship_sluice=True), "
            "ship_sluice(spark), or SLUICE_SPARK_SHIP=1."
        )
    return (
        f"Spark's Python workers cannot import {missing} ({detail}). They run {executable} "
        f"({configured}). {fix} Nothing was read or committed."
    )


def _configured_python(spark: Any) -> str:
    conf = None
    try:
        conf = spark.conf.get("spark.pyspark.python", None)
    except Exception:  # Spark Connect may refuse to show a static setting
        conf = None
    if conf:
        return f"spark.pyspark.python={conf}"
    env = os.environ.get("PYSPARK_PYTHON")
    if env:
        return f"PYSPARK_PYTHON={env}"
    return "PYSPARK_PYTHON is not set, so Spark runs python3 from the PATH"
