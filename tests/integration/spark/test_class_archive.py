"""The JVM's class archive (sluice.spark.class_archive): the first process that starts Spark
writes it, later JVMs map it, and nothing broken is ever given its name. Each Spark here is a
process of its own with a cache directory of the test's own."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sluice.spark import class_archive

from .conftest import run_spark_process

pytestmark = pytest.mark.timeout(600)

_TASK = """
import json
from sluice.spark import spark_session
spark = spark_session("local[1]", "class-archive-test")
assert spark.range(1000).selectExpr("sum(id)").first()[0] == 499500
pid = spark._jvm.java.lang.ProcessHandle.current().pid()
maps = open(f"/proc/{pid}/maps").read()
cmdline = open(f"/proc/{pid}/cmdline").read().replace("\\0", " ")
print("RESULT " + json.dumps({"maps": maps, "cmdline": cmdline}))
"""


def _run_task(cache: Path, **env: str) -> dict[str, str]:
    return run_spark_process(_TASK, [], {**os.environ, class_archive.CACHE_ENV: str(cache), **env})


def test_the_first_jvm_writes_the_archive_and_the_next_one_maps_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _run_task(tmp_path)
    archives = sorted((tmp_path / "jvm").iterdir())
    assert len(archives) == 1, archives  # the archive, and no part file left behind
    archive = archives[0]
    assert archive.name.startswith("spark-") and archive.suffix == ".jsa"
    assert "-XX:ArchiveClassesAtExit=" in first["cmdline"]
    assert str(archive) not in first["maps"]
    # the wait at exit is announced, not silent
    assert "sluice: writing a class archive of Spark's classes" in first["stderr"]
    assert "sluice: class archive written in" in first["stderr"]

    second = _run_task(tmp_path)
    assert f"-XX:SharedArchiveFile={archive}" in second["cmdline"]
    assert str(archive) in second["maps"]  # the JVM really mapped it
    assert "class archive" not in second["stderr"]
    assert sorted((tmp_path / "jvm").iterdir()) == [archive]

    # A truncated archive crashes the JVM that maps it: the check that gates the renaming
    # refuses one, and accepts the real one.
    java = class_archive._java()
    assert java is not None
    truncated = tmp_path / "truncated.jsa"
    truncated.write_bytes(archive.read_bytes()[: archive.stat().st_size // 3])
    monkeypatch.chdir(tmp_path)
    assert not class_archive._opens(java, truncated)
    assert not list(tmp_path.glob("hs_err*"))  # the crash wrote no report where it ran
    assert class_archive._opens(java, archive)


def test_turned_off_the_jvm_gets_no_archive_options(tmp_path: Path) -> None:
    result = _run_task(tmp_path, **{class_archive.CDS_ENV: "0"})
    assert "-XX:SharedArchiveFile" not in result["cmdline"]
    assert "-XX:ArchiveClassesAtExit" not in result["cmdline"]
    assert not (tmp_path / "jvm").exists()


def test_the_callers_own_default_java_options_win(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(class_archive.CACHE_ENV, str(tmp_path))
    monkeypatch.delenv(class_archive.CDS_ENV, raising=False)
    assert class_archive.prepare({class_archive.JAVA_OPTIONS_KEY: "-Xss4m"}) is None
    planned = class_archive.prepare({})
    assert planned is not None and planned.part is not None  # no archive yet: write one
    assert "-XX:ArchiveClassesAtExit=" in planned.java_options
    # another class path is another archive: extra jars, or Spark's jars in another place
    other = class_archive.prepare({"spark.jars": "/opt/extra.jar"})
    assert other is not None and other.path != planned.path
    jars = class_archive._spark_jars()
    assert jars is not None
    (tmp_path / "spark-elsewhere").mkdir()
    (tmp_path / "spark-elsewhere" / "jars").symlink_to(jars)
    monkeypatch.setenv("SPARK_HOME", str(tmp_path / "spark-elsewhere"))
    elsewhere = class_archive.prepare({})
    assert elsewhere is not None and elsewhere.path not in (planned.path, other.path)


def test_one_process_at_a_time_writes_the_archive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(class_archive.CACHE_ENV, str(tmp_path))
    monkeypatch.delenv(class_archive.CDS_ENV, raising=False)
    writer = class_archive.prepare({})
    assert writer is not None and writer.part is not None
    claim = class_archive._claim_file(writer.path)
    assert claim.read_text() == str(os.getpid())
    assert class_archive.prepare({}) is None  # a live writer holds the claim
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    claim.write_text(dead.stdout.strip())  # its process is gone: the claim is taken over
    again = class_archive.prepare({})
    assert again is not None and again.part is not None


def test_a_java_that_cannot_be_found_means_no_archive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(class_archive.CACHE_ENV, str(tmp_path))
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    assert shutil.which("java") is not None  # the JAVA_HOME one is what Spark would run
    assert class_archive.prepare({}) is None
