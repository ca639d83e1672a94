"""Resolving discovery and store keys into plain connection.* / credential.* values."""

from __future__ import annotations

from pip_services3_commons.config import ConfigParams
from pip_services3_commons.refer import Descriptor, References
from pip_services3_components.auth import CredentialParams, MemoryCredentialStore
from pip_services3_components.connect import ConnectionParams, MemoryDiscovery

from sluice.queues.references import apply_connections, apply_credential, resolve_references

DISCOVERY = Descriptor("pip-services", "discovery", "memory", "default", "1.0")
STORE = Descriptor("pip-services", "credential-store", "memory", "default", "1.0")
BASE = {
    "connection.discovery_key": None,
    "connection.protocol": None,
    "connection.host": None,
    "connection.port": None,
    "connection.uri": None,
    "credential.store_key": None,
    "credential.username": None,
    "credential.password": None,
    "credential.mechanism": None,
}


def test_nothing_to_resolve_leaves_the_config_alone() -> None:
    config = {**BASE, "connection.host": "h"}
    assert resolve_references(config, None, None, "Q") == config


def test_several_kafka_connections_make_one_server_list() -> None:
    discovery = MemoryDiscovery()
    for host in ("k1", "k2"):
        discovery.register(
            None, "cluster", ConnectionParams.from_tuples("host", host, "port", 9093)
        )
    config = {**BASE, "connection.discovery_key": "cluster"}
    refs = References.from_tuples(DISCOVERY, discovery)

    kafka = resolve_references(config, refs, None, "Q", join_servers=True)
    mqtt = resolve_references(config, refs, None, "Q")

    assert kafka["connection.uri"] == "k1:9093,k2:9093"
    assert (mqtt["connection.host"], mqtt["connection.port"]) == ("k1", 9093)


def test_found_values_win_and_configured_ones_fill_the_gaps() -> None:
    config = {**BASE, "connection.host": "old", "connection.port": 1883}
    merged = apply_connections(config, [ConnectionParams.from_tuples("host", "new")])
    assert (merged["connection.host"], merged["connection.port"]) == ("new", 1883)
    by_uri = apply_connections(config, [ConnectionParams.from_tuples("uri", "mqtt://u:1")])
    assert (by_uri["connection.uri"], by_uri["connection.host"]) == ("mqtt://u:1", None)


def test_credential_from_store_including_kafka_mechanism_and_pip_short_names() -> None:
    store = MemoryCredentialStore(
        ConfigParams.from_tuples("k.user", "al", "k.pass", "pw", "k.mechanism", "scram-sha-256")
    )
    config = {**BASE, "credential.store_key": "k"}
    resolved = resolve_references(config, References.from_tuples(STORE, store), None, "Q")
    assert (resolved["credential.username"], resolved["credential.password"]) == ("al", "pw")
    assert resolved["credential.mechanism"] == "scram-sha-256"
    unknown = apply_credential({"credential.username": None}, CredentialParams.from_tuples("x", 1))
    assert unknown == {"credential.username": None}
