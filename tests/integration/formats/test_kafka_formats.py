"""Avro, Protobuf and JSON Schema topics ingested from a real Kafka-protocol broker (noida-db)
into Parquet with the real Spark, the schemas read over HTTP from a schema registry (the
stand-in of sluice.registry_server, through the client a user runs) or from schema files."""

from __future__ import annotations

import json
import logging
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from sluice.batch import plan_batch
from sluice.formats.encode import Encoder
from sluice.formats.plan import IncompatibleSchemaError
from sluice.formats.registry import RegistryError, RegistryUnavailableError, SchemaRegistry
from sluice.formats.wire import frame
from sluice.registry_server import SchemaRegistryServer
from sluice.spark import ingest
from sluice.spark.failpoints import armed

from ..spark.conftest import KafkaTopic
from .conftest import (
    READING_AVRO,
    READING_AVRO_V2,
    READING_AVRO_V3,
    READING_JSON_SCHEMA,
    READING_PROTO,
    batch_tables,
    dataset_rows,
    quarantine_rows,
    reading,
    write_schema,
)


def bad_records(good: bytes) -> dict[str, bytes | None]:
    """Undecodable records, each with (a fragment of) the reason it must be quarantined with."""
    return {
        "wrong magic byte": b"\x07" + good[1:],
        "unknown schema id 999": frame(999, good[5:]),
        "truncated: 3 byte(s)": good[:3],
        "truncated or corrupt Avro payload": good[:-4],
        "byte(s) left over after the record": good + b"\x01\x02",
        "tombstone": None,
    }


def reasons_match(bad: list[dict[str, Any]], expected: list[str]) -> None:
    reasons = sorted(r["reason"] for r in bad)
    for fragment in expected:
        assert any(fragment in r for r in reasons), f"no reason with {fragment!r} in {reasons}"
    assert len(reasons) == len(expected)


def test_avro_from_a_registry_decodes_logical_types_quarantines_bad_records_and_evolves(
    spark: Any, topic: KafkaTopic, schema_registry: SchemaRegistryServer, tmp_path: Path
) -> None:
    sink = tmp_path / "sink"
    v1 = Encoder("avro", topic.name, json.dumps(READING_AVRO), schema_registry.url)
    good = [v1.encode(reading(i)) for i in range(40)]
    bad = bad_records(good[0])
    topic.send([*good, *bad.values()])

    first = ingest(
        spark,
        topic.plan(),
        sink,
        source=topic.source,
        value_format="avro",
        schema_registry=schema_registry.url,
    )

    assert (first.written, first.quarantined, first.committed) == (40, 6, True)
    rows = {r["id"]: r for r in dataset_rows(sink)}
    row = rows["r5"]
    assert row["temperature"] == 2.5 and row["ts"] == datetime(2024, 1, 1, 0, 0, 5, tzinfo=UTC)
    assert row["price"] == Decimal("5.25") and row["day"] == date(2024, 2, 3)
    assert row["uuid"] == "6a2f41a3-c54c-fce8-32d2-0324e1c32e22" and row["kind"] == "INDOOR"
    assert row["place"] == {"room": "room-2"} and row["tags"] == ["a", "b"]
    assert dict(row["extra"]) == {"n": 5} and "value" not in row, "fields, not the record"
    reasons_match(quarantine_rows(sink), list(bad))
    # one look at the subject's versions and one per version, none per message
    assert schema_registry.requests["GET /subjects/" + f"{topic.name}-value/versions"] == 1
    assert not any(k.startswith("GET /schemas/ids/1") for k in schema_registry.requests)

    v2 = Encoder("avro", topic.name, json.dumps(READING_AVRO_V2), schema_registry.url)
    topic.send([v2.encode(reading(i, humidity=40.0 + i)) for i in range(100, 103)])
    topic.send([v1.encode(reading(200))])
    ingest(
        spark,
        topic.plan(),
        sink,
        source=topic.source,
        value_format="avro",
        schema_registry=schema_registry.url,
    )

    tables = batch_tables(sink)
    assert "humidity" not in tables[0].column_names
    assert tables[1].schema.field("humidity").nullable, "a new optional field: a new column"
    humid = {r["id"]: r["humidity"] for r in tables[1].to_pylist()}
    assert humid == {"r100": 40.0 + 100, "r101": 141.0, "r102": 142.0, "r200": None}

    client = SchemaRegistry(schema_registry.url)
    client._call("PUT", f"/config/{topic.name}-value", {"compatibility": "NONE"})
    v3 = Encoder("avro", topic.name, json.dumps(READING_AVRO_V3), schema_registry.url)
    topic.send([v3.encode(reading(300, temperature="hot"))])
    third = ingest(
        spark,
        topic.plan(),
        sink,
        source=topic.source,
        value_format="avro",
        schema_registry=schema_registry.url,
        max_quarantined=None,  # a batch of one misfit: all of it is quarantined
    )
    assert (third.written, third.quarantined) == (0, 1)
    (reason,) = [r["reason"] for r in quarantine_rows(sink) if "version 3" in r["reason"]]
    assert f"schema id {v3.schema_id} ({topic.name}-value version 3) does not fit" in reason
    assert "field 'temperature' is string, the table has double" in reason

    topic.send([v3.encode(reading(301, temperature="cold"))])
    with pytest.raises(IncompatibleSchemaError, match="field 'temperature' is string"):
        ingest(
            spark,
            topic.plan(),
            sink,
            source=topic.source,
            value_format="avro",
            schema_registry=schema_registry.url,
            on_incompatible="fail",
        )
    assert plan_batch(topic.queue) is not None, "a failed batch commits nothing"


