"""A class-data-sharing archive of Spark's classes for the JVMs that Sluice starts.

Every Airflow task is a new process with a new JVM, and a cold ingest spent about a third of
its time in the JVM loading and verifying Spark's classes from some 250 jars
(``bench/cold_task.py``). Java 13+ can write the classes a JVM loaded into an archive when it
exits (``-XX:ArchiveClassesAtExit``, "dynamic CDS") and map that archive in later JVMs
(``-XX:SharedArchiveFile``), which then start with those classes parsed and verified.

So :func:`sluice.spark.spark_session`, when it starts a JVM here (a local or client-mode
driver, not Spark Connect or ``spark-submit``), asks :func:`prepare` for its options:

- with an archive in the cache, the JVM maps it;
- without one, the JVM writes one at exit into a part file; at this process's exit Sluice
  stops Spark, waits for the JVM, checks that a JVM starts with the part file, and only then
  moves it into place. A part file is never used: a truncated archive crashes the JVM that
  maps it, so only a checked one gets the archive's name. One process at a time writes (it
  holds a claim file with its pid): the others start without an archive, as before.

The cache is ``$SLUICE_CACHE_DIR`` (default ``$XDG_CACHE_HOME/sluice`` or ``~/.cache/sluice``),
directory ``jvm``. An archive's name holds what it was made from (the java binary, Spark's
jars, the session's extra jars and class path), so an upgrade starts a new one, and a JVM
that finds it does not match ignores it. ``SLUICE_SPARK_CDS=0`` turns all of this off.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..jars import CACHE_ENV, cache_dir

__all__ = [
    "CACHE_ENV",
    "CDS_ENV",
    "JAVA_OPTIONS_KEY",
    "ClassArchive",
    "cache_dir",
    "owns_java_options",
    "prepare",
]

log = logging.getLogger("sluice.spark")

CDS_ENV = "SLUICE_SPARK_CDS"
#: Where the options go: Spark puts them before ``spark.driver.extraJavaOptions``, which
#: stays the user's.
JAVA_OPTIONS_KEY = "spark.driver.defaultJavaOptions"
#: Settings that change the driver's class path, and so what an archive holds.
_CLASS_PATH_KEYS = ("spark.jars", "spark.jars.packages", "spark.driver.extraClassPath")
#: CDS's own log lines (classes it cannot archive, an archive it cannot use) are not news.
_QUIET = "-Xlog:cds*=off"
_DUMP_TIMEOUT_S = 180.0
_STALE_S = 3600.0


@dataclass(frozen=True)
class ClassArchive:
    """The archive of one JVM configuration: ``path`` once it exists, ``part`` while this
    process's JVM writes it."""

    path: Path
    java: str
    part: Path | None = None

    @property
    def java_options(self) -> str:
        if self.part is not None:
            return f"-XX:ArchiveClassesAtExit={self.part} {_QUIET}"
        return f"-XX:SharedArchiveFile={self.path} {_QUIET}"

    def finish_at_exit(self) -> None:
        """When this process exits: stop Spark, wait for the JVM to write the archive, and
        move it into place if a JVM starts with it (no-op when the archive was only used)."""
        if self.part is not None:
            atexit.register(self._finish)

    def _finish(self) -> None:
        from pyspark import SparkContext

        gateway = SparkContext._gateway
        context = SparkContext._active_spark_context
        proc = getattr(gateway, "proc", None)
        part = self.part
        assert part is not None
        try:
            if context is not None:
                context.stop()
            if proc is None:
                return
            if proc.stdin is not None:
                proc.stdin.close()  # the JVM's gateway server exits when its stdin closes
            # Said on stderr, not logged: at exit a task's log handlers may be gone, and the
            # wait (tens of seconds on a busy machine) must not look like a hang.
            started = time.monotonic()
            _say(
                "sluice: writing a class archive of Spark's classes, so that later processes "
                "start Spark faster (once per machine and Spark version; this process exits "
                "when it is written)..."
            )
            proc.wait(timeout=_DUMP_TIMEOUT_S)
            if proc.returncode == 0 and part.is_file() and _opens(self.java, part):
                os.replace(part, self.path)
                _say(f"sluice: class archive written in {time.monotonic() - started:.0f} s.")
        except Exception as exc:  # a cache: the next process tries again
            log.debug("no class archive from this JVM: %s", exc)
        finally:
            with contextlib.suppress(OSError):
                part.unlink()
            with contextlib.suppress(OSError):
                _claim_file(self.path).unlink()


