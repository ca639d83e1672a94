"""Emulators of Azure Blob Storage and Google Cloud Storage on loopback, for the tests of the
Delta sink on those stores: Azurite (Microsoft's, the npm package ``azurite``) and
fake-gcs-server (a Go program, ``github.com/fsouza/fake-gcs-server``).

Each is installed once into Sluice's cache (:func:`sluice.jars.cache_dir`) at a pinned version,
as the jars are: ``python -m sluice.cloudservers`` (``scripts/setup.sh`` runs it) does ``npm
install azurite@AZURITE_VERSION`` and ``go install
github.com/fsouza/fake-gcs-server@FAKE_GCS_VERSION`` there; a second run finds them and
touches no network.

What each does with the conditional writes the sink relies on (checked by the tests):
Azurite honours ``If-None-Match: *`` and ``If-Match`` on Put Blob, atomically (of concurrent
creates of one blob, one wins). fake-gcs-server serves Google's JSON API only, not the XML API
that Rust's ``object_store`` (delta-rs, obstore) writes objects with (fake-gcs-server issue
#331), so neither delta-rs nor the sink can write a table there: the sink refuses it at its
check, naming ``STORAGE_EMULATOR_HOST``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from .brokers import HOST, BrokerError, BrokerProcess, _launch, _workdir
from .jars import cache_dir

__all__ = [
    "AZURITE_ACCOUNT",
    "AzuriteServer",
    "FakeGcsServer",
    "install",
    "start_azurite",
    "start_fake_gcs",
]

AZURITE_VERSION = "3.37.0"
FAKE_GCS_VERSION = "1.56.1"
#: Azurite's well-known development account and key (public: Microsoft documents them)
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)


def _azurite_path() -> Path:
    return cache_dir() / f"azurite-{AZURITE_VERSION}" / "node_modules" / ".bin" / "azurite-blob"


def _fake_gcs_path() -> Path:
    return cache_dir() / f"fake-gcs-server-{FAKE_GCS_VERSION}" / "fake-gcs-server"


def install() -> None:
    """Install Azurite and fake-gcs-server into the cache (each once; a missing ``npm`` or
    ``go`` is an error naming it)."""
    if not _azurite_path().exists():
        npm = shutil.which("npm")
        if not npm:
            raise BrokerError("npm is not installed: Azurite (the Azure emulator) needs Node.js")
        target, package = _azurite_path().parents[2], f"azurite@{AZURITE_VERSION}"
        target.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--prefix", str(target), package],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    if not _fake_gcs_path().exists():
        go = shutil.which("go") or shutil.which("go", path="/usr/local/go/bin")
        if not go:
            raise BrokerError("go is not installed: fake-gcs-server (the GCS emulator) needs Go")
        _fake_gcs_path().parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [go, "install", f"github.com/fsouza/fake-gcs-server@v{FAKE_GCS_VERSION}"],
            check=True,
            env={**os.environ, "GOBIN": str(_fake_gcs_path().parent)},
            stdout=subprocess.DEVNULL,
        )


def _found(path: Path, what: str) -> str:
    if not path.exists():
        raise BrokerError(
            f"{what} is not installed: run python -m sluice.cloudservers (scripts/setup.sh does)"
        )
    return str(path)


@dataclass
class AzuriteServer(BrokerProcess):
    """Azurite's Blob service: its endpoint and account."""

    @property
    def endpoint(self) -> str:
        """The account's blob endpoint (path-style, as Azurite serves it)."""
        return f"http://{self.host}:{self.port}/{AZURITE_ACCOUNT}"

    def environment(self) -> dict[str, str]:
        """The standard Azure variables that point a client (obstore, pyarrow) at it."""
        return {
            "AZURE_STORAGE_ACCOUNT_NAME": AZURITE_ACCOUNT,
            "AZURE_STORAGE_ACCOUNT_KEY": AZURITE_KEY,
            "AZURE_STORAGE_ENDPOINT": self.endpoint,
        }

    def create_container(self, name: str) -> None:
        from pyarrow import fs

        authority = f"{self.host}:{self.port}"
        filesystem = fs.AzureFileSystem(
            account_name=AZURITE_ACCOUNT,
            account_key=AZURITE_KEY,
            blob_storage_authority=authority,
            dfs_storage_authority=authority,
            blob_storage_scheme="http",
            dfs_storage_scheme="http",
        )
        filesystem.create_dir(name)


def start_azurite(port: int | None = None, workdir: str | Path | None = None) -> AzuriteServer:
    """Azurite's Blob service on ``port`` (free by default), its data in ``workdir``."""
    path, owns = _workdir("azurite", workdir)
    executable = _found(_azurite_path(), "Azurite")

    def build(port: int) -> BrokerProcess:
        return AzuriteServer(
            name="azurite",
            scheme="http",
            port=port,
            argv=[
                executable,
                "--blobHost",
                HOST,
                "--blobPort",
                str(port),
                "--location",
                str(path / "data"),
                "--silent",
                "--skipApiVersionCheck",
                "--loose",
            ],
            workdir=path,
            log_path=path / "azurite.log",
            _owns_workdir=owns,
        )

    launched = _launch(port, build)
    assert isinstance(launched, AzuriteServer)
    return launched


@dataclass
class FakeGcsServer(BrokerProcess):
    """fake-gcs-server: its endpoint (``STORAGE_EMULATOR_HOST``)."""

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    def environment(self) -> dict[str, str]:
        return {"STORAGE_EMULATOR_HOST": self.endpoint}

    def create_bucket(self, name: str) -> None:
        import json
        import urllib.request

        request = urllib.request.Request(
            f"{self.endpoint}/storage/v1/b",
            data=json.dumps({"name": name}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                with urllib.request.urlopen(request, timeout=5):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)


def start_fake_gcs(port: int | None = None, workdir: str | Path | None = None) -> FakeGcsServer:
    """fake-gcs-server over plain HTTP on ``port`` (free by default), in memory."""
    path, owns = _workdir("fake-gcs", workdir)
    executable = _found(_fake_gcs_path(), "fake-gcs-server")

    def build(port: int) -> BrokerProcess:
        return FakeGcsServer(
            name="fake-gcs-server",
            scheme="http",
            port=port,
            argv=[
                executable,
                "-scheme",
                "http",
                "-host",
                HOST,
                "-port",
                str(port),
                "-backend",
                "memory",
                "-public-host",
                f"{HOST}:{port}",
                "-external-url",
                f"http://{HOST}:{port}",
                "-log-level",
                "error",
            ],
            workdir=path,
            log_path=path / "fake-gcs-server.log",
            _owns_workdir=owns,
        )

    launched = _launch(port, build)
    assert isinstance(launched, FakeGcsServer)
    return launched


if __name__ == "__main__":
    install()
