"""The one resolver and cache for every jar Sluice needs (Apache Kafka's broker now; later
Spark's Kafka source and an Iceberg REST catalog server).

Pinned Maven coordinates are resolved with their transitive dependencies by Apache Ivy, run
standalone (``java -cp ivy.jar org.apache.ivy.Main``), from Maven Central through Ivy's
built-in default repository (an ``ibiblio`` resolver, Maven 2 layout), or from the mirror
``$SLUICE_MAVEN_REPOSITORY`` names. Ivy checks every download against the repository's SHA-1
(else MD5) checksum file. Ivy's jar comes with pyspark (``pyspark/jars/ivy-*.jar``); without
pyspark it is fetched once from ``$SLUICE_MAVEN_REPOSITORY`` and checked against a SHA-256
pinned here.

The cache is Sluice's cache directory, :func:`cache_dir` (``$SLUICE_CACHE_DIR``, else
``$XDG_CACHE_HOME/sluice``, else ``~/.cache/sluice``):

- ``ivy/cache``: Ivy's cache. ``ivy`` has Spark's layout for ``spark.jars.ivy`` (it uses
  ``<dir>/cache`` and ``<dir>/jars``), so Spark's ``--packages`` can share the same files.
- ``classpaths/<key>.txt``: the jars a resolution found, one path a line. When every listed
  jar is there, :func:`resolve` returns them without starting Java or touching the network.

Resolutions are serialized by a file lock (``resolve.lock``): concurrent processes (pytest-xdist
workers, two CLIs) resolve once, the others wait and read the result.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from xml.sax.saxutils import quoteattr

__all__ = [
    "CACHE_ENV",
    "REPOSITORY_ENV",
    "Coordinate",
    "JarError",
    "cache_dir",
    "cached",
    "find_java",
    "ivy_dir",
    "resolve",
]

#: A Maven repository (Maven 2 layout) to use instead of Maven Central, e.g. a company mirror.
REPOSITORY_ENV = "SLUICE_MAVEN_REPOSITORY"
IVY_VERSION = "2.5.3"
#: SHA-256 of ``org.apache.ivy:ivy:2.5.3``'s jar (the same bytes as pyspark's copy).
IVY_SHA256 = "9502aa5aabf0b1484924a13ef4b5d24f121f7f91aab6768f11cc9d0906c0803b"

Progress = Callable[[str], None]


class JarError(RuntimeError):
    """Jars could not be resolved; the message says what to install or set."""


@dataclass(frozen=True, order=True)
class Coordinate:
    """``organisation:name:revision`` of one Maven artifact (a fixed revision, never a range),
    or ``organisation:name:revision:classifier`` for a classified jar of it (e.g.
    ``test-fixtures``), resolved with the module's dependencies."""

    org: str
    name: str
    rev: str
    classifier: str = ""

    @classmethod
    def parse(cls, text: str | Coordinate) -> Coordinate:
        if isinstance(text, Coordinate):
            return text
        parts = text.split(":")
        if len(parts) not in (3, 4) or not all(parts) or any(c in text for c in "[]()$,+ "):
            raise ValueError(
                f"not a pinned Maven coordinate org:name:revision[:classifier]: {text!r}"
            )
        return cls(*parts)

    def __str__(self) -> str:
        text = f"{self.org}:{self.name}:{self.rev}"
        return f"{text}:{self.classifier}" if self.classifier else text


#: The environment variable that moves Sluice's cache directory (:func:`cache_dir`).
CACHE_ENV = "SLUICE_CACHE_DIR"


