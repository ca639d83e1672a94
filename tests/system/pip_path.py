"""The README's pip lines, installed with plain pip into a fresh venv, without the network.

A README path is ``pip install ./core './providers/X[quickstart]'``. Offline, the test takes
every distribution that line needs (the transitive requirements of those packages and their
extras, as their metadata says) at the versions of the workspace's lock, installed in the
workspace's venv: Sluice's own packages are built with ``uv build --offline``, the others are
packed back into wheels from the venv (the files their ``RECORD`` lists). Then plain pip
installs exactly those, with ``--no-deps --no-index``, into a new venv, and ``pip check``
says whether their metadata agree: a requirement missing from the closure, or two pins that
disagree (dagster-pyspark's ``dagster==X`` against another dagster), fails it. What the
network would add (pip choosing newer versions) is not covered; the lock is.
"""

from __future__ import annotations

import csv
import re
import shlex
import subprocess
import sys
import zipfile
from collections.abc import Iterable, Iterator
from importlib.metadata import Distribution, distribution
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
OURS = {
    "sluice-core": "core",
    "sluice-airflow": "providers/airflow",
    "sluice-dagster": "providers/dagster",
}


def closure(roots: Iterable[tuple[str, tuple[str, ...]]]) -> dict[str, set[str]]:
    """Every distribution ``roots`` ((name, extras) pairs) need, with the extras asked of
    each, from the metadata of the installed distributions."""
    wanted: dict[str, set[str]] = {}
    todo = [(canonicalize_name(n), set(e)) for n, e in roots]
    while todo:
        name, extras = todo.pop()
        known = wanted.get(name)
        if known is not None and extras <= known:
            continue
        wanted[name] = (known or set()) | extras
        for text in distribution(name).requires or []:
            requirement = Requirement(text)
            marker = requirement.marker
            envs = [{"extra": e} for e in sorted(wanted[name])] or [{"extra": ""}]
            if marker is None or any(marker.evaluate(env) for env in envs):
                todo.append((canonicalize_name(requirement.name), set(requirement.extras)))
    return wanted


def repack(dist: Distribution, folder: Path) -> Path:
    """A wheel of the installed ``dist`` (its RECORD's files; scripts are made again by pip
    from the entry points)."""
    name = str(dist.metadata["Name"]).replace("-", "_")
    target = folder / f"{name}-{dist.version}-py3-none-any.whl"
    site = Path(str(dist.locate_file("")))
    record = next(f for f in dist.files or [] if f.name == "RECORD")
    rows = list(csv.reader((site / record).read_text().splitlines()))
    with zipfile.ZipFile(target, "w", zipfile.ZIP_STORED) as wheel:
        for path, *_ in rows:
            if path and not path.startswith("..") and (site / path).is_file():
                wheel.write(site / path, path)
    return target


def wheelhouse(roots: Iterable[tuple[str, tuple[str, ...]]], folder: Path) -> list[Path]:
    """The wheels of every distribution ``roots`` need (see the module docstring)."""
    folder.mkdir(parents=True, exist_ok=True)
    wheels = []
    for name in sorted(closure(roots)):
        if name in OURS:
            subprocess.run(
                ["uv", "build", "--offline", "--wheel", "-q", "-o", str(folder), OURS[name]],
                cwd=ROOT, check=True, capture_output=True,
            )  # fmt: skip
            wheels += folder.glob(f"{name.replace('-', '_')}-*.whl")
        else:
            wheels.append(repack(distribution(name), folder))
    return wheels


def fresh_venv(folder: Path) -> Path:
    """A new venv with pip (from the base interpreter of this one); its python."""
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", str(folder)], check=True, capture_output=True)
    return folder / "bin" / "python"


def pip(python: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(python), "-m", "pip", "--disable-pip-version-check", "--no-input", *args],
        capture_output=True, text=True, check=False, timeout=900,
    )  # fmt: skip


#: A README/docs install line names Sluice's packages from the clone, like the quickstarts.
_OUR_PATHS = {"./core": "sluice-core", **{f"./{v}": k for k, v in OURS.items() if v != "core"}}
_PIP_LINE = re.compile(
    r"pip install ((?:'[^']*'|\"[^\"]*\"|[^\s`#'\"])+(?: +(?:'[^']*'|[^\s`#'\"]+))*)"
)


def install_lines(texts: Iterable[str]) -> list[list[str]]:
    """The package arguments of every ``pip install`` in ``texts`` (options left out)."""
    found = []
    for text in texts:
        for match in _PIP_LINE.finditer(text):
            words = [w for w in shlex.split(match.group(1)) if not w.startswith("-")]
            if words:
                found.append(words)
    return found


def roots_of(words: Iterable[str]) -> list[tuple[str, tuple[str, ...]]]:
    """(name, extras) of each argument of an install line: ``./core[x]`` is sluice-core[x]."""
    roots = []
    for word in words:
        path, _, extras = word.partition("[")
        name = _OUR_PATHS.get(path.rstrip("/"), path)
        roots.append(
            (canonicalize_name(name), tuple(e for e in extras.rstrip("]").split(",") if e))
        )
    return roots


def _active(name: str, extras: set[str]) -> Iterator[Requirement]:
    envs = [{"extra": e} for e in sorted(extras)] or [{"extra": ""}]
    for text in distribution(name).requires or []:
        requirement = Requirement(text)
        marker = requirement.marker
        if marker is None or any(marker.evaluate(env) for env in envs):
            yield requirement


def _requirements(
    wanted: dict[str, set[str]],
) -> tuple[dict[str, list[tuple[str, Requirement]]], dict[str, list[tuple[str, Requirement]]]]:
    """Target name -> (who, requirement), of Sluice's distributions and of the others."""
    ours: dict[str, list[tuple[str, Requirement]]] = {}
    theirs: dict[str, list[tuple[str, Requirement]]] = {}
    for name, extras in wanted.items():
        for requirement in _active(name, extras):
            target = canonicalize_name(requirement.name)
            (ours if name in OURS else theirs).setdefault(target, []).append((name, requirement))
    return ours, theirs


def looser_than_the_others(
    installed: Iterable[tuple[str, tuple[str, ...]]], added: Iterable[tuple[str, tuple[str, ...]]]
) -> list[str]:
    """Where a requirement that the ``added`` line brings (a Sluice extra, installed after a
    quickstart's line ``installed``) admits the next major version of a package that a
    distribution already there excludes, as ``protobuf>=5.26`` (the [protobuf] extra) against
    dagster's ``protobuf<7``. pip then picks the newest of what the extra adds (a grpcio-tools
    that needs protobuf 7) and upgrades the package past the other's pin; a cap on our side
    makes it choose versions that fit. The versions tried are the next two majors above the
    installed one."""
    installed = list(installed)
    before, theirs = _requirements(closure(installed))
    ours, _ = _requirements(closure([*installed, *added]))
    problems = []
    for target, mine in sorted(ours.items()):
        new = [(who, r) for who, r in mine if (who, r) not in before.get(target, [])]
        if target in OURS or not new:
            continue
        major = Version(distribution(target).version).major
        for probe in (Version(f"{major + 1}.0"), Version(f"{major + 2}.0")):
            excluded_by = [
                f"{who} ({r.specifier})"
                for who, r in theirs.get(target, [])
                if not r.specifier.contains(probe, prereleases=True)
            ]
            admitted_by = [
                f"{who} ({r.specifier})"
                for who, r in new
                if r.specifier.contains(probe, prereleases=True)
            ]
            if excluded_by and admitted_by:
                problems.append(
                    f"{target} {probe}: admitted by {', '.join(admitted_by)}, "
                    f"excluded by {', '.join(excluded_by)}"
                )
                break
    return problems
