"""OpenLineage for the operators: what apache-airflow-providers-openlineage asks them for.

Imported only by the operators' ``get_openlineage_facets_on_*`` methods, which the
OpenLineage provider calls when it is installed (``pip install 'sluice-airflow[openlineage]'``);
without it nothing here is imported. Dataset names come from :mod:`sluice.lineage`, the one
home of lineage naming:

- inputs: the topic (``kafka://host:port`` + topic, ``mqtt://host:port`` + filter), with the
  messages read (input statistics);
- outputs: the sink (a Parquet dataset's path, an Iceberg table's location with its catalog
  name as a symlink and the catalog facet) with its schema, the rows written (output
  statistics) and the rows quarantined (the ``sluice_quarantine`` facet); a publish's topic
  with the messages sent;
- the ``sluice_batch`` run facet: batch ids, kinds and offset ranges (MQTT: the session and
  its limit), counts, commits. Never a payload or a password: it is built from the
  ``BatchSpec`` and the ``IngestResult``, which hold neither.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attr
from airflow.providers.openlineage.extractors import OperatorLineage
from openlineage.client.event_v2 import InputDataset, OutputDataset
from openlineage.client.facet_v2 import (
    DatasetFacet,
    InputDatasetFacet,
    OutputDatasetFacet,
    RunFacet,
    catalog_dataset,
    input_statistics_input_dataset,
    output_statistics_output_dataset,
    schema_dataset,
    storage_dataset,
    symlinks_dataset,
)

from sluice.batch import BatchSpec
from sluice.lineage import DatasetName, SinkDataset, sink_dataset, written_schema

__all__ = [
    "SluiceBatchRunFacet",
    "SluiceQuarantineFacet",
    "ingest_lineage",
    "publish_lineage",
]

#: Where the custom facets are described (docs/guides/observability.md).
FACETS_DOC = "https://pypi.org/project/sluice-airflow/#openlineage"


@attr.define
class SluiceBatchRunFacet(RunFacet):
    """The batches a task ingested: ids, offset ranges and counts (never payloads)."""

    batches: list[dict[str, Any]] = attr.field(factory=list)

    @staticmethod
    def _get_schema() -> str:
        return f"{FACETS_DOC}-sluicebatchrunfacet"


@attr.define
class SluiceQuarantineFacet(OutputDatasetFacet):
    """Rows of the batch that went to the sink's quarantine, with why (a count per run)."""

    rowCount: int = 0  # OpenLineage's spelling
    location: str | None = None

    @staticmethod
    def _get_schema() -> str:
        return f"{FACETS_DOC}-sluicequarantinefacet"


def _batch(spec: BatchSpec, result: Mapping[str, Any] | None) -> dict[str, Any]:
    entry: dict[str, Any] = {"batch_id": spec.batch_id, "kind": spec.kind, "topic": spec.topic}
    if spec.kind == "kafka":
        entry["group"] = spec.group_id
        entry["ranges"] = [
            {"partition": r.partition, "start": r.start, "end": r.end} for r in spec.ranges
        ]
    else:
        entry["session"] = spec.client_id
        entry["max_messages"] = spec.max_messages
    if result is not None:
        for key in ("read", "written", "quarantined", "duplicates", "skipped", "committed"):
            entry[key] = result.get(key)
        entry["commits"] = result.get("commits")
        if result.get("lost"):
            entry["lost"] = result["lost"]
    return entry


def _symlinks(sink: SinkDataset) -> dict[str, DatasetFacet]:
    facets: dict[str, DatasetFacet] = {}
    if sink.symlink is not None:
        identifier = symlinks_dataset.Identifier(sink.symlink.namespace, sink.symlink.name, "TABLE")
        facets["symlinks"] = symlinks_dataset.SymlinksDatasetFacet(identifiers=[identifier])
    if sink.catalog is not None:
        facets["catalog"] = catalog_dataset.CatalogDatasetFacet(
            framework="iceberg",
            type=sink.catalog.type,
            name=sink.catalog.name,
            warehouseUri=sink.catalog.warehouse,
            source="sluice",
        )
    if sink.storage in ("iceberg", "delta"):
        facets["storage"] = storage_dataset.StorageDatasetFacet(
            storageLayer=sink.storage, fileFormat="parquet"
        )
    return facets


def _schema(fields: Sequence[tuple[str, str]]) -> schema_dataset.SchemaDatasetFacet:
    return schema_dataset.SchemaDatasetFacet(
        fields=[
            schema_dataset.SchemaDatasetFacetFields(name=name, type=kind, ordinal_position=i)
            for i, (name, kind) in enumerate(fields, start=1)
        ]
    )


def ingest_lineage(
    topics: Iterable[DatasetName],
    sink: str,
    specs: Sequence[BatchSpec] = (),
    results: Sequence[Mapping[str, Any]] = (),
    fields: Sequence[tuple[str, str]] = (),
) -> OperatorLineage[Any, Any]:
    """What an ingest reads and writes: ``topics`` into ``sink``. Before it ran, ``specs``
    (if known) and the schema's ``fields``; after it, its ``results`` too (statistics, and the
    schema of what was written)."""
    target = sink_dataset(sink)
    done = [r for r in results if r.get("batch_id")]
    read = sum(int(r.get("read") or 0) for r in done)
    inputs = []
    for topic in dict.fromkeys(topics):
        input_facets: dict[str, InputDatasetFacet] = {}
        if done:
            input_facets["inputStatistics"] = (
                input_statistics_input_dataset.InputStatisticsInputDatasetFacet(
                    rowCount=read, size=sum(int(r.get("bytes") or 0) for r in done)
                )
            )
        inputs.append(InputDataset(topic.namespace, topic.name, inputFacets=input_facets))
    facets = _symlinks(target)
    if done:
        outputs_written = [r.get("output") for r in done if r.get("output")]
        fields = written_schema(sink, str(outputs_written[-1]) if outputs_written else None)
    if fields:
        facets["schema"] = _schema(fields)
    output_facets: dict[str, OutputDatasetFacet] = {}
    if done:
        output_facets["outputStatistics"] = (
            output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(
                rowCount=sum(int(r.get("written") or 0) for r in done)
            )
        )
        quarantines = [r.get("quarantine_output") for r in done if r.get("quarantine_output")]
        output_facets["sluice_quarantine"] = SluiceQuarantineFacet(
            rowCount=sum(int(r.get("quarantined") or 0) for r in done),
            location=str(quarantines[-1]) if quarantines else None,
        )
    output = OutputDataset(
        target.dataset.namespace, target.dataset.name, facets=facets, outputFacets=output_facets
    )
    by_batch = {r.get("batch_id"): r for r in done}
    run_facets: dict[str, RunFacet] = {}
    if specs:
        batches = [_batch(spec, by_batch.get(spec.batch_id)) for spec in specs]
        run_facets["sluice_batch"] = SluiceBatchRunFacet(batches=batches)
    return OperatorLineage(inputs=inputs, outputs=[output], run_facets=run_facets)


def publish_lineage(topic: DatasetName, sent: int | None) -> OperatorLineage[Any, Any]:
    """A publish: ``topic`` as the output, with the messages ``sent`` once it ran."""
    output_facets: dict[str, OutputDatasetFacet] = {}
    if sent is not None:
        output_facets["outputStatistics"] = (
            output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(rowCount=sent)
        )
    output = OutputDataset(topic.namespace, topic.name, outputFacets=output_facets)
    return OperatorLineage(outputs=[output])
