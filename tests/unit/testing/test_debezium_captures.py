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


def balances(name: str) -> dict[int, tuple[Any, dict[str, Any]]]:
    """lsn -> (the balance, the envelope's schema) of each streamed customer change with one
    (a snapshot's rows carry the position of their connector's own snapshot)."""
    found = {}
    for message in messages(name):
        if message["topic"].endswith(".customers") and message["value"]:
            document = json.loads(message["value"])
            envelope = document.get("payload", document)
            after = envelope["after"] or {}
            if after.get("balance") is not None and envelope["op"] != "r":
                found[envelope["source"]["lsn"]] = (after["balance"], document.get("schema"))
    return found


def test_with_schemas_a_decimal_is_its_unscaled_bytes_and_the_scale_is_in_the_schema() -> None:
    """What the CDC core has to decode (Connect's Decimal logical type), checked against the
    same change without schemas (Debezium's decimal.handling.mode=string)."""
    typed, text = balances("json"), balances("json-bare")
    assert typed and typed.keys() == text.keys()
    for lsn, (encoded, schema) in typed.items():
        [row] = [f for f in schema["fields"] if f["field"] == "after"]
        [balance] = [f for f in row["fields"] if f["field"] == "balance"]
        assert balance["name"] == "org.apache.kafka.connect.data.Decimal"
        scale = int(balance["parameters"]["scale"])
        unscaled = int.from_bytes(base64.b64decode(encoded), "big", signed=True)
        assert Decimal(unscaled).scaleb(-scale) == Decimal(text[lsn][0]), lsn
        assert str(Decimal(unscaled).scaleb(-scale)) == text[lsn][0], "the scale is kept"
