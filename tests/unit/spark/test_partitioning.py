"""Partition specs: parsing, the errors that name the problem, and the transforms computed on
rows, checked against pyiceberg's own transforms."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from sluice.queues import ConfigError
from sluice.spark.partitioning import Partitioning, PartitionSpecError, PartitionTerm

UTC = datetime.UTC


def test_a_spec_parses_from_text_or_a_list_and_prints_back() -> None:
    spec = Partitioning.parse(" day(ts) , bucket( 16 , device ),truncate(4,name), region")
    assert str(spec) == "day(ts),bucket(16,device),truncate(4,name),identity(region)"
    assert Partitioning.parse(["day(ts)", "bucket(16,device)"]) == Partitioning.parse(
        "day(ts),bucket(16,device)"
    )
    assert [t.name for t in spec.terms] == ["ts_day", "device_bucket", "name_trunc", "region"]
    assert spec.terms[3].directory_key == "region_identity"
    assert not Partitioning.parse(None) and not Partitioning.parse("")
    assert Partitioning.parse("DAY(ts)").terms == (PartitionTerm("day", "ts"),)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("days(ts)", r"unknown transform 'days'\. Iceberg's transforms are identity, year"),
        ("bucket(device)", r"bucket needs a number first, bucket\(N,device\)"),
        ("bucket(0,device)", r"number of buckets must be at least 1, not 0"),
        ("truncate(-2,name)", r"width must be at least 1, not -2"),
        ("bucket(device,16)", r"the number comes first.*bucket\(16,device\)"),
        ("day(3,ts)", r"day takes only a column, day\(ts\)"),
        ("day(ts", r"is not TRANSFORM\(COLUMN\)"),
        ("day(ts),day(ts)", r"partition field 'ts_day' twice"),
    ],
)
def test_a_bad_spec_is_refused_naming_the_problem_and_a_fix(text: str, message: str) -> None:
    with pytest.raises(PartitionSpecError, match=message):
        Partitioning.parse(text)


def test_the_check_names_an_unknown_column_or_a_type_the_transform_does_not_take() -> None:
    schema = pa.schema([("ts", pa.timestamp("us", tz="UTC")), ("device", pa.string())])
    Partitioning.parse("hour(ts),bucket(8,device),truncate(2,device)").check(schema)
    with pytest.raises(PartitionSpecError, match=r"no column 'when'.*columns are: ts, device"):
        Partitioning.parse("day(when)").check(schema)
    with pytest.raises(PartitionSpecError, match="day takes a timestamp or date column"):
        Partitioning.parse("day(device)").check(schema)
    with pytest.raises(PartitionSpecError, match="truncate takes an int, long, string"):
        Partitioning.parse("truncate(3,ts)").check(schema)


def _timestamps() -> pa.Array:
    moments = [
        datetime.datetime(1969, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
        datetime.datetime(1970, 1, 1, tzinfo=UTC),
        datetime.datetime(2026, 1, 5, 10, 30, tzinfo=UTC),
        datetime.datetime(2024, 2, 29, 23, 0, tzinfo=UTC),
        None,
    ]
    return pa.array(moments, pa.timestamp("us", tz="UTC"))


def _micros(value: datetime.datetime | None) -> int | None:
    if value is None:
        return None
    delta = value - datetime.datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


@pytest.mark.parametrize("name", ["year", "month", "day", "hour"])
def test_time_transforms_agree_with_pyiceberg(name: str) -> None:
    from pyiceberg.transforms import parse_transform
    from pyiceberg.types import DateType, TimestamptzType

    array = _timestamps()
    theirs = parse_transform(name).transform(TimestamptzType())
    assert PartitionTerm(name, "ts").values(array).to_pylist() == [
        theirs(_micros(v)) for v in array.to_pylist()
    ]
    if name != "hour":
        dates = pa.array([datetime.date(1969, 12, 31), datetime.date(2026, 3, 1), None])
        on_dates = parse_transform(name).transform(DateType())
        days = [
            None if d is None else (d - datetime.date(1970, 1, 1)).days for d in dates.to_pylist()
        ]
        assert PartitionTerm(name, "d").values(dates).to_pylist() == [on_dates(d) for d in days]


def test_bucket_and_truncate_agree_with_pyiceberg_for_each_type() -> None:
    from pyiceberg.transforms import BucketTransform, TruncateTransform
    from pyiceberg.types import BinaryType, IntegerType, LongType, StringType, TimestamptzType

    strings = pa.array(["dev-1", "", "ü日本語", None, "dev-1"])
    longs = pa.array([0, 1, -1, 34, -10, 2**40, None], pa.int64())
    ints = pa.array([7, -7, None], pa.int32())
    binary = pa.array([b"\x00\x01\x02", None], pa.binary())
    cases: list[tuple[pa.Array, Any, list[Any]]] = [
        (strings, StringType(), strings.to_pylist()),
        (longs, LongType(), longs.to_pylist()),
        (ints, IntegerType(), ints.to_pylist()),
        (binary, BinaryType(), binary.to_pylist()),
        (_timestamps(), TimestamptzType(), [_micros(v) for v in _timestamps().to_pylist()]),
    ]
    for array, kind, internal in cases:
        for buckets in (1, 16, 1000):
            mine = PartitionTerm("bucket", "c", buckets).values(array).to_pylist()
            assert mine == [BucketTransform(buckets).transform(kind)(v) for v in internal], kind
        if not isinstance(kind, TimestamptzType):
            for width in (1, 3, 10):
                mine = PartitionTerm("truncate", "c", width).values(array).to_pylist()
                theirs = TruncateTransform(width).transform(kind)
                assert mine == [theirs(v) for v in internal], (kind, width)


def test_split_puts_every_row_in_one_piece_of_one_partition_value() -> None:
    spec = Partitioning.parse("day(ts),bucket(4,device),region")
    table = pa.table(
        {
            "ts": _timestamps(),
            "device": pa.array(["a", "b", "a", None, "c"]),
            "region": pa.array(["eu/west", "eu/west", "us", "us", None]),
            "n": pa.array(range(5)),
        }
    )
    pieces = list(spec.split(table))
    assert sorted(n for _, _, piece in pieces for n in piece["n"].to_pylist()) == list(range(5))
    for directory, values, piece in pieces:
        for term, value in zip(spec.terms, values, strict=True):
            assert set(term.values(piece[term.column]).to_pylist()) == {value}
        assert directory.count("/") == 2
    directories = {d for d, _, _ in pieces}
    assert "ts_day=1969-12-31/device_bucket=2/region_identity=eu%2Fwest" in directories
    assert any(
        d.startswith("ts_day=null/") and d.endswith("region_identity=null") for d in directories
    )
    assert list(Partitioning().split(table)) == [("", (), table)]


def test_a_spec_round_trips_through_an_iceberg_partition_spec() -> None:
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField, StringType, TimestamptzType

    schema = Schema(
        NestedField(1, "ts", TimestamptzType(), required=False),
        NestedField(2, "device", StringType(), required=False),
    )
    spec = Partitioning.parse("day(ts),bucket(16,device),truncate(3,device),device")
    iceberg = spec.iceberg_spec(schema)
    assert [(f.source_id, f.name, str(f.transform)) for f in iceberg.fields] == [
        (1, "ts_day", "day"),
        (2, "device_bucket", "bucket[16]"),
        (2, "device_trunc", "truncate[3]"),
        (2, "device", "identity"),
    ]
    assert Partitioning.of_iceberg(iceberg, schema) == spec


def test_an_iceberg_uri_takes_the_spec_once_and_checks_it() -> None:
    pytest.importorskip("pyiceberg")
    from sluice.spark.sinks.iceberg import IcebergSink, parse_iceberg_uri

    target = parse_iceberg_uri("iceberg://lake/ns.t?partition_by=day(ts),bucket(16,device)")
    assert str(target.partitioning) == "day(ts),bucket(16,device)"
    assert str(IcebergSink("iceberg://lake/ns.t", "hour(ts)").partitioning) == "hour(ts)"
    with pytest.raises(ConfigError, match=r"sink 'iceberg://lake/ns.t\?partition_by=dy\(ts\)'"):
        parse_iceberg_uri("iceberg://lake/ns.t?partition_by=dy(ts)")
    with pytest.raises(ConfigError, match="give the spec once"):
        IcebergSink("iceberg://lake/ns.t?partition_by=day(ts)", "hour(ts)")


def test_a_parquet_dataset_keeps_the_layout_of_its_batches(tmp_path: Path) -> None:
    from sluice.spark.sinks import open_sink
    from sluice.spark.sinks.parquet import ParquetSink

    fresh = ParquetSink(tmp_path / "fresh", "day(ts)")
    fresh.check()
    assert str(fresh.dataset_partitioning(adopt=True)) == "day(ts)"
    assert str(ParquetSink(tmp_path / "fresh").dataset_partitioning()) == "day(ts)"
    with pytest.raises(ConfigError, match=r"partitioned by day\(ts\).*partition_by=hour\(ts\)"):
        ParquetSink(tmp_path / "fresh", "hour(ts)").check()
    # a dataset of unpartitioned batches (what one looks like on disk) stays unpartitioned
    (tmp_path / "plain" / "batch_id=old").mkdir(parents=True)
    with pytest.raises(ConfigError, match="holds unpartitioned batches"):
        ParquetSink(tmp_path / "plain", "day(ts)").check()
    assert not ParquetSink(tmp_path / "plain").dataset_partitioning(adopt=True)
    # on S3 too (the spec recorded under _sluice/, checked against the store's at check())
    assert str(open_sink("s3://bucket/readings", "day(ts)").partitioning) == "day(ts)"  # type: ignore[union-attr]
    with pytest.raises(ConfigError, match="s3://bucket/readings"):
        open_sink("s3://bucket/readings", "weekday(ts)")
