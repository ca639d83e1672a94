"""The real Debezium messages of ``tests/data/debezium/`` hold every case of the workload they
were captured from, in both converters' forms (the CDC core's unit tests read them)."""

from __future__ import annotations

import base64
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

DATA = Path(__file__).parents[2] / "data" / "debezium"
CASES = {
    "snapshot", "insert", "update", "delete", "tombstone", "truncate", "toast-placeholder",
    "added-column", "nulls", "heartbeat", "transaction-begin", "transaction-end",
}  # fmt: skip


def messages(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (DATA / f"{name}.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("name", ["json", "json-bare"])
def test_every_case_is_there(name: str) -> None:
    found = {case for m in messages(name) for case in m["cases"]}
    assert found >= CASES, CASES - found


def test_with_schemas_a_decimal_is_its_unscaled_bytes_and_the_scale_is_in_the_schema() -> None:
    """What the CDC core has to decode: Connect's Decimal logical type."""
    for message in messages("json"):
        if message["topic"].endswith(".customers") and message["value"]:
            value = json.loads(message["value"])
            after = value["payload"]["after"]
            if after and after.get("balance") is not None:
                break
    else:
        raise AssertionError("no customer with a balance")
    [row] = [f for f in value["schema"]["fields"] if f["field"] == "after"]
    [balance] = [f for f in row["fields"] if f["field"] == "balance"]
    assert balance["name"] == "org.apache.kafka.connect.data.Decimal"
    scale = int(balance["parameters"]["scale"])
    unscaled = int.from_bytes(base64.b64decode(after["balance"]), "big", signed=True)
    assert scale == 2 and Decimal(unscaled).scaleb(-scale).as_tuple().exponent == -2
