"""Deprecated: the stand-in Schema Registry lives in :mod:`sluice.registry_server` (the
``sluice`` command runs it, and production code never imports :mod:`sluice.testing`).

Importing this module still works and warns; ``python -m sluice.testing.schema_registry``
still serves.
"""

from __future__ import annotations

import warnings

from ..registry_server import BANNER, SchemaRegistryServer, main, start_schema_registry

__all__ = ["BANNER", "SchemaRegistryServer", "main", "start_schema_registry"]

warnings.warn(
    "sluice.testing.schema_registry is deprecated: import sluice.registry_server instead.",
    DeprecationWarning,
    stacklevel=2,
)

if __name__ == "__main__":
    main()
