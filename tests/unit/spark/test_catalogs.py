"""A REST catalog's request timeout (``connection.timeout``): read from the catalog's
properties as environment variables and YAML give them, refused when it is no duration, and
put on every request of the catalog pyiceberg opens (it sets none itself)."""

from __future__ import annotations

import pytest

from sluice.queues import ConfigError
from sluice.spark.sinks.catalogs import DEFAULT_REST_TIMEOUT_S, _is_rest, rest_timeout


@pytest.mark.parametrize(
    ("properties", "seconds"),
    [
        ({}, DEFAULT_REST_TIMEOUT_S),
        ({"connection.timeout": "2.5"}, 2.5),  # PYICEBERG_CATALOG__<NAME>__CONNECTION__TIMEOUT
        ({"connection": {"timeout": 30}}, 30.0),  # connection: {timeout: 30} in .pyiceberg.yaml
    ],
)
def test_the_timeout_comes_from_the_catalogs_properties(
    properties: dict[str, object], seconds: float
) -> None:
    assert rest_timeout("lake", properties) == seconds


@pytest.mark.parametrize("value", ["0", "-1", "soon", "nan"])
def test_a_timeout_that_is_no_duration_is_refused_naming_the_property(value: str) -> None:
    with pytest.raises(ConfigError, match=r"'lake': property connection.timeout must be"):
        rest_timeout("lake", {"connection.timeout": value})


@pytest.mark.parametrize(
    ("properties", "rest"),
    [
        ({"uri": "http://catalog:8181"}, True),
        ({"type": "rest", "uri": "https://catalog"}, True),
        ({"uri": "sqlite:///lake.db"}, False),
        ({"type": "sql", "uri": "postgresql+psycopg2://u@h/db"}, False),
        ({"uri": "http://c", "py-catalog-impl": "my.Catalog"}, False),
    ],
)
def test_rest_catalogs_are_told_apart_as_pyiceberg_does(
    properties: dict[str, str], rest: bool
) -> None:
    assert _is_rest("lake", properties) is rest
