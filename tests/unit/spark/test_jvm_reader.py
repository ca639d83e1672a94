"""options.reader 'spark': the Kafka source's options made from a batch reader's settings, and
the connector's jars that pyspark lacks. Reading itself runs in
tests/integration/spark/test_reader_contract.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sluice.batch import BatchSpec, OffsetRange
from sluice.queues.config import ConfigError
from sluice.spark.connector import _artifact, _not_in_pyspark, connector_coordinates
from sluice.spark.ingest import source_config
from sluice.spark.jvm_reader import FETCH_MAX_WAIT_MS, kafka_options
from sluice.spark.kafka_source import reader_kwargs

SPEC = BatchSpec("kafka", "readings", group_id="g", ranges=(OffsetRange(0, 5, 10),))


def options_for(source: dict[str, object]) -> dict[str, str]:
    kwargs = reader_kwargs(source_config(SPEC, {**source, "options.reader": "spark"}))
    return kafka_options(kwargs, "readings", [OffsetRange(0, 5, 10), OffsetRange(2, 0, 7)])


def test_the_ranges_become_per_partition_offsets_read_committed() -> None:
    options = options_for({"connection.uri": "kafka://127.0.0.1:9092"})

    assert json.loads(options["startingOffsets"]) == {"readings": {"0": 5, "2": 0}}
    assert json.loads(options["endingOffsets"]) == {"readings": {"0": 10, "2": 7}}
    assert json.loads(options["assign"]) == {"readings": [0, 2]}
    assert options["kafka.bootstrap.servers"] == "127.0.0.1:9092"
    assert options["kafka.isolation.level"] == "read_committed"
    assert options["failOnDataLoss"] == "false", "Sluice checks loss itself"
    assert options["includeHeaders"] == "true"
    assert options["kafkaConsumer.pollTimeoutMs"] == options["kafka.request.timeout.ms"]
    # a fetch that finds nothing new (at a range's end) is not held for Kafka's 500 ms
    assert options["kafka.fetch.max.wait.ms"] == str(FETCH_MAX_WAIT_MS) == "10"


def test_sasl_over_tls_becomes_a_jaas_line_and_a_pem_truststore(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    options = options_for(
        {
            "connection.uri": "kafka+ssl://127.0.0.1:9093",
            "credential.username": "alice",
            "credential.password": 's3"cr\\et',
            "credential.mechanism": "scram-sha-512",
            "options.ssl_cafile": str(ca),
        }
    )

    assert options["kafka.security.protocol"] == "SASL_SSL"
    assert options["kafka.sasl.mechanism"] == "SCRAM-SHA-512"
    assert options["kafka.sasl.jaas.config"] == (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="alice" password="s3\\"cr\\\\et";'
    )
    assert options["kafka.ssl.truststore.type"] == "PEM"
    assert options["kafka.ssl.truststore.location"] == str(ca)
    others = {k: v for k, v in options.items() if k != "kafka.sasl.jaas.config"}
    assert not any("s3" in v for v in others.values()), "the password is in the JAAS line only"


def test_a_client_certificate_is_refused_naming_the_key(tmp_path: Path) -> None:
    pem = tmp_path / "client.pem"
    pem.write_text("-----BEGIN CERTIFICATE-----\n")
    with pytest.raises(ConfigError, match=r"options.ssl_certfile.*options.reader 'auto'"):
        options_for(
            {
                "connection.uri": "kafka+ssl://127.0.0.1:9093",
                "options.ssl_certfile": str(pem),
                "options.ssl_keyfile": str(pem),
            }
        )


def test_a_setting_it_cannot_translate_is_named() -> None:
    with pytest.raises(ConfigError, match=r"'sasl_oauth_token_provider'"):
        kafka_options({"sasl_oauth_token_provider": object()}, "t", [OffsetRange(0, 0, 1)])


def test_only_the_jars_pyspark_lacks_go_on_the_class_path() -> None:
    cache = Path("/cache")
    found = [
        cache / "spark-sql-kafka-0-10_2.13-4.2.0.jar",
        cache / "kafka-clients-3.9.2.jar",
        cache / "scala-library-2.13.18.jar",  # pyspark's own
        cache / "spark-tags_2.13-4.2.0.jar",  # pyspark has 4.3.0's
    ]
    assert _artifact(found[0]) == "spark-sql-kafka-0-10_2.13"
    assert _not_in_pyspark(found) == found[:2]
    assert connector_coordinates() == ["org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"]
