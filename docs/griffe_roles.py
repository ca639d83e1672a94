"""A Griffe extension of the documentation site: the Sphinx roles of Sluice's docstrings
(``:func:`~sluice.spark.ingest```, ``:class:`BatchSpec```, ``:mod:`sluice.secrets```...)
become cross-references, links where the API reference documents the target and code where
it does not, never the role's literal text.

A role's target is resolved from the docstring's own object (``:func:`ingest``` in a module
that imports it names ``sluice.spark.ingest.ingest``); ``~`` shows the last part only, as in
Sphinx. Each becomes an optional autoref (mkdocs-autorefs): a target the site documents is a
link, another one renders as its name in code, with no warning.
"""

from __future__ import annotations

import re
from html import escape
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|data|attr|exc|obj|const):`(~?)([^`<>]+)`")


def replace_roles(text: str, obj: griffe.Object | None = None) -> str:
    """``text`` with every Sphinx role replaced (see the module docstring)."""

    def link(match: re.Match[str]) -> str:
        short, target = match.group(1) == "~", match.group(2).strip().rstrip("()")
        title = target.rsplit(".", 1)[-1] if short else target
        full = _resolve(obj, target)
        code = f"<code>{escape(title)}</code>"
        return f'<autoref identifier="{escape(full)}" optional>{code}</autoref>'

    return ROLE.sub(link, text)


def _resolve(obj: griffe.Object | None, target: str) -> str:
    """The target's documented path: relative to the docstring's module (``.workers``), a
    name in the docstring's scope, and an alias's or a same-named module member's own path
    (``:func:`sluice.spark.ingest``` is the function ``sluice.spark.ingest.ingest``)."""
    if obj is None:
        return target
    if target.startswith("."):
        module = obj if obj.is_module else obj.module
        package = module.path if module.is_package else module.path.rsplit(".", 1)[0]
        full = f"{package}{target}"
    else:
        head, _, rest = target.partition(".")
        try:
            found = obj.resolve(head)
        except Exception:  # not a name in the object's scope: the target as written
            found = head
        full = f"{found}.{rest}" if rest else found
    return _canonical(obj, full)


def _canonical(obj: griffe.Object, path: str) -> str:
    try:
        found = obj.modules_collection[path]
    except Exception:  # not loaded (another package): as it is
        return path
    last = path.rsplit(".", 1)[-1]
    if found.is_module and last in found.members and not found.members[last].is_module:
        found = found.members[last]  # a package's function of the module's name
    try:
        return str(found.final_target.path if found.is_alias else found.path)
    except Exception:  # an alias whose target is not loaded
        return path


class SphinxRoles(griffe.Extension):
    """Rewrites the roles of every docstring of a package once Griffe has loaded it whole
    (so that the names a module imports resolve)."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        _rewrite(pkg, set())


def _rewrite(obj: griffe.Object, seen: set[str]) -> None:
    if obj.path in seen:
        return
    seen.add(obj.path)
    if obj.docstring is not None and ":" in obj.docstring.value:
        obj.docstring.value = replace_roles(obj.docstring.value, obj)
    for member in obj.members.values():
        if not member.is_alias:
            _rewrite(member, seen)  # type: ignore[arg-type]
