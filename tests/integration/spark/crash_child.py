"""Run one ingest in a process of its own, on the parent's Spark (sluice.testing.crash).

    python crash_child.py ARGUMENTS_JSON

ARGUMENTS_JSON holds ``spec``, ``sink``, ``source`` and further keyword arguments of ingest().
The failpoint to die at comes from SLUICE_FAILPOINTS in the environment.
"""

from __future__ import annotations

import json
import sys

from sluice.spark import ingest
from sluice.testing.crash import attached_session


def main() -> None:
    arguments = json.loads(sys.argv[1])
    spark = attached_session()
    ingest(spark, arguments.pop("spec"), arguments.pop("sink"), **arguments)


if __name__ == "__main__":
    main()
