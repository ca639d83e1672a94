"""Every code block of every documentation page, run as written, page by page, as a new user
would: each page in a fresh directory (docs/: the guides say "runnable on its own").

A page's session is one terminal (``markdown_blocks.Session``): ``export`` and ``cd`` carry from
one block to the next, not from one page to the next. Each page starts in a fresh working
directory that looks like the root of a clone (a symlink to each top-level entry of the
repository, so ``./core``, ``dags_examples/``, ``Makefile`` are there, while everything the
blocks write lands in the temporary directory), with a fresh ``HOME``, ``AIRFLOW_HOME`` and
``DAGSTER_HOME``, nothing of the test run's own Airflow, Dagster, Spark or Sluice settings, and
the workspace venv's ``bin`` first on ``PATH``: what ``source .venv/bin/activate`` after ``uv
sync`` gives. (Kept, as they change how fast the JVMs start and run, not what they do: the
machine's cache of jars and of Spark's classes, ``SLUICE_CACHE_DIR``, and ``make test``'s
``SPARK_SUBMIT_OPTS``.)

One thing is shared by the pages of a test session: ``SLUICE_HOME``, where ``sluice brokers``
keeps its brokers. Every page that needs brokers starts them itself with ``sluice brokers up``
on the fixed ports its snippets use, which finds them running when an earlier page started
them: the brokers start once per session, not once per page, and ``sluice brokers down`` stops
them at the end. Pages use topics and consumer groups of their own.

``pip install ./core ./providers/...`` is not run against the shared venv (it would replace
its editable installs with copies, under other running tests, and needs the network). A
``pip`` placed first on ``PATH`` checks instead that each path is a project of this clone and
that the venv has that project installed from exactly that path; it refuses anything else.
Likewise a ``uv`` first on ``PATH`` takes only ``uv sync --all-packages`` and checks that the
venv is in sync with the lock file (``uv sync --check``), changing nothing; the clone's
``.venv`` is the workspace venv, as after ``uv sync``.

Bash blocks run with ``bash`` (``set -eo pipefail``: any failing command fails the test),
python blocks with the venv's ``python``, an Airflow DAG is saved where the text says and run
by the real ``airflow dags test``, Dagster Definitions are loaded by the real ``dagster`` CLI
and ``dagster dev`` runs until its sensor's run has written the batch, then gets Ctrl-C and
must stop with all its child processes.

The README's runnable blocks are the quickstart pages' blocks, verbatim and in their order:
checked here, and run on those pages.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sluice.spark.class_archive import CACHE_ENV, cache_dir

from .markdown_blocks import (
    NOT_CODE,
    Block,
    Session,
    clean_environment,
    parse,
    running,
    write_pip_shim,
    write_uv_shim,
)

pytestmark = [pytest.mark.kafka, pytest.mark.mqtt]

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
VENV_BIN = Path(sys.executable).parent
#: The fixed ports of the pages: Kafka, MQTT, S3, the stand-in Schema Registry, the Iceberg
#: REST catalog, the Dagster UI of ``dagster dev``, and the Spark clusters and Connect page's
#: standalone master, its web UI and its worker's, and Connect server.
PORTS = (19092, 11883, 19000, 18081, 18181, 3000, 17077, 18080, 18082, 15002)
BLOCK_TIMEOUT = 420.0


def pages() -> list[Path]:
    """Every page of the site, in the order of the navigation (the quickstarts first)."""
    from tests.system.site import nav_pages

    return [DOCS / page for page in nav_pages()]


def page_blocks(page: Path) -> list[Block]:
    return parse(page.read_text(), str(page.relative_to(ROOT)))


def test_every_block_of_every_page_is_tagged_and_runnable() -> None:
    found = [block for page in pages() for block in page_blocks(page)]
    langs = {b.lang for b in found}
    assert {"bash", "python"} <= langs, langs
    assert any(b.directive == "save-as" for b in found), "the DAG and Definitions files"
    assert any(b.directive == "until" for b in found), "dagster dev"
    every = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    assert every == {p.relative_to(DOCS).as_posix() for p in pages()}, "a page off the nav"


def _same(block: Block) -> tuple[str, str, str | None, str]:
    return block.lang, block.code, block.directive, block.argument


def test_the_readme_quickstarts_are_the_pages_blocks() -> None:
    """The README runs nothing of its own: its blocks are the quickstart pages', verbatim."""
    readme = [_same(b) for b in parse(README.read_text()) if b.lang not in NOT_CODE]
    assert readme, "the README has the quickstarts"
    on_pages = [
        _same(b)
        for name in (
            "getting-started/install.md",
            "getting-started/airflow.md",
            "getting-started/dagster.md",
        )
        for b in page_blocks(DOCS / name)
        if b.lang not in NOT_CODE
    ]
    missing = [code for code in readme if code not in on_pages]
    assert not missing, f"README blocks that no quickstart page holds verbatim: {missing}"
    order = [on_pages.index(code) for code in readme]
    assert order == sorted(order), "the README's blocks are in the pages' order"


def test_the_readme_links_to_pages_that_exist() -> None:
    """The README is short and points at the site's pages (readable on a forge too)."""
    text = README.read_text()
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [t for t in targets if not t.startswith(("http://", "https://"))]
    assert len(local) >= 20, "the README links to the documentation"
    missing = [t for t in local if not (ROOT / t).exists()]
    assert not missing, f"README links to missing files: {missing}"
    assert len(text.splitlines()) <= 300, "the README stays short: the rest is on the site"


def clone_like(folder: Path) -> Path:
    """A directory that looks like the root of a fresh clone (see the module docstring)."""
    folder.mkdir()
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    for top in sorted({path.split("/", 1)[0] for path in tracked}):
        (folder / top).symlink_to(ROOT / top)
    (folder / ".venv").symlink_to(VENV_BIN.parent)  # what `uv sync` made
    return folder


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def new_user(tmp_path: Path, sluice_home: Path) -> Session:
    homes = {name: tmp_path / name for name in ("home", "airflow", "dagster")}
    for home in homes.values():
        home.mkdir()
    scratch = tmp_path / "scratch"
    write_pip_shim(scratch / "bin", sys.executable)
    uv = shutil.which("uv") or shutil.which("uv", path=str(VENV_BIN))
    if uv is None:
        pytest.fail("uv is missing: make setup installs it")
    write_uv_shim(scratch / "bin", sys.executable, uv, VENV_BIN.parent)
    env = clean_environment(os.environ)
    env.update(
        {
            "HOME": str(homes["home"]),
            "AIRFLOW_HOME": str(homes["airflow"]),
            "DAGSTER_HOME": str(homes["dagster"]),
            "SLUICE_HOME": str(sluice_home),
            # The machine's cache (the jars Sluice resolves, the class archive of Spark's
            # classes), not one of its own: a new HOME would fetch the jars again from Maven
            # Central and have its first JVM write a new archive (what tests/unit/test_jars.py
            # and tests/integration/spark/test_class_archive.py already cover).
            CACHE_ENV: str(cache_dir()),
            "VIRTUAL_ENV": str(VENV_BIN.parent),
            "PATH": os.pathsep.join(
                [str(scratch / "bin"), str(VENV_BIN), "/usr/sbin", env.get("PATH", "")]
            ),
        }
    )
    if "SPARK_SUBMIT_OPTS" in os.environ:  # make test's JIT setting: how fast, not what happens
        env["SPARK_SUBMIT_OPTS"] = os.environ["SPARK_SUBMIT_OPTS"]
    return Session(cwd=clone_like(tmp_path / "clone"), env=env, scratch=scratch)


def brokers_down(sluice_home: Path) -> None:
    """``sluice brokers down``, then check that no broker it recorded still runs."""
    env = {**clean_environment(os.environ), "SLUICE_HOME": str(sluice_home)}
    sluice = str(VENV_BIN / "sluice")
    state = subprocess.run(
        [sluice, "brokers", "status", "--json"], env=env, capture_output=True, text=True,
        check=False,
    )  # fmt: skip
    pids = [b["pid"] for b in json.loads(state.stdout or "{}").get("brokers", [])]
    subprocess.run([sluice, "brokers", "down"], env=env, check=False, timeout=60)
    left = [pid for pid in pids if running(pid)]
    assert not left, f"brokers still running after 'sluice brokers down': {left}"


@pytest.fixture(scope="module")
def sluice_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The brokers' state, shared by the pages of this session (see the module docstring)."""
    busy = [port for port in PORTS if not port_free(port)]
    if busy:
        pytest.fail(f"the pages' fixed ports {busy} are taken on 127.0.0.1: free them first")
    home = tmp_path_factory.mktemp("sluice-home")
    try:
        yield home
    finally:
        brokers_down(home)


def _page_ids() -> list[str]:
    return [p.relative_to(DOCS).as_posix() for p in pages()]


@pytest.mark.timeout(1500)
@pytest.mark.parametrize("name", _page_ids())
def test_page_runs_as_written(name: str, tmp_path: Path, sluice_home: Path) -> None:
    blocks = [b for b in page_blocks(DOCS / name) if b.lang not in NOT_CODE]
    if not blocks:
        return  # a page of prose and examples to read: nothing to run
    session = new_user(tmp_path, sluice_home)
    started = time.monotonic()
    for block in blocks:
        began = time.monotonic()
        session.run(block, BLOCK_TIMEOUT)
        print(f"{block.name}: {time.monotonic() - began:.1f} s")
    print(f"{name}: {time.monotonic() - started:.1f} s")
