"""sluice.jars: pinned Maven coordinates resolved by Apache Ivy into one cache.

The first resolution of a small artifact downloads it from Maven Central (or the mirror
``SLUICE_MAVEN_REPOSITORY`` names); every later one must work with the repository unreachable.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from sluice import jars
from sluice.brokers import BrokerError, free_port, start_kafka

pytest.importorskip("pyspark")  # Ivy's jar comes with pyspark

#: A small artifact with no dependencies.
SMALL = "org.slf4j:slf4j-api:1.7.36"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache of the test's own (``$XDG_CACHE_HOME``)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv(jars.CACHE_ENV, raising=False)
    monkeypatch.delenv(jars.REPOSITORY_ENV, raising=False)
    return tmp_path / "sluice"


def closed_repository() -> str:
    """A repository URL on loopback where nothing listens: any request fails at once."""
    return f"http://127.0.0.1:{free_port()}/maven2/"


@pytest.mark.parametrize(
    "text", ["org:name", "org:name:1.0:cls:more", "org:name:[1.0,2.0)", "org:name:latest.+", ":n:1"]
)
def test_a_coordinate_must_be_pinned(text: str) -> None:
    with pytest.raises(ValueError, match="pinned Maven coordinate"):
        jars.Coordinate.parse(text)


def test_the_cache_is_under_the_users_cache_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(jars.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", "/somewhere")
    assert jars.cache_dir() == Path("/somewhere/sluice")
    assert jars.ivy_dir() == Path("/somewhere/sluice/ivy")  # spark.jars.ivy can point here
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert jars.cache_dir() == Path.home() / ".cache" / "sluice"


def test_sluice_cache_dir_moves_every_cache_of_sluice(monkeypatch: pytest.MonkeyPatch) -> None:
    from sluice.spark import class_archive

    monkeypatch.setenv("XDG_CACHE_HOME", "/somewhere")
    monkeypatch.setenv("SLUICE_CACHE_DIR", "/shared/cache")
    assert jars.cache_dir() == Path("/shared/cache")
    assert jars.ivy_dir() == Path("/shared/cache/ivy")
    assert class_archive.cache_dir() == Path("/shared/cache")  # one cache, not two


def test_a_cached_resolution_needs_no_network_and_no_jvm(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines: list[str] = []
    first = jars.resolve([SMALL], progress=lines.append)
    assert [j.name for j in first] == ["slf4j-api-1.7.36.jar"]
    assert first[0].is_relative_to(cache / "ivy" / "cache")
    assert any("Resolving org.slf4j:slf4j-api:1.7.36" in line for line in lines)

    monkeypatch.setenv(jars.REPOSITORY_ENV, closed_repository())
    again: list[str] = []
    started = time.perf_counter()
    assert jars.resolve([SMALL], progress=again.append) == first
    took = time.perf_counter() - started
    assert again == []  # nothing to show: no Ivy run
    assert took < 0.1, f"a cached resolution took {took:.3f} s"

    # Without Sluice's list of jars, Ivy itself resolves from its cache, offline.
    for manifest in (cache / "classpaths").iterdir():
        manifest.unlink()
    assert jars.resolve([SMALL], progress=None) == first


def test_an_unreachable_repository_names_the_coordinates_and_the_variable(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(jars.REPOSITORY_ENV, closed_repository())
    with pytest.raises(jars.JarError) as caught:
        jars.resolve([SMALL], progress=None)
    message = str(caught.value)
    assert SMALL in message and jars.REPOSITORY_ENV in message
    assert jars.cached([SMALL]) is None


def test_concurrent_resolutions_run_ivy_once(cache: Path) -> None:
    lines: list[str] = []
    results: list[list[Path]] = []

    def resolve() -> None:
        results.append(jars.resolve([SMALL], progress=lines.append))

    threads = [threading.Thread(target=resolve) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    assert len(results) == 3 and results[0] == results[1] == results[2]
    assert sum(line.startswith("Resolving") for line in lines) == 1


def test_missing_java_says_what_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(jars.JarError, match="openjdk-17-jre-headless"):
        jars.find_java()
    with pytest.raises(BrokerError, match="openjdk-17-jre-headless"):
        start_kafka()


def test_an_unreachable_repository_stops_kafka_with_a_clear_error(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(jars.REPOSITORY_ENV, closed_repository())
    with pytest.raises(BrokerError, match=f"org.apache.kafka:kafka_2.13:.*{jars.REPOSITORY_ENV}"):
        start_kafka()