@pytest.mark.parametrize("value_format", ["protobuf", "json_schema"])
def test_protobuf_and_json_schema_from_a_registry_decode_on_the_executors(
    spark: Any,
    topic: KafkaTopic,
    schema_registry: SchemaRegistryServer,
    tmp_path: Path,
    value_format: str,
) -> None:
    schema = (
        str(write_schema(tmp_path, "reading.proto", READING_PROTO))
        if value_format == "protobuf"
        else json.dumps(READING_JSON_SCHEMA)
    )
    encoder = Encoder(value_format, topic.name, schema, schema_registry.url)
    documents = [
        {
            "id": f"r{i}",
            "temperature": i / 4,
            "ts": "2024-01-01T00:00:01Z",
            **(
                {"humidity": 50.5, "kind": "OUTDOOR", "samples": [1, 2], "labels": {"a": "b"}}
                if value_format == "protobuf"
                else {"tags": ["x"]}
            ),
            "place": {"room": "lab"},
        }
        for i in range(30)
    ]
    good = [encoder.encode(d) for d in documents]
    if value_format == "protobuf":
        bad = {
            "truncated or corrupt Protobuf payload": good[0][:6] + b"\xff\xff\xff\xff",
            "message indexes [3] name no message": frame(encoder.schema_id or 0, good[0][6:], (3,)),
            "wrong magic byte": b"{" + good[0][1:],
        }
    else:
        bad = {
            "field 'temperature': temperature must be number": frame(
                encoder.schema_id or 0, b'{"id": "x", "temperature": "hot"}'
            ),
            "invalid JSON": frame(encoder.schema_id or 0, b'{"id": '),
            "wrong magic byte": b'{"id": "y", "temperature": 1}',
        }
    topic.send([*good, *bad.values()])

    result = ingest(
        spark,
        topic.plan(),
        tmp_path / "sink",
        source=topic.source,
        value_format=value_format,
        schema_registry=schema_registry.url,
        key_format="string",
        mode="executors",
    )

    assert (result.mode, result.written, result.quarantined) == ("executors", 30, 3)
    rows = {r["id"]: r for r in dataset_rows(tmp_path / "sink")}
    assert rows["r2"]["temperature"] == 0.5 and rows["r2"]["place"]["room"] == "lab"
    assert rows["r2"]["ts"] == datetime(2024, 1, 1, 0, 0, 1, tzinfo=UTC)
    assert rows["r2"]["key_decoded"] == "k2", "the key as text"
    if value_format == "protobuf":
        assert rows["r2"]["humidity"] == 50.5 and rows["r2"]["kind"] == "OUTDOOR"
        assert rows["r2"]["samples"] == [1, 2] and dict(rows["r2"]["labels"]) == {"a": "b"}
        assert rows["r2"]["place"]["floor"] is None, "an unset optional field is null"
    reasons_match(quarantine_rows(tmp_path / "sink"), list(bad))


