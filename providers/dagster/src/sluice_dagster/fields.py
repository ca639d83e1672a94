"""Unknown fields of Sluice's Dagster resources and configs are errors with a "did you mean".

Pydantic ignores a keyword it does not know, so ``KafkaQueueResource(bootstrp="h:9092")``
would fail only on the missing ``bootstrap``, never naming the typo. :class:`StrictFields`
checks the given names first, with the suggestion of :func:`sluice.queues.config.did_you_mean`
(the one home of "did you mean" in Sluice). Values are never shown: a field may be a password.
"""

from __future__ import annotations

from typing import Any

from pydantic import model_validator

from sluice.queues.config import did_you_mean

__all__ = ["StrictFields"]


class StrictFields:
    """Mixin for a Dagster ``Config`` or ``ConfigurableResource``: unknown fields are errors."""

    @model_validator(mode="before")
    @classmethod
    def _known_fields(cls, data: Any) -> Any:
        if isinstance(data, dict):
            fields: dict[str, Any] = getattr(cls, "model_fields", {})
            for name in data:
                if name not in fields:
                    raise ValueError(
                        f"{cls.__name__}: unknown field '{name}'.{did_you_mean(name, fields)} "
                        f"Its fields: {', '.join(sorted(fields))}."
                    )
        return data
