"""The confluent-kafka reader's configuration: ``options.reader``, the translation of
kafka-python arguments to librdkafka, its errors, and its messages as Arrow columns."""

from __future__ import annotations

import pickle
import sys
from typing import Any

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_NOT_AVAILABLE, Message

from sluice.kafka.config import client_config
from sluice.kafka.confluent_ranges import librdkafka_config
from sluice.queues import ConfigError
from sluice.queues.uri import config_from_uri, queue_from_config
from sluice.spark.kafka_source import DEFAULT_READER, ReaderKwargs, chosen_reader, reader_kwargs
from sluice.spark.records import RecordColumns

PASSWORD = "pw-Secret-4711"


def validated(**config: Any) -> dict[str, Any]:
    return dict(queue_from_config("kafka", {"connection.uri": "h:9092", **config}).config)


def test_auto_is_the_default_reader_and_picks_confluent_where_it_can() -> None:
    assert validated()["options.reader"] == DEFAULT_READER == "auto"
    kwargs = reader_kwargs(validated())
    assert kwargs.reader == "auto"
    assert chosen_reader("auto", kwargs) == "confluent"
    assert chosen_reader("auto", {**kwargs, "api_version": (2, 0)}) == "kafka-python", (
        "a setting librdkafka cannot take: kafka-python reads"
    )
    assert chosen_reader("kafka-python", kwargs) == "kafka-python"
    assert reader_kwargs(validated(**{"options.reader": "confluent"})).reader == "confluent"
    assert config_from_uri("kafka://h:9092/t?reader=confluent")[1]["options.reader"] == "confluent"


def test_an_unknown_reader_names_the_key_and_the_allowed_values() -> None:
    allowed = r"'options.reader' must be one of 'auto', 'kafka-python', "
    with pytest.raises(ConfigError, match=allowed):
        validated(**{"options.reader": "rdkafka"})


def test_a_missing_confluent_kafka_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "confluent_kafka", None)  # what an absent package does
    monkeypatch.delitem(sys.modules, "sluice.kafka.confluent_ranges")

    with pytest.raises(ConfigError) as missing:
        reader_kwargs(validated(**{"options.reader": "confluent"}))

    assert "'options.reader' is 'confluent'" in str(missing.value)
    assert "pip install 'sluice-core[confluent]'" in str(missing.value)
    assert chosen_reader(reader_kwargs(validated()).reader) == "kafka-python", (
        "the default needs none: it falls back to kafka-python"
    )


def test_every_client_setting_translates_to_librdkafka() -> None:
    kwargs = reader_kwargs(
        validated(
            **{
                "connection.uri": "kafka+ssl://h1:9093,h2:9093",
                "client_id": "ingest",
                "credential.username": "user",
                "credential.password": PASSWORD,
                "credential.mechanism": "scram-sha-512",
                "options.ssl_cafile": "/ca.pem",
                "options.ssl_certfile": "/cert.pem",
                "options.ssl_keyfile": "/key.pem",
                "options.ssl_check_hostname": False,
                "options.connect_timeout": 500,
                "options.max_retries": 1,  # a reader bootstraps for all attempts: 500 ms
            }
        )
    )
    assert librdkafka_config(kwargs) == {
        "bootstrap.servers": "h1:9093,h2:9093",
        "client.id": "ingest",
        "security.protocol": "sasl_ssl",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "user",
        "sasl.password": PASSWORD,
        "ssl.ca.location": "/ca.pem",
        "ssl.certificate.location": "/cert.pem",
        "ssl.key.location": "/key.pem",
        "ssl.endpoint.identification.algorithm": "none",
        "socket.timeout.ms": 30000,
        "reconnect.backoff.max.ms": 30000,
        "socket.connection.setup.timeout.ms": 1000,  # librdkafka's least
        "isolation.level": "read_committed",
        "auto.offset.reset": "error",  # a position out of range is never reset
        "group.id": "sluice-range-reader",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": False,
    }


def test_an_untranslatable_setting_is_named_without_any_value() -> None:
    credentials = {"credential.username": "u", "credential.password": PASSWORD}
    kwargs = {
        **client_config(validated(**credentials, **{"connection.protocol": "sasl_ssl"})),
        "api_version": (2, 8),
    }
    with pytest.raises(ConfigError, match="cannot translate the kafka-python setting") as refused:
        librdkafka_config(kwargs)

    assert "'api_version'" in str(refused.value) and "options.reader" in str(refused.value)
    assert PASSWORD not in str(refused.value)


def test_a_configuration_librdkafka_refuses_is_reported_without_the_password() -> None:
    from sluice.batch import OffsetRange
    from sluice.kafka.confluent_ranges import read_range_messages

    kwargs = reader_kwargs(
        validated(
            **{
                "connection.uri": "kafka+ssl://127.0.0.1:9",
                "credential.username": "u",
                "credential.password": PASSWORD,
                "options.ssl_cafile": "/no/such/ca.pem",
                "options.reader": "confluent",
            }
        )
    )
    with pytest.raises(ConfigError, match="librdkafka refused") as refused:
        next(read_range_messages(kwargs, "t", [OffsetRange(0, 0, 1)], 1))

    assert "ssl.ca.location" in str(refused.value) and PASSWORD not in str(refused.value)


def test_the_reader_choice_pickles_and_stays_out_of_kafka_python_arguments() -> None:
    from kafka import KafkaConsumer

    kwargs = reader_kwargs(
        validated(
            **{
                "connection.protocol": "sasl_ssl",
                "credential.username": "u",
                "credential.password": PASSWORD,
                "options.reader": "confluent",
            }
        )
    )
    copy = pickle.loads(pickle.dumps(kwargs))

    assert isinstance(copy, ReaderKwargs) and (copy.reader, copy) == ("confluent", kwargs)
    assert "reader" not in kwargs and PASSWORD not in repr(kwargs)
    assert set(kwargs) <= set(KafkaConsumer.DEFAULT_CONFIG), "kafka-python's keys only"


def test_confluent_messages_become_the_same_columns_as_kafka_python_records() -> None:
    messages = [
        Message(
            topic="t",
            partition=2,
            offset=5,
            key=b"k",
            value=b"v5",
            headers=[("message_id", b"m5"), ("trace", b"t")],
            timestamp=(TIMESTAMP_CREATE_TIME, 1_700_000_000_123),
        ),
        Message(
            topic="t", partition=2, offset=6, value=None, timestamp=(TIMESTAMP_NOT_AVAILABLE, 0)
        ),
    ]
    columns = RecordColumns()
    columns.extend_confluent(messages, "t", 2)
    rows = columns.to_batch().to_pylist()

    assert [(r["partition"], r["offset"], r["key"], r["value"]) for r in rows] == [
        (2, 5, b"k", b"v5"),
        (2, 6, None, None),
    ]
    assert rows[0]["headers"] == [
        {"key": "message_id", "value": b"m5"},
        {"key": "trace", "value": b"t"},
    ]
    assert rows[1]["headers"] == [] and rows[1]["message_id"] is None
    assert rows[0]["message_id"] == "m5"
    assert rows[0]["timestamp"].timestamp() == 1_700_000_000.123
    assert rows[1]["timestamp"] is None, "no timestamp: null"