def test_unframed_avro_from_a_schema_file_with_avro_keys_from_an_inline_schema(
    spark: Any, topic: KafkaTopic, tmp_path: Path
) -> None:
    path = write_schema(tmp_path, "reading.avsc", READING_AVRO)
    key_schema = {"type": "record", "name": "Key", "fields": [{"name": "site", "type": "string"}]}
    values, keys = Encoder("avro", topic.name, str(path)), Encoder("avro", topic.name, key_schema)
    sent = [
        topic.producer.send(
            topic.name, value=values.encode(reading(i)), key=keys.encode({"site": f"s{i % 2}"})
        )
        for i in range(10)
    ]
    sent.append(topic.producer.send(topic.name, value=values.encode(reading(10)), key=b"\x01"))
    topic.producer.flush(10)
    for future in sent:
        future.get(10)

    result = ingest(
        spark,
        topic.plan(),
        tmp_path / "sink",
        source=topic.source,
        value_format="avro",
        value_schema=str(path),
        key_format="avro",
        key_schema=key_schema,
    )

    assert (result.written, result.quarantined) == (10, 1)
    rows = dataset_rows(tmp_path / "sink")
    assert sorted(r["key_decoded"]["site"] for r in rows) == ["s0"] * 5 + ["s1"] * 5
    (bad,) = quarantine_rows(tmp_path / "sink")
    assert bad["reason"].startswith("key: truncated or corrupt Avro payload")


def test_a_registry_unreachable_fails_the_batch_before_anything_is_committed(
    spark: Any, topic: KafkaTopic, schema_registry: SchemaRegistryServer, tmp_path: Path
) -> None:
    from sluice.registry_server import start_schema_registry

    secured = start_schema_registry("ingest", "registry-secret-pw")
    url = secured.url.replace("http://", "http://ingest:registry-secret-pw@")
    encoder = Encoder("avro", topic.name, json.dumps(READING_AVRO), url)
    # a schema of another subject (RecordNameStrategy): the plan does not read it up front
    other = Encoder("avro", "elsewhere", json.dumps(READING_AVRO_V2), url)
    topic.send([encoder.encode(reading(1)), other.encode(reading(2, humidity=1.0))])
    spec = topic.plan()

    with armed("read.before", secured.stop), pytest.raises(RegistryUnavailableError) as failed:
        ingest(
            spark,
            spec,
            tmp_path / "sink",
            source=topic.source,
            value_format="avro",
            schema_registry=url,
            mode="executors",
        )

    assert "cannot be reached" in str(failed.value)
    assert "registry-secret-pw" not in str(failed.value) and "ingest:***@" in str(failed.value)
    assert plan_batch(topic.queue) == spec, "nothing committed"
    assert not list((tmp_path / "sink").glob("batch_id=*")), "nothing published"
    with pytest.raises(RegistryUnavailableError, match="cannot be reached"):
        ingest(
            spark,
            spec,
            tmp_path / "sink",
            source=topic.source,
            value_format="avro",
            schema_registry=url,
        )


def test_an_unknown_schema_id_is_quarantined_asking_the_registry_once_per_batch(
    spark: Any, topic: KafkaTopic, schema_registry: SchemaRegistryServer, tmp_path: Path
) -> None:
    sink = tmp_path / "sink"
    encoder = Encoder("avro", topic.name, json.dumps(READING_AVRO), schema_registry.url)
    good = [encoder.encode(reading(i)) for i in range(60)]
    topic.send([*good, *[frame(999, good[0][5:])] * 50], partition=0)

    result = ingest(
        spark,
        topic.plan(),
        sink,
        source=topic.source,
        value_format="avro",
        schema_registry=schema_registry.url,
    )

    assert (result.written, result.quarantined, result.committed) == (60, 50, True)
    assert {r["reason"] for r in quarantine_rows(sink)} == {
        f"unknown schema id 999: the schema registry at {schema_registry.url} has no schema "
        "with this id"
    }
    assert schema_registry.requests["GET /schemas/ids/999"] == 1, "once per batch"


