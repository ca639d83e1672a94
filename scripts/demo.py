"""The Sluice demo (``make demo``): IoT readings from Kafka and MQTT into Parquet, end to end.

The demo is the package ``sluice_demo`` beside this file (its docstring says what it does);
this is its entry point::

    uv run --all-packages python scripts/demo.py [--output DIR] [--waves N] [--verbose]
"""

import sys

from sluice_demo.cli import main

if __name__ == "__main__":
    sys.exit(main())