def cache_dir() -> Path:
    """Sluice's cache directory, for everything it downloads or builds once (the jars here,
    the class archive of :mod:`sluice.spark.class_archive`, test servers' binaries):
    ``$SLUICE_CACHE_DIR``, else ``$XDG_CACHE_HOME/sluice``, else ``~/.cache/sluice``."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sluice"


def ivy_dir() -> Path:
    """The directory to give Spark as ``spark.jars.ivy`` to share the cache."""
    return cache_dir() / "ivy"


def find_java() -> str:
    """The ``java`` executable (``$JAVA_HOME/bin/java``, else the one on ``PATH``), Java 17+."""
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else None
    if not java or not os.access(java, os.X_OK):
        java = shutil.which("java")
    if not java:
        raise JarError(
            "Java is not installed (no 'java' on PATH, no JAVA_HOME). Install a Java 17+ runtime: "
            "apt-get install -y openjdk-17-jre-headless (or run `make setup`)."
        )
    major = _java_major(java)
    if major is not None and major < 17:
        raise JarError(
            f"{java} is Java {major}; Java 17 or newer is needed. Install "
            "openjdk-17-jre-headless (apt-get install -y openjdk-17-jre-headless) or set "
            "JAVA_HOME to a Java 17+ runtime."
        )
    return java


@lru_cache(maxsize=8)
def _java_major(java: str) -> int | None:
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30).stderr
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if not found:
        return None
    major = int(found.group(1))
    return int(found.group(2) or 0) if major == 1 else major


def _key(coordinates: Sequence[Coordinate]) -> str:
    text = ",".join(str(c) for c in sorted(set(coordinates)))
    first = coordinates[0]
    return f"{first.name}-{first.rev}-{hashlib.sha256(text.encode()).hexdigest()[:12]}"


def cached(coordinates: Sequence[str | Coordinate]) -> list[Path] | None:
    """The jars of an earlier resolution of ``coordinates``, if all are still in the cache."""
    wanted = [Coordinate.parse(c) for c in coordinates]
    manifest = cache_dir() / "classpaths" / f"{_key(wanted)}.txt"
    try:
        jars = [Path(line) for line in manifest.read_text().splitlines() if line]
    except OSError:
        return None
    return jars if jars and all(j.is_file() for j in jars) else None


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def resolve(
    coordinates: Sequence[str | Coordinate],
    *,
    progress: Progress | None = _stderr,
    timeout: float = 1800.0,
) -> list[Path]:
    """The jars of ``coordinates`` and their transitive dependencies (runtime scope), as paths
    in the cache. The first call downloads them (one ``progress`` line per step); later calls
    read the cache: no Java, no network."""
    wanted = [Coordinate.parse(c) for c in coordinates]
    if not wanted:
        raise ValueError("no coordinates to resolve")
    hit = cached(wanted)
    if hit is not None:
        return hit
    say = progress or (lambda _line: None)
    with _locked(cache_dir() / "resolve.lock"):
        hit = cached(wanted)  # another process may have resolved them while we waited
        if hit is not None:
            return hit
        return _run_ivy(wanted, say, timeout)


def _repository() -> str | None:
    value = os.environ.get(REPOSITORY_ENV, "").strip()
    if not value:
        return None
    return value if value.endswith("/") else value + "/"


def _settings(repository: str | None) -> str:
    root = f" root={quoteattr(repository)}" if repository else ""
    return (
        "<ivysettings>\n"
        '  <property name="ivy.checksums" value="sha1,md5"/>\n'
        '  <settings defaultResolver="central"/>\n'
        '  <caches lockStrategy="artifact-lock-nio"/>\n'
        f'  <resolvers><ibiblio name="central" m2compatible="true"{root}/></resolvers>\n'
        "</ivysettings>\n"
    )


def _ivy_module(coordinates: Sequence[Coordinate]) -> str:
    # One dependency per module; a module asked for with classifiers lists each jar wanted
    # (the plain one too, if asked for), as Ivy then fetches only the listed artifacts.
    modules: dict[tuple[str, str, str], list[str]] = {}
    for c in coordinates:
        modules.setdefault((c.org, c.name, c.rev), []).append(c.classifier)
    deps = []
    for (org, name, rev), classifiers in modules.items():
        head = (
            f"    <dependency org={quoteattr(org)} name={quoteattr(name)} "
            f'rev={quoteattr(rev)} conf="default->default"'
        )
        if classifiers == [""]:
            deps.append(head + "/>")
            continue
        artifacts = "".join(
            f'<artifact name={quoteattr(name)} type="jar" ext="jar"'
            + (f" m:classifier={quoteattr(classifier)}" if classifier else "")
            + "/>"
            for classifier in dict.fromkeys(classifiers)
        )
        deps.append(f"{head}>{artifacts}</dependency>")
    return (
        '<ivy-module version="2.0" xmlns:m="http://ant.apache.org/ivy/maven">\n'
        '  <info organisation="sluice" module="sluice-jars"/>\n'
        '  <configurations><conf name="default"/></configurations>\n'
        "  <dependencies>\n" + "\n".join(deps) + "\n  </dependencies>\n"
        "</ivy-module>\n"
    )


def _proxy_properties() -> list[str]:
    """Java ignores ``https_proxy``; pass it on as system properties."""
    from urllib.parse import urlsplit

    props: list[str] = []
    for scheme in ("https", "http"):
        value = os.environ.get(f"{scheme}_proxy") or os.environ.get(f"{scheme.upper()}_PROXY")
        if value:
            parts = urlsplit(value if "://" in value else f"http://{value}")
            if parts.hostname:
                props += [f"-D{scheme}.proxyHost={parts.hostname}"]
                props += [f"-D{scheme}.proxyPort={parts.port or 80}"]
    no_proxy = os.environ.get("no_proxy") or os.environ.get("NO_PROXY")
    if props and no_proxy:
        hosts = "|".join(h.strip() for h in no_proxy.split(",") if h.strip())
        props.append(f"-Dhttp.nonProxyHosts={hosts}")
    return props


def _ivy_jar(say: Progress) -> Path:
    with contextlib.suppress(ImportError):
        import pyspark

        for jar in sorted((Path(str(pyspark.__file__)).parent / "jars").glob("ivy-*.jar")):
            return jar
    jar = cache_dir() / "bootstrap" / f"ivy-{IVY_VERSION}.jar"
    if jar.is_file() and hashlib.sha256(jar.read_bytes()).hexdigest() == IVY_SHA256:
        return jar
    base = _repository()
    if base is None:
        raise JarError(
            "Apache Ivy (the jar resolver) comes with pyspark, which is not installed. Install "
            "it (pip install 'sluice-core[spark]'), or set "
            f"{REPOSITORY_ENV} to a Maven repository to fetch "
            f"org.apache.ivy:ivy:{IVY_VERSION} from."
        )
    url = f"{base}org/apache/ivy/ivy/{IVY_VERSION}/ivy-{IVY_VERSION}.jar"
    say(f"Downloading Apache Ivy {IVY_VERSION} (the jar resolver)...")
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            data = response.read()
    except (urllib.error.URLError, OSError) as exc:
        raise _unreachable([Coordinate("org.apache.ivy", "ivy", IVY_VERSION)], str(exc)) from None
    if hashlib.sha256(data).hexdigest() != IVY_SHA256:
        raise JarError(f"org.apache.ivy:ivy:{IVY_VERSION} from {base} has the wrong SHA-256")
    jar.parent.mkdir(parents=True, exist_ok=True)
    tmp = jar.with_suffix(".tmp")
    tmp.write_bytes(data)
    tmp.replace(jar)
    return jar


def _unreachable(coordinates: Sequence[Coordinate], detail: str) -> JarError:
    names = ", ".join(str(c) for c in coordinates)
    where = _repository() or "Maven Central"
    return JarError(
        f"Could not resolve {names} from {where}: {detail}. Check the network, or point "
        f"{REPOSITORY_ENV} at a Maven repository mirror you can reach "
        f"(e.g. export {REPOSITORY_ENV}=https://nexus.example.com/repository/maven-central/); "
        "an HTTPS proxy is taken from https_proxy."
    )


_FOUND = re.compile(r"^\s*found (\S+) in ")
_DOWNLOADED = re.compile(r"^\s*\[SUCCESSFUL \] (\S+)!([^\s(]+)\S* \((\d+)ms\)")
_SIZE = re.compile(r"\((\d+)kB\)\s*$")


def _run_ivy(coordinates: Sequence[Coordinate], say: Progress, timeout: float) -> list[Path]:
    java = find_java()
    names = ", ".join(str(c) for c in coordinates)
    work = ivy_dir()
    work.mkdir(parents=True, exist_ok=True)
    key = _key(coordinates)
    settings, module = work / f"{key}.settings.xml", work / f"{key}.ivy.xml"
    settings.write_text(_settings(_repository()))
    module.write_text(_ivy_module(coordinates))
    out = work / f"{key}.classpath"
    out.unlink(missing_ok=True)
    say(f"Resolving {names} and dependencies into {work / 'cache'} (first time only)...")
    argv = [
        java,
        "-Dsun.net.client.defaultConnectTimeout=30000",
        "-Dsun.net.client.defaultReadTimeout=120000",
        *_proxy_properties(),
        "-cp",
        str(_ivy_jar(say)),
        "org.apache.ivy.Main",
        "-settings",
        str(settings),
        "-cache",
        str(work / "cache"),
        "-ivy",
        str(module),
        "-confs",
        "default",
        "-cachepath",
        str(out),
    ]
    lines: list[str] = []
    found = downloaded = 0
    kilobytes = 0
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True
    )
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            lines.append(line.rstrip())
            if m := _FOUND.match(line):
                found += 1
                if found % 10 == 0:
                    say(f"  found {found} modules (latest {m.group(1)})")
            elif m := _SIZE.search(line):
                kilobytes += int(m.group(1))
            elif m := _DOWNLOADED.match(line):
                downloaded += 1
                say(f"  [{downloaded}/{found}] {m.group(2)} ({kilobytes / 1024:.1f} MB so far)")
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise _unreachable(coordinates, f"Ivy did not finish within {timeout:.0f} s") from None
    except BaseException:  # Ctrl-C, a broken pipe: Ivy must not outlive us
        proc.kill()
        proc.wait()
        raise
    if proc.returncode != 0 or not out.is_file():
        problems = [
            ln.strip()
            for ln in lines
            if "not found" in ln or "problem while" in ln or "Exception" in ln or "ERROR" in ln
        ]
        detail = "; ".join(dict.fromkeys(problems[:4])) or "\n".join(lines[-10:])
        raise _unreachable(coordinates, detail)
    jars = [Path(p) for p in out.read_text().strip().split(os.pathsep) if p]
    if not jars:
        raise JarError(f"Ivy resolved no jars for {names}")
    manifest = cache_dir() / "classpaths" / f"{key}.txt"
    manifest.parent.mkdir(parents=True, exist_ok=True)
    tmp = manifest.with_suffix(".tmp")
    tmp.write_text("\n".join(str(j) for j in jars) + "\n")
    tmp.replace(manifest)
    say(f"Resolved {len(jars)} jars ({kilobytes / 1024:.1f} MB downloaded).")
    return jars


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m sluice.jars [COORDINATE...]``: resolve (default: Apache Kafka's broker) and
    print the classpath."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        from .brokers import KAFKA_COORDINATES

        args = list(KAFKA_COORDINATES)
    try:
        jars = resolve(args)
    except (JarError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(os.pathsep.join(str(j) for j in jars))
    return 0


if __name__ == "__main__":
    sys.exit(main())
