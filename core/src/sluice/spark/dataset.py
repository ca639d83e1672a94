"""The sink's layout, which makes writing a batch idempotent.

::

    <sink>/batch_id=<id>/part-*.parquet          the batch's good rows
    <quarantine>/batch_id=<id>/part-*.parquet    its bad rows with a reason
                                                 (default: <sink>/_quarantine)
    <sink>/_sluice/batches/<id>.json             the manifest: written, and what it holds
    <sink>/_sluice/staging/<id>-<random>/        a run's output until it is published

A run writes into a staging directory of its own, then publishes: it moves the staging output
to ``batch_id=<id>`` (replacing what an interrupted earlier run of the same batch left there)
and then writes the manifest. A batch with a manifest is written; one without is written again
from scratch. Spark ignores paths starting with ``_``, so ``spark.read.parquet(sink)`` reads
exactly the published batches, with ``batch_id`` as a partition column.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pyarrow.parquet as pq

from ..queues.config import ConfigError

__all__ = ["Dataset", "parquet_rows"]


def _local_path(location: str | os.PathLike[str], what: str) -> Path:
    text = os.fspath(location)
    scheme = urlsplit(text).scheme
    if scheme == "file":
        text = urlsplit(text).path
    elif scheme and len(scheme) > 1:  # one letter: a Windows drive
        raise ConfigError(
            f"{what} {text!r} is not a local directory: Sluice publishes batches with atomic "
            "renames, which it does on local (or mounted shared) file systems only. Give a "
            "path such as /data/orders, or file:///data/orders."
        )
    return Path(text).absolute()


def parquet_rows(directory: Path) -> int:
    """Rows in the Parquet files under ``directory``, from their footers."""
    return sum(pq.read_metadata(f).num_rows for f in directory.rglob("*.parquet"))


class Dataset:
    """A sink directory and its quarantine (see the module docstring)."""

    def __init__(
        self, sink: str | os.PathLike[str], quarantine: str | os.PathLike[str] | None = None
    ) -> None:
        self.root = _local_path(sink, "sink")
        self.quarantine_root = (
            _local_path(quarantine, "quarantine") if quarantine else self.root / "_quarantine"
        )
        self._meta = self.root / "_sluice"

    def output_dir(self, output_id: str) -> Path:
        return self.root / f"batch_id={output_id}"

    def quarantine_dir(self, output_id: str) -> Path:
        return self.quarantine_root / f"batch_id={output_id}"

    def manifest(self, output_id: str) -> dict[str, Any] | None:
        path = self._meta / "batches" / f"{output_id}.json"
        if not path.exists():
            return None
        data: dict[str, Any] = json.loads(path.read_text())
        return data

    def manifests(self) -> Iterator[dict[str, Any]]:
        for path in sorted((self._meta / "batches").glob("*.json")):
            yield json.loads(path.read_text())

    def stage(self, output_id: str) -> Path:
        """A fresh staging directory for one run (with ``data/`` and ``quarantine/`` inside)."""
        staging = self._meta / "staging" / f"{output_id}-{uuid.uuid4().hex[:8]}"
        staging.mkdir(parents=True)
        return staging

    def publish(self, staging: Path, output_id: str, manifest: dict[str, Any]) -> None:
        """Move the staged output into place, then record the manifest (the commit point)."""
        for produced, target in (
            (staging / "data", self.output_dir(output_id)),
            (staging / "quarantine", self.quarantine_dir(output_id)),
        ):
            if target.exists():
                shutil.rmtree(target)  # left by an earlier run that stopped before its manifest
            if produced.exists() and parquet_rows(produced):
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(produced, target)
        batches = self._meta / "batches"
        batches.mkdir(parents=True, exist_ok=True)
        temporary = batches / f".{output_id}.json.tmp"
        temporary.write_text(json.dumps(manifest, sort_keys=True))
        os.replace(temporary, batches / f"{output_id}.json")
        shutil.rmtree(staging, ignore_errors=True)

    def written_ends(self, topic: str, group_id: str | None) -> dict[int, int]:
        """Per partition, the highest offset end of any published Kafka batch of the group."""
        ends: dict[int, int] = {}
        for manifest in self.manifests():
            if manifest.get("kind") != "kafka" or manifest.get("topic") != topic:
                continue
            if manifest.get("group_id") != group_id:
                continue
            for r in manifest.get("ranges", []):
                ends[r["partition"]] = max(ends.get(r["partition"], 0), r["end"])
        return ends

    def written_message_ids(self, topic: str) -> set[str]:
        """The message ids of every published MQTT batch of ``topic`` (for de-duplication)."""
        ids: set[str] = set()
        for manifest in self.manifests():
            if manifest.get("kind") == "mqtt" and manifest.get("topic") == topic:
                ids.update(manifest.get("message_ids", []))
        return ids
