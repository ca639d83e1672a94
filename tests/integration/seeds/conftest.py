"""The examples at the end of the seed documents, read from ../shared/seeds/ when it is there.

A copy of each example is kept beside these tests (``*.example``) so the tests also run from a
clone without ../shared; a test checks the copy against the seed whenever the seed is present.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

HERE = Path(__file__).parent
SEEDS = HERE.parents[2].parent / "shared" / "seeds"


def seed_example(prefix: str) -> str | None:
    """The python block under "### Examples" of seed ``prefix``, dedented; None without seeds."""
    found = sorted(SEEDS.glob(f"{prefix}_*.txt"))
    if not found:
        return None
    text = found[0].read_text()
    section = text[text.index("### Examples") :]
    block = re.search(r"```python\n(.*?)```", section, re.S)
    assert block is not None, f"no python example in {found[0]}"
    return textwrap.dedent(block.group(1))


def example(name: str) -> str:
    return (HERE / f"{name}.example").read_text()
