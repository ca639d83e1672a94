"""``python -m sluice.formats.sparkplug --compile``: compile sparkplug_b.proto into
sparkplug_b.desc (needs grpcio-tools); ``--check`` exits 1 when the two disagree."""

from __future__ import annotations

import sys

from ..protobuf import compile_proto
from . import DESCRIPTOR_SET, PROTO


def main(argv: list[str]) -> int:
    compiled = compile_proto(PROTO)
    if "--compile" in argv:
        DESCRIPTOR_SET.write_bytes(compiled)
        print(f"wrote {DESCRIPTOR_SET}")
        return 0
    if compiled != DESCRIPTOR_SET.read_bytes():
        print(f"{DESCRIPTOR_SET} is stale: run python -m sluice.formats.sparkplug --compile")
        return 1
    print("up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
