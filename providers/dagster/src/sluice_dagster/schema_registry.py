"""``SchemaRegistryResource``: the Schema Registry an ingest reads writer schemas from."""

from __future__ import annotations

from typing import Any

from dagster import ConfigurableResource
from pydantic import Field

from sluice.formats.registry import RegistrySettings

__all__ = ["SchemaRegistryResource"]


class SchemaRegistryResource(ConfigurableResource):  # type: ignore[type-arg]
    """A Schema Registry (Confluent's REST API). Give the ingest its key as
    ``schema_registry_key``; pass the password as ``dagster.EnvVar``: Sluice never puts it in
    logs, metadata or errors."""

    url: str = Field(description="Registry URL, e.g. https://registry:8081 (no password in it).")
    username: str | None = Field(default=None, description="User name (HTTP Basic).")
    password: str | None = Field(default=None, description="Password. Pass dagster.EnvVar('NAME').")
    timeout_s: float = Field(default=10.0, description="Seconds to wait for an answer.")

    def settings(self) -> RegistrySettings:
        options: dict[str, Any] = {"url": self.url, "timeout_s": self.timeout_s}
        if self.username:
            options.update(username=self.username, password=self.password)
        return RegistrySettings.of(options)
