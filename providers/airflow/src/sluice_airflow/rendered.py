"""Values of templated fields: a template renders a list or dict as JSON or as its Python repr
(unless the DAG sets ``render_template_as_native_obj``)."""

from __future__ import annotations

import ast
import json
from typing import Any

__all__ = ["parse_rendered"]


def parse_rendered(text: str, what: str) -> Any:
    """``text`` as JSON, else as a Python literal; a ValueError naming ``what`` otherwise."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        raise ValueError(
            f"{what} rendered to {text[:80]!r}, which is neither JSON nor a Python literal. "
            "Pass the value itself, an XComArg (task.output), or set "
            "render_template_as_native_obj=True on the DAG."
        ) from None
