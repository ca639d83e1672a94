"""sluice.jars: classified coordinates (``org:name:rev:classifier``) and the Ivy module they
make. The resolution itself runs in the integration tests (Apache Kafka, the REST catalog)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from sluice.jars import Coordinate, _ivy_module

IVY_MAVEN = "{http://ant.apache.org/ivy/maven}classifier"


def test_a_coordinate_may_name_a_classifier() -> None:
    plain = Coordinate.parse("org.apache.iceberg:iceberg-core:1.10.0")
    tests = Coordinate.parse("org.apache.iceberg:iceberg-core:1.10.0:tests")
    assert plain.classifier == "" and str(plain) == "org.apache.iceberg:iceberg-core:1.10.0"
    assert tests.classifier == "tests" and str(tests).endswith(":1.10.0:tests")
    assert plain != tests


@pytest.mark.parametrize("text", ["a:b", "a:b:c:d:e", "a:b:[1,2)", "a::1", "a:b:1:"])
def test_a_coordinate_must_be_pinned_and_whole(text: str) -> None:
    with pytest.raises(ValueError, match="org:name:revision"):
        Coordinate.parse(text)


def test_a_module_asked_for_twice_lists_each_jar_once() -> None:
    module = ET.fromstring(
        _ivy_module(
            [
                Coordinate.parse("org.apache.iceberg:iceberg-core:1.10.0"),
                Coordinate.parse("org.apache.iceberg:iceberg-core:1.10.0:tests"),
                Coordinate.parse("org.apache.iceberg:iceberg-open-api:1.10.0:test-fixtures"),
                Coordinate.parse("org.slf4j:slf4j-simple:2.0.17"),
            ]
        )
    )
    deps = {d.get("name"): d for d in module.iter("dependency")}
    assert sorted(deps) == ["iceberg-core", "iceberg-open-api", "slf4j-simple"]
    core = [a.get(IVY_MAVEN) for a in deps["iceberg-core"].iter("artifact")]
    assert core == [None, "tests"], "the plain jar and the tests jar"
    fixtures = [a.get(IVY_MAVEN) for a in deps["iceberg-open-api"].iter("artifact")]
    assert fixtures == ["test-fixtures"], "only the classified jar"
    assert not list(deps["slf4j-simple"]), "a plain module lists no artifact: its jar"