def _say(text: str) -> None:
    with contextlib.suppress(OSError, ValueError):  # stderr closed
        print(text, file=sys.stderr, flush=True)


def owns_java_options(conf: Mapping[str, str]) -> bool:
    """Whether the user sets the driver's default Java options (in ``conf`` or in
    spark-defaults.conf): then Sluice adds none of its own."""
    return JAVA_OPTIONS_KEY in conf or _in_spark_defaults(JAVA_OPTIONS_KEY, _spark_jars())


def prepare(conf: Mapping[str, str]) -> ClassArchive | None:
    """The archive for a JVM started with ``conf``, or None: turned off, no ``java`` or
    cache directory, or the caller sets the driver's default Java options itself."""
    if os.environ.get(CDS_ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return None
    if owns_java_options(conf):
        return None
    jars = _spark_jars()
    java = _java()
    if java is None:
        return None
    folder = cache_dir() / "jvm"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    path = folder / f"spark-{_key(java, jars, conf)}.jsa"
    if path.is_file():
        return ClassArchive(path, java)
    _remove_stale_parts(folder)
    if not _claim(_claim_file(path)):
        return None
    return ClassArchive(path, java, part=path.with_name(f"{path.name}.{os.getpid()}.part"))


def _claim_file(path: Path) -> Path:
    return path.with_name(f"{path.name}.writer")


def _claim(claim: Path) -> bool:
    """Whether this process may write the archive: it created the claim file, or took over
    one whose process is gone or which is older than an hour."""
    for _ in range(2):
        try:
            handle = os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            if not _abandoned(claim):
                return False
            with contextlib.suppress(OSError):
                claim.unlink()
            continue
        except OSError:  # a cache directory we cannot write
            return False
        with os.fdopen(handle, "w") as file:
            file.write(str(os.getpid()))
        return True
    return False


def _abandoned(claim: Path) -> bool:
    try:
        pid = int(claim.read_text() or "0")
        age = time.time() - claim.stat().st_mtime
    except (OSError, ValueError):
        return True
    if age > _STALE_S or pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        return False
    return False


def _java() -> str | None:
    """The java that spark-submit runs: ``$JAVA_HOME/bin/java``, else ``java`` on the PATH."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if found is None or not os.path.isfile(found):
        return None
    return os.path.realpath(found)


def _key(java: str, jars: Path | None, conf: Mapping[str, str]) -> str:
    digest = hashlib.sha256()
    stat = os.stat(java)
    digest.update(f"{java}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    if jars is not None:  # the JVM checks the class path by its text: another venv, another key
        digest.update(f"{jars}\n".encode())
        for jar in sorted(jars.glob("*.jar")):
            digest.update(f"{jar.name}\0{jar.stat().st_size}\n".encode())
    for key in _CLASS_PATH_KEYS:
        digest.update(f"{key}={conf.get(key, '')}\n".encode())
    return digest.hexdigest()[:16]


def _spark_jars() -> Path | None:
    try:
        from pyspark.find_spark_home import _find_spark_home

        jars = Path(_find_spark_home()) / "jars"
    except Exception:
        return None
    return jars if jars.is_dir() else None


def _in_spark_defaults(key: str, jars: Path | None) -> bool:
    """Whether spark-defaults.conf (which ``conf`` would override, not extend) sets ``key``;
    ``jars``: Spark's jars directory, beside its default conf directory."""
    conf_dir = os.environ.get("SPARK_CONF_DIR")
    if not conf_dir:
        conf_dir = str(jars.parent / "conf") if jars else ""
    defaults = Path(conf_dir) / "spark-defaults.conf" if conf_dir else None
    if defaults is None or not defaults.is_file():
        return False
    with contextlib.suppress(OSError):
        for line in defaults.read_text().splitlines():
            if line.strip().split(maxsplit=1)[:1] == [key]:
                return True
    return False


def _opens(java: str, archive: Path) -> bool:
    """A JVM starts with ``archive`` mapped (a truncated one crashes it; its crash report
    and core dump are not wanted)."""
    command = [java, f"-XX:SharedArchiveFile={archive}", _QUIET]
    command += ["-XX:ErrorFile=/dev/null", "-XX:-CreateCoredumpOnCrash", "-version"]
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _remove_stale_parts(folder: Path) -> None:
    """Part files a JVM was killed while writing, or whose process exited without moving them
    (``os._exit``): never used, removed after an hour."""
    now = time.time()
    for part in folder.glob("*.part"):
        with contextlib.suppress(OSError):
            if now - part.stat().st_mtime > _STALE_S:
                part.unlink()
