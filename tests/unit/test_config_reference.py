"""The configuration reference of the documentation (docs/reference/configuration.md) is the
one the code generates, and says it all."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice.connection_fields import config_from_fields
from sluice.queues import transports
from sluice.queues.config import COMMON_KEYS
from sluice.reference import AIRFLOW_FIELDS, END, START, main, render, replace_section

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "configuration.md"


def test_the_docs_page_holds_the_generated_reference() -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert replace_section(text, render()) == text, (
        "docs/reference/configuration.md is out of date: run "
        "python -m sluice.reference --write docs/reference/configuration.md"
    )


def test_every_config_key_of_every_transport_is_documented() -> None:
    reference = render()
    keys = {k.name for k in COMMON_KEYS}
    for transport in transports().values():
        keys |= {k.name for k in transport.load().CONFIG_KEYS}
    missing = sorted(k for k in keys if f"| `{k}` |" not in reference)
    assert not missing


def test_provider_sections_come_from_the_providers() -> None:
    from sluice_dagster.resources import KafkaQueueResource, MqttQueueResource

    reference = render()
    assert "TODO" not in reference
    for cls in (KafkaQueueResource, MqttQueueResource):
        for name, field in cls.model_fields.items():
            assert f"| `{name}` |" in reference
            assert field.description and field.description.split(".")[0] in reference


def test_the_airflow_field_table_matches_the_mapping_code() -> None:
    config = config_from_fields(
        "kafka", host="h", port=9092, username="u", password="p", extra={"group_id": "g"}
    )
    documented = dict(AIRFLOW_FIELDS)
    assert config["connection.host"] == "h" and "`connection.host`" in documented["host"]
    assert config["connection.port"] == 9092 and "`connection.port`" in documented["port"]
    assert config["credential.username"] == "u" and "`credential.username`" in documented["login"]
    assert (
        config["credential.password"] == "p" and "`credential.password`" in documented["password"]
    )
    assert config["group_id"] == "g"
    uri = config_from_fields("kafka", host="h1:9092,h2:9092")
    assert "connection.uri" in uri and "`connection.uri`" in documented["host"]


def test_check_fails_on_a_stale_copy_and_write_fixes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"# Title\n\n{START}\nSTALE COPY\n{END}\n\nAfter.\n")
    assert main(["--check", str(readme)]) == 1
    assert "out of date" in capsys.readouterr().err
    assert main(["--write", str(readme)]) == 0
    assert main(["--check", str(readme)]) == 0
    text = readme.read_text()
    assert text.startswith("# Title\n") and text.endswith(f"{END}\n\nAfter.\n")
    assert "STALE COPY" not in text


def test_missing_markers_are_an_error(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# No markers\n")
    assert main(["--check", str(readme)]) == 2