@pytest.mark.parametrize("answer", ["proxy HTML 404", "wrong path"])
def test_a_404_that_is_not_the_registrys_unknown_id_fails_the_batch(
    spark: Any, topic: KafkaTopic, answer: str, tmp_path: Path
) -> None:
    from sluice.registry_server import start_schema_registry

    with start_schema_registry("ingest", "registry-secret-pw") as secured:
        url = secured.url.replace("http://", "http://ingest:registry-secret-pw@")
        encoder = Encoder("avro", topic.name, json.dumps(READING_AVRO), url)
        # a schema of another subject: the plan does not read it, a task asks for its id
        other = Encoder("avro", "elsewhere", json.dumps(READING_AVRO_V2), url)
        topic.send([encoder.encode(reading(1)), other.encode(reading(2, humidity=1.0))])
        spec = topic.plan()
        if answer == "proxy HTML 404":
            secured.proxy_404 = ("/schemas/ids/",)
            path = f"/schemas/ids/{other.schema_id}"
        else:
            url += "/api"
            path = f"/api/subjects/{topic.name}-value/versions"

        with pytest.raises(RegistryError) as failed:
            ingest(
                spark,
                spec,
                tmp_path / "sink",
                source=topic.source,
                value_format="avro",
                schema="id STRING, temperature DOUBLE",
                schema_registry=url,
                max_quarantined=None,  # it is no quarantine's business
            )

    shown = secured.url.replace("http://", "http://ingest:***@")
    assert f"GET {shown}{path} answered 404" in str(failed.value)
    assert "registry-secret-pw" not in str(failed.value)
    assert plan_batch(topic.queue) == spec, "nothing committed"
    assert not list((tmp_path / "sink").glob("batch_id=*")), "nothing published"


def test_a_new_schema_version_evolves_the_iceberg_table_and_a_changed_type_is_quarantined(
    spark: Any, topic: KafkaTopic, schema_registry: SchemaRegistryServer, sqlite_lake: Any
) -> None:
    sink = sqlite_lake.sink("readings")
    options = {"value_format": "avro", "schema_registry": schema_registry.url}
    v1 = Encoder("avro", topic.name, json.dumps(READING_AVRO), schema_registry.url)
    topic.send([v1.encode(reading(i)) for i in range(5)])
    ingest(spark, topic.plan(), sink, source=topic.source, **options)
    assert "humidity" not in sqlite_lake.table().schema().column_names

    v2 = Encoder("avro", topic.name, json.dumps(READING_AVRO_V2), schema_registry.url)
    topic.send([v2.encode(reading(i, humidity=float(i))) for i in range(5, 8)])
    SchemaRegistry(schema_registry.url)._call(
        "PUT", f"/config/{topic.name}-value", {"compatibility": "NONE"}
    )
    v3 = Encoder("avro", topic.name, json.dumps(READING_AVRO_V3), schema_registry.url)
    topic.send([v3.encode(reading(9, temperature="hot"))])
    result = ingest(spark, topic.plan(), sink, source=topic.source, **options)

    assert (result.written, result.quarantined) == (3, 1)
    table = sqlite_lake.table()
    assert not table.schema().find_field("humidity").required, "the table evolved"
    rows = {r["id"]: r for r in table.scan().to_arrow().to_pylist()}
    assert rows["r6"]["humidity"] == 6.0 and rows["r1"]["humidity"] is None
    (bad,) = sqlite_lake.table("readings__quarantine").scan().to_arrow().to_pylist()
    assert "field 'temperature' is string, the table has double" in bad["reason"]


def test_the_spark_reader_leaves_payloads_decoded_in_python_to_the_python_reader(
    spark: Any, topic: KafkaTopic, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """options.reader 'spark' with Avro from a schema file: the Python workers decode anyway,
    so the batch is read by the 'auto' reader, and the log says which and why."""
    values = Encoder("avro", topic.name, READING_AVRO)
    sent = [topic.producer.send(topic.name, value=values.encode(reading(i))) for i in range(6)]
    topic.producer.flush(10)
    for future in sent:
        future.get(10)

    with caplog.at_level(logging.INFO, logger="sluice.spark"):
        result = ingest(
            spark,
            topic.plan(),
            tmp_path / "sink",
            source=f"{topic.source}?reader=spark",
            value_format="avro",
            value_schema=READING_AVRO,
        )

    assert (result.written, result.mode) == (6, "driver"), "a Python reader, not Spark's source"
    assert (
        "options.reader 'spark': the avro payloads decode in Python, so the batch is read by "
        "options.reader 'auto' instead"
    ) in caplog.text
