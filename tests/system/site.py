"""The documentation site: its navigation (mkdocs.yml) and a strict build of it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "mkdocs.yml"


class _Loader(yaml.SafeLoader):
    """mkdocs.yml may hold !ENV and !!python tags; the navigation needs none of them."""


_Loader.add_multi_constructor("", lambda loader, suffix, node: None)
_Loader.add_multi_constructor("!", lambda loader, suffix, node: None)


def nav() -> list[Any]:
    return list(yaml.load(CONFIG.read_text(), Loader=_Loader)["nav"])


def _walk(entries: list[Any], trail: tuple[str, ...]) -> list[tuple[tuple[str, ...], str]]:
    found: list[tuple[tuple[str, ...], str]] = []
    for entry in entries:
        for title, target in entry.items() if isinstance(entry, dict) else [("", entry)]:
            if isinstance(target, list):
                found += _walk(target, (*trail, title))
            else:
                found.append(((*trail, title), str(target)))
    return found


def nav_entries() -> list[tuple[tuple[str, ...], str]]:
    """(section titles..., page title) and the page's path under docs/, in navigation order."""
    return _walk(nav(), ())


def nav_pages() -> list[str]:
    return [page for _, page in nav_entries()]


def build(site: Path) -> subprocess.CompletedProcess[str]:
    """``mkdocs build --strict`` into ``site``: any warning (a broken link, a page left out of
    the navigation, a docstring mkdocstrings cannot read) fails it."""
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT, capture_output=True, text=True, check=False, timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip
