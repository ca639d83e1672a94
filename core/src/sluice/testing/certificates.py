"""A throw-away certificate authority and a server certificate for 127.0.0.1, made with openssl."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Certificates", "make_certificates"]


@dataclass(frozen=True)
class Certificates:
    ca: Path  # give clients this to trust the server
    cert: Path
    key: Path


def make_certificates(directory: str | Path, days: int = 1) -> Certificates:
    """A CA and a server certificate for ``localhost`` / ``127.0.0.1`` in ``directory``."""
    where = Path(directory)
    where.mkdir(parents=True, exist_ok=True)

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=where, check=True, capture_output=True)

    openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        str(days),
        "-subj",
        "/CN=sluice test CA",
    )
    openssl(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=localhost",
    )
    (where / "san.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    openssl(
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        str(days),
        "-extfile",
        "san.ext",
    )
    return Certificates(where / "ca.pem", where / "server.pem", where / "server.key")
